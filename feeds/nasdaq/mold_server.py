"""`engine moldudp64 serve`: send an ITCH stream as MoldUDP64 packets, and answer re-requests.

For end-to-end runs and tests here (no exchange to connect to): the messages come from an ITCH
file or from the simulator through the ITCH writer; `--drop` loses chosen packets on purpose so
gap handling can be checked exactly.
"""
import socket
import sys
import threading
import time

import numpy as np
from engine.jit import njit

from feeds.core import files
from feeds.nasdaq.moldudp64 import HEADER, HEADER_LEN, MAX_PAYLOAD, heartbeat, is_multicast
from feeds.core.uri import FeedError, split


@njit(nogil=True, cache=True)
def frame_offsets(b, offs):
    """Offsets of the complete length-framed messages in b (into offs); returns (count, end of
    the last complete message)."""
    pos = 0
    k = 0
    n = b.shape[0]
    while n - pos >= 2 and k < offs.shape[0]:
        ln = (np.int64(b[pos]) << 8) | np.int64(b[pos + 1])
        if ln == 0 or ln > n - pos - 2:
            break
        offs[k] = pos
        k += 1
        pos += 2 + ln
    return k, pos


def itch_stream(uri):
    """All framed ITCH messages of a source as (bytes, offsets)."""
    scheme, target, params = split(uri)
    if scheme == "itch":
        data = b"".join(files.chunks(target))
    elif scheme == "synthetic":
        import io
        from feeds.nasdaq.itch_sink import ItchSink  # the same writer `engine convert` uses
        from feeds.core.sources import open_source
        src = open_source(uri)  # (the simulator: a venue of its own)
        if not src.params.count:
            raise FeedError(f"{uri}: give count= (the stream is sent whole)")
        sink = ItchSink(None, ".itch", src, fileobj=io.BytesIO())
        for t in src.batches():
            sink.write(t, 0)
        sink.finish()
        data = sink.f.getvalue()
        print(f"[moldudp64] receivers read it as ...?date={sink.day}", file=sys.stderr, flush=True)
    else:
        raise FeedError(f"{uri}: serve reads itch:FILE or synthetic://?...&count=N")
    arr = np.frombuffer(data, np.uint8)
    offs = np.zeros(len(data) // 3 + 1, np.int64)
    k, end = frame_offsets(arr, offs)
    if end != len(data):
        raise FeedError(f"{uri}: malformed ITCH framing at byte {end}")
    return data, np.append(offs[:k], end)


class Server:
    def __init__(self, uri, dest, session=b"ENGINE0001", rerequest=None, rate=100_000.0, drop=(),
                 drop_every=0, linger=1.0, quiet=False, iface=None):
        self.data, self.offs = itch_stream(uri)
        self.session = session.ljust(10)[:10]
        self.dest = dest
        self.rate = rate
        self.drop, self.drop_every = set(drop), drop_every
        self.linger = linger
        self.say = (lambda m: None) if quiet else (lambda m: print(f"[moldudp64] {m}", file=sys.stderr, flush=True))
        self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if is_multicast(dest[0]):
            self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            if iface:
                self.tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
        self.rr = None
        if rerequest:
            self.rr = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.rr.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.rr.bind(rerequest)
            except OSError as e:
                raise FeedError(f"re-request server cannot bind {rerequest[0]}:{rerequest[1]}: {e.strerror}") from None
            self.rr.settimeout(0.05)
        self.done = threading.Event()
        self.sent = self.dropped_packets = self.dropped_messages = self.retransmitted = 0

    @property
    def messages(self):
        return len(self.offs) - 1

    def packets(self, first, last):
        """(seq, packet) covering messages [first, last) (seq from 1), each under the MTU.
        Message `s` is data[offs[s - 1]:offs[s]]."""
        seq = first
        while seq < last:
            end, size = seq, 0
            while end < last:
                msz = int(self.offs[end] - self.offs[end - 1])
                if size and size + msz > MAX_PAYLOAD:
                    break
                size += msz
                end += 1
            yield seq, HEADER.pack(self.session, seq, end - seq) + self.data[int(self.offs[seq - 1]):int(self.offs[end - 1])]
            seq = end

    def _serve_rerequests(self):
        while not self.done.is_set():
            try:
                req, addr = self.rr.recvfrom(64)
            except socket.timeout:
                continue
            except OSError:
                return
            if len(req) < HEADER_LEN:
                continue
            session, seq, count = HEADER.unpack_from(req)
            if session != self.session or seq < 1:
                continue
            last = min(seq + count, self.messages + 1)
            for _, pkt in self.packets(seq, last):
                self.tx.sendto(pkt, addr)
                self.retransmitted += 1

    def run(self, stop=lambda: False):
        """Send the whole stream paced at `rate` messages/s, then end the session and linger
        for re-requests. Returns a summary dict."""
        t = None
        if self.rr:
            t = threading.Thread(target=self._serve_rerequests, name="mold-rerequest", daemon=True)
            t.start()
        self.say(f"{self.messages} messages -> {self.dest[0]}:{self.dest[1]} session {self.session.decode()!r}")
        t0 = time.monotonic()
        for i, (seq, pkt) in enumerate(self.packets(1, self.messages + 1)):
            if stop():
                break
            count = HEADER.unpack_from(pkt)[2]
            if i in self.drop or (self.drop_every and i % self.drop_every == self.drop_every - 1):
                self.dropped_packets += 1
                self.dropped_messages += count
            else:
                self.tx.sendto(pkt, self.dest)
                self.sent += 1
            if self.rate > 0:
                due = t0 + (seq + count - 1) / self.rate
                ahead = due - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        end = heartbeat(self.session, self.messages + 1, end=True)
        deadline = time.monotonic() + self.linger
        while time.monotonic() < deadline and not stop():
            self.tx.sendto(end, self.dest)  # repeated: an end that is lost would leave receivers waiting
            time.sleep(min(0.1, self.linger / 4))
        self.done.set()
        if t:
            t.join(1.0)
        res = {"messages": self.messages, "packets_sent": self.sent, "packets_dropped": self.dropped_packets,
               "messages_dropped": self.dropped_messages, "packets_retransmitted": self.retransmitted}
        self.say(" ".join(f"{k}={v}" for k, v in res.items()))
        return res

"""`moldudp64://HOST:PORT` — live ITCH 5.0 over MoldUDP64 (UDP, unicast or multicast).

Its parameters are declared in feeds/nasdaq/params.py (MOLD; `engine sources moldudp64`). A gap
tick voids every book downstream, so after one each instrument's next event re-sends its depth
window (after a clear tick).

Raw messages (`engine record --raw`, the contract in app/recorder.py): raw_suffix ".itch"; with
`raw_sink` set, each packet's messages that are applied (duplicates and overlaps left out, in
sequence order, retransmissions in their place) go to it as they are, length-framed: together an
ITCH 5.0 file (`itch:FILE`, feeds/nasdaq/itch_file.py). Lost messages are missing from it (no gap mark:
ITCH files have none), and malformed ones are in it as received (read it with on_error=skip then).
`raw_restart()` gives the stock directory messages seen so far, so a piece cut mid-session names
its instruments in the same order.

A packet is a 20-byte header (session: 10 ASCII bytes, sequence number of its first message:
u64, message count: u16, big-endian) and `count` length-framed messages. Count 0 is a heartbeat
(its sequence is the next expected), 0xFFFF ends the session. Sequence checks:
- a packet after a gap: the missing messages are counted; with no re-request server (or when
  recovery times out) a gap tick carrying their number is emitted and the stream goes on;
- a duplicate or an overlap is dropped (counted), overlaps message by message;
- a malformed packet (short header, other session, messages that do not fit) is counted and
  dropped, and its messages count as lost: a live feed never stops on one bad datagram;
- at most MAX_HELD packets wait for a re-request: past that (a flood of packets from ahead of a
  gap) the gap is given up at once, as when recover_ms passes, so memory stays bounded.
"""
import select
import socket
import struct
import time

import numpy as np

from feeds.core import uri as U, venues
from feeds.books.book import Orders, rehash
from feeds.nasdaq.itch import ST_OUT, ItchBooks
from feeds.nasdaq.itch_file import day_ns
from feeds.books.ticks import emit_gap

HEADER = struct.Struct(">10sQH")
HEADER_LEN = 20
END_OF_SESSION = 0xFFFF
MAX_PAYLOAD = 1400  # keep packets under a 1500-byte Ethernet MTU
BATCH = 4096
MAX_HELD = 1024  # packets held while a gap is recovered (each at most one 64 KiB datagram)


def packet(session, seq, msgs):
    """A downstream packet with framed messages `msgs` (bytes each, length prefix included)."""
    return HEADER.pack(session, seq, len(msgs)) + b"".join(msgs)


def heartbeat(session, next_seq, end=False):
    return HEADER.pack(session, next_seq, END_OF_SESSION if end else 0)


def request(session, seq, count):
    return HEADER.pack(session, seq, count)


def split_messages(buf, pos, end, count):
    """Offsets of `count` framed messages in buf[pos:end], or None when they do not fit."""
    offs = []
    for _ in range(count):
        if end - pos < 2:
            return None
        ln = int.from_bytes(buf[pos:pos + 2], "big")
        if ln == 0 or ln > end - pos - 2:
            return None
        offs.append(pos)
        pos += 2 + ln
    return offs if pos == end else None


def is_multicast(host):
    try:
        return 224 <= int(host.split(".")[0]) <= 239
    except ValueError:
        return False


MOLD_STATS = ("packets", "heartbeats", "duplicate_messages", "bad_packets", "wrong_session", "gaps",
              "lost_messages", "rerequests", "recovered_messages", "rerequest_timeouts", "held_overflows")
YIELD_EVERY_S = 0.02  # however packets come, a batch (empty if need be) at least this often: the heartbeat


class MoldSource:
    live = True
    raw_suffix = ".itch"

    def __init__(self, u, v):
        self.uri = u
        self.host, self.port = U.hostport(v.target)
        self.rerequest = v.rerequest
        self.recover_ns = int(v.recover_ms * 1e6)
        self.idle_s = v.idle_s
        self.max_gap = v.max_gap
        # a live feed never stops on a malformed message: count it and go on
        self.books = ItchBooks(v.symbols, strict=False, day_ns=day_ns(v), depth=v.depth)
        self.depth = v.depth
        self.counts = dict.fromkeys(MOLD_STATS, 0)
        if len(v.session) > 10 or not v.session.isascii():
            raise U.FeedError(f"{u}: session must be at most 10 ASCII characters, got {v.session!r}")
        self.session = v.session.encode().ljust(10) if v.session else None  # (space-padded on the wire)
        self.expected = v.start_seq if v.start_seq > 0 else None
        self._asked = (-1, 0)  # (first seq, count) of the outstanding re-request
        self.stopped = False
        self.ended = False
        self.raw_sink = None   # fn(bytes): the applied messages as an ITCH file (engine record --raw)
        self._directory = {}   # stock locate -> its latest 'R' message, framed (raw_restart)
        self._compile()  # before we listen: packets that come while a parser compiles overflow the socket
        self.sock = self._bind(v.iface)
        self._poll = select.poll()
        self._poll.register(self.sock, select.POLLIN)

    def _compile(self):
        """Everything a packet can reach that numba compiles on first use: the ITCH parser (no
        message in an empty buffer), a gap tick, the order table's growth."""
        out = np.zeros((BATCH, 8), np.int64)
        self.books.apply(np.frombuffer(b"", np.uint8), 0, 0, out, 0, max_msgs=0, ts_recv=0)
        emit_gap(out, 0, 0, 0, 0)
        o = Orders(8)
        rehash(o.keys, o.vals, o.keys.copy(), o.vals.copy())

    def _bind(self, iface):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        try:
            if is_multicast(self.host):
                s.bind(("", self.port))
                mreq = socket.inet_aton(self.host) + socket.inet_aton(iface)
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            else:
                s.bind((self.host, self.port))
        except OSError as e:
            s.close()
            raise U.FeedError(f"{self.uri}: cannot listen on {self.host}:{self.port}: {e.strerror}") from None
        s.settimeout(0.05)
        return s

    @property
    def instruments(self):
        return self.books.instruments()

    @property
    def specs(self):
        """The instruments' records (engine/instruments.py): Nasdaq stocks."""
        if not hasattr(self, "_specs"):
            self._specs = venues.Specs(venues.nasdaq)
        return self._specs.of(self.instruments)

    def stats(self):
        return {**self.counts, **self.books.stats_dict()}

    def stop(self):
        self.stopped = True

    def resync(self):
        """A consumer asked for every window again (feeds/process.py)."""
        self.books.forget()

    def raw_restart(self):
        """The bytes a new raw piece starts with: the stock directory seen so far."""
        return b"".join(self._directory.values())

    def _raw(self, data, offs, first):
        """Messages offs[first:] of a packet (they run to its end) to raw_sink; the directory kept."""
        for o in offs[first:]:
            if data[o + 2] == 82 and data[o + 1] == 39 and data[o] == 0:  # 'R', 39 bytes: a stock directory
                self._directory[data[o + 3:o + 5]] = data[o:o + 41]
        self.raw_sink(data[offs[first]:])

    # -- per packet ----------------------------------------------------------------------

    def batches(self):
        out = np.zeros((BATCH, 8), np.int64)
        n = 0
        pending = {}         # seq -> (buf, offsets) held while a gap is being recovered
        gap_deadline = None
        last_packet = last_yield = time.monotonic()
        buf = bytearray(65536)
        view = memoryview(buf)
        ended = False
        while not self.stopped:
            try:
                size, addr = self.sock.recvfrom_into(view)
            except socket.timeout:
                size = -1
            now = time.monotonic()
            if size >= 0:
                last_packet = now
                events = self._on_packet(bytes(view[:size]), pending)
            else:
                events = []
                if self.idle_s and now - last_packet > self.idle_s:
                    break
            if gap_deadline is None and pending:
                gap_deadline = time.monotonic_ns() + self.recover_ns
            if pending and gap_deadline is not None and time.monotonic_ns() > gap_deadline:
                events += self._give_up(pending)
            while len(pending) > MAX_HELD:  # a flood from ahead of a gap: give it up now
                self.counts["held_overflows"] += 1
                events += self._give_up(pending, timed_out=False)
            if not pending:
                gap_deadline = None
            n = yield from self._run(events, out, n)
            ended = ended or self.ended
            if n and (size < 0 or n > BATCH // 2 or now - last_yield > YIELD_EVERY_S or not self._poll.poll(0)):
                yield out[:n]  # a live feed does not sit on ticks: what the socket held is a batch
                n, last_yield = 0, now
            elif size < 0 or now - last_yield > YIELD_EVERY_S:
                yield out[:0]  # idle, or packets without ticks: lets the publisher keep its heartbeat fresh
                last_yield = now
            if ended and not pending:
                break
        if n:
            yield out[:n]
        self.sock.close()

    def _run(self, events, out, n):
        """Apply events to the books, yielding full batches; returns the ticks left in out."""
        for ev in events:
            if ev[0] == "msgs":
                _, data, offs, first = ev
                if self.raw_sink is not None:
                    self._raw(data, offs, first)
                arr = np.frombuffer(data, np.uint8)
                pos, left, stamp = offs[first], len(offs) - first, time.monotonic_ns()
                while left > 0:
                    pos, n, k, st = self.books.apply(arr, pos, len(data), out, n, max_msgs=left, ts_recv=stamp)
                    left -= k
                    if st != ST_OUT:
                        break  # ST_DONE (split_messages checked the framing already)
                    yield out[:n]
                    n = 0
            elif ev[0] == "gap":
                if n + 1 > len(out):
                    yield out[:n]
                    n = 0
                n = emit_gap(out, n, 0, time.monotonic_ns(), ev[1])
                self.books.forget()  # the consumer voids every book: windows are re-sent
            elif ev[0] == "end":
                self.ended = True
        return n

    def datagram(self, data, pending, out, n):
        """Handle one datagram as the receive loop does (for tests and fuzzing): a generator of
        full batches that returns the ticks left in out."""
        return (yield from self._run(self._on_packet(data, pending), out, n))

    def _on_packet(self, data, pending):
        """Sequence bookkeeping for one datagram; returns events in the order to apply them."""
        c = self.counts
        if len(data) < HEADER_LEN:
            c["bad_packets"] += 1
            return []
        session, seq, count = HEADER.unpack_from(data)
        if self.session is None:
            self.session = session
        elif session != self.session:
            c["bad_packets"] += 1
            c["wrong_session"] += 1
            return []
        if seq >= 1 << 62 or (self.expected is not None and seq - self.expected > self.max_gap):
            c["bad_packets"] += 1  # a sequence number no live session reaches: corrupt or foreign
            return []
        if count == 0 or count == END_OF_SESSION:
            c["packets"] += 1  # (every datagram is counted once: in packets or in bad_packets)
            c["heartbeats"] += 1
            ev = self._advance_to(seq, pending, data=None)
            return ev + ([("end",)] if count == END_OF_SESSION else [])
        offs = split_messages(data, HEADER_LEN, len(data), count)
        if offs is None:
            c["bad_packets"] += 1
            return []
        c["packets"] += 1
        if self.expected is None:
            self.expected = seq
        if seq + count <= self.expected:
            c["duplicate_messages"] += count
            return []
        if seq > self.expected:
            return self._advance_to(seq, pending, data=(data, offs))
        first = self.expected - seq  # overlap: skip what we already have
        c["duplicate_messages"] += first
        if pending:  # a gap is being recovered: this is a retransmission (or the late original)
            c["recovered_messages"] += count - first
        self.expected = seq + count
        ev = [("msgs", data, offs, first)] + self._drain(pending)
        self._ask(pending)
        return ev

    def _advance_to(self, seq, pending, data):
        """A packet (or heartbeat) says messages up to `seq` exist."""
        if self.expected is None:
            self.expected = seq
        if seq <= self.expected:
            return []
        pending.setdefault(seq, data if data is not None else (b"", []))
        if not self.rerequest:
            return self._lose(seq - self.expected) + self._drain(pending)
        self._ask(pending)
        return []

    def _ask(self, pending):
        """Re-request what is missing before the first held packet (once per starting point)."""
        if not pending or not self.rerequest:
            return
        missing = min(pending) - self.expected
        if missing > 0 and self._asked[0] != self.expected:
            self._asked = (self.expected, missing)
            self.counts["rerequests"] += 1
            try:
                self.sock.sendto(request(self.session, self.expected, min(missing, 0xFFFE)), self.rerequest)
            except OSError:
                pass  # the server is gone: recovery times out and the gap is emitted

    def _lose(self, missing):
        self.counts["gaps"] += 1
        self.counts["lost_messages"] += missing
        self.expected += missing
        return [("gap", missing)]

    def _drain(self, pending):
        """Apply held packets that are now in sequence."""
        ev = []
        while pending:
            seq = min(pending)
            data, offs = pending[seq]
            if seq > self.expected:
                break
            del pending[seq]
            count = len(offs)
            if seq + count <= self.expected:
                self.counts["duplicate_messages"] += count
                continue
            first = self.expected - seq
            ev.append(("msgs", data, offs, first))
            self.expected = seq + count
        return ev

    def _give_up(self, pending, timed_out=True):
        """Recovery timed out (or too much is held): the missing messages are lost; go on from the
        next held packet."""
        seq = min(pending)
        ev = self._lose(seq - self.expected) if seq > self.expected else []
        if ev and self.rerequest and timed_out:
            self.counts["rerequest_timeouts"] += 1  # asked, and no answer within recover_ms
        self._asked = (-1, 0)
        ev += self._drain(pending)
        self._ask(pending)
        return ev

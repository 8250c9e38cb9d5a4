"""Signals on zmq, with slow subscribers counted and cut off, never the engine.

A message is three frames: the topic (the instrument's name), the 128-byte signal record, and
the topic's publication number (uint64 little-endian, from 0 per topic per run). A subscriber
that sees a topic's number jump by more than one lost the signals in between.

The socket is an XPUB with XPUB_NODROP, sent to without blocking. libzmq queues at most
SNDHWM messages per subscriber (plus its socket buffer); a send that finds a subscriber's queue
full fails with EAGAIN, and that is the only moment libzmq tells us a subscriber fell behind (it
never says which one, and once a queue is full it drops silently until it drains). So on EAGAIN:
the signal is counted as dropped, the connections whose kernel send queue is backed up (at least
half their socket buffer unsent, or unsent and not moving for STALL_S: a reader keeps it near
empty) are the slow ones, and each is shut down (its queue goes with the connection, counted
too); then the signal goes to everyone else (the full queue drops it). The connections are
looked at again for RECHECK_FOR_S after an EAGAIN, as a queue can fill before the socket
buffer does. A zmq SUB reconnects by itself and sees the gap in the publication numbers.
Finding a connection costs a scan of /proc/self/fd (~13 us a descriptor), only then.
"""
import fcntl
import os
import socket
import struct
import sys
import time

HWM = 1000                 # signals queued per subscriber before it is found full
SNDBUF = 256 * 1024        # its socket buffer (the kernel doubles it)
RECHECK_S = 0.05           # after an EAGAIN, look at the connections this often...
RECHECK_FOR_S = 2.0        # ...for this long
STALL_S = 0.2              # a send queue that has not moved for this long (after an EAGAIN) is a stalled reader
LOG_EVERY_S = 10.0         # at most one line about slow subscribers this often (the rest are counted)
_SIOCOUTQ = 0x5411         # bytes in a socket's send queue not yet taken by the peer (TCP and unix)
_SEQ = struct.Struct("<Q")


def log(msg):
    print(f"[engine] {msg}", file=sys.stderr, flush=True)


class Publisher:
    def __init__(self, endpoint, hwm=HWM, sndbuf=SNDBUF):
        import zmq
        self.zmq = zmq
        s = zmq.Context.instance().socket(zmq.XPUB)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, hwm)
        s.setsockopt(zmq.SNDBUF, sndbuf)
        s.setsockopt(zmq.RCVHWM, 1000)  # subscriptions we have not read yet (read every drain)
        s.setsockopt(zmq.XPUB_NODROP, 1)
        try:
            s.bind(endpoint)
        except zmq.ZMQError as e:
            s.close(0)
            raise RuntimeError(f"--pub {endpoint}: cannot bind: {e.strerror}") from None
        self.sock, self.hwm = s, hwm
        self.endpoint = s.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._local = self._local_address(self.endpoint)
        self.seqs = {}                 # topic -> its next publication number
        self.published = 0             # signals sent
        self.dropped = 0               # signals a slow subscriber did not get (see README)
        self.disconnected = 0          # slow subscribers cut off
        self._recheck_until = self._next_recheck = 0.0  # after an EAGAIN: look for the slow one until then
        self._queued = {}              # socket -> (bytes unsent, since when) at the last look
        self._wire = 150
        self._logged_at, self._unlogged = 0.0, 0

    @staticmethod
    def _local_address(endpoint):
        if endpoint.startswith("tcp://"):
            host, _, port = endpoint[6:].rpartition(":")
            return ("tcp", host.strip("[]"), int(port))
        if endpoint.startswith("ipc://"):
            return ("ipc", endpoint[6:])
        return None  # inproc: no sockets of ours to look at

    # -- sending -------------------------------------------------------------------------

    def send(self, topic, payload):
        zmq = self.zmq
        seq = self.seqs.get(topic, 0)
        self.seqs[topic] = seq + 1
        parts = (topic, payload, _SEQ.pack(seq))
        try:
            self.sock.send_multipart(parts, zmq.NOBLOCK)
        except zmq.Again:  # a subscriber's queue is full: it loses this one; cut it off, then send to the rest
            self.dropped += 1
            self._wire = sum(len(p) + 2 for p in parts)  # ZMTP: flags + size byte per short frame
            self._recheck_until = time.monotonic() + RECHECK_FOR_S
            self._cut_slow()
            self.sock.setsockopt(zmq.XPUB_NODROP, 0)
            try:
                self.sock.send_multipart(parts, zmq.NOBLOCK)  # lossy: a full queue drops, the others get it
            except zmq.Again:
                pass
            finally:
                self.sock.setsockopt(zmq.XPUB_NODROP, 1)
        self.published += 1

    def poll(self):
        """Every drain: read subscriptions (XPUB passes them up; they would queue), and after an
        EAGAIN nobody could be blamed for yet, look again for a while."""
        zmq = self.zmq
        for _ in range(1000):
            try:
                self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        now = time.monotonic()
        if now < self._recheck_until and now >= self._next_recheck:
            self._next_recheck = now + RECHECK_S
            self._cut_slow()

    def close(self):
        self.sock.close(0)

    # -- slow subscribers ----------------------------------------------------------------

    def _connections(self):
        """Our accepted subscriber connections: the sockets of this process whose local address
        is the endpoint and that have a peer. (libzmq does not tell which fd a pipe is; the
        kernel does.) (socket id, a dup the caller closes, peer)."""
        loc = self._local
        if loc is None:
            return []
        out, seen = [], set()
        for name in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{name}")
                if not link.startswith("socket:") or link in seen:
                    continue  # (a socket once: the dups made here are listed too)
                fd = os.dup(int(name))
                seen.add(link)
            except OSError:
                continue
            s = socket.socket(fileno=fd)
            try:
                if s.type != socket.SOCK_STREAM:
                    raise OSError
                if loc[0] == "tcp":
                    if s.family not in (socket.AF_INET, socket.AF_INET6):
                        raise OSError
                    host, port = s.getsockname()[:2]
                    if port != loc[2] or (loc[1] not in ("*", "0.0.0.0", "::") and host != loc[1]):
                        raise OSError
                    peer = "%s:%d" % s.getpeername()[:2]
                else:
                    if s.family != socket.AF_UNIX or s.getsockname() != loc[1] or \
                            s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                        raise OSError  # not ours, or the listener
                    peer = f"{loc[1]} (fd {name})"
            except OSError:
                s.close()
                continue
            out.append((link, s, peer))
        return out

    def _cut_slow(self):
        """Shut down the connections that stopped taking signals: at least half their socket
        buffer unsent, or an unsent queue that has not moved for STALL_S."""
        now = time.monotonic()
        prev, self._queued = self._queued, {}
        cut = 0
        for link, s, peer in self._connections():
            try:
                queued = struct.unpack("i", fcntl.ioctl(s.fileno(), _SIOCOUTQ, b"\0" * 4))[0]
                seen = prev.get(link)
                since = seen[1] if seen is not None and seen[0] == queued else now
                if queued * 2 < s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) and \
                        (queued == 0 or now - since < STALL_S):
                    self._queued[link] = (queued, since)
                    continue
                # RST rather than a FIN stuck behind its queue: libzmq sees the end and drops the
                # pipe, the kernel frees the queue
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
                cut += 1
                self.disconnected += 1
                self.dropped += self.hwm + queued // self._wire  # what was queued for it goes with it
                self._say(f"zmq subscriber {peer} stopped reading ({self.hwm} signals and {queued:,} bytes "
                          f"queued for it): disconnected (engine_zmq_slow_disconnects_total)")
            except OSError:
                pass
            finally:
                s.close()
        if cut and not any(q for q, _ in self._queued.values()):
            self._recheck_until = 0.0  # found, and nobody else is behind: stop looking

    def _say(self, msg):
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return
        more = f" (and {self._unlogged} more since the last line)" if self._unlogged else ""
        self._logged_at, self._unlogged = now, 0
        log(msg + more)


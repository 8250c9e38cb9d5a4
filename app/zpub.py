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
Finding a connection costs a scan of /proc/self/fd (~13 us a descriptor), only then, and in a
thread of its own: each of its system calls gives up the GIL, and taking it back can wait 5 ms
while the HTTP side runs Python (a scrape flood): seconds for a few hundred descriptors, which
the thread that drains signals and renews the loop's lease must never spend.

The socket is a CURVE server (server_keys): a subscriber that sets curve_serverkey to the
engine's public key completes the handshake only with the holder of the secret key, so a process
that binds the port while the engine is down (a squatter) cannot feed it records: its handshake
fails and the subscriber can say so (engine signals --follow does). The keypair persists per
engine name in the engine's private state directory, so subscribers that were given the public
key once keep working across restarts; delete the files to change it. The engine, in turn,
admits only the client keys its owner allows (app/zauth.py: this user's own subscribers', and
those of --pub-clients FILE): the public key alone reads nothing.
"""
import fcntl
import os
import socket
import struct
import sys
import threading
import time

from .zauth import (Gate, allowed_clients, check_public_key, keypair, own_client_keys,  # noqa: F401 (the API)
                    own_key_paths)

HWM = 1000                 # signals queued per subscriber before it is found full
SNDBUF = 256 * 1024        # its socket buffer (the kernel doubles it)
RECHECK_S = 0.05           # after an EAGAIN, look at the connections this often...
RECHECK_FOR_S = 2.0        # ...for this long
STALL_S = 0.2              # a send queue that has not moved for this long (after an EAGAIN) is a stalled reader
LOG_EVERY_S = 10.0         # at most one line about slow subscribers this often (the rest are counted)
_SIOCOUTQ = 0x5411         # bytes in a socket's send queue not yet taken by the peer (TCP and unix)
_SEQ = struct.Struct("<Q")
_EAGAIN, _SNDMORE, _DONTWAIT = 11, 2, 1


from .progress import log  # noqa: E402  (one owner of the [engine] lines and --quiet)


def key_paths(name, directory):
    """(secret key file, public key file) of engine `name` in its state directory."""
    base = os.path.join(directory, f"{str(name).replace('/', '%')}.zmq-key")
    return base, base + ".pub"


def server_keys(name, directory):
    """(public, secret) CURVE keys (z85 bytes) of engine `name`: read from its 0600 key file, or made
    the first time. The public key is also written to KEYFILE.pub (0644: it is no secret) for
    consumers."""
    return keypair(*key_paths(name, directory), "zmq key file",
                   "delete it and the engine makes a new keypair (subscribers then need the new public key)")


def read_public_key(path):
    """A server's public key (40 z85 characters) from a key file (NAME.zmq-key.pub)."""
    try:
        with open(path, "rb") as f:
            key = f.read(4096).strip()
    except OSError as e:
        raise ValueError(f"zmq public key {path}: {e.strerror}") from None
    return check_public_key(key, path)


def subscriber(ctx, server_key, client=None):
    """A SUB socket that talks only to the holder of server_key's secret (CURVE), with the client
    keypair `client` (public, secret): by default this user's own subscribers', which its engines
    admit (app/zauth.py); another user's engine admits the keys its owner lists (--pub-clients)."""
    import zmq
    s = ctx.socket(zmq.SUB)
    pub, sec = client or own_client_keys()
    s.curve_serverkey = server_key
    s.curve_publickey, s.curve_secretkey = pub, sec
    return s


def _libzmq():
    """pyzmq's own libzmq (the one its sockets live in), opened so calls keep the GIL, or None."""
    import ctypes

    import zmq  # noqa: F401 - loads it
    with open("/proc/self/maps") as f:
        paths = {ln.split()[-1] for ln in f if "libzmq" in ln and "/" in ln}
    if len(paths) != 1:
        return None
    lib = ctypes.PyDLL(paths.pop())
    lib.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    lib.zmq_send.restype = ctypes.c_int
    lib.zmq_errno.restype = ctypes.c_int
    return lib


class _Sender:
    """send_multipart without giving up the GIL. pyzmq releases it around every frame; taking it
    back waits for the switch interval (5 ms) whenever another thread is running Python (the HTTP
    side under a scrape flood): 15 ms a signal, a minute for one drained chunk, and the loop's
    lease runs out. A non-blocking zmq_send takes about a microsecond: never worth the release."""

    def __init__(self, sock):
        import zmq
        self.zmq, self.sock = zmq, sock
        self.lib = _libzmq()
        self.handle = sock.underlying

    def __call__(self, parts):
        """parts sent as one message without blocking; zmq.Again if a queue is full."""
        lib = self.lib
        if lib is None:
            return self.sock.send_multipart(parts, self.zmq.NOBLOCK)
        last = len(parts) - 1
        for i, p in enumerate(parts):  # (libzmq takes the rest of a message once its first frame is in)
            if lib.zmq_send(self.handle, p, len(p), _DONTWAIT | (_SNDMORE if i < last else 0)) < 0:
                err = lib.zmq_errno()
                raise self.zmq.Again() if err == _EAGAIN else self.zmq.ZMQError(err)


class Publisher:
    """The XPUB socket. With secret_key: a CURVE server (only the holder of this key completes a
    subscriber's handshake) in a zmq context of its own, whose ZAP handler (app/zauth.py Gate)
    admits only the client public keys in `clients`."""

    def __init__(self, endpoint, hwm=HWM, sndbuf=SNDBUF, secret_key=None, clients=()):
        import zmq
        self.zmq = zmq
        self._logged_at, self._unlogged, self._say_lock = 0.0, 0, threading.Lock()
        self.gate = None
        if secret_key is not None:
            self.ctx = zmq.Context()
            self.gate = Gate(self.ctx, clients, self._say)  # (bound before the socket: no handshake without it)
        else:
            self.ctx = zmq.Context.instance()
        s = self.ctx.socket(zmq.XPUB)
        if secret_key is not None:
            s.curve_server = True
            s.curve_secretkey = secret_key
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, hwm)
        s.setsockopt(zmq.SNDBUF, sndbuf)
        s.setsockopt(zmq.RCVHWM, 1000)  # subscriptions we have not read yet (read every drain)
        s.setsockopt(zmq.XPUB_NODROP, 1)
        try:
            s.bind(endpoint)
        except zmq.ZMQError as e:
            s.close(0)
            self._close_gate()
            raise RuntimeError(f"--pub {endpoint}: cannot bind: {e.strerror}") from None
        self.sock, self.hwm = s, hwm
        self._send = _Sender(s)
        self.endpoint = s.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._local = self._local_address(self.endpoint)
        self.seqs = {}                 # topic -> its next publication number
        self.published = 0             # signals sent
        self._sent_dropped = 0         # signals refused on a full queue (the sending thread's count)
        self._cut_dropped = 0          # signals queued for subscribers cut off (the cutter's count)
        self.disconnected = 0          # slow subscribers cut off
        self._recheck_until = 0.0      # after an EAGAIN: look for the slow one until then
        self._queued = {}              # socket -> (bytes unsent, since when) at the last look
        self._wire = 150
        self._wake, self._stop = threading.Event(), threading.Event()
        self._cutter = threading.Thread(target=self._cut_loop, name="engine-zmq-slow", daemon=True)
        self._cutter.start()

    @property
    def dropped(self):
        """Signals a slow subscriber did not get (see README)."""
        return self._sent_dropped + self._cut_dropped

    @property
    def refused(self):
        """Subscribers whose client key is not one the owner allows (their handshakes refused)."""
        return self.gate.refused if self.gate is not None else 0

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
            self._send(parts)
        except zmq.Again:  # a subscriber's queue is full: it loses this one; cut it off, then send to the rest
            self._sent_dropped += 1
            self._wire = sum(len(p) + 2 for p in parts)  # ZMTP: flags + size byte per short frame
            self._recheck_until = time.monotonic() + RECHECK_FOR_S
            self._wake.set()  # (the cutter thread finds it; the rest get this one now)
            self.sock.setsockopt(zmq.XPUB_NODROP, 0)
            try:
                self._send(parts)  # lossy: a full queue drops, the others get it
            except zmq.Again:
                pass
            finally:
                self.sock.setsockopt(zmq.XPUB_NODROP, 1)
        self.published += 1

    def poll(self):
        """Every drain: read subscriptions (XPUB passes them up; they would queue)."""
        zmq = self.zmq
        for _ in range(1000):
            try:
                self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break

    def close(self):
        self._stop.set()
        self._wake.set()
        self._cutter.join(1.0)  # (a scan under a flood may take longer: it is a daemon thread)
        self.sock.close(0)
        self._close_gate()

    def _close_gate(self):
        if self.gate is not None and self.gate.close():
            self.ctx.term()  # (its sockets are closed: returns at once)

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

    def _cut_loop(self):
        """After an EAGAIN, look for the slow connections every RECHECK_S until _recheck_until."""
        while not self._stop.is_set():
            self._wake.wait()
            while not self._stop.is_set() and time.monotonic() < self._recheck_until:
                self._wake.clear()
                self._cut_slow()
                self._stop.wait(RECHECK_S)

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
                self._cut_dropped += self.hwm + queued // self._wire  # what was queued for it goes with it
                self._say(f"zmq subscriber {peer} stopped reading ({self.hwm} signals and {queued:,} bytes "
                          f"queued for it): disconnected (engine_zmq_slow_disconnects_total)")
            except OSError:
                pass
            finally:
                s.close()
        if cut and not any(q for q, _ in self._queued.values()):
            self._recheck_until = 0.0  # found, and nobody else is behind: stop looking

    def _say(self, msg):
        """One line at most every LOG_EVERY_S (the slow-subscriber cutter and the ZAP handler: two threads)."""
        with self._say_lock:
            now = time.monotonic()
            if now - self._logged_at < LOG_EVERY_S:
                self._unlogged += 1
                return
            more = f" (and {self._unlogged} more since the last line)" if self._unlogged else ""
            self._logged_at, self._unlogged = now, 0
        log(msg + more)



class Subscriber:
    """Follows an engine's signals, checking that the publisher holds the engine's secret key: a
    process on the port that does not (a squatter while the engine is down) completes no
    handshake, so none of its records is ever received, and say() is told (one line, again every
    WARN_EVERY_S while it stays). libzmq gives up on a peer after a failed handshake: we connect
    again every RETRY_S, with current_key() (the engine's key now: a restarted engine may have a
    new one), and say when the engine is followed again. client: this subscriber's keypair (public,
    secret; default this user's own subscribers', app/zauth.py), which the engine must admit: a
    publisher that refuses it is said too (its owner lists the key in --pub-clients).

        sub = Subscriber("tcp://127.0.0.1:5556", open("engine.zmq-key.pub", "rb").read().strip())
        while True:
            topic, record, seq = sub.recv()   # seq: the topic's publication number (a jump: lost)
    """
    HANDSHAKE_IVL_MS = 5000   # a publisher that does not finish the handshake within this is refused
    WARN_EVERY_S = 10.0
    RETRY_S = 1.0

    def __init__(self, endpoint, key, name="engine", topics=(b"",), key_source="the key given", current_key=None,
                 say=None, ctx=None, client=None, client_source=None):
        import zmq
        self.zmq, self.ctx = zmq, ctx or zmq.Context.instance()
        self.client = client or own_client_keys()
        self.client_source = client_source or (own_key_paths()[1] if client is None else "the client key given")
        self.endpoint, self.key, self.name, self.topics = endpoint, check_public_key(key, key_source), name, topics
        self.key_source, self.current_key = key_source, current_key or (lambda: self.key)
        self.say = say or (lambda m: print(f"engine: {m}", file=sys.stderr, flush=True))
        self.events = {zmq.EVENT_CONNECTED: "connected", zmq.EVENT_HANDSHAKE_SUCCEEDED: "ok",
                       zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "failed", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "failed",
                       zmq.EVENT_HANDSHAKE_FAILED_AUTH: "denied", zmq.EVENT_DISCONNECTED: "gone"}
        self.pending = self.had_ok = False  # a connection whose handshake has not finished; one that did
        self.refused, self._warned_at, self._retry_at = 0, None, None
        self.sock = self.mon = None
        self._open()

    def _open(self):
        zmq = self.zmq
        s = subscriber(self.ctx, self.key, self.client)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.HANDSHAKE_IVL, self.HANDSHAKE_IVL_MS)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        m = s.get_monitor_socket(sum(self.events))
        try:
            s.connect(self.endpoint)
        except zmq.ZMQError as e:
            m.close(0)
            s.close(0)
            raise ValueError(f"--follow {self.endpoint}: {e.strerror}") from None
        for t in self.topics:
            s.setsockopt(zmq.SUBSCRIBE, t)
        self.sock, self.mon = s, m
        self.poller = zmq.Poller()
        self.poller.register(s, zmq.POLLIN)
        self.poller.register(m, zmq.POLLIN)

    def close(self):
        if self.sock is not None:
            self.sock.disable_monitor()
            self.mon.close(0)
            self.sock.close(0)
            self.sock = None

    def recv(self, timeout=None):
        """(topic, record, publication number bytes) from the engine; None after timeout seconds."""
        from zmq.utils.monitor import recv_monitor_message
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if end is not None and now >= end:
                return None
            if self._retry_at is not None and now >= self._retry_at:
                self._retry_at = None
                new = self.current_key()
                if new != self.key:
                    self.say(f"engine {self.name!r}'s publisher on {self.endpoint} has a new key "
                             f"({self.key.decode()} -> {new.decode()}): following it with the new key")
                    self.key = new
                self.close()
                self._open()
            waits = [x for x in (end, self._retry_at) if x is not None]
            wait_ms = None if not waits else max(0, int((min(waits) - now) * 1000) + 1)
            ready = dict(self.poller.poll(wait_ms))
            if self.mon in ready:
                self._event(self.events.get(recv_monitor_message(self.mon)["event"]))
            if self.sock in ready:
                parts = self.sock.recv_multipart()
                return (parts + [b"", b""])[:3] if len(parts) < 3 else parts[:3]

    def _event(self, kind):
        if kind == "connected":
            self.pending = True
        elif kind == "ok":
            self.pending = False
            if self.had_ok or self.refused:
                self.say(f"following engine {self.name!r} on {self.endpoint} again (publisher key "
                         f"{self.key.decode()}; it restarted, or cut this subscriber off)")
            self.had_ok, self.refused, self._warned_at = True, 0, None
        elif kind in ("failed", "denied") or (kind == "gone" and self.pending):
            self.pending = False
            now = time.monotonic()
            if self.current_key() != self.key:  # the engine restarted with a new key: at once
                self._retry_at = now
                return
            self._retry_at = now + self.RETRY_S
            self.refused += 1
            if self._warned_at is None or now - self._warned_at >= self.WARN_EVERY_S:
                self._warned_at = now
                if kind == "denied":  # (a ZAP refusal: the publisher turned this client's key away)
                    self.say(f"warning: the publisher on {self.endpoint} refused this subscriber: its client key "
                             f"{self.client[0].decode()} ({self.client_source}) is not one engine {self.name!r} "
                             "allows; the engine's owner lists it in the engine's --pub-clients file "
                             f"([control] pub_clients) and restarts it ({self.refused} refused so far)")
                    return
                self.say(f"warning: a process that is not engine {self.name!r} is listening on {self.endpoint}: "
                         f"it did not prove the engine's key ({self.key_source}); its records are refused "
                         f"({self.refused} handshakes refused so far)")

"""The TCP connection to a Databento live gateway: the transport only (what it carries is
feeds/databento/gateway_protocol.py's). A non-blocking connect within a deadline, TCP keepalive
(a half-open connection ends by itself too), the handshake's line reads, and reads into the
source's receive buffer.

A wait is a generator that yields while it waits, so that the feed's loop can hand on an empty
batch meanwhile (the ring's heartbeat stays fresh). A connection that is gone, or never came up,
raises Dropped: the session reconnects.
"""
import os
import select
import socket
import time

POLL_MS = 20              # a wait yields at least this often
LINE_MAX = 1 << 16        # a handshake line longer than this: not a gateway
RCVBUF_BYTES = 4 << 20
KEEPALIVE = (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
CONNECTING = (0, 115, 36, 10035)  # connect_ex: done, or EINPROGRESS (Linux, macOS), WSAEWOULDBLOCK


def run_blocking(wait):
    """Run a wait (a generator that yields while it waits) to its end, outside a feed's loop:
    its value."""
    try:
        while True:
            next(wait)
    except StopIteration as e:
        return e.value


class Dropped(Exception):
    """The connection is gone (or never came up): reconnect."""


class GatewayLink:
    """One TCP connection to HOST:PORT. `timeout_s` bounds the connect and the handshake's lines
    together; `stopped()` true ends a wait (Dropped "stopped")."""

    def __init__(self, host, port, timeout_s, stopped=lambda: False):
        self.host, self.port, self.timeout_s, self.stopped = host, port, timeout_s, stopped
        self.where = f"{host}:{port}"
        self.sock = None
        self.buf = bytearray()  # read past the last line: the start of what follows the handshake
        self.deadline = None
        self._poll = None

    def open(self):
        """Connect (a generator: it yields while it waits). Dropped when it cannot."""
        self.deadline = time.monotonic() + self.timeout_s
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise Dropped(f"cannot resolve {self.host}: {e.strerror or e}") from None
        family, kind, proto, _, addr = infos[0]
        s = self.sock = socket.socket(family, kind, proto)
        try:
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for opt, v in KEEPALIVE:
                if hasattr(socket, opt):
                    s.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), v)
            err = s.connect_ex(addr)
            if err not in CONNECTING:
                raise Dropped(f"cannot connect to {self.where}: {os.strerror(err)}")
            yield from self.wait(select.POLLOUT, "connect")
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise Dropped(f"cannot connect to {self.where}: {os.strerror(err)}")
        except BaseException:
            self.close()
            raise
        self._poll = select.poll()
        self._poll.register(s, select.POLLIN)

    def wait(self, ev, what):
        """Yield until the socket is ready for `ev` (select.POLLIN / POLLOUT), within the deadline."""
        p = select.poll()
        p.register(self.sock, ev | select.POLLERR | select.POLLHUP)
        while not p.poll(POLL_MS):
            if time.monotonic() > self.deadline:
                raise Dropped(f"{what}: no answer from {self.where} within {self.timeout_s:g} s")
            if self.stopped():
                raise Dropped("stopped")
            yield

    def read_line(self, what):
        """The next line, `\\n` included (a generator: it yields while it waits)."""
        buf = self.buf
        while b"\n" not in buf:
            yield from self.wait(select.POLLIN, what)
            try:
                chunk = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                raise Dropped(f"{what}: {e.strerror or e}") from None
            if not chunk:
                raise Dropped(f"{what}: {self.where} closed the connection")
            buf.extend(chunk)
            if len(buf) > LINE_MAX:
                raise Dropped(f"{what}: {self.where} sent no line end in 64 KiB: not a Databento gateway")
        i = buf.index(b"\n")
        line = bytes(buf[:i + 1])
        del buf[:i + 1]
        return line

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionError) as e:
            raise Dropped(f"{self.where}: {e.strerror or e}") from None

    def take_buffered(self):
        """What was read past the handshake's lines (and is no longer held here)."""
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def receive(self, into, wait_ms):
        """Read what has come (waiting up to wait_ms for it) into the writable buffer `into`:
        how many bytes (0: none yet). Dropped when the connection is gone."""
        try:
            if not self._poll.poll(wait_ms):
                return 0
            got = self.sock.recv_into(into)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as e:
            raise Dropped(f"{self.where}: {e.strerror or e}") from None
        if got == 0:
            raise Dropped(f"{self.where} closed the connection")
        return got

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

"""One binance-live websocket connection: the transport (feeds/transport/ws_client.py connects, reads
a socket read at a time, answers pings, closes), its frames as capture lines, and its life: when it
opened, when its last whole frame came, how many, whether it is lost and why."""
import time
from functools import partial

from feeds.transport import ws_client

MAX_FRAME = 1 << 20  # a bigger frame is not market data: the connection is dropped and resynced


class Conn:
    """One websocket connection: its frames, as capture lines, go into `buf` (ws_client makes the
    lines, a socket read at a time), unless `fast(conn, lines)` took them (published them at once)
    first. `fused(conn, ...)`, when given, is ws_client's one-call read (feeds/binance/read.py)."""

    def __init__(self, fast=None, fused=None):
        self.fast, self.fused = fast, fused
        self.buf = bytearray()
        self.transport = None  # the ws_client protocol, once connected
        self.opened = self.last = time.monotonic()
        self.frames = 0
        self.closed = False
        self.wake = None  # set while someone waits for this connection's lines (an event loop's stop)
        self.reason = ""

    def connect(self, url, offset):
        """The websocket handshake, a coroutine (ws_client.connect): its protocol, for `transport`."""
        return ws_client.connect(url, self.lines, self.lost, offset=offset, max_frame=MAX_FRAME,
                                 fused=None if self.fused is None else partial(self.fused, self))

    def lines(self, data, frames):
        self.frames += frames
        self.last = time.monotonic()
        if not self.buf and self.fast is not None and self.fast(self, data):
            return  # (lines queued before these, a snapshot or a gap, go first: the slow way)
        self.buf += data
        self.nudge()

    def lost(self, reason):
        self.closed = True
        self.reason = self.reason or reason
        self.nudge()

    def nudge(self):
        """Wake whoever waits for this connection (the event loop's stop: batches() waits in run_forever)."""
        if self.wake is not None:
            self.wake()

    def whole(self):
        """Open, nothing queued and nothing half-read (a cut frame, a fragmented message): its socket
        may be read by another reader from here."""
        p = self.transport
        return not (self.closed or self.buf or p is None or p.closed or p.transport is None
                    or p.transport.is_closing() or p.inbuf or p.frag is not None)

"""binance-live's session: its websocket connections over a run, and who reads the active one.

Connections (`Session`): the first connects at start (a refused handshake is one line at once);
a lost one (closed, or no whole data frame for silence_s) leaves a gap line and is replaced, with
backoff when a connect failed or the connection died young (within backoff_max_s: a venue that
takes connections and drops them); an old one (rotate_s, before the venue's 24-hour close) is
rotated make-before-break: a standby opens, runs beside it for overlap_s, and takes over, its
overlap dropped by the scanner (update and trade ids). Counted: connects, reconnects, rotations,
silences. The event loop runs here (`wait`) until the active connection has lines or is lost.

The native reader (`Handover`, feeds/binance/pump.py): in the steady state the active connection's
socket is handed to a thread that reads and publishes with no Python per read, and taken back for
anything else (a control frame, a snapshot wanted, a reconnect or rotation, a stop); its last read
is finished the read callback's way."""
import asyncio
import os
import time
from functools import partial

from feeds.binance import live_protocol as P, pump as ws_pump
from feeds.binance.live_conn import Conn
from feeds.binance.live_waits import Stopped, backoff, why
from feeds.core import uri as U
from feeds.core.venue_text import escape
from feeds.transport import ws_client


class Session:
    """The connections to `url` (p: silence_s, rotate_s, overlap_s, backoff_s, backoff_max_s, ws).
    Each new connection reads with `fast` and `fused` (live_conn.Conn); `on_gap()` is called when the
    active one is replaced (a gap), `before()` before any connection changes hands."""

    def __init__(self, u, url, p, waits, log, say, offset, *, fast=None, fused=None, on_gap=None, before=None):
        self.uri, self.url, self.p, self.waits, self.log, self.say, self.offset = u, url, p, waits, log, say, offset
        self.fast, self.fused = fast, fused
        self.on_gap = on_gap or (lambda: None)
        self.before = before or (lambda: None)
        self.counts = dict.fromkeys(("connects", "reconnects", "rotations", "silences"), 0)
        self.loop = None  # the event loop the connections run on (set when it runs)
        self.active = self.standby = None  # the connection read, and a rotation's next one
        self.ticking = None  # the task doing what due() said (a replace, a rotation, a switch), while it runs
        self.attempt = 0  # connections failed or died young in a row (the reconnect backoff's)
        self.done_frames = 0  # frames of the connections that are gone

    def frames(self):
        return self.done_frames + sum(c.frames for c in (self.active, self.standby) if c is not None)

    async def open(self):
        self.active = await self.connect(first=True)
        self.standby = None

    def take(self):
        """The active connection's lines so far (its buffer itself: a new one takes its place)."""
        a = self.active
        if not a.buf:
            return b""
        data, a.buf = a.buf, bytearray()
        return data

    def due(self):
        """What the connections need now: "replace" (the active one is lost or silent), "rotate"
        (it is old: open a standby), "switch" (the standby's overlap is over), or None."""
        a, now = self.active, time.monotonic()
        if a.closed or now - a.last > self.p.silence_s:
            return "replace"
        if self.standby is None and now - a.opened > self.p.rotate_s:
            return "rotate"
        if self.standby is not None and (self.standby.closed or now - self.standby.opened > self.p.overlap_s):
            return "switch"
        return None

    def step(self):
        """Between batches: a finished task's outcome (what it raised ends the run; False: it was
        stopped), and a task started for what is due (while it backs off and connects, batches go
        on, the heartbeat too)."""
        t = self.ticking
        if t is not None and t.done():
            self.ticking = None
            if t.cancelled() or isinstance(t.exception(), Stopped):
                return False
            t.result()
        if self.ticking is None:
            due = self.due()
            if due:
                self.ticking = self.loop.create_task(self.tick(due))
        return True

    async def tick(self, due):
        """Do what due() said: a lost or silent connection is replaced (a gap line first), an old
        one rotated, the standby switched to."""
        self.before()
        a = self.active
        if due == "replace":
            if not a.closed:
                self.counts["silences"] += 1
                a.reason = f"silent for {time.monotonic() - a.last:.1f} s"
                a.transport.abort()
            await self._replace(a)
        elif due == "rotate":
            self.standby = await self.connect(beside=True)
        else:
            self._switch()

    async def _replace(self, a):
        """The active connection is gone: a gap line, then a new connection (or the standby). One
        that died young (nothing came, or within backoff_max_s) is a failure like a refused
        connect: backed off before the next."""
        a.buf += P.gap_line(time.monotonic_ns() + self.offset, a.reason or "lost")
        self.counts["reconnects"] += 1
        self.on_gap()
        standby = self.standby if self.standby is not None and not self.standby.closed else None
        delay = 0.0
        if a.frames == 0 or time.monotonic() - a.opened < self.p.backoff_max_s:
            delay = self._backoff()
        else:
            self.attempt = 0
        if self.log.allow():
            self.say(f"connection lost ({escape(a.reason or 'lost')}); reconnecting"
                     + (f" in {delay:.2f} s" if delay and standby is None else ""))
        if standby is None:
            await self.waits.sleep(delay)
        new = standby or await self.connect()
        self.standby = None
        new.buf[:0] = a.buf  # the old connection's last lines first
        self.done_frames += a.frames
        self.active = new

    def _switch(self):
        """Rotation: the standby takes over; the old connection's lines come first, the standby's
        overlap with them is dropped by the scanner (update and trade ids)."""
        old, new = self.active, self.standby
        self.standby = None
        if new.closed:
            return
        old.transport.close()
        self.done_frames += old.frames
        new.buf[:0] = old.buf
        self.active = new
        self.counts["rotations"] += 1

    def _backoff(self):
        """The next reconnect's wait (one more failure in a row)."""
        self.attempt += 1
        return backoff(self.attempt, self.p.backoff_s, self.p.backoff_max_s)

    async def connect(self, first=False, beside=False):
        """A connection, retried with backoff until it opens (Stopped if we are stopped first); the
        first one fails at once on a refused handshake (a bad URL or stream). One opened beside the
        active one (a rotation) is given up (None) once the active one is lost or silent: that one
        is replaced, its gap said, not left waiting behind retries."""
        while True:
            if beside and self.due() == "replace":
                return None
            conn = Conn(self.fast, self.fused)
            try:
                conn.transport = await self.waits.stoppable(conn.connect(self.url, self.offset))
                self.counts["connects"] += 1
                return conn
            except ws_client.HandshakeError as e:  # the venue refused the subscription
                if first:
                    raise U.FeedError(f"{self.uri}: the venue refused the subscription: {escape(str(e))}") from None
                err = e
            except OSError as e:  # (a timeout is one)
                if first and isinstance(e, ConnectionRefusedError):
                    raise U.FeedError(f"{self.uri}: cannot connect to {self.p.ws}: {e.strerror}") from None
                err = e
            delay = self._backoff()
            if self.log.allow():
                self.say(f"cannot connect to {self.p.ws} ({escape(why(err))}); again in {delay:.2f} s")
            await self.waits.sleep(delay)

    def wait(self):
        """Run the event loop until the active connection has lines or is lost (its callbacks stop
        the loop), the task under way ends, or 50 ms pass. One loop iteration from the socket read to
        here: a future woken by the read and awaited by a task took three, ~40 us at a live feed's
        one frame a read."""
        a, loop, tick = self.active, self.loop, self.ticking
        once = []

        def stop(*_):  # (once: uvloop queues each stop, and a second one would end the next run early)
            if not once:
                once.append(1)
                loop.stop()
        if a.buf or a.closed:
            if tick is None:
                return
            if a.buf:  # (lines to take now, and a tick under way: one step of the loop, no wait)
                loop.call_soon(stop)
                loop.run_forever()
                return
        a.wake = stop
        t = loop.call_later(0.05, stop)
        if tick is not None:
            tick.add_done_callback(stop)
        try:
            loop.run_forever()
        finally:
            t.cancel()
            a.wake = None
            if tick is not None:
                tick.remove_done_callback(stop)

    async def close(self):
        """The task under way cancelled, then (after before()) every connection closed."""
        t = self.ticking
        if t is not None:
            t.cancel()
            await asyncio.wait((t,), timeout=1.0)
            if t.done() and not t.cancelled():
                t.exception()  # (seen: Stopped, most likely)
        self.before()
        for c in (self.active, self.standby):
            if c is not None and c.transport is not None and not c.closed:
                c.transport.close()


class Handover:
    """The session's active connection read by `pump` (ws_pump.Pump) when it may: the session is
    steady (no task, no standby, the connection whole) and `ready()` (the source: a publisher with
    its arrays, no raw recording, every book synced, no snapshot on the way). `handles()` gives the
    pump's arrays; the pump's last read is finished by `finish(lines_ro, w, pos, nt, r, want)` (the
    source's, as after its own one-call read); what it raised goes to `failed(conn, e)`; the ticks
    it published are told to `published(n)`."""

    def __init__(self, pump, session, *, ready, handles, finish, failed, published):
        self.pump, self.session = pump, session
        self.ready, self.handles, self.finish, self.failed, self.published = ready, handles, finish, failed, published
        self.conn = None  # the connection the pump reads (or read last)
        self.ended = None  # the connection whose end the pump saw (the event loop reads that end itself)

    def may(self):
        s = self.session
        a = s.active
        return s.standby is None and s.ticking is None and a.whole() and a is not self.ended and self.ready()

    def step(self):
        """A pump that returned by itself is finished here; one that may run is started."""
        if self.pump.running and self.pump.result is not None:
            self.stop()
        if not self.pump.running and self.may():
            a = self.session.active
            args = self.handles()
            self.conn = a
            self.pump.start(a.transport, args, self.session.offset, partial(self._returned, a))

    def _returned(self, conn):
        """(The pump's thread) it returned by itself: wake the event loop, which finishes it."""
        try:
            self.session.loop.call_soon_threadsafe(conn.nudge)
        except RuntimeError:  # (the loop is closed: we are stopping, close() joins the thread)
            pass

    def fold(self):
        """The pump's frames, last read and published ticks into its connection and publisher."""
        frames, pub = self.pump.take_counts()
        conn = self.conn
        conn.frames += frames
        conn.last = max(conn.last, self.pump.last_s())
        if pub:
            self.published(pub)

    def stop(self):
        """Stop the pump (if it runs) and finish its last read the read callback's way: a scan it
        left, a snapshot wanted, the bytes it did not take apart (a control frame and what follows
        it, a frame cut at the end) through the connection's own path; then the event loop reads
        the socket again."""
        if not self.pump.running:
            return
        res = self.pump.stop()
        self.fold()
        conn, pump = self.conn, self.pump
        proto = conn.transport
        why_, err, n, used, w, st, pos, nt, r, want, now = res
        if pump.error is not None:  # (what the thread raised ends the run, as a read callback's does)
            self.failed(conn, pump.error)
        try:
            if why_ == ws_pump.W_PYTHON:
                self.finish(pump.lines_ro, w, pos, nt, r, want)
                rest = bytes(pump.buf[used:n])
            else:
                rest = bytes(pump.buf[:n])  # (a frame cut by the last read)
            if why_ in (ws_pump.W_EOF, ws_pump.W_ERROR):  # (never again on this connection: the event loop
                self.ended = conn                          # must read the end itself and call it lost)
                if why_ == ws_pump.W_ERROR and not proto.reason:
                    proto.reason = f"connection lost ({os.strerror(err)})"
            if rest and not proto.closed:
                proto._frames(rest, now)
        except Exception as e:  # noqa: BLE001 - as in a read callback: batches() raises it again
            self.failed(conn, e)
        if not proto.closed and not proto.transport.is_closing():
            proto.transport.resume_reading()  # (the end of the stream, an error: the event loop sees it)

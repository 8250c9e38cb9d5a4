"""`binance-live://MARKET?symbols=BTCUSDT,ETHUSDT` — Binance's public market data, live.

  MARKET       spot, usdm (USD-M futures) or coinm (COIN-M futures)
  symbols      the symbols, comma-separated (required; checked against exchangeInfo at start)
  depth        book levels per side published as level ticks, 0..32 (default 10)
  update       the depth stream's speed: 100ms (default), 0ms / 250ms / 500ms / 1000ms where the
               market offers it, or `none` for the plain `@depth` stream
  trades       trade (default), aggTrade or none
  book_ticker  the bookTicker stream: quote (default): its quotes go over the book's touch, as
               binance:FILE's; check: only cross-checked against the book and counted; off: not
               subscribed (feeds/binance/params.py)
  size_unit    the quantity one record size unit stands for (default 1e-5, as binance:FILE)
  ws, rest     the websocket and REST bases (default the venue's; tests and proxies point elsewhere)
  silence_s    a connection with no whole data frame for this long is dead: reconnect (default 10)
  rotate_s     replace the connection after this long, before the venue's 24-hour limit, with no
               gap (default 84600: 23.5 h)
  backoff_s, backoff_max_s  every retry's wait: doubles from backoff_s up to backoff_max_s, the
               upper half jittered (defaults 0.1 and 30); for a reconnect after a failed connect
               or a connection that died young (within backoff_max_s), and for REST (a depth
               snapshot asked again, a 429/418 whatever its Retry-After) from REST_FLOOR_S up
  snapshot_limit  levels asked of the REST depth snapshot (default 1000)
  idle_s       end the stream when no frame came for this long (default 0: never; for tests and
               bounded recordings)
  reader       who reads the socket once the books are synced: native, a thread of its own that
               publishes with no Python per read (feeds/binance/pump.py; frame to tick p50 / p99 ~3x /
               ~2x less at a live pace here, bench/live.py); spin, the same thread never sleeping
               (a whole core: for a core set aside for it); python, the event loop's read callback.
               native and spin read plain ws:// only (TLS is the event loop's: point ws= at a
               TLS-terminating proxy); auto (default): native on ws://, python on wss://
  reader_core  the CPU the native reader's thread runs on (default: wherever the feed process may
               run); with reader=spin, give it a core of its own, kept clear of everything else

Durations are finite and > 0 (idle_s >= 0); ws= must be ws:// or wss://, rest= http:// or https://.

One websocket connection (combined streams: `<sym>@depth@100ms`, `<sym>@bookTicker`,
`<sym>@trade` per symbol) feeds the numba scanner of `binance:FILE` (feeds/binance/scan.py): each
frame becomes the line `<receive ns> <json>` a capture holds, and the REST depth snapshot the line
`<receive ns> {"lastUpdateId":...,"s":SYMBOL,...}` at the point its reply arrived. So the book follows
Binance's documented procedure exactly as for a capture (diffs held until the snapshot, the ones it
covers dropped, the first diff's range checked, then U/u continuity, and pu on futures), bookTicker
quotes merge the same way, and a live run's lines recorded (`--raw` of `engine record`) replay
through `binance:FILE` to the same ticks. Extra lines only a live run writes: `{"e":"gap","E":ms}`
when a connection is lost (every book waits for a new snapshot; one gap tick).

The book's life: a symbol whose first diff is held (or whose continuity broke: the scanner emitted
a gap tick and holds the next diff) gets a REST snapshot, one request at a time per symbol, within
a request-weight budget shared by all symbols (the venue's X-MBX-USED-WEIGHT-1M header; a 429 or
418 stops every request for the Retry-After it gives, never less than the backoff). Duplicates (a
repeated diff, a trade id already seen, an older ticker) are dropped by the scanner, which is what
makes the 24-hour rotation gapless: a second connection opens, runs beside the first for
`overlap_s`, and takes over; its overlap with the old one is dropped by update and trade id.

Time: each frame's receive time is read once (CLOCK_MONOTONIC) in the websocket's read callback and
becomes the ticks' ts_recv in the ring (published as is: the loop's ring latency then includes our
parse). The recorded line carries it as wall-clock ns (plus the wall clock's offset read at start).
Counters (engine/feed_stats.py): connects, reconnects, rotations, silences, snapshots asked,
REST errors and bans, log lines suppressed, frames, feed latency (event time to receive) and frame-to-tick percentiles.

A hostile or broken venue cannot exhaust the process: every buffer has a cap (a frame or a
fragmented message over MAX_FRAME, a control frame over 125 bytes (RFC 6455 5.5), pongs the server
does not read past ws_client.WRITE_MAX, a REST reply over its size (its cap): the connection or
the request fails), every retry backs off, and every wait ends at stop() (a SIGTERM is obeyed
within a step of the event loop, whatever the venue's Retry-After or a reply that never comes).
What the venue says (a REST `msg`, a close frame's reason, a refused upgrade's status line) reaches
stderr escaped (feeds/core/venue_text.py: an ESC sequence or a newline cannot forge a line of ours), and
the connection and REST lines at most venue_text.LINES every PER_S seconds (the rest counted:
log_suppressed).

Everything here runs in the feed process (feeds/process.py), never on the strategy core: one
asyncio loop (uvloop when installed) stepped between batches, the websocket taken apart in numba a
socket read at a time (feeds/transport/ws_client.py: a client library's per-frame Python call was the limit,
bench/live.py), aiohttp for REST on a thread and loop of its own (feeds/binance/live_rest.py says why). Once every
book is synced, a plain ws:// connection is handed to the native reader (`reader`, feeds/binance/pump.py:
a thread that reads and publishes with no Python per read) and taken back for anything else. In a feed process a read's lines are scanned and their ticks
published from the read callback itself (`direct`, the process's publisher): stopping the loop
per frame to hand a batch out cost ~100 us of frame-to-tick at a live pace (p50 ~310 -> ~200 us,
bench/live.py); lines queued behind a snapshot or a gap line, a rotation's, and every line when
nobody set `direct` (engine record, tests) go the batch way, in order.

The layers, each a module of its own (and tested alone: tests/test_binance_live_layers.py):
  live_conn.py       the transport: one websocket connection (feeds/transport/ws_client.py: connect,
                     read, ping/pong, close), its frames as capture lines, its life
  live_protocol.py   the venue's protocol, no I/O: stream names, REST requests and what their replies
                     mean, the lines added to the capture format, which books need a snapshot
  live_rest.py       REST on its own thread: the request-weight budget, 429/418 bans, size caps
  live_snapshots.py  the books' depth snapshots: asked, paced, placed where their reply arrived
  live_session.py    the connections over a run (connect, reconnect with backoff, silence, the
                     make-before-break rotation, health counters) and the native reader's handover
  live_waits.py      the backoff, and the stop every wait ends at
  live.py            the source: the parameters, the batches, the read callbacks that publish
"""
import dataclasses
import sys
import time

import numpy as np

from engine import realtime

from feeds.binance import live_protocol as P, pump as ws_pump, read as binance_read, scan as S
from feeds.binance.capture import ScannedSource, Scanner, size_divisor
from feeds.binance.live_conn import MAX_FRAME
from feeds.binance.live_rest import Budget, Rest
from feeds.binance.live_session import Handover, Session
from feeds.binance.live_snapshots import Snapshots
from feeds.binance.live_waits import Stopped, Waits, new_loop
from feeds.binance.params import MARKETS
from feeds.core import uri as U, venues
from feeds.core.feed_latency import Latencies, record_feed, record_since
from feeds.core.params import check_backoff
from feeds.core.venue_text import Limit
from feeds.transport import ws_client

OUT_ROWS = 4096


def _venue(u, v):
    """(market, the parameters with the market's ws= and rest= defaults, its REST prefix, its
    request weight a minute), checked."""
    market = v.target.strip("/")
    if market not in MARKETS:
        raise U.FeedError(f"{u}: the market must be one of {', '.join(MARKETS)} (binance-live://MARKET?symbols=...)")
    ws, rest, api, weight_limit = MARKETS[market]
    p = dataclasses.replace(v, ws=v.ws or ws, rest=v.rest or rest)
    if not p.symbols:
        raise U.FeedError(f"{u}: no symbols (binance-live://{market}?symbols=BTCUSDT,ETHUSDT)")
    check_backoff(u, p)
    P.check_url(u, "ws", p.ws, ("ws", "wss"))
    P.check_url(u, "rest", p.rest, ("http", "https"))
    return market, p, api, weight_limit


def _native_pump(u, p):
    """The native reader's pump (feeds/binance/pump.py) if `reader` (auto: on ws://) says so, else None."""
    tls = p.ws.lower().startswith("wss:")
    if tls and p.reader in ("native", "spin"):
        raise U.FeedError(f"{u}: reader={p.reader} reads the socket itself and needs ws:// (TLS is the event "
                          f"loop's: point ws= at a TLS-terminating proxy, or use reader=python)")
    native = p.reader in ("native", "spin") or (p.reader == "auto" and not tls)
    if p.reader_core is not None:
        allowed = realtime.available_cpus()
        if not native:
            raise U.FeedError(f"{u}: reader_core pins the native reader, and this source reads with the event loop "
                              f"(reader={p.reader}{', wss://' if tls else ''})")
        if p.reader_core not in allowed:
            raise U.FeedError(f"{u}: reader_core={p.reader_core} is not a CPU this process may run on "
                              f"({', '.join(map(str, allowed))})")
    core = -1 if p.reader_core is None else p.reader_core
    return ws_pump.Pump(p.reader == "spin", MAX_FRAME, core) if native else None


def _compile(depth, pump, lat):
    """Every scanner path a frame can reach, on a throwaway scanner, before we connect."""
    sc = Scanner("compile", strict=False, quote=True, size_div=1000, depth=max(depth, 1))
    lines = (b'1 {"stream":"x@depth","data":{"e":"depthUpdate","E":1,"s":"X","U":5,"u":6,"b":[["1.0","1"]],"a":[]}}\n'
             b'2 {"lastUpdateId":5,"s":"X","bids":[["1.0","2"]],"asks":[["2.0","1"]]}\n'
             b'3 {"stream":"x@trade","data":{"e":"trade","E":1,"s":"X","t":1,"p":"1.5","q":"1","T":1,"m":true}}\n'
             b'4 {"stream":"x@aggTrade","data":{"e":"aggTrade","E":1,"s":"X","a":2,"p":"1.5","q":"1","T":1,"m":false}}\n'
             b'5 {"stream":"x@bookTicker","data":{"u":7,"s":"X","b":"1.0","B":"1","a":"2.0","A":"1"}}\n'
             b'6 {"e":"gap","E":1}\n')
    out = np.zeros((OUT_ROWS, 8), np.int64)
    for _ in sc.scan(np.frombuffer(lines, np.uint8), 0, True, out):
        pass
    ws_client.deframe(np.frombuffer(b"\x81\x02{}\x89\x00", np.uint8), 6, np.frombuffer(b"1 ", np.uint8),
                      np.empty(128, np.uint8), MAX_FRAME)
    binance_read.compile_read(MAX_FRAME, sc)
    if pump is not None:
        pump.compile((sc.table(), sc.top, out, binance_read.throwaway_publish(), 0, 0, 1))
    S.needs_snapshot(sc.state[0], sc.state[1], 1)
    S.compact(sc.state[1], sc.state[5], sc.state[6])
    t = np.zeros((1, 8), np.int64)
    record_feed(lat.counts["feed_latency"], t, 0)
    record_since(lat.counts["frame_to_tick"], t, 0)
    for c in lat.counts.values():
        c[:] = 0


def _unfinished(buf):
    """Bytes after the last newline (lines are appended whole, so normally none)."""
    j = buf.rfind(b"\n")
    return len(buf) - j - 1


class BinanceLive(ScannedSource):
    live = True
    instruments_at_open = True  # its URI's symbols, ids in that order (app/multi_rings.py fixed_instruments)
    stamps_recv = True  # ts_recv is the frame's receive time: feeds/process.py publishes it as is
    raw_suffix = ".binance"

    def __init__(self, u, v):
        self.uri = u
        market, p, api, weight_limit = _venue(u, v)
        self.market, self.p = market, p
        self.symbols = tuple(s.upper() for s in p.symbols)
        ws_url = P.stream_url(u, p.ws, P.streams(self.symbols, p.update, p.book_ticker, p.trades))
        self.depth = p.depth
        self.size_unit = p.size_unit
        self.scanner = Scanner(u, strict=False, quote=p.book_ticker == "quote", size_div=size_divisor(u, p.size_unit),
                               depth=self.depth)
        self.scanner.state[1][S.G_HOLD_MAX] = P.LIVE_HOLD
        try:  # the symbols' ids fixed at start, in the URI's order (a run can bind a UNIVERSE to them)
            self.scanner.declare(self.symbols)
        except ValueError as e:
            raise U.FeedError(f"{u}: {e}") from None
        self._specs = venues.Specs(lambda s: venues.binance(s, self.size_unit, market))
        self.lat = Latencies("feed_latency", "frame_to_tick")
        # what we say of the venue (a connection lost and why, a failed connect, a ban): its words
        # escaped, at most venue_text.LINES lines every PER_S seconds, the others counted
        self.venue_log = Limit(self._say, "connection and REST messages")
        self.waits = Waits()
        self.raw_sink = None
        self.direct = None  # set by the feed process: direct(ticks, lat, offset) publishes a batch (feeds/process.py Put)
        self._direct_out = np.zeros((OUT_ROWS, 8), np.int64)
        self._error = None  # what the read callback raised, raised again by batches()
        self.offset = time.time_ns() - time.monotonic_ns()  # the recorded lines' wall clock
        self.pump = _native_pump(u, p)
        self.rest = Rest(p.rest.rstrip("/"), api, Budget(weight_limit, p.backoff_s, p.backoff_max_s), self.waits,
                         self.venue_log, self._say)
        self.snapshots = Snapshots(self.scanner, self.symbols, self.rest, market, p.snapshot_limit, self.offset,
                                   self.waits, self._place)
        self.session = Session(u, ws_url, p, self.waits, self.venue_log, self._say, self.offset, fast=self._fast,
                               fused=self._fused, on_gap=self.snapshots.gap, before=self._native_stop)
        self.native = None if self.pump is None else Handover(
            self.pump, self.session, ready=self._native_ready, handles=self._native_handles, finish=self._finish_read,
            failed=self._callback_failed, published=lambda n: self.direct.published(n))
        _compile(self.depth, self.pump, self.lat)

    # -- the source interface --------------------------------------------------------------

    @property
    def stopped(self):
        return self.waits.stopped

    @property
    def active(self):
        """The connection read now (a rotation's next one is the session's standby)."""
        return self.session.active

    @property
    def _done_frames(self):
        return self.session.done_frames

    def _frames(self):
        return self.session.frames()

    def stats(self):
        return {**self.lat.stats(), "frames": self._frames(), **self.session.counts, **self.snapshots.counts,
                **self.rest.counts, "log_suppressed": self.venue_log.suppressed, **self.scanner.stats()}

    def resync(self):
        self._native_stop()  # (the scanner's state is the native reader's while it runs)
        self.scanner.windows.forget()

    def _say(self, m):
        print(f"{self.uri}: {m}", file=sys.stderr, flush=True)

    def stop(self):
        """Stop (a signal handler may call it): every wait in either event loop ends now."""
        self.waits.stop()

    def raw_restart(self):
        """A new piece of a raw recording starts (app/recorder.py): ask every symbol's snapshot
        again, so the piece holds one and replays on its own from there (its diffs before the
        reply are held, as at any start). Nothing to prepend: the lines are self-contained."""
        self.snapshots.refresh = True
        return b""

    # -- the batches -------------------------------------------------------------------------

    def batches(self):
        loop = self.session.loop = self.snapshots.loop = new_loop()
        try:
            try:
                loop.run_until_complete(self._start())
            except Stopped:
                return
            out = np.zeros((OUT_ROWS, 8), np.int64)
            pending = b""
            last_frames, last_t = 0, time.monotonic()
            while not self.stopped:
                self._wait()
                if self.stopped:  # (not one more batch: a caller that stops reading us would leave a
                    break         # native reader publishing behind its back until we are closed)
                if not self.session.step():
                    break
                self.venue_log.tick()  # (a flood's count is said when its interval ends)
                if self.snapshots.tries:
                    self.snapshots.forget_synced()
                frames = self._frames()
                if frames != last_frames:
                    last_frames, last_t = frames, time.monotonic()
                elif self.p.idle_s and time.monotonic() - last_t > self.p.idle_s and not self.active.buf:
                    break  # (across reconnects: no frame from any connection for idle_s)
                data = self.session.take()
                if self.raw_sink is not None and data:
                    self.raw_sink(data)
                buf = pending + data if pending else data
                if not buf:
                    yield out[:0]  # idle: the publisher keeps its heartbeat fresh
                    continue
                for batch in self._ticks(buf, out):
                    yield from self._emit(batch)
                pending = buf[len(buf) - _unfinished(buf):]
                self._want_snapshots()
            if self._error is not None:  # (the read callback's: it stopped us)
                raise self._error
        finally:
            loop.run_until_complete(self._close())
            loop.close()
            self.venue_log.flush()

    def _wait(self):
        """The session's event loop run until there are lines to take (Session.wait); the native
        reader (reader=native/spin) started first when it may run, and its counters folded in after."""
        if self.native is not None:
            self.native.step()
        try:
            self.session.wait()
        finally:
            if self.native is not None and self.pump.running:
                self.native.fold()

    def _ticks(self, lines, out, pos=0, n=0):
        """The ticks of whole lines from pos, scanned (out already holding n): each full batch of
        out, then the rest."""
        sc = self.scanner
        sc.n = n
        yield from sc.scan(np.frombuffer(lines, np.uint8), pos, False, out)
        if sc.n:
            yield out[:sc.n]
            sc.n = 0

    def _emit(self, ticks):
        """Feed latency (wall clock), then ts_recv back on CLOCK_MONOTONIC; after the publisher has
        put the batch in the ring (the generator resumes), the frame-to-tick time."""
        record_feed(self.lat.counts["feed_latency"], ticks, self.offset)
        yield ticks
        record_since(self.lat.counts["frame_to_tick"], ticks, time.monotonic_ns())

    # -- the read callbacks ------------------------------------------------------------------

    def _fast(self, conn, data):
        """The read callback's lines of the active connection scanned and published right there
        (self.direct), when nothing is queued before them; False: queue them (no direct
        publisher, a standby's lines, or we are stopping)."""
        if not self._direct_ok(conn):
            return False
        try:
            if self.raw_sink is not None:
                self.raw_sink(data)
            for batch in self._ticks(data, self._direct_out):
                self.direct(batch, self.lat, self.offset)
            self._want_snapshots()
        except Exception as e:  # noqa: BLE001 - an exception in a read callback only gets logged
            self._callback_failed(conn, e)
        return True

    def _drain(self, conn):
        """Lines queued on conn (a snapshot's, a gap line, a rotation's) published first, here, when
        this read may publish; False: they wait for batches(). Left for batches(), every read
        behind them queued too: a socket callback runs up to 32 reads (8 MiB) an event, all of it
        then scanned in one piece, out of cache, and the book's first snapshot queued that way put
        a third of a flat-out session behind it (bench/live.py)."""
        if not conn.buf:
            return True
        queued, conn.buf = conn.buf, bytearray()
        return self._fast(conn, queued)

    def _direct_ok(self, conn):
        """May conn's read callback publish its ticks itself (a direct publisher, the active
        connection, no standby, not stopping)?"""
        s = self.session
        return self.direct is not None and conn is s.active and s.standby is None and not self.stopped

    def _callback_failed(self, conn, e):
        """What a read callback raised stops us; batches() raises it again."""
        self._error = e
        self.stop()
        conn.nudge()

    def _fused(self, conn, b, stamp, lines, lines_ro):
        """The read callback's frames deframed, scanned and published in one numba call
        (feeds/binance/read.py) when _fast would publish them (the active connection, nothing
        queued, a direct publisher that offers its arrays); deframe's 8 values, or None: the
        two-step way (deframe, then Conn.lines). What the one call leaves (a full tick buffer, a
        state array to grow, a bad line) is finished here as _fast would."""
        put = self.direct
        if not self._direct_ok(conn) or not hasattr(put, "live_handles") or not self._drain(conn):
            return None
        try:
            sc = self.scanner
            H, mask, limit_ns = put.live_handles(self.lat)
            put.name_instruments()
            used, w, frames, st, op, fin, s, ln, pos, nt, r, pub, want = binance_read.read(
                b, len(b), stamp, lines, lines_ro, MAX_FRAME, sc.table(), sc.top, self._direct_out, H, mask,
                self.offset, limit_ns, len(self.symbols))
            if frames:  # (silence is counted in whole frames: a frame trickled a byte a read is none)
                conn.frames += frames
                conn.last = time.monotonic()
            if self.raw_sink is not None and w:
                self.raw_sink(memoryview(lines)[:w])
            if pub:
                put.published(pub)
            self._finish_read(lines_ro, w, pos, nt, r, want)
            if self.native is not None and not self.pump.running and self.native.may():
                conn.nudge()  # (back to _wait, which hands the connection to the native reader now, not
                # at its next 50 ms: after a handover its cut frame or a snapshot kept it here)
        except Exception as e:  # noqa: BLE001 - an exception in a read callback only gets logged
            self._callback_failed(conn, e)
            return 0, 0, 0, ws_client.D_MORE, 0, False, 0, 0
        return used, w, frames, st, op, fin, s, ln

    def _finish_read(self, lines_ro, w, pos, nt, r, want):
        """What one numba call (binance_read.read, from the read callback or the native reader) left
        of a read: a scan that stopped short (r not R_DONE) finished by the scanner's own loop from
        where it stopped (out already holding nt ticks), its ticks published; the snapshots wanted."""
        if r != S.R_DONE:
            for batch in self._ticks(lines_ro[:w], self._direct_out, pos, nt):
                self.direct(batch, self.lat, self.offset)
            want = True
        if want or self.snapshots.refresh:
            self._want_snapshots()

    # -- the native reader (live_session.Handover) ---------------------------------------------

    def _native_ready(self):
        """Our part of the native reader's steady state: a direct publisher with its arrays, no raw
        recording, nothing raised or stopped, no snapshot wanted or on its way."""
        put, snaps = self.direct, self.snapshots
        return not (self.stopped or self._error is not None or self.raw_sink is not None or put is None
                    or not hasattr(put, "live_handles") or snaps.asking or snaps.refresh
                    or P.needs_any(self.scanner, len(self.symbols)))

    def _native_handles(self):
        """The native reader's arrays: the scanner's, our tick buffer, the publisher's."""
        put, sc = self.direct, self.scanner
        H, mask, limit_ns = put.live_handles(self.lat)
        put.name_instruments()
        return sc.table(), sc.top, self._direct_out, H, mask, limit_ns, len(self.symbols)

    def _native_stop(self):
        if self.native is not None:
            self.native.stop()

    # -- start, snapshots, close ---------------------------------------------------------------

    async def _start(self):
        await self.rest.start()
        halted = await self.rest.check_symbols(self.uri, self.market, self.symbols)
        if halted:
            self._say(f"warning: not trading now: {', '.join(halted)}")
        await self.session.open()
        self._want_snapshots()

    def _want_snapshots(self):
        if self.session.active.closed:  # (no connection: the next one asks, after its gap line)
            return
        self.snapshots.want()

    def _place(self, line):
        """A snapshot's line goes where the active connection's lines are now."""
        self._native_stop()  # (its lines go after the native reader's, from this thread)
        a = self.session.active
        a.buf += line
        a.nudge()

    async def _close(self):
        self.stop()  # (every wait ends: the REST thread's, a tick's)
        await self.session.close()
        self.snapshots.close()
        await self.rest.close()

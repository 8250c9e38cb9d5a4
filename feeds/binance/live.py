"""`binance-live://MARKET?symbols=BTCUSDT,ETHUSDT` — Binance's public market data, live.

  MARKET       spot, usdm (USD-M futures) or coinm (COIN-M futures)
  symbols      the symbols, comma-separated (required; checked against exchangeInfo at start)
  depth        book levels per side published as level ticks, 0..32 (default 10)
  update       the depth stream's speed: 100ms (default), 0ms / 250ms / 500ms / 1000ms where the
               market offers it, or `none` for the plain `@depth` stream
  trades       trade (default), aggTrade or none
  book_ticker  the bookTicker stream: quote (default): its quotes go over the book's touch, as
               binance:FILE's; check: only cross-checked against the book and counted; off: not
               subscribed (feeds/binance/capture.py BOOK_TICKER)
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
does not read past ws_client.WRITE_MAX, a REST reply over its size (rest_cap): the connection or
the request fails), every retry backs off, and every wait ends at stop() (a SIGTERM is obeyed
within a step of the event loop, whatever the venue's Retry-After or a reply that never comes).
What the venue says (a REST `msg`, a close frame's reason, a refused upgrade's status line) reaches
stderr escaped (feeds/core/venue_text.py: an ESC sequence or a newline cannot forge a line of ours), and
the connection and REST lines at most venue_text.LINES every PER_S seconds (the rest counted:
log_suppressed).

Everything here runs in the feed process (feeds/process.py), never on the strategy core: one
asyncio loop (uvloop when installed) stepped between batches, the websocket taken apart in numba a
socket read at a time (feeds/transport/ws_client.py: a client library's per-frame Python call was the limit,
bench/live.py), aiohttp for REST on a thread and loop of its own (`_start` says why). Once every
book is synced, a plain ws:// connection is handed to the native reader (`reader`, feeds/binance/pump.py:
a thread that reads and publishes with no Python per read) and taken back for anything else. In a feed process a read's lines are scanned and their ticks
published from the read callback itself (`direct`, the process's publisher): stopping the loop
per frame to hand a batch out cost ~100 us of frame-to-tick at a live pace (p50 ~310 -> ~200 us,
bench/live.py); lines queued behind a snapshot or a gap line, a rotation's, and every line when
nobody set `direct` (engine record, tests) go the batch way, in order.
"""
import asyncio
import json
import math
import os
import random
import sys
import threading
import time
from functools import partial
from urllib.parse import quote, urlsplit

import numpy as np

from engine import realtime

from feeds.binance import read as binance_read, scan as S

from feeds.core import uri as U, venues
from feeds.binance.capture import BOOK_TICKER, Scanner, size_divisor
from feeds.transport import ws_client
from feeds.binance import pump as ws_pump
from feeds.core.venue_text import Limit, escape
from feeds.core.feed_latency import Latencies, record_feed, record_since

MARKETS = {  # (websocket base, REST base, REST prefix, weight budget a minute, depth weight for the limit)
    "spot": ("wss://stream.binance.com:9443", "https://api.binance.com", "/api/v3", 6000),
    "usdm": ("wss://fstream.binance.com", "https://fapi.binance.com", "/fapi/v1", 2400),
    "coinm": ("wss://dstream.binance.com", "https://dapi.binance.com", "/dapi/v1", 2400),
}
UPDATES = ("100ms", "0ms", "250ms", "500ms", "1000ms", "none")
READERS = ("auto", "python", "native", "spin")
MAX_STREAMS = 1024  # per connection (the venue's limit)
OUT_ROWS = 4096
MAX_FRAME = 1 << 20  # a bigger frame is not market data: the connection is dropped and resynced
OVERLAP_S = 1.0  # a rotation's two connections run side by side this long
REST_FLOOR_S = 0.5  # the REST backoff's least base, whatever backoff_s or the venue says (a flood ends in a ban)
MAX_BAN_S = 3 * 86400.0  # the longest Retry-After honoured: the venue's longest IP ban
# REST replies past these sizes are not the venue's (a reply is read up to its cap, then dropped):
# exchangeInfo ~3 KiB a symbol (spot's permission sets included), a depth level ~40 bytes a side
INFO_BYTES, INFO_SYMBOL_BYTES, DEPTH_LEVEL_BYTES = 1 << 20, 64 << 10, 128
# diffs a symbol holds while it waits for a snapshot (the newest: past it the oldest go). A live
# book needs only those that come during the snapshot's round trip (a REST timeout, 30 s, of the
# busiest 0 ms stream); a capture's reader holds binance.HOLD_MAX. Without this a venue that
# withholds snapshots (or sends stale ones) grew the held arena without bound.
LIVE_HOLD = 5000


class Stopped(Exception):
    """stop() came while we waited (a backoff, a ban, a connect, a REST reply): unwind and close."""


class RestError(Exception):
    """A REST reply that is not the venue's (over its size cap)."""


def backoff(attempt, base, cap):
    """The wait before retry `attempt` (1, 2, ...): base doubled each attempt up to cap, drawn from
    its upper half (a floor of half, and jitter that keeps many clients apart)."""
    d = min(cap, base * 2.0 ** min(attempt - 1, 60))
    return random.uniform(d / 2, d)


def why(e):
    """An exception as words (a timeout's str() is empty)."""
    return str(e) or ("timed out" if isinstance(e, TimeoutError) else type(e).__name__)


def _json(body):
    """(body parsed, None) or (None, why not)."""
    try:
        return json.loads(body), None
    except ValueError:
        return None, "not JSON"
    except RecursionError:
        return None, "JSON nested deeper than a parser follows"


def _url(u, key, value, schemes):
    """ws= / rest=: a URL of one of `schemes` with a host."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - (raises on a port that is not a number)
    except ValueError as e:
        raise U.FeedError(f"{u}: {key}={value!r}: {e}") from None
    if parts.scheme.lower() not in schemes or not parts.hostname:
        raise U.FeedError(f"{u}: {key}={value!r} is not a {' or '.join(s + '://' for s in schemes)}HOST URL")
    return value


def depth_weight(market, limit):
    """REST weight of a depth snapshot (Binance's tables, spot and futures)."""
    if market == "spot":
        return 5 if limit <= 100 else 25 if limit <= 500 else 50 if limit <= 1000 else 250
    return 2 if limit <= 50 else 5 if limit <= 100 else 10 if limit <= 500 else 20


class Conn:
    """One websocket connection: its frames, as capture lines, go into `buf` (feeds/transport/ws_client.py
    makes the lines, a socket read at a time), unless `fast(conn, lines)` took them (published
    them at once) first."""

    def __init__(self, fast=None):
        self.fast = fast
        self.buf = bytearray()
        self.transport = None
        self.opened = self.last = time.monotonic()
        self.frames = 0
        self.closed = False
        self.wake = None
        self.reason = ""

    def lines(self, data, frames):
        self.frames += frames
        self.last = time.monotonic()
        if not self.buf and self.fast is not None and self.fast(self, data):
            return  # (lines queued before these, a snapshot or a gap, go first: the slow way)
        self.buf += data
        self._wake()

    def lost(self, reason):
        self.closed = True
        self.reason = self.reason or reason
        self._wake()

    def _wake(self):
        if self.wake is not None:  # (the event loop's stop: batches() waits in run_forever)
            self.wake()


def _new_loop():
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class BinanceLive:
    live = True
    instruments_at_open = True  # its URI's symbols, ids in that order (app/multi_rings.py fixed_instruments)
    stamps_recv = True  # ts_recv is the frame's receive time: feeds/process.py publishes it as is
    raw_suffix = ".binance"

    def __init__(self, u, target, params):
        self.uri = u
        market = target.strip("/")
        if market not in MARKETS:
            raise U.FeedError(f"{u}: the market must be one of {', '.join(MARKETS)} (binance-live://MARKET?symbols=...)")
        ws, rest, self.api, self.weight_limit = MARKETS[market]
        p = U.take(u, params, {
            "symbols": (U.symbols, ()), "depth": (U.depth, U.DEFAULT_DEPTH), "update": (str, "100ms"),
            "trades": (str, "trade"), "book_ticker": (str, "quote"),
            "size_unit": (U.finite_pos, venues.BINANCE_SIZE_UNIT), "ws": (str, ws), "rest": (str, rest),
            "silence_s": (U.finite_pos, 10.0), "rotate_s": (U.finite_pos, 84600.0), "backoff_s": (U.finite_pos, 0.1),
            "backoff_max_s": (U.finite_pos, 30.0), "snapshot_limit": (U.pos_int, 1000),
            "overlap_s": (U.finite_pos, OVERLAP_S), "idle_s": (U.finite_nonneg, 0.0), "reader": (str, "auto"),
            "reader_core": (U.nonneg_int, None)})
        if not p["symbols"]:
            raise U.FeedError(f"{u}: no symbols (binance-live://{market}?symbols=BTCUSDT,ETHUSDT)")
        if p["update"] not in UPDATES:
            raise U.FeedError(f"{u}: update must be one of {', '.join(UPDATES)}, got {p['update']!r}")
        if p["trades"] not in ("trade", "aggTrade", "none"):
            raise U.FeedError(f"{u}: trades must be trade, aggTrade or none, got {p['trades']!r}")
        if p["book_ticker"] not in (*BOOK_TICKER, "off"):
            raise U.FeedError(f"{u}: book_ticker must be {', '.join(BOOK_TICKER)} or off (not subscribed), "
                              f"got {p['book_ticker']!r}")
        if p["reader"] not in READERS:
            raise U.FeedError(f"{u}: reader must be one of {', '.join(READERS)}, got {p['reader']!r}")
        if p["backoff_max_s"] < p["backoff_s"]:
            raise U.FeedError(f"{u}: backoff_max_s={p['backoff_max_s']:g} is below backoff_s={p['backoff_s']:g}")
        _url(u, "ws", p["ws"], ("ws", "wss"))
        _url(u, "rest", p["rest"], ("http", "https"))
        if not 1 <= p["snapshot_limit"] <= 5000:
            raise U.FeedError(f"{u}: snapshot_limit must be 1..5000, got {p['snapshot_limit']}")
        self.market, self.p = market, p
        self.symbols = tuple(s.upper() for s in p["symbols"])
        streams = []
        for s in self.symbols:
            lo = s.lower()
            streams.append(f"{lo}@depth" if p["update"] == "none" else f"{lo}@depth@{p['update']}")
            if p["book_ticker"] != "off":
                streams.append(f"{lo}@bookTicker")
            if p["trades"] != "none":
                streams.append(f"{lo}@{p['trades']}")
        if len(streams) > MAX_STREAMS:
            raise U.FeedError(f"{u}: {len(streams)} streams; one connection carries at most {MAX_STREAMS}")
        self.ws_url = p["ws"].rstrip("/") + "/stream?streams=" + "/".join(streams)
        self.rest = p["rest"].rstrip("/")
        self.depth = p["depth"]
        self.size_unit = p["size_unit"]
        self.scanner = Scanner(u, strict=False, quote=p["book_ticker"] == "quote", size_div=size_divisor(u, p["size_unit"]),
                               depth=self.depth)
        self.scanner.state[1][S.G_HOLD_MAX] = LIVE_HOLD
        try:  # the symbols' ids fixed at start, in the URI's order (a run can bind a UNIVERSE to them)
            self.scanner.declare(self.symbols)
        except ValueError as e:
            raise U.FeedError(f"{u}: {e}") from None
        self._specs = venues.Specs(lambda s: venues.binance(s, self.size_unit, market))
        self.lat = Latencies("feed_latency", "frame_to_tick")
        self.counts = dict.fromkeys(("frames", "connects", "reconnects", "rotations", "silences", "snapshots_asked",
                                     "rest_errors", "rest_banned", "log_suppressed"), 0)
        # what we say of the venue (a connection lost and why, a failed connect, a ban): its words
        # escaped, at most venue_text.LINES lines every PER_S seconds, the others counted
        self.venue_log = Limit(self._say, "connection and REST messages")
        self.stopped = False
        self._halts = {}  # event loop -> its asyncio.Event set by stop(): every wait ends on it
        self.attempt = 0  # connections failed or died young in a row (the reconnect backoff's)
        self.bans = 0  # REST 429/418 in a row
        self.snap_tries = {}  # symbol -> (snapshots asked in a row, monotonic s of the last): their backoff
        self.rest_base = max(p["backoff_s"], REST_FLOOR_S)
        self.rest_cap = max(p["backoff_max_s"], self.rest_base)
        self.raw_sink = None
        self.active = self.standby = None  # the connection read, and a rotation's next one
        self.direct = None  # set by the feed process: direct(ticks, lat, offset) publishes a batch (feeds/process.py Put)
        self._direct_out = np.zeros((OUT_ROWS, 8), np.int64)
        self._error = None  # what the read callback raised, raised again by batches()
        self.asking = {}  # symbol -> its snapshot request (a future of the REST thread's task)
        self.gen = 0  # connections replaced so far: a snapshot asked before a gap is not placed after it
        self.refresh = False  # ask every symbol's snapshot again (a new raw piece)
        self.ban_until = 0.0  # no REST before this (monotonic s): a 429/418's Retry-After
        self.weight = (0, 0)  # (minute, weight used in it as the venue last said)
        self.offset = time.time_ns() - time.monotonic_ns()  # the recorded lines' wall clock
        tls = p["ws"].lower().startswith("wss:")
        if tls and p["reader"] in ("native", "spin"):
            raise U.FeedError(f"{u}: reader={p['reader']} reads the socket itself and needs ws:// (TLS is the event "
                              f"loop's: point ws= at a TLS-terminating proxy, or use reader=python)")
        native = p["reader"] in ("native", "spin") or (p["reader"] == "auto" and not tls)
        if p["reader_core"] is not None:
            allowed = realtime.available_cpus()
            if not native:
                raise U.FeedError(f"{u}: reader_core pins the native reader, and this source reads with the event loop "
                                  f"(reader={p['reader']}{', wss://' if tls else ''})")
            if p["reader_core"] not in allowed:
                raise U.FeedError(f"{u}: reader_core={p['reader_core']} is not a CPU this process may run on "
                                  f"({', '.join(map(str, allowed))})")
        core = -1 if p["reader_core"] is None else p["reader_core"]
        self.pump = ws_pump.Pump(p["reader"] == "spin", MAX_FRAME, core) if native else None
        self._compile()

    # -- the source interface --------------------------------------------------------------

    @property
    def instruments(self):
        return self.scanner.instruments

    @property
    def specs(self):
        return self._specs.of(self.instruments)

    def _frames(self):
        live = [c for c in (getattr(self, "active", None), getattr(self, "standby", None)) if c is not None]
        return self._done_frames + sum(c.frames for c in live)

    def stats(self):
        self.counts["frames"] = self._frames()
        self.counts["log_suppressed"] = self.venue_log.suppressed
        return {**self.lat.stats(), **self.counts, **self.scanner.stats()}

    def resync(self):
        self._pump_stop()  # (the scanner's state is the pump's while it runs)
        self.scanner.windows.forget()

    def _say(self, m):
        print(f"{self.uri}: {m}", file=sys.stderr, flush=True)

    def stop(self):
        """Stop (a signal handler may call it): every wait in either event loop ends now."""
        self.stopped = True
        for loop, ev in list(self._halts.items()):
            try:
                loop.call_soon_threadsafe(ev.set)
            except RuntimeError:  # (that loop is closed)
                pass

    def _halt(self):
        """The running loop's stop event (made on first use; set at once if we are stopped)."""
        loop = asyncio.get_running_loop()
        ev = self._halts.get(loop)
        if ev is None:
            self._halts[loop] = ev = asyncio.Event()
            if self.stopped:  # (stop() came before the entry: it did not see it)
                ev.set()
        return ev

    async def _stoppable(self, aw):
        """aw's result, unless stop() comes first: then aw is cancelled and Stopped raised."""
        if self.stopped:
            if asyncio.iscoroutine(aw):
                aw.close()
            raise Stopped
        task = asyncio.ensure_future(aw)
        halt = asyncio.ensure_future(self._halt().wait())
        try:
            await asyncio.wait((task, halt), return_when=asyncio.FIRST_COMPLETED)
        finally:
            halt.cancel()
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        await asyncio.wait((task,), timeout=1.0)  # (its cancellation runs: a socket closed, a request let go)
        raise Stopped

    async def _sleep(self, s):
        """asyncio.sleep(s) that ends at stop() (Stopped)."""
        await self._stoppable(asyncio.sleep(max(0.0, s)))

    def raw_restart(self):
        """A new piece of a raw recording starts (app/recorder.py): ask every symbol's snapshot
        again, so the piece holds one and replays on its own from there (its diffs before the
        reply are held, as at any start). Nothing to prepend: the lines are self-contained."""
        self.refresh = True
        return b""

    def _compile(self):
        """Every scanner path a frame can reach, on a throwaway scanner, before we connect."""
        sc = Scanner("compile", strict=False, quote=True, size_div=1000, depth=max(self.depth, 1))
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
        if self.pump is not None:
            self.pump.compile((sc.table(), sc.top, out, binance_read.throwaway_publish(), 0, 0, 1))
        S.needs_snapshot(sc.state[0], sc.state[1], 1)
        S._compact(sc.state[1], sc.state[5], sc.state[6])
        t = np.zeros((1, 8), np.int64)
        record_feed(self.lat.counts["feed_latency"], t, 0)
        record_since(self.lat.counts["frame_to_tick"], t, 0)
        for c in self.lat.counts.values():
            c[:] = 0

    # -- the batches -------------------------------------------------------------------------

    def batches(self):
        loop = self.loop = _new_loop()
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
                t = self._ticking
                if t is not None and t.done():
                    self._ticking = None
                    if t.cancelled() or isinstance(t.exception(), Stopped):
                        break
                    t.result()  # (what it raised ends the run)
                if self._ticking is None:
                    due = self._due()
                    if due:  # (a task: while it backs off and connects, batches go on, the heartbeat too)
                        self._ticking = loop.create_task(self._tick(due))
                self.venue_log.tick()  # (a flood's count is said when its interval ends)
                if self.snap_tries:
                    self._forget_synced()
                frames = self._frames()
                if frames != last_frames:
                    last_frames, last_t = frames, time.monotonic()
                elif self.p["idle_s"] and time.monotonic() - last_t > self.p["idle_s"] and not self.active.buf:
                    break  # (across reconnects: no frame from any connection for idle_s)
                data = self._take()
                if self.raw_sink is not None and data:
                    self.raw_sink(data)
                buf = pending + data if pending else data
                if not buf:
                    yield out[:0]  # idle: the publisher keeps its heartbeat fresh
                    continue
                for batch in self._ticks(buf, out):
                    yield from self._emit(batch)
                pending = buf[len(buf) - self._unfinished(buf):]
                self._want_snapshots()
            if self._error is not None:  # (the read callback's: it stopped us)
                raise self._error
        finally:
            loop.run_until_complete(self._close())
            loop.close()
            self.venue_log.flush()

    @staticmethod
    def _unfinished(buf):
        """Bytes after the last newline (lines are appended whole, so normally none)."""
        j = buf.rfind(b"\n")
        return len(buf) - j - 1

    def _ticks(self, lines, out, pos=0, n=0):
        """The ticks of whole lines from pos, scanned (out already holding n): each full batch of
        out, then the rest."""
        sc = self.scanner
        sc.n = n
        yield from sc.scan(np.frombuffer(lines, np.uint8), pos, False, out)
        if sc.n:
            yield out[:sc.n]
            sc.n = 0

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
        return self.direct is not None and conn is self.active and self.standby is None and not self.stopped

    def _callback_failed(self, conn, e):
        """What a read callback raised stops us; batches() raises it again."""
        self._error = e
        self.stop()
        conn._wake()

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
            P, mask, limit_ns = put.live_handles(self.lat)
            put.name_instruments()
            used, w, frames, st, op, fin, s, ln, pos, nt, r, pub, want = binance_read.read(
                b, len(b), stamp, lines, lines_ro, MAX_FRAME, sc.table(), sc.top, self._direct_out, P, mask,
                self.offset, limit_ns, len(self.symbols))
            if frames:  # (silence is counted in whole frames: a frame trickled a byte a read is none)
                conn.frames += frames
                conn.last = time.monotonic()
            if self.raw_sink is not None and w:
                self.raw_sink(memoryview(lines)[:w])
            if pub:
                put.published(pub)
            self._finish_read(lines_ro, w, pos, nt, r, want)
            if self.pump is not None and not self.pump.running and self._pump_ok():
                conn._wake()  # (back to _wait, which hands the connection to the native reader now, not
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
        if want or self.refresh:
            self._want_snapshots()

    def _emit(self, ticks):
        """Feed latency (wall clock), then ts_recv back on CLOCK_MONOTONIC; after the publisher has
        put the batch in the ring (the generator resumes), the frame-to-tick time."""
        record_feed(self.lat.counts["feed_latency"], ticks, self.offset)
        yield ticks
        record_since(self.lat.counts["frame_to_tick"], ticks, time.monotonic_ns())

    # -- connections -------------------------------------------------------------------------

    async def _start(self):
        # REST on a thread and loop of its own: a snapshot's request and reply then progress while
        # this thread scans (its numba calls release the GIL), not a step per pass of this loop
        # between socket reads. Flat out (bench/live.py), a snapshot asked at connect took 40-130 ms
        # that way in half the sessions, every diff meanwhile held and parsed twice; on a busy
        # market a resync would wait the same.
        self.rest_loop = _new_loop()
        self.rest_thread = threading.Thread(target=self.rest_loop.run_forever, name="binance-rest", daemon=True)
        self.rest_thread.start()
        await self._on_rest(self._open_http())
        await self._check_symbols()
        self.active = await self._connect(first=True)
        self.standby = None
        self._want_snapshots()

    async def _open_http(self):
        import aiohttp
        self.rest_errors = (OSError, RestError, aiohttp.ClientError)  # (a request that failed, one kind)
        # (no compression: a reply's size is its size on the wire, so its cap holds)
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), auto_decompress=False,
                                          headers={"Accept-Encoding": "identity"})

    def _in_rest(self, coro):
        """coro run on the REST thread's loop: its concurrent future."""
        return asyncio.run_coroutine_threadsafe(coro, self.rest_loop)

    async def _on_rest(self, coro):
        """coro run on the REST thread's loop, awaited here (until stop(): Stopped)."""
        return await self._stoppable(asyncio.wrap_future(self._in_rest(coro)))

    async def _close(self):
        self.stop()  # (every wait ends: the REST thread's, a tick's)
        t = self._ticking
        if t is not None:
            t.cancel()
            await asyncio.wait((t,), timeout=1.0)
            if t.done() and not t.cancelled():
                t.exception()  # (seen: Stopped, most likely)
        self._pump_stop()
        for c in (getattr(self, "active", None), getattr(self, "standby", None)):
            if c is not None and c.transport is not None and not c.closed:
                c.transport.close()
        for t in self.asking.values():
            t.cancel()
        rest = getattr(self, "rest_loop", None)
        if rest is not None:
            if hasattr(self, "http"):
                try:
                    await asyncio.wait_for(asyncio.wrap_future(self._in_rest(self.http.close())), 2.0)
                except (Exception, asyncio.CancelledError):  # noqa: BLE001 - closing: what is left goes with the loop
                    pass
            rest.call_soon_threadsafe(rest.stop)
            self.rest_thread.join()
            rest.close()

    async def _check_symbols(self):
        """exchangeInfo: every symbol must exist and trade (one clear line otherwise)."""
        q = quote(json.dumps(list(self.symbols), separators=(",", ":")))
        url = f"{self.rest}{self.api}/exchangeInfo?symbols={q}"
        cap = INFO_BYTES + INFO_SYMBOL_BYTES * len(self.symbols)
        try:
            status, body, _ = await self._on_rest(self._get(url, 20 if self.market == "spot" else 1, cap))
        except RestError as e:
            raise U.FeedError(f"{self.uri}: exchangeInfo from {self.rest}: {e}") from None
        except self.rest_errors as e:
            raise U.FeedError(f"{self.uri}: cannot reach {self.rest}: {escape(why(e))}") from None
        doc, bad = _json(body)
        if status != 200:  # (the venue's words, escaped: one line of ours, whatever it sent)
            msg = doc.get("msg") if isinstance(doc, dict) else None
            msg = msg if isinstance(msg, str) else body[:200].decode("utf-8", "replace")
            if status == 400 and "symbol" in msg.lower():  # (the venue does not say which)
                raise U.FeedError(f"{self.uri}: unknown symbol among {', '.join(self.symbols)} on Binance "
                                  f"{self.market} (exchangeInfo: {escape(msg)})")
            raise U.FeedError(f"{self.uri}: exchangeInfo refused {', '.join(self.symbols)}: HTTP {status} {escape(msg)}")
        syms = doc.get("symbols") if isinstance(doc, dict) else None
        if not isinstance(syms, list) or not all(isinstance(s, dict) for s in syms):
            raise U.FeedError(f"{self.uri}: exchangeInfo from {self.rest} is not Binance's "
                              f"({bad or 'no list of symbol objects'})")
        info = {s["symbol"]: s for s in syms if isinstance(s.get("symbol"), str)}
        missing = [s for s in self.symbols if s not in info]
        if missing:
            raise U.FeedError(f"{self.uri}: unknown symbol {', '.join(missing)} on Binance {self.market}")
        halted = [s for s in self.symbols if info[s].get("status", info[s].get("contractStatus")) not in
                  ("TRADING", None)]
        if halted:
            self._say(f"warning: not trading now: {', '.join(halted)}")

    def _backoff(self):
        """The next reconnect's wait (one more failure in a row)."""
        self.attempt += 1
        return backoff(self.attempt, self.p["backoff_s"], self.p["backoff_max_s"])

    async def _connect(self, first=False, beside=False):
        """A connection, retried with backoff until it opens (Stopped if we are stopped first); the
        first one fails at once on a refused handshake (a bad URL or stream). One opened beside the
        active one (a rotation) is given up (None) once the active one is lost or silent: that one
        is replaced, its gap said, not left waiting behind retries."""
        while True:
            if beside and self._due() == "replace":
                return None
            conn = Conn(self._fast)
            try:
                conn.transport = await self._stoppable(ws_client.connect(
                    self.ws_url, conn.lines, conn.lost, offset=self.offset, max_frame=MAX_FRAME,
                    fused=partial(self._fused, conn)))
                self.counts["connects"] += 1
                return conn
            except ws_client.HandshakeError as e:  # the venue refused the subscription
                if first:
                    raise U.FeedError(f"{self.uri}: the venue refused the subscription: {escape(str(e))}") from None
                err = e
            except OSError as e:  # (a timeout is one)
                if first and isinstance(e, ConnectionRefusedError):
                    raise U.FeedError(f"{self.uri}: cannot connect to {self.p['ws']}: {e.strerror}") from None
                err = e
            delay = self._backoff()
            if self.venue_log.allow():
                self._say(f"cannot connect to {self.p['ws']} ({escape(why(err))}); again in {delay:.2f} s")
            await self._sleep(delay)

    def _wait(self):
        """Run the event loop until the active connection has lines or is lost (its callbacks stop
        the loop) or 50 ms pass. One loop iteration from the socket read to here: a future woken by
        the read and awaited by a task took three, ~40 us at a live feed's one frame a read.
        The native reader (reader=native/spin) is started here when it may run, and its counters
        folded in after."""
        if self.pump is not None:
            self._pump_step()
        try:
            self._run_loop()
        finally:
            if self.pump is not None and self.pump.running:
                self._pump_fold()

    def _run_loop(self):
        a, loop, tick = self.active, self.loop, self._ticking
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

    def _due(self):
        """What the connections need now: "replace" (the active one is lost or silent), "rotate"
        (it is old: open a standby), "switch" (the standby's overlap is over), or None."""
        a, now = self.active, time.monotonic()
        if a.closed or now - a.last > self.p["silence_s"]:
            return "replace"
        if self.standby is None and now - a.opened > self.p["rotate_s"]:
            return "rotate"
        if self.standby is not None and (self.standby.closed or now - self.standby.opened > self.p["overlap_s"]):
            return "switch"
        return None

    async def _tick(self, due):
        """Do what _due said: a lost or silent connection is replaced (a gap line first), an old
        one rotated, the standby switched to."""
        self._pump_stop()
        a = self.active
        if due == "replace":
            if not a.closed:
                self.counts["silences"] += 1
                a.reason = f"silent for {time.monotonic() - a.last:.1f} s"
                a.transport.abort()
            await self._replace(a)
        elif due == "rotate":
            self.standby = await self._connect(beside=True)
        else:
            await self._switch()

    async def _replace(self, a):
        """The active connection is gone: a gap line, then a new connection (or the standby). One
        that died young (nothing came, or within backoff_max_s: a venue that takes connections
        and drops them) is a failure like a refused connect: backed off before the next."""
        a.buf += b'%d {"e":"gap","E":%d,"reason":%s}\n' % (
            time.monotonic_ns() + self.offset, (time.monotonic_ns() + self.offset) // 1_000_000,
            json.dumps(a.reason or "lost").encode())
        self.counts["reconnects"] += 1
        for t in self.asking.values():
            t.cancel()
        self.asking.clear()
        self.gen += 1
        standby = self.standby if self.standby is not None and not self.standby.closed else None
        delay = 0.0
        if a.frames == 0 or time.monotonic() - a.opened < self.p["backoff_max_s"]:
            delay = self._backoff()
        else:
            self.attempt = 0
        if self.venue_log.allow():
            self._say(f"connection lost ({escape(a.reason or 'lost')}); reconnecting"
                      + (f" in {delay:.2f} s" if delay and standby is None else ""))
        if standby is None:
            await self._sleep(delay)
        new = standby or await self._connect()
        self.standby = None
        new.buf[:0] = a.buf  # the old connection's last lines first
        self._done_frames += a.frames
        self.active = new

    async def _switch(self):
        """Rotation: the standby takes over; the old connection's lines come first, the standby's
        overlap with them is dropped by the scanner (update and trade ids)."""
        old, new = self.active, self.standby
        self.standby = None
        if new.closed:
            return
        old.transport.close()
        self._done_frames += old.frames
        new.buf[:0] = old.buf
        self.active = new
        self.counts["rotations"] += 1

    def _take(self):
        """The active connection's lines so far (its buffer itself: a new one takes its place)."""
        a = self.active
        if not a.buf:
            return b""
        data, a.buf = a.buf, bytearray()
        return data

    _done_frames = 0  # frames of the connections that are gone
    _ticking = None  # the task doing what _due said (a replace, a rotation, a switch), while it runs
    _pump_ended = None  # the connection whose end the native reader saw

    # -- the native reader (feeds/binance/pump.py) --------------------------------------------------

    def _pump_ok(self):
        """May the native reader take the active connection now? Only in the steady state: a
        direct publisher with its arrays, no raw recording, no standby, nothing queued or cut, no
        snapshot wanted or on its way."""
        a, put = self.active, self.direct
        proto = a.transport
        if (self.stopped or self._error is not None or self.raw_sink is not None or self.standby is not None
                or self._ticking is not None
                or put is None or not hasattr(put, "live_handles") or a.closed or a.buf or proto is None
                or proto.closed or proto.transport is None or proto.transport.is_closing() or proto.inbuf
                or proto.frag is not None or self.asking or self.refresh or a is self._pump_ended):
            return False
        return not S.needs_snapshot(self.scanner.state[0], self.scanner.state[1], len(self.symbols))

    def _pump_step(self):
        """A pump that returned by itself is finished here; one that may run is started."""
        if self.pump.running and self.pump.result is not None:
            self._pump_stop()
        if not self.pump.running and self._pump_ok():
            put, sc, a = self.direct, self.scanner, self.active
            P, mask, limit_ns = put.live_handles(self.lat)
            put.name_instruments()
            self.pump_conn = a
            self.pump.start(a.transport, (sc.table(), sc.top, self._direct_out, P, mask, limit_ns, len(self.symbols)),
                            self.offset, partial(self._pump_returned, a))

    def _pump_returned(self, conn):
        """(The pump's thread) it returned by itself: wake the event loop, which finishes it."""
        try:
            self.loop.call_soon_threadsafe(conn._wake)
        except RuntimeError:  # (the loop is closed: we are stopping, _close joins the thread)
            pass

    def _pump_fold(self):
        """The pump's frames, last read and published ticks into its connection and publisher."""
        frames, pub = self.pump.take_counts()
        conn = self.pump_conn
        conn.frames += frames
        conn.last = max(conn.last, self.pump.last_s())
        if pub:
            self.direct.published(pub)

    def _pump_stop(self):
        """Stop the native reader (if it runs) and finish its last read the read callback's way:
        a scan it left, a snapshot wanted, the bytes it did not take apart (a control frame and
        what follows it, a frame cut at the end) through the connection's own path; then the event
        loop reads the socket again."""
        if self.pump is None or not self.pump.running:
            return
        res = self.pump.stop()
        self._pump_fold()
        conn, pump = self.pump_conn, self.pump
        proto = conn.transport
        why, err, n, used, w, st, pos, nt, r, want, now = res
        if pump.error is not None:  # (what the thread raised ends the run, as a read callback's does)
            self._callback_failed(conn, pump.error)
        try:
            if why == ws_pump.W_PYTHON:
                self._finish_read(pump.lines_ro, w, pos, nt, r, want)
                rest = bytes(pump.buf[used:n])
            else:
                rest = bytes(pump.buf[:n])  # (a frame cut by the last read)
            if why in (ws_pump.W_EOF, ws_pump.W_ERROR):  # (never again on this connection: the event loop
                self._pump_ended = conn                      # must read the end itself and call it lost)
                if why == ws_pump.W_ERROR and not proto.reason:
                    proto.reason = f"connection lost ({os.strerror(err)})"
            if rest and not proto.closed:
                proto._frames(rest, now)
        except Exception as e:  # noqa: BLE001 - as in a read callback: batches() raises it again
            self._callback_failed(conn, e)
        if not proto.closed and not proto.transport.is_closing():
            proto.transport.resume_reading()  # (the end of the stream, an error: the event loop sees it)

    # -- snapshots ---------------------------------------------------------------------------

    def _want_snapshots(self):
        """A snapshot for each symbol without a book or one on the way: at connect (the reply is
        placed where it arrives; diffs it covers are dropped, one it is older than is a gap and
        another snapshot), and after a gap. One request at a time per symbol."""
        if self.active.closed:  # (no connection: the next one asks, after its gap line)
            return
        I, G = self.scanner.state[0], self.scanner.state[1]
        refresh, self.refresh = self.refresh, False
        if not refresh and not S.needs_snapshot(I, G, len(self.symbols)):  # (every step: the common case)
            return
        self._compact_held()
        known = {name: k for k, name in enumerate(self.scanner.instruments)}
        for name in self.symbols:
            k = known.get(name, -1)
            if name not in self.asking and (refresh or k < 0 or (I[k, S.I_SYNCED] == 0 and I[k, S.I_SID] < 0)):
                self.asking[name] = asyncio.run_coroutine_threadsafe(self._snapshot(name, self.gen), self.rest_loop)

    def _compact_held(self):
        """Drop the dead entries of the scanner's held arena once they are most of it. The scanner
        compacts only when the arena is full outside a snapshot's replay, and a stale snapshot's
        replay holds every diff again (a copy each): under a venue that keeps sending them, nearly
        every fill came during a replay and the arena doubled each time, without bound."""
        st = self.scanner.state
        G = st[1]
        n = int(G[S.G_HN])
        if n > 1024 and G[S.G_RP_INST] < 0 and n - int(st[0][:G[S.G_NSYM], S.I_HELD].sum()) > n // 2:
            S._compact(G, st[5], st[6])

    def _forget_synced(self):
        """A symbol whose book is synced (the last snapshot was one it could use) starts its next
        snapshot's backoff afresh: the backoff is for snapshots that fail, not each gap of a book."""
        I = self.scanner.state[0]
        known = {name: k for k, name in enumerate(self.scanner.instruments)}
        for name in list(self.snap_tries):
            k = known.get(name, -1)
            if k >= 0 and I[k, S.I_SYNCED] and name not in self.asking:
                self.snap_tries.pop(name, None)

    def _snapshot_line(self, gen, line):
        """(This thread) a snapshot's line goes where the active connection's lines are now, unless
        a gap came since it was asked (the next connection asks its own)."""
        if gen == self.gen and not self.stopped:
            self._pump_stop()  # (its lines go after the pump's, from this thread)
            a = self.active
            a.buf += line
            a._wake()

    def _asked(self, symbol, gen):
        if gen == self.gen:
            self.asking.pop(symbol, None)

    async def _snapshot(self, symbol, gen):
        """(The REST thread) symbol's depth snapshot, asked until it comes (backing off), then
        handed to this source's own thread as a capture line."""
        limit = self.p["snapshot_limit"]
        url = f"{self.rest}{self.api}/depth?symbol={symbol}&limit={limit}"
        try:
            while not self.stopped:
                await self._snapshot_turn(symbol)
                try:
                    status, body, _ = await self._get(url, depth_weight(self.market, limit),
                                                      4096 + 2 * DEPTH_LEVEL_BYTES * limit)
                except self.rest_errors:
                    status, body = 0, b""
                if status == 200 and body.lstrip().startswith(b"{"):
                    self.counts["snapshots_asked"] += 1
                    body = body.replace(b"\n", b" ").lstrip()
                    line = b"%d {\"s\":%s," % (time.monotonic_ns() + self.offset, json.dumps(symbol).encode())
                    self.loop.call_soon_threadsafe(self._snapshot_line, gen, line + body[1:] + b"\n")
                    return
                self.counts["rest_errors"] += 1
        except Stopped:
            pass
        finally:
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._asked, symbol, gen)

    async def _snapshot_turn(self, symbol):
        """(The REST thread) wait for symbol's next snapshot request: at once for the first since its
        book was synced (or in a while), then backing off, counted across requests: a snapshot the
        book could not use (not JSON, older than the diffs, cut by a gap) is asked again no sooner
        than a failed one."""
        n, last = self.snap_tries.get(symbol, (0, 0.0))
        if n and time.monotonic() - last > 2 * self.rest_cap:  # (the last was long ago: a new start)
            n = 0
        if n:
            await self._sleep(last + backoff(n, self.rest_base, self.rest_cap) - time.monotonic())
        self.snap_tries[symbol] = (n + 1, time.monotonic())

    async def _get(self, url, weight, cap):
        """One REST GET within the weight budget: (status, body, headers), the body at most cap
        bytes (RestError past it). Waits out a ban (429: too many requests, 418: banned) for the
        Retry-After the venue gives, never less than the REST backoff, shared by every request;
        spends no more than 90% of the minute's weight. Every wait ends at stop() (Stopped)."""
        while True:
            now = time.monotonic()
            if now < self.ban_until:
                await self._sleep(self.ban_until - now)
                continue
            minute, used = self.weight
            if minute == int(time.time() // 60) and used + weight > 0.9 * self.weight_limit:
                await self._sleep(60 - time.time() % 60 + 0.05)
                continue
            status, body, headers = await self._stoppable(self._request(url, cap))
            w = headers.get("X-MBX-USED-WEIGHT-1M", "")
            if w.isdigit():
                self.weight = (int(time.time() // 60), int(w))
            if status in (429, 418):
                self.bans += 1
                try:
                    said = float(headers.get("Retry-After", ""))
                except ValueError:
                    said = math.nan
                if not said >= 0:  # (none, nan, negative: the venue's usual)
                    said = 60.0 if status == 429 else 120.0
                wait = min(MAX_BAN_S, max(said, backoff(self.bans, self.rest_base, self.rest_cap)))
                self.ban_until = time.monotonic() + wait
                self.counts["rest_banned"] += 1
                if self.venue_log.allow():
                    self._say(f"REST {status} ({'banned' if status == 418 else 'too many requests'}); "
                              f"no requests for {round(wait, 2):g} s")
                continue  # (the loop waits the ban out, then asks again)
            self.bans = 0
            return status, body, headers

    async def _request(self, url, cap):
        """GET url: (status, body, headers), reading no more than cap bytes of body."""
        async with self.http.get(url) as r:
            n = r.content_length
            if n is not None and n > cap:
                raise RestError(f"a reply of {n} bytes (over {cap})")
            body = bytearray()
            async for chunk in r.content.iter_chunked(1 << 16):
                body += chunk
                if len(body) > cap:
                    raise RestError(f"a reply over {cap} bytes")
            return r.status, bytes(body), r.headers

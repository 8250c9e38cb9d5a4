"""Live feeds against their peers, on local venues (loopback, real sockets, real captures).

binance: the usdm BTCUSDT capture (93,953 frames a pass) served flat out by bench/_ws_blast.py in
its own process; subscription depth@100ms + bookTicker + aggTrade (the streams cryptofeed subscribes;
the blast server serves the capture's depth diffs and trades under those names), so both clients
get the same bytes. One pass per session: a second pass would apply the capture's first diffs on the
book its last diffs left (stale levels, a crossed book: neither realistic nor the same work), so each
measurement is a fresh connection and a fresh book, repeated, and the median is quoted.
- ours: `binance-live://usdm?...` (feeds/binance/live.py, its default reader: auto, native on ws://
  once synced) run in-process and publishing into a real tick ring as the feed process does
  (feeds/process.py Put: from the socket's read callback, one numba call a read
  (feeds/binance/read.py), then from the native reader's thread (feeds/binance/pump.py), the rest as
  batches; no consumer): the socket reads,
  the numba websocket deframer (feeds/transport/ws_client.py), the numba scanner (JSON, book, ticks) and the
  ring publish; nothing downstream. frames_per_s: the pass's frames over the time from the connection's start to the
  last frame's ticks in the ring (median of the sessions). frame_to_tick_p50/p99/p999_ns: per
  tick, a frame's receive time (read in the websocket callback) to its ticks being in the ring
  (the source's own histogram, src.lat "frame_to_tick", pooled over the sessions); flat out, that
  is mostly the wait behind the megabytes already received, so it is a queueing figure.
  frame_to_tick_capture_pace_*_ns: the same histogram at the capture's own pace (BinanceVenue speed
  1.0, no faults, `paced`), emptied once the first snapshot is placed and its batch recorded (diffs
  held for it would count the REST round trip; emptied at the batch that placed it, the held diffs'
  ticks were recorded just after and were the p99): the per-frame cost a live feed
  sees, with no queue in front. Measured four ways in one run: reader=python (the event loop's
  read callback: the figure quoted before stop 56), reader=native (a thread polls and reads the
  socket and publishes, no Python per read: the default on ws://), reader=spin (that thread
  never sleeps: a whole core) and spin_own_core (reader=spin&reader_core=the last CPU, with the
  venue's process and this one's other threads moved off it: as near a core set aside for the
  reader as this VM allows; its host still takes that core, stall_floor below).
- machine floor (`machine_floor`; it and the two below are bench/_machine_floor.py's): the numba
  deframer on one frame, back to back and after 1 ms of sleep. On this untuned VM the second is
  10-40x the first (a frame at a live pace finds caches and branch predictors cold): the paced
  figures above are mostly that, not our code. And one call of
  a numba function that does nothing (one array read), back to back and 10 ms after the last, asleep
  or busy in a Python loop: here ~0.8 us against ~30 us either way (stop 45), so it is not the wake
  from idle (a spinning feed pays it too: an event loop that never sleeps was tried, within the
  spread, not kept) but the core's caches, shared with whatever else the host runs. Any path that
  enters Python per frame starts at that floor, which is above the 20 us p99 target on this machine.
- C floor (`cache_floor`, when gcc is here): a C loop reading 300 random cache lines (a dependent
  chain), right after 5 ms of spinning, 1 ms asleep and 5 ms asleep. No Python, no numba: what the
  machine does to any frame path's memory between two frames (stop 53's EPYC: 1.0 / 17 us p50 / p99
  spinning, 15 / 49 us after 5 ms asleep, against 3 ns a line warm). Stop 54 swept the sleep: up to
  1 ms asleep the lines stay warm (1.1 / 3.4-4.4 us), from 1.5 ms they do not (3-4.5 / 9-25 us at
  1.5-4 ms, 20-28 / 45-60 us at 5-10 ms). Waking the feed's event loop that often while idle did
  not carry over to the Python path (a timerfd every 200 us: 14% of a core, no gain; uvloop's timers
  are whole milliseconds, and one under 1 ms is a spin). Stop 55: the event loop spinning, with the
  feed pinned to one core and the venue to the other, 10.5 / 83 us p50 / p99 (21.5 / 150 as
  shipped): even a core of its own does not bring this VM's p99 to 20 us.
- stalls (`stall_floor`, when gcc is here): a C loop reading the clock back to back; the gaps of
  10 us and 50 us and more a second are the host taking the core. Stop 56's EPYC: ~360 / ~15 a
  second, ~0.8-1.5% of the time, on a core nothing else of ours ran on. A frame that such a stall
  lands in pays it whatever reads it, and the core's caches come back cold: why even the native
  reader spinning on a core of its own stays over 20 us at p99 here.
- cryptofeed paced (`cryptofeed_paced`): the peer on the same BinanceVenue at the same pace, its
  bookTicker frames (70% of the capture's, the cheapest), from its receipt stamp (after its websocket
  library read and took apart the frame: less of the path than ours) to its callback.
- cryptofeed: BinanceFutures subclassed with its websocket and REST endpoints on the blast server
  (see _cryptofeed for the one thing an attribute cannot do), L2_BOOK / TRADES / TICKER callbacks that
  count: frames (its connection's raw message count) from its first callback to its last, over that
  time. It keeps a Decimal book and builds an object per event; ours keeps an integer book and
  writes ticks. Its connection is the `websockets` client.
- bare websocket clients (picows, websockets, aiohttp; uvloop): a receive loop that only counts text
  frames (picows also takes each payload as bytes), first to last frame, over several passes
  (content does not matter here). The ceiling a client library puts on a feed: with a Python call
  per frame even the fastest (picows) left the source near 170k frames/s, which is why the source
  takes frames apart in numba a socket read at a time instead.
- reconnect: feeds.binance.venue.BinanceVenue in a process of its own (speed 1.0: the
  capture's pace) drops every connection (TCP abort) after 150 frames; ours (backoff_s=0.05)
  reconnects at once (a connection that had frames is retried without backoff). Timed in the
  consuming loop: from the gap tick's receive time (the source writes the gap line the moment it
  sees the connection gone) to the loop seeing the scanner's `snapshots` counter rise (the new REST
  snapshot placed: the book synced again). p50 / max over the drops.
dbn: bench/_live_dbn.run(quick) (our dbn-live source vs Databento's official client).

`python bench/live.py [--quick]` prints a table and writes bench/results/live.json (--quick: < 60 s
with the numba cache warm).
"""
import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import time

import _common
import numpy as np
from _machine_floor import cache_floor, machine_floor, stall_floor

from engine import shm
from engine.records import KIND_GAP, tick_kinds
from feeds.binance.layout import STATS

ROOT = _common.ROOT
USDM = ROOT.parent / "shared" / "data" / "binance" / "usdm_btcusdt_20240808.gz"
STREAMS = ("btcusdt@depth@100ms", "btcusdt@bookTicker", "btcusdt@aggTrade")
I_GAPS, I_SNAPS = STATS.index("stream_gaps"), STATS.index("snapshots")


# -- the blast venue ------------------------------------------------------------------------------

class Blast:
    def __init__(self, capture):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_ws_blast.py"), str(capture),
                                      "--prebuild", "/".join(STREAMS)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        words = self.proc.stdout.readline().split()
        if not words:
            raise SystemExit("bench/_ws_blast.py did not start")
        self.port = int(words[0])
        counts = dict(w.split("=") for w in words[1:])
        self.per_pass = sum(int(v) for v in counts.values())  # one frame per line of each subscribed kind

    def ws(self, passes):
        return f"ws://127.0.0.1:{self.port}/p{passes}"

    @property
    def rest(self):
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- ours -------------------------------------------------------------------------------------------

@contextlib.contextmanager
def into_ring(src):
    """src publishing into a fresh tick ring as in a feed process (feeds/process.py Put, set as its
    direct publisher); yields the Put, which the caller also gives what batches() yields."""
    import os

    from engine.tickring import TickRing
    from feeds.books.crossed import CrossedWatch
    from feeds.process import Put
    ring = TickRing(f"bench-live-{os.getpid()}", 1 << 16, depth=src.depth)
    try:
        if src.instruments:
            ring.publish_instruments(src.instruments, src.specs)
        class Timed(Put):  # (+ when it last published: a read callback's publication is seen by the
            last_ns = 0    # consuming loop only at its next batch, up to 50 ms later)

            def published(self, i):
                super().published(i)
                self.last_ns = time.monotonic_ns()
        put = Timed(ring, src, CrossedWatch(1.0), lambda: False)
        src.direct = put
        yield put
    finally:
        ring.unlink()


def ours(blast, runs, reader="auto"):
    """`runs` sessions of one pass each (a fresh source: a fresh book) with the given reader; frames/s
    per run, and the frame_to_tick histogram of all runs pooled."""
    from feeds.core.feed_latency import Latencies
    from feeds.process import keep_freed_memory
    from feeds.core.sources import open_source
    keep_freed_memory()  # (as the feed process does)
    pooled = Latencies("frame_to_tick")
    rates, tick_rates = [], []
    for _ in range(runs):
        src = open_source(f"binance-live://usdm?symbols=BTCUSDT&ws={blast.ws(1)}&rest={blast.rest}"
                          f"&update=100ms&trades=aggTrade&idle_s=5&reader={reader}")
        gc.collect()
        gc.freeze()  # (as feeds/process.py does once its source has started)
        want = blast.per_pass
        t0 = f0 = None
        with into_ring(src) as put:
            gen = src.batches()
            for b in gen:
                a = src.active
                frames = src._done_frames + a.frames
                if t0 is None:  # from the connection's start: a socket read takes many frames at once, so
                    t0, f0 = int(a.opened * 1e9), 0  # "the first frame seen" would skip most of them
                if len(b):
                    put.batch(b)
                elif frames >= want and not a.buf:
                    break  # everything received and published
            gen.close()  # (closes the connection)
            ticks, t_end = put.produced, max(put.last_ns, int(put.ring.hdr[shm.H_HEARTBEAT_NS]))
            # (the ring's heartbeat: written after every publication, the native reader's too, whose
            # counts reach the publisher only between event-loop steps)
        st = src.stats()
        if st["frames"] != want or st["stream_gaps"] or st["resyncs"]:
            raise SystemExit(f"ours: {st['frames']} frames of {want}, {st['stream_gaps']} gaps, {st['resyncs']} resyncs")
        secs = (t_end - t0) / 1e9
        rates.append(round((st["frames"] - f0) / secs))
        tick_rates.append(round(ticks / secs))
        pooled.counts["frame_to_tick"] += src.lat.counts["frame_to_tick"]
    lat = pooled.percentiles_ns("frame_to_tick")
    return {"frames_per_s": int(np.median(rates)), "ticks_per_s": int(np.median(tick_rates)),
            "frame_to_tick_p50_ns": lat["p50"], "frame_to_tick_p99_ns": lat["p99"],
            "frame_to_tick_p999_ns": lat["p999"], "frames_count": runs * blast.per_pass}, rates


# -- cryptofeed -------------------------------------------------------------------------------------

def _cryptofeed_class(ws_base, rest_base):
    """cryptofeed's BinanceFutures with its endpoints on a local server (ws_base: ws://HOST[/PATH]).
    The endpoints are class attributes and are overridden; but its WSAsyncConn refuses any address
    that is not wss:// (a ValueError in its constructor), and TLS on one side only would not be the
    same work: connect() is overridden to swap each connection's address to ws:// after it was built
    (the connection is otherwise its own)."""
    import logging

    from cryptofeed.connection import RestEndpoint, Routes, WebsocketEndpoint, WSAsyncConn
    from cryptofeed.exchanges import BinanceFutures

    logging.getLogger("feedhandler").setLevel(logging.ERROR)

    class LocalBinanceFutures(BinanceFutures):
        websocket_endpoints = [WebsocketEndpoint("wss://" + ws_base[len("ws://"):], options={"compression": None})]
        rest_endpoints = [RestEndpoint(rest_base, routes=Routes(
            "/fapi/v1/exchangeInfo", l2book="/fapi/v1/depth?symbol={}&limit={}", authentication="/fapi/v1/listenKey",
            open_interest="/fapi/v1/openInterest?symbol={}"))]

        def connect(self):
            out = super().connect()
            for conn, *_ in out:
                if isinstance(conn, WSAsyncConn):
                    conn.address = "ws://" + conn.address[len("wss://"):]
            return out
    return LocalBinanceFutures


def _cryptofeed_run(make_feed, coro_fn):
    """A cryptofeed feed (make_feed() -> feed) started on a fresh loop, coro_fn() run to its end,
    then the feed and the loop shut down; returns the coroutine's result."""
    loop = _loop()
    asyncio.set_event_loop(loop)
    feed = make_feed()
    feed.start(loop)
    try:
        res = loop.run_until_complete(coro_fn())
        feed.stop()
        loop.run_until_complete(feed.shutdown())
        return res
    finally:
        for t in asyncio.all_tasks(loop):
            t.cancel()
        loop.run_until_complete(asyncio.sleep(0.05))
        loop.close()
        asyncio.set_event_loop(None)


def _cryptofeed(blast, passes=1):
    """cryptofeed's BinanceFutures on the blast server (_cryptofeed_class), L2_BOOK / TRADES / TICKER
    callbacks that count."""
    from cryptofeed.defines import L2_BOOK, TICKER, TRADES

    host = f"127.0.0.1:{blast.port}"
    local = _cryptofeed_class(f"ws://{host}/p{passes}", f"http://{host}")
    counts = {L2_BOOK: 0, TRADES: 0, TICKER: 0}
    mark = {}

    def counter(kind):
        async def cb(obj, receipt):
            counts[kind] += 1
            now = time.monotonic_ns()
            if "t0" not in mark:
                mark["t0"], mark["f0"] = now, feed.connection_handlers[0].conn.received
            mark["t1"] = now
        return cb

    want = passes * blast.per_pass
    feed = None

    def make():
        nonlocal feed
        feed = local(symbols=["BTC-USDT-PERP"], channels=[L2_BOOK, TRADES, TICKER],
                     callbacks={k: counter(k) for k in counts})
        return feed

    async def watch():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            hs = feed.connection_handlers
            if hs and hs[0].conn.received >= want and mark:
                return hs[0].conn.received
            await asyncio.sleep(0.01)
        raise SystemExit("cryptofeed: not every frame arrived in 600 s")

    received = _cryptofeed_run(make, watch)
    from importlib.metadata import version
    secs = (mark["t1"] - mark["t0"]) / 1e9
    return {"frames_per_s": round((received - mark["f0"]) / secs), "frames_count": received,
            "l2_book_callbacks_count": counts[L2_BOOK], "trades_callbacks_count": counts[TRADES],
            "ticker_callbacks_count": counts[TICKER], "version": version("cryptofeed")}


# -- bare websocket clients -------------------------------------------------------------------------

def _loop():
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _rate(n, t0, t1):
    return round((n - 1) / ((t1 - t0) / 1e9))


def _run(loop, run):
    """run() to its end on loop, then the loop closed."""
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


class _Count:
    """Text frames a bare client's callback counts: the first's and the `want`-th's times, and
    `done` set at the `want`-th."""

    def __init__(self, loop, want):
        self.want, self.n, self.t0, self.t1 = want, 0, 0, 0
        self.done = loop.create_future()

    def add(self, frames=1):
        if not self.n:
            self.t0 = time.monotonic_ns()
        self.n += frames
        if self.n >= self.want and not self.done.done():
            self.t1 = time.monotonic_ns()
            self.done.set_result(None)

    def rate(self):
        return _rate(self.n, self.t0, self.t1)


def bare_picows(url, want):
    import picows
    TEXT = picows.WSMsgType.TEXT
    loop = _loop()
    count = _Count(loop, want)

    class L(picows.WSListener):
        def on_ws_frame(self, tr, f):
            if f.msg_type == TEXT:
                f.get_payload_as_bytes()  # the payload as the source takes it
                count.add()

    async def run():
        tr, _ = await picows.ws_connect(L, url, max_frame_size=1 << 20, enable_auto_pong=True)
        await asyncio.wait_for(count.done, 600)
        tr.send_close()
        tr.disconnect()

    _run(loop, run)
    return count.rate()


def bare_ours(url, want):
    """feeds/transport/ws_client.py alone: socket reads deframed in numba into capture lines, counted."""
    from feeds.transport import ws_client
    loop = _loop()
    count = _Count(loop, want)

    async def run():
        proto = await ws_client.connect(url, lambda lines, frames: count.add(frames), lambda reason: None)
        await asyncio.wait_for(count.done, 600)
        proto.close()

    _run(loop, run)
    return count.rate()


def bare_websockets(url, want):
    from websockets.asyncio.client import connect

    async def run():
        async with connect(url, compression=None, max_size=1 << 20, ping_interval=None) as ws:
            await ws.recv()
            t0, n = time.monotonic_ns(), 1
            while n < want:
                await ws.recv()
                n += 1
            return _rate(n, t0, time.monotonic_ns())
    return _run(_loop(), run)


def bare_aiohttp(url, want):
    import aiohttp

    async def run():
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(url, compress=0, max_msg_size=1 << 20, autoping=True) as ws:
                await ws.receive()
                t0, n = time.monotonic_ns(), 1
                while n < want:
                    m = await ws.receive()
                    if m.type == aiohttp.WSMsgType.TEXT:
                        n += 1
                    elif m.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
                return _rate(n, t0, time.monotonic_ns())
    return _run(_loop(), run)


# -- reconnect --------------------------------------------------------------------------------------

def _venue(capture, faults, pipe, cpus=None):
    """BinanceVenue (usdm, the capture's pace, `faults` its fault arguments) in a process of its own
    (its aiohttp thread must not share the source's GIL), on `cpus` when given; serves until the
    pipe closes."""
    from feeds.binance.venue import BinanceVenue
    if cpus:
        os.sched_setaffinity(0, cpus)
    with BinanceVenue(capture, market="usdm", speed=1.0, **faults) as fb:
        pipe.send((fb.ws_url, fb.rest_url))
        try:
            pipe.recv()
        except EOFError:
            pass


@contextlib.contextmanager
def venue(capture, cpus=None, **faults):
    """(websocket URL, REST URL) of a `_venue` process (on `cpus` when given) that lives as long as
    the block."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_venue, args=(str(capture), faults, theirs, cpus), daemon=True)
    proc.start()
    try:
        yield mine.recv()
    finally:
        mine.send("stop")
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
            proc.join()


def reconnect(capture, drops, every):
    """Drop every connection after `every` frames (BinanceVenue, capture pace); per drop, the gap
    tick's receive time to the loop seeing the next snapshot placed (ms)."""
    from feeds.core.sources import open_source
    out = []
    with venue(capture, drop_after=every, fault_every_connection=True) as (ws, rest):
        src = open_source(f"binance-live://usdm?symbols=BTCUSDT&ws={ws}&rest={rest}&update=0ms&backoff_s=0.05")
        C = src.scanner.state[2]
        gaps, t_drop, snaps_at = int(C[I_GAPS]), None, 0
        deadline = time.monotonic() + 30 + drops * (every / 200 + 3)
        gen = src.batches()
        for b in gen:
            g = int(C[I_GAPS])
            if g > gaps:
                gaps = g
                k = np.nonzero(tick_kinds(b) == KIND_GAP)[0] if len(b) else []
                t_drop = int(b[k[0], 2]) if len(k) else time.monotonic_ns()
                snaps_at = int(C[I_SNAPS])
            elif t_drop is not None and int(C[I_SNAPS]) > snaps_at:
                out.append((time.monotonic_ns() - t_drop) / 1e6)
                t_drop = None
                if len(out) >= drops:
                    break
            if time.monotonic() > deadline:
                break
        gen.close()
    if len(out) < drops:
        raise SystemExit(f"reconnect: {len(out)} of {drops} drops resynced ({src.stats()})")
    return out


def paced(capture, seconds, reader="python", core=-1):
    """Steady state at the capture's pace (BinanceVenue, no faults): the source's frame_to_tick
    histogram, emptied when the book is first synced (the snapshot placed), so the diffs held for
    it do not count; then `seconds` of live frames. {p50, p99, p999, count} in ns. core >= 0: the
    native reader on that CPU (reader_core=), the venue and this thread on the others (a core
    set aside for the reader, as far as an untuned VM can)."""
    from feeds.core.sources import open_source
    others = os.sched_getaffinity(0) - {core} if core >= 0 else None
    with venue(capture, others) as (ws, rest):
        src = open_source(f"binance-live://usdm?symbols=BTCUSDT&ws={ws}&rest={rest}&update=0ms&reader={reader}"
                          + (f"&reader_core={core}" if core >= 0 else ""))
        C = src.scanner.state[2]
        synced_at, emptied = None, False
        with _on(others), into_ring(src) as put:  # (the source opened first: reader_core is checked
            gen = src.batches()                    # against this process's CPUs)
            for b in gen:
                if len(b):
                    put.batch(b)
                if synced_at is None and int(C[I_SNAPS]):
                    synced_at = time.monotonic()
                    gc.freeze()  # (as feeds/process.py does once its source has started)
                elif synced_at is not None and not emptied:  # (at the next batch: a yielded batch's
                    src.lat.counts["frame_to_tick"][:] = 0   # frame_to_tick is recorded when the
                    emptied = True                           # next one is asked for: the held diffs')
                elif synced_at is not None and time.monotonic() - synced_at > seconds:
                    break
            gen.close()
    return src.lat.percentiles_ns("frame_to_tick")


@contextlib.contextmanager
def _on(cpus):
    """This thread on `cpus` for the block (None: no change)."""
    was = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, was)


def cryptofeed_paced(capture, seconds):
    """The peer at the same pace: cryptofeed's BinanceFutures on the same BinanceVenue (speed 1.0, no
    faults), its TICKER channel (bookTicker: 70% of the capture's frames and the cheapest; the
    venue's depth@100ms and aggTrade streams, which cryptofeed subscribes to, are not in the
    capture), the time from its receipt stamp (taken when its websocket hands it the message,
    after the frame was read and taken apart) to the callback, after the first second.
    {p50, p99, p999, count} in ns."""
    from cryptofeed.defines import TICKER
    lat, t_start = [], []

    async def cb(obj, receipt):
        now = time.time()
        if not t_start:
            t_start.append(now)
        elif now - t_start[0] > 1.0:
            lat.append(now - receipt)

    with venue(capture) as (ws, rest):
        local = _cryptofeed_class(ws, rest)
        _cryptofeed_run(lambda: local(symbols=["BTC-USDT-PERP"], channels=[TICKER], callbacks={TICKER: cb}),
                        lambda: asyncio.sleep(seconds + 1.0))
    if not lat:
        return {}
    ns = np.array(lat) * 1e9
    return {"p50": int(np.percentile(ns, 50)), "p99": int(np.percentile(ns, 99)),
            "p999": int(np.percentile(ns, 99.9)), "count": len(ns)}


# -- the run ----------------------------------------------------------------------------------------

def main():
    a = _common.args(__doc__.split("\n")[0])
    metrics, peers, ratios, notes = {}, {}, {}, {}
    rows = []
    if not USDM.exists():
        notes["binance"] = f"skipped: {USDM} is not here"
    else:
        m = measure_binance(USDM, a.quick)
        binance_figures(m, metrics, peers, ratios, notes)
        rows += binance_rows(m, metrics, ratios)
        notes["binance"] = (f"usdm BTCUSDT capture, {m['per_pass']} frames a pass; ours {m['runs']} sessions of "
                            f"one pass (median frames/s; frame_to_tick pooled), cryptofeed {m['cf_runs']} (median), "
                            f"bare clients {m['p_bare']} passes (picows median of 3); reconnect: BinanceVenue speed "
                            "1.0, every connection dropped after 150 frames, backoff_s=0.05; paced frame_to_tick: "
                            "BinanceVenue speed 1.0, no faults, from the first snapshot on")
    rows += dbn_figures(a.quick, metrics, peers, ratios, notes)
    _print(rows)
    _common.save("live", metrics, peers, ratios, notes)


def measure_binance(capture, quick):
    """Every binance measurement of the run, in its order: ours and the peers on the blast venue,
    then reconnects, the paced histograms and the machine's floor."""
    runs, cf_runs, p_bare = (3, 1, 2) if quick else (15, 3, 10)
    blast = Blast(capture)
    try:
        best, our_runs = ours(blast, runs)
        cfs = [_cryptofeed(blast) for _ in range(cf_runs)]
        cf = sorted(cfs, key=lambda x: x["frames_per_s"])[len(cfs) // 2]
        want = p_bare * blast.per_pass
        url = f"{blast.ws(p_bare)}/stream?streams={'/'.join(STREAMS)}"
        bare = {"picows": [bare_picows(url, want) for _ in range(3)], "ours": [bare_ours(url, want) for _ in range(3)],
                "websockets": [bare_websockets(url, want)], "aiohttp": [bare_aiohttp(url, want)]}
    finally:
        blast.close()
    drops = reconnect(capture, 3 if quick else 6, 150)
    pace = paced(capture, 10 if quick else 60)  # (the event loop's read callback: reader=python)
    pace_native = {r: paced(capture, 10 if quick else 60, r) for r in ("native", "spin")}
    own = max(os.sched_getaffinity(0))  # (spin on a CPU of its own: the venue and Python on the others)
    pace_native["spin_own_core"] = paced(capture, 10 if quick else 60, "spin", core=own)
    cf_pace = cryptofeed_paced(capture, 10 if quick else 60)
    return {"runs": runs, "cf_runs": cf_runs, "p_bare": p_bare, "per_pass": blast.per_pass, "best": best,
            "our_runs": our_runs, "cfs": cfs, "cf": cf, "bare": bare, "drops": drops, "pace": pace,
            "pace_native": pace_native, "own": own, "cf_pace": cf_pace, "floor": machine_floor(),
            "cfloor": cache_floor(), "stalls": stall_floor(2.0 if quick else 10.0)}


def binance_figures(m, metrics, peers, ratios, notes):
    """The binance measurements (measure_binance) as the results file's figures."""
    best, cf, bare, drops, pace = m["best"], m["cf"], m["bare"], m["drops"], m["pace"]
    metrics.update({f"binance_live_{k}": v for k, v in best.items()})
    metrics.update({f"binance_live_frame_to_tick_capture_pace_{k}_ns": pace[k] for k in ("p50", "p99", "p999")})
    metrics["binance_live_frame_to_tick_capture_pace_count"] = pace["count"]
    for r, v in m["pace_native"].items():
        metrics.update({f"binance_live_{r}_reader_frame_to_tick_capture_pace_{k}_ns": v[k]
                        for k in ("p50", "p99", "p999")})
    for k, v in m["floor"].items():
        what = "machine_numba_call" if k.startswith("call_") else "machine_deframe_one_frame"
        metrics.update({f"{what}_{k.removeprefix('call_')}_{p}_ns": x for p, x in v.items()})
    for k, v in m["cfloor"].items():
        metrics.update({f"machine_c_300_cache_lines_{k}_{p}_ns": x for p, x in v.items()})
    metrics.update({f"machine_spinning_core_{k}": v for k, v in m["stalls"].items()})
    cf_version = cf.pop("version")
    peers["cryptofeed"] = {f"binance_live_{k}": v for k, v in cf.items()}
    peers["cryptofeed"].update({f"binance_ticker_receipt_to_callback_capture_pace_{k}"
                                + ("" if k == "count" else "_ns"): v for k, v in m["cf_pace"].items()})
    notes["runs_frames_per_s"] = {"ours": m["our_runs"], "cryptofeed": [x["frames_per_s"] for x in m["cfs"]],
                                  "picows_bare": bare["picows"]}
    peers["cryptofeed"]["client"] = (f"cryptofeed {cf_version} BinanceFutures (subclassed: local endpoints, ws://), "
                                     "L2_BOOK + TRADES + TICKER callbacks that count")
    ratios["binance_live_vs_cryptofeed_frames_per_s"] = _common.ratio(best["frames_per_s"], cf["frames_per_s"], True)
    metrics["ws_bare_frames_per_s"] = sorted(bare["picows"])[1]
    metrics["ws_client_bare_frames_per_s"] = sorted(bare["ours"])[1]
    ratios["ws_client_vs_picows_ws_bare_frames_per_s"] = _common.ratio(metrics["ws_client_bare_frames_per_s"],
                                                                       metrics["ws_bare_frames_per_s"], True)
    for name in ("websockets", "aiohttp"):
        peers[name] = {"ws_bare_frames_per_s": bare[name][0]}
        ratios[f"picows_vs_{name}_ws_bare_frames_per_s"] = _common.ratio(metrics["ws_bare_frames_per_s"],
                                                                         bare[name][0], True)
    metrics["reconnect_to_synced_p50_ms"] = round(float(np.median(drops)), 1)
    metrics["reconnect_to_synced_max_ms"] = round(max(drops), 1)
    metrics["reconnect_drops_count"] = len(drops)


def binance_rows(m, metrics, ratios):
    """The printed table's binance rows: (figure, ours, peer, which peer, ratio, target)."""
    best, cf, bare, pace, cf_pace = m["best"], m["cf"], m["bare"], m["pace"], m["cf_pace"]
    floor, cfloor, stalls = m["floor"], m["cfloor"], m["stalls"]
    rows = [("binance frames/s", best["frames_per_s"], cf["frames_per_s"], "cryptofeed",
             ratios["binance_live_vs_cryptofeed_frames_per_s"], ">= 500,000"),
            ("binance ticks/s", best["ticks_per_s"], None, "", None, ""),
            ("frame_to_tick p50 ns (flat out)", best["frame_to_tick_p50_ns"], None, "", None, ""),
            ("frame_to_tick p99 ns (flat out)", best["frame_to_tick_p99_ns"], None, "", None, ""),
            ("frame_to_tick p99.9 ns (flat out)", best["frame_to_tick_p999_ns"], None, "", None, ""),
            ("frame_to_tick p50 ns (paced)", pace["p50"], None, "", None, "reader=python"),
            ("frame_to_tick p99 ns (paced)", pace["p99"], None, "", None, "<= 20,000"),
            ("frame_to_tick p99.9 ns (paced)", pace["p999"], None, "", None, "")]
    said = {"native": "reader=native (default on ws://)", "spin": "reader=spin (a core)",
            "spin_own_core": f"reader=spin&reader_core={m['own']}, all else off it"}
    for r, v in m["pace_native"].items():
        for q, label, target in (("p50", "p50", said[r]), ("p99", "p99", "<= 20,000"), ("p999", "p99.9", "")):
            rows.append((f"frame_to_tick {label} ns (paced, {r})", v[q], pace[q], "python",
                         _common.ratio(v[q], pace[q], False), target))
    rows += [("paced p50 ns, cryptofeed ticker", pace["p50"], cf_pace.get("p50"), "cryptofeed", None,
              "(its receipt -> callback, bookTicker only)"),
             ("paced p99 ns, cryptofeed ticker", pace["p99"], cf_pace.get("p99"), "cryptofeed", None, ""),
             ("machine: deframe 1 frame p50 ns", floor["back_to_back"]["p50"], floor["after_1ms"]["p50"],
              "after 1 ms", None, "back to back"),
             ("machine: deframe 1 frame p99 ns", floor["back_to_back"]["p99"], floor["after_1ms"]["p99"],
              "after 1 ms", None, "back to back")]
    for p in ("p50", "p99"):
        for k, label in (("asleep", "10 ms asleep"), ("busy", "10 ms busy")):
            rows.append((f"machine: one numba call {p} ns", floor["call_back_to_back"][p],
                         floor[f"call_after_10ms_{k}"][p], f"after {label}", None, "back to back"))
    if cfloor:
        for p in ("p50", "p99"):
            for k in ("1ms", "5ms"):
                rows.append((f"machine: C, 300 lines {p} ns", cfloor["busy_5ms"][p], cfloor[f"asleep_{k}"][p],
                             f"after {k[0]} ms asleep", None, "after 5 ms spinning"))
    if stalls:
        rows += [("machine: core stalls >= 10 us /s", stalls["stalls_10us_per_s"], None, "", None,
                  f"a spinning C loop; {stalls['lost_pct']}% of its time"),
                 ("machine: core stalls >= 50 us /s", stalls["stalls_50us_per_s"], None, "", None, "")]
    rows.append(("bare ws frames/s (ws_client, numba)", metrics["ws_client_bare_frames_per_s"],
                 metrics["ws_bare_frames_per_s"], "picows", ratios["ws_client_vs_picows_ws_bare_frames_per_s"], ""))
    for name in ("websockets", "aiohttp"):
        rows.append(("bare ws frames/s (picows)", metrics["ws_bare_frames_per_s"], bare[name][0], name,
                     ratios[f"picows_vs_{name}_ws_bare_frames_per_s"], ""))
    rows += [("reconnect to synced p50 ms", metrics["reconnect_to_synced_p50_ms"], None, "", None, "< 1,050"),
             ("reconnect to synced max ms", metrics["reconnect_to_synced_max_ms"], None, "", None, "< 1,050")]
    return rows


def dbn_figures(quick, metrics, peers, ratios, notes):
    """bench/_live_dbn.run's figures into the results; its rows of the printed table."""
    import _live_dbn
    d = _live_dbn.run(quick)
    if "skipped" in d:
        notes["dbn"] = d["skipped"]
        return []
    metrics.update(d["metrics"])
    peers.update(d["peers"])
    ours_r, peer_r = d["metrics"]["dbn_live_records_per_s"], d["peers"]["databento"]["dbn_live_records_per_s"]
    ratios["dbn_live_vs_databento_records_per_s"] = _common.ratio(ours_r, peer_r, True)
    return [("dbn records/s", ours_r, peer_r, "databento", ratios["dbn_live_vs_databento_records_per_s"], ""),
            ("dbn bytes_to_tick p99 us", d["metrics"]["dbn_live_bytes_to_tick_p99_us"], None, "", None, "")]


def _print(rows):
    def f(v):
        return "-" if v is None else f"{v:,.0f}" if isinstance(v, (int, float)) and v >= 100 else f"{v:,}"
    print(f"\n  {'figure':<32}{'ours':>14}{'peer':>14}  {'(peer)':<12}{'ratio':>8}  target")
    for label, o, p, who, r, tgt in rows:
        print(f"  {label:<32}{f(o):>14}{f(p):>14}  {who:<12}{f(r):>8}  {tgt}")


if __name__ == "__main__":
    main()

"""The feed-handler process: a source -> the tick ring. `engine feed SOURCE`.

Pacing: the simulator publishes at its `rate`; file sources replay at the pace their receive
times give, scaled by `speed` (or flat out with speed 0); live sources publish as packets come.

Clocks (the ring header's H_CLOCK_*, engine/tickring.py `origin`): a live source's ts_recv is its
arrival on CLOCK_MONOTONIC. A file keeps its data's own ts_recv: wall time only paces it, so every
rule that reads time (order latency, risk rates, half-lives) sees the data's clock at any speed.
A paced file's tick is due at mono0 + (ts_recv - data0) / speed; with `run_clock` the reading run
sets (data0, mono0) in every file ring it reads (one clock for all its files), else the feed
anchors at its own first tick. While a file feed waits to publish its next tick it announces it
(H_HEAD_*), so a run reading several files takes their ticks in receive-time order.

Depth: the ring's header carries the source's `depth`. Between batches (never per tick) the feed
looks at the consumers' resync words and, when one changed, has the source re-send every depth
window (`src.resync()`: each instrument's next event sends a clear tick and its whole window).

Counters: between batches (at most every STATS_EVERY_S) the feed writes its source's `stats()`
and the crossed-book watch's (feeds/books/crossed.py) into the ring's header (engine/feed_stats.py),
where the engine's control plane reads them for /metrics, /status and the run's summary.

Live sources: everything is compiled before the source is opened (a live one binds or joins
when opened, and packets that arrive while a parser compiles overflow the socket's buffer).
"""
import contextlib
import ctypes
import gc
import itertools
import signal
import sys
import time

import numpy as np

from engine import defaults, feed_stats, latency, shm
from engine.realtime import set_timer_slack
from engine.tickring import TickRing

from feeds.core.borrow import handles
from feeds.books.crossed import CrossedWatch
from feeds.core.publisher import Waiter, publish_all, publish_due, publish_live, publish_paced
from feeds.core.sources import open_source

STATS_EVERY_S = 0.05   # the feed's counters in the ring header are this fresh


def _compile():
    """JIT the publishers and the crossed-book watch on throwaway state before the source is
    opened and the ring exists: nobody waits on our JIT, and no packet arrives during it."""
    scratch = np.zeros((4, 8), np.int64)
    hdr = np.zeros(shm.HEADER_WORDS, np.int64)
    for bp in (False, True):
        for stamp in (False, True):
            publish_paced(hdr, np.zeros(4 * 8, np.int64), 3, scratch, 0, 4, 0, 0, bp, stamp)
        publish_due(hdr, np.zeros(4 * 8, np.int64), 3, scratch, np.zeros(4, np.int64), 0, 4, bp, False)
    lat = np.zeros((1, latency.COUNTS_LEN), np.int64)
    publish_live(hdr, np.zeros(4 * 8, np.int64), 3, scratch, lat, lat, 0)
    CrossedWatch(1.0).watch(scratch)


def due_times(ticks, data0, mono0, speed):
    """CLOCK_MONOTONIC ns each tick is due at: the formula engine/tickring.py `origin` reads back."""
    return mono0 + ((ticks[:, 2] - data0).astype(np.float64) * 1e6 / float(round(speed * 1e6))).astype(np.int64)


def _publish_timed(ring, ticks, clock, speed, stopped):
    """Publish ticks (their own ts_recv kept) when the ring's clock makes them due: clock[0] is
    (data0, mono0). Files wait for back-pressure consumers (a late tick is published late, and the
    loop measures its latency from when it was due, never a loss)."""
    n = len(ticks)
    due = due_times(ticks, *clock[0], speed)
    i = 0
    waiter = Waiter(ring)
    while i < n and not stopped():
        j = publish_due(ring.hdr, ring.data, ring.mask, ticks, due, i, n, True, False)
        if j < n:
            ahead = int(due[j]) - time.monotonic_ns() - 5_000
            if ahead > 0:
                time.sleep(min(ahead / 1e9, 0.05))
            else:
                waiter.wait()
        if j > i:
            waiter.moved()
        i = j
    return i


def _start_clock(ring, src, first, speed, run_clock, stopped):
    """The ring's clock, set before it is marked producing: (data0, mono0) for a paced file, else
    None. run_clock: wait for the reading run's anchor (its one clock for all its files)."""
    if src.live or _generated(src):
        return None  # CLOCK_ARRIVAL: ts_recv is stamped on arrival
    if speed == 0:
        ring.set_clock(shm.CLOCK_UNPACED)
        return None
    anchor = None
    while run_clock and anchor is None and not stopped():
        anchor = ring.anchor()
        if anchor is None:
            ring.heartbeat()
            time.sleep(0.001)
    if anchor is None:
        anchor = (int(first[0, 2]) if first is not None and len(first) else 0, time.monotonic_ns())
    ring.set_clock(shm.CLOCK_PACED, anchor[0], anchor[1], speed)
    return anchor


class Put:
    """What the batch loop below does around each batch's publication (the instrument table
    first, the crossed-book watch and the count after), and, called, a live source's
    publication itself: a source with a `direct` attribute is given it and publishes from its
    socket's read callback, so a frame's ticks are in the ring before control leaves
    the callback (binance-live: an event loop stopped and started again per frame cost ~200 us
    of frame-to-tick at a live pace, bench/live.py); its batches are what is left."""

    def __init__(self, ring, src, crossed, stopped):
        self.ring, self.src, self.crossed, self.stopped = ring, src, crossed, stopped
        # a live source's ticks are stamped on arrival unless it read the time itself; a file's keep theirs
        self.stamp = src.live and not getattr(src, "stamps_recv", False)
        self.named = len(src.instruments)
        self.produced = 0
        self._live = None  # (lat, live_handles' answer)

    def name_instruments(self):
        src = self.src
        if len(src.instruments) != self.named:  # feeds find instruments as they read
            self.named = len(src.instruments)
            self.ring.publish_instruments(src.instruments, getattr(src, "specs", None))

    def done(self, ticks, i):
        self.crossed.watch(ticks[:i])
        self.published(i)

    def published(self, i):
        self.produced += i

    def live_handles(self, lat):
        """(handle table, ring mask, crossed limit ns) for a read published in one numba call
        (feeds/binance/read.py PUBLISH: the ring's header and data, lat's feed_latency and
        frame_to_tick histograms, the crossed watch's arrays), built once: they live as long as we do."""
        if self._live is None or self._live[0] is not lat:
            r, c = self.ring, self.crossed
            P = handles([r.hdr, r.data, lat.counts["feed_latency"], lat.counts["frame_to_tick"], c.state, c.since,
                         c.clist, c.cpos, c.c])
            self._live = (lat, (P, r.mask, c.limit_ns))
        return self._live[1]

    def batch(self, ticks):
        """A batch the source yielded (ts_recv on CLOCK_MONOTONIC), from a live source or a file
        read flat out (which waits for back-pressure consumers; a market never does)."""
        self.name_instruments()
        i, _ = publish_all(self.ring, ticks, len(ticks), 0, 0, self.stopped, bp=not self.src.live, stamp=self.stamp)
        self.done(ticks, i)
        return i

    def __call__(self, ticks, lat, offset):
        """A live source's batch (ts_recv on the wall clock, minus offset for CLOCK_MONOTONIC):
        published in one numba call that also records its feed latency and frame-to-tick time in
        lat (feeds/core/feed_latency.py Latencies: feed_latency, frame_to_tick)."""
        self.name_instruments()
        r = self.ring
        i = publish_live(r.hdr, r.data, r.mask, ticks, lat.counts["feed_latency"], lat.counts["frame_to_tick"], offset)
        self.done(ticks, i)
        return i


def keep_freed_memory():
    """glibc gives large freed blocks back to the kernel (mmap'ed above 128 KiB, the heap's top
    trimmed), so a feed that allocates a socket read's worth of memory per read took a page fault
    per 4 KiB every time (14% of binance-live's time flat out, perf). Ours keeps them: mmap only
    from 32 MiB (glibc's most), trim above 512 MiB. No-op where the C library has no mallopt."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


class _Loop:
    """The batch loop's two steps: publish a batch at its source's pace (a live source or a file
    read flat out at once, the simulator at its rate, a paced file when its ticks are due), and
    between batches (at most every ms) beat the heartbeat, serve a consumer's resync request and
    write the counters (every STATS_EVERY_S)."""

    def __init__(self, ring, src, put, clock, speed, run_clock, counters, crossed, stopped):
        self.ring, self.src, self.put, self.clock, self.speed = ring, src, put, clock, speed
        self.run_clock, self.counters, self.crossed, self.stopped = run_clock, counters, crossed, stopped
        if _generated(src):
            self.interval = int(1e9 / src.params.rate) if src.params.rate > 0 else 0
            self.next_due = time.monotonic_ns()
        self.next_look = self.next_stats = 0.0
        self.segment = 0

    def publish(self, ticks):
        src, put = self.src, self.put
        if not _generated(src) and (src.live or self.speed == 0):
            put.batch(ticks)
            return
        put.name_instruments()
        if _generated(src):
            i, self.next_due = publish_all(self.ring, ticks, len(ticks), self.next_due, self.interval, self.stopped)
        else:
            if getattr(src, "segment", 0) != self.segment and not self.run_clock:
                # the next file of `engine replay A B`: its own clock (nobody waits out the time
                # between two recordings); ticks of the last file still unread are timed on it too
                self.segment = src.segment
                self.clock[0] = (int(ticks[0, 2]), time.monotonic_ns()) if len(ticks) else self.clock[0]
                self.ring.set_clock(shm.CLOCK_PACED, *self.clock[0], self.speed)
            i = _publish_timed(self.ring, ticks, self.clock, self.speed, self.stopped)
        put.done(ticks, i)

    def tend(self, now):
        if now < self.next_look:  # (at most every ms: small batches must not pay for it each time)
            return
        self.next_look = now + 0.001
        self.ring.heartbeat()
        if self.ring.resync_requested():  # a consumer's books are void: re-send every depth window
            self.src.resync()
        if now >= self.next_stats:
            self.next_stats = now + STATS_EVERY_S
            self.counters.write({**self.src.stats(), **self.crossed.counts()})


def _stop_on_signals(src):
    """SIGTERM and SIGINT stop the feed (and a source that can be stopped): the flag they set."""
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True
        if hasattr(src, "stop"):
            src.stop()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    return stop


def _wait_consumers(ring, n, timeout, stopped):
    """Hold the ticks until n consumers attach, for at most timeout seconds (0: no limit)."""
    t_wait = time.monotonic()
    while ring.consumers() < n and not stopped():
        if timeout and time.monotonic() - t_wait > timeout:
            raise TimeoutError(f"no consumer attached to {ring.path} within {timeout:g} s")
        ring.heartbeat()
        time.sleep(0.001)


def run_feed(uri, ring_name, *, rate=None, speed=1.0, capacity=defaults.RING_CAPACITY, wait_consumers=0,
             wait_timeout=60.0, count=None, duration=None, keep=False, quiet=False, source=None,
             crossed_after=defaults.CROSSED_AFTER_S, run_clock=False):
    """Publish ticks from `uri` (or an opened `source`) into ring `ring_name` until the source
    ends or we are stopped. rate: ticks/s for the simulator (0 = flat out); speed: file pace
    multiplier (0 = flat out); crossed_after: seconds a book may stay crossed before it is
    counted (0 = never); wait_consumers: hold the ticks until this many consumers attach, for at
    most wait_timeout seconds (0: no limit; TimeoutError after it); run_clock: a paced file waits
    for the reading run to set its clock's anchor (after the consumers)."""
    _compile()  # first: a live source listens from the moment it is opened
    keep_freed_memory()
    src = source or open_source(uri)
    if _generated(src):
        src.override(rate=rate, count=count)
    stop = _stop_on_signals(src)
    stopped = lambda: stop["flag"]  # noqa: E731

    # The first batch before the ring exists: file parsers and the simulator compile on first use,
    # and a ring whose heartbeat stops for seconds while that happens would look like a dead feed.
    # (A live source compiled its parser before it started to listen, and gives its first batch,
    # empty if no packet came, within one socket timeout.)
    batches = src.batches()
    first = next(batches, None)
    set_timer_slack(1000)
    # what start-up made (modules, numba's types, a client library) lives as long as we do: out of
    # the collector's sight, so a full collection looks at what the batches allocate, not at the
    # ~10^5 objects of start-up (a pause of milliseconds in a live feed's frame-to-tick p99.9)
    gc.freeze()
    first_recv = int(first[0, 2]) if first is not None and len(first) and not src.live else 0
    ring = TickRing(ring_name, capacity, depth=getattr(src, "depth", 0), first_recv=first_recv)
    crossed = CrossedWatch(crossed_after)
    counters = feed_stats.Writer(ring.hdr)
    counters.write({**src.stats(), **crossed.counts()})
    say = (lambda m: None) if quiet else (lambda m: print(f"[feed] {m}", file=sys.stderr, flush=True))
    if ring.note:
        say(ring.note)
    say(f"{src.uri} -> {ring.path} ({capacity} slots)")
    try:
        if src.instruments:
            ring.publish_instruments(src.instruments, getattr(src, "specs", None))
        _wait_consumers(ring, wait_consumers, wait_timeout, stopped)
        clock = [_start_clock(ring, src, first, speed, run_clock, stopped)]
        ring.set_state(shm.STATE_PRODUCING)
        deadline = time.monotonic() + duration if duration else None
        put = Put(ring, src, crossed, stopped)
        loop = _Loop(ring, src, put, clock, speed, run_clock, counters, crossed, stopped)
        if src.live and count is None and hasattr(src, "direct"):
            src.direct = put
        for ticks in itertools.chain([] if first is None else [first], batches):
            if count is not None and not _generated(src):
                ticks = ticks[:max(0, count - put.produced)]
            loop.publish(ticks)
            now = time.monotonic()
            loop.tend(now)
            if stop["flag"] or (deadline and now >= deadline) or (count is not None and put.produced >= count):
                break
        _close(batches)  # (the source stops: a live one's reader threads too, before the last counts)
        st = {**src.stats(), **crossed.counts()}
        counters.write(st)  # the last counts, before the ring says finished
        ring.set_state(shm.STATE_FINISHED)
        say(f"published {put.produced} ticks")
        if st and not _generated(src):
            say(" ".join(f"{k}={v}" for k, v in st.items() if v))
        return put.produced
    finally:
        if ring.hdr[shm.H_STATE] != shm.STATE_FINISHED:  # (an error: the source stopped first, its own
            with contextlib.suppress(Exception):        # error, if any, not put in front of this one)
                _close(batches)
            ring.set_state(shm.STATE_FINISHED)
        if not keep:
            ring.unlink()


def _close(batches):
    """A source's batches ended (a generator's finally runs now, not when it is collected)."""
    close = getattr(batches, "close", None)
    if close is not None:
        close()


def _generated(src):
    """A source that makes its ticks (the simulator: paced by its own rate, never a file's time)."""
    return getattr(src, "generated", False)

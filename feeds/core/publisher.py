"""Paced publication of ticks into the tick ring (numba).

Back-pressure (bp=True; file sources only: a file can wait, a market cannot): a consumer that
set its line's C_BACKPRESSURE word is never lapped. Before publishing seq w the producer checks
w < cursor + capacity for the slowest such consumer (engine/tickring.room, which re-reads the
cursors only when it reaches the last limit it computed), and returns early (the caller sleeps
briefly) when it must wait.
Consumers that did not ask still see the never-block rule (they are lapped and count a gap).
"""
import time

import numpy as np
from engine.jit import njit

from engine import shm, tickring
from engine.intrinsics import cpu_pause, monotonic_ns, store_relaxed

from feeds.core.feed_latency import record_feed, record_since

SLEEP_THRESHOLD_NS = 20_000    # further ahead than this: return and let the caller sleep
MAX_BEHIND_NS = 10_000_000     # more than 10 ms behind schedule: re-anchor, do not burst


@njit(nogil=True, cache=True)
def publish_paced(hdr, data, mask, buf, i, n, next_due, interval_ns, bp=False, stamp=True):
    """Publish buf[i:n] at one tick per interval_ns (0 = as fast as possible).

    Stamps ts_recv (word 2) with CLOCK_MONOTONIC just before each publish (unless not `stamp`: a
    source that read the time at the socket, feeds/binance/live.py, keeps its own). Returns
    (next index, next due time); returns early when the next tick is far off so the
    caller can sleep instead of spinning a core, or (bp) when a consumer must catch up.
    """
    limit = np.int64(-1)
    while i < n:
        if bp:
            ok, limit = tickring.room(hdr, mask, limit)
            if not ok:
                break
        now = monotonic_ns()
        if interval_ns > 0:
            if now < next_due:
                if next_due - now > SLEEP_THRESHOLD_NS:
                    return i, next_due
                cpu_pause()
                continue
            next_due += interval_ns
            if now - next_due > MAX_BEHIND_NS:
                next_due = now
        # stamp ts_recv, publish, beat the heartbeat every 256 ticks. Written out here: through a
        # shared inline="always" helper (which itself inlines publish) the same steps ran at half
        # the speed, 14M vs 28M ticks/s (bench/ring.py, this VM)
        if stamp:
            buf[i, 2] = now
        tickring.publish(hdr, data, mask, buf[i])
        i += 1
        if (i & 255) == 0:
            store_relaxed(hdr, shm.H_HEARTBEAT_NS, now)
    store_relaxed(hdr, shm.H_HEARTBEAT_NS, monotonic_ns())
    return i, next_due


@njit(nogil=True, cache=True)
def publish_live(hdr, data, mask, ticks, feed_counts, f2t_counts, offset):
    """A live source's batch in one call (after an idle millisecond a numba call costs ~45 us on
    this VM before it runs: four became one): each tick's feed latency recorded and its ts_recv
    moved from the wall clock to CLOCK_MONOTONIC (record_feed), every tick published as stamped
    (a market never waits: no back-pressure), then its frame-to-tick time recorded. Returns n."""
    n = ticks.shape[0]
    record_feed(feed_counts, ticks, offset)
    for i in range(n):
        tickring.publish(hdr, data, mask, ticks[i])
    now = monotonic_ns()
    store_relaxed(hdr, shm.H_HEARTBEAT_NS, now)
    record_since(f2t_counts, ticks, now)
    return n


@njit(nogil=True, cache=True)
def publish_due(hdr, data, mask, buf, due, i, n, bp=False, stamp=True):
    """Publish buf[i:n], tick j not before CLOCK_MONOTONIC due[j]; returns early (the next
    index) when the next tick is far enough off for the caller to sleep, or (bp) when a
    consumer must catch up. Stamps ts_recv unless not `stamp` (a file keeps its own). While it
    waits for a tick it announces it (engine/tickring.py head: a run merging several files in
    receive-time order need not wait for this one to know what comes next)."""
    limit = np.int64(-1)
    while i < n:
        # the back-pressure check as in publish_paced, written out too: through a shared inline
        # helper both loops ran at 17M instead of 25M ticks/s (flat out into a private ring)
        if bp:
            ok, limit = tickring.room(hdr, mask, limit)
            if not ok:
                break
        now = monotonic_ns()
        if now < due[i]:
            tickring.announce(hdr, hdr[shm.H_WRITE], buf[i, 2])
            if due[i] - now > SLEEP_THRESHOLD_NS:
                break
            cpu_pause()
            continue
        # stamp ts_recv, publish, beat the heartbeat every 256 ticks. Written out here: through a
        # shared inline="always" helper (which itself inlines publish) the same steps ran at half
        # the speed, 14M vs 28M ticks/s (bench/ring.py, this VM)
        if stamp:
            buf[i, 2] = now
        tickring.publish(hdr, data, mask, buf[i])
        i += 1
        if (i & 255) == 0:
            store_relaxed(hdr, shm.H_HEARTBEAT_NS, now)
    store_relaxed(hdr, shm.H_HEARTBEAT_NS, monotonic_ns())
    return i


class Waiter:
    """The producer's side of back-pressure: sleeps while a consumer catches up, and frees a line
    whose process died (so a killed consumer never stalls a replay for good)."""

    def __init__(self, ring):
        self.ring, self.since, self.waits = ring, None, 0

    def wait(self):
        now = time.monotonic()
        if self.since is None:
            self.since = now
        elif now - self.since > 1.0:
            self.ring.release_dead_backpressure()
            self.since = now
        self.waits += 1
        self.ring.heartbeat()
        time.sleep(0.0001)

    def moved(self):
        self.since = None


def publish_all(ring, buf, n, next_due, interval_ns, stopped=lambda: False, bp=False, stamp=True):
    """Publish buf[:n] paced at interval_ns (0 = flat out), sleeping between ticks when the next
    one is far enough off (call rt.set_timer_slack first for accurate short sleeps), and (bp)
    while a back-pressure consumer catches up. Returns (published, next_due); stops early when
    stopped() turns true."""
    i = 0
    waiter = None
    while i < n and not stopped():
        j, next_due = publish_paced(ring.hdr, ring.data, ring.mask, buf, i, n, next_due, interval_ns, bp, stamp)
        if j < n:
            ahead = next_due - time.monotonic_ns() - 5_000
            if interval_ns > 0 and ahead > 0:  # in steps of at most 50 ms: publish_paced beats the heartbeat
                time.sleep(min(ahead / 1e9, 0.05))
            elif j == i or bp:
                waiter = waiter or Waiter(ring)
                waiter.wait()
        if j > i and waiter is not None:
            waiter.moved()
        i = j
    return i, next_due

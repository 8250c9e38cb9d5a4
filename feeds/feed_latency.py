"""Latency of a live feed, kept per batch (never per tick in Python) in HdrHistogram counts arrays
of the loop's layout (engine/latency.py), and reported in the feed's counters as microseconds:

  feed_latency_*_us   the venue's event time to our receive time (ts_recv - ts_event, wall clock:
                      it includes the venue's own delay and the clocks' offset, so it is a trend to
                      watch, not an exact figure)
  frame_to_tick_*_us  a frame's receive time to its ticks being in the ring (parse, book, publish:
                      our own cost, on one clock)
"""
import numpy as np
from numba import njit

from engine import latency

POINTS = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9))


@njit(nogil=True, cache=True)
def record_feed(counts, ticks, offset):
    """A batch about to be published: each tick's ts_recv - ts_event (wall clock; ticks without an
    event time skipped) into counts, then ts_recv moved from the wall clock to CLOCK_MONOTONIC
    (minus offset). One call, no temporaries."""
    for i in range(ticks.shape[0]):
        ev = ticks[i, 1]
        if ev > 0:
            latency.record(counts, 0, ticks[i, 2] - ev)
        ticks[i, 2] -= offset


@njit(nogil=True, cache=True)
def record_since(counts, ticks, now):
    """now - ts_recv of each tick (CLOCK_MONOTONIC ns) into counts."""
    for i in range(ticks.shape[0]):
        latency.record(counts, 0, now - ticks[i, 2])


class Latencies:
    """Named histograms (filled by record_feed / record_since on `counts[name]`); `stats()` gives
    {name_p50_us: ..., ...} for the feed's counters."""

    def __init__(self, *names):
        self.counts = {n: np.zeros((1, latency.COUNTS_LEN), np.int64) for n in names}

    def percentiles_ns(self, name):
        """{p50, p99, p999, count} in ns (empty histogram: {})."""
        c = self.counts[name][0]
        total = int(c.sum())
        if not total:
            return {}
        h = latency.to_hdrh(c)
        return {**{k: int(h.get_value_at_percentile(p)) for k, p in POINTS}, "count": total}

    def stats(self):
        out = {}
        for n in self.counts:
            p = self.percentiles_ns(n)
            for k, _ in POINTS:
                out[f"{n}_{k}_us"] = p.get(k, 0) // 1000
        return out

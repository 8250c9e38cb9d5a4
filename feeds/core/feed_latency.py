"""Latency of a live feed, kept per batch (never per tick in Python) in HdrHistogram counts arrays
of the loop's layout (engine/latency.py), and reported in the feed's counters as microseconds:

  feed_latency_*_us   the venue's event time to our receive time (ts_recv - ts_event, wall clock:
                      it includes the venue's own delay and the clocks' offset, so it is a trend to
                      watch, not an exact figure)
  frame_to_tick_*_us  a frame's receive time to its ticks being in the ring (parse, book, publish:
                      our own cost, on one clock)

Two clocks are comparable only while their difference can be a latency: ts_recv at most
MAX_LATENCY_NS after the event time and at most MAX_SKEW_NS before it. A tick outside that (a
venue replaying an old capture, a clock set wrong) is not a latency: it is counted apart
(`feed_latency_off_clock`), and when such ticks are most of them the percentiles are not reported
at all; `feed_latency_clock_offset_us` says instead how far the event times are off the receive
clock (the last such tick's ts_recv - ts_event). `comparable_stats` is that rule, for this
module's histograms and for any source that keeps its own (feeds/databento/live_stream.py).
"""
import numpy as np
from engine.jit import njit

from engine import latency

POINTS = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9))
MAX_LATENCY_NS = latency.HIGHEST_NS  # 100 s: a tick older than this on arrival is not on our clock
MAX_SKEW_NS = 1_000_000_000          # a receive time up to 1 s before the event: two machines' clocks
# a histogram's rows: HIST the counts of the differences in range; OFF the ones out of range:
# [OFF, OFF_N] how many, [OFF, OFF_LAST] the last one (ns)
HIST, OFF = 0, 1
OFF_N, OFF_LAST = 0, 1


@njit(nogil=True, inline="always", cache=True)
def on_one_clock(d):
    """Can d = ts_recv - ts_event be a latency (the two clocks comparable)?"""
    return -MAX_SKEW_NS <= d <= MAX_LATENCY_NS


@njit(nogil=True, cache=True)
def record_feed(counts, ticks, offset):
    """A batch about to be published: each tick's ts_recv - ts_event (wall clock; ticks without an
    event time skipped) into counts (out of range: counted apart, OFF), then ts_recv moved from
    the wall clock to CLOCK_MONOTONIC (minus offset). One call, no temporaries."""
    for i in range(ticks.shape[0]):
        ev = ticks[i, 1]
        if ev > 0:
            d = ticks[i, 2] - ev
            if on_one_clock(d):
                latency.record(counts, HIST, d)
            else:
                counts[OFF, OFF_N] += 1
                counts[OFF, OFF_LAST] = d
        ticks[i, 2] -= offset


@njit(nogil=True, cache=True)
def record_since(counts, ticks, now):
    """now - ts_recv of each tick (CLOCK_MONOTONIC ns) into counts."""
    for i in range(ticks.shape[0]):
        latency.record(counts, HIST, now - ticks[i, 2])


def comparable_stats(name, n, off, last_off, percentile_us):
    """The counters of one latency: {name_p50_us, name_p99_us, name_p999_us} (percentile_us(p),
    p in percent) from the n differences in range, unless the off ones outnumber them: then
    {name_clock_offset_us: last_off in us} instead; name_off_clock (how many were off) when any."""
    out = {}
    if off > n:
        out[f"{name}_clock_offset_us"] = int(last_off) // 1000
    else:
        for k, p in POINTS:
            out[f"{name}_{k}_us"] = percentile_us(p) if n else 0
    if off:
        out[f"{name}_off_clock"] = int(off)
    return out


class Latencies:
    """Named histograms (filled by record_feed / record_since on `counts[name]`); `stats()` gives
    {name_p50_us: ..., ...} for the feed's counters."""

    def __init__(self, *names):
        self.counts = {n: np.zeros((2, latency.COUNTS_LEN), np.int64) for n in names}

    def percentiles_ns(self, name):
        """{p50, p99, p999, count} in ns of the differences in range (empty histogram: {})."""
        c = self.counts[name][HIST]
        total = int(c.sum())
        if not total:
            return {}
        h = latency.to_hdrh(c)
        return {**{k: int(h.get_value_at_percentile(p)) for k, p in POINTS}, "count": total}

    def stats(self):
        out = {}
        for n, c in self.counts.items():
            p = self.percentiles_ns(n)
            pct = {v: p[k] // 1000 for k, v in POINTS} if p else {}
            out.update(comparable_stats(n, p.get("count", 0), int(c[OFF, OFF_N]), int(c[OFF, OFF_LAST]),
                                        lambda q: pct[q]))
        return out

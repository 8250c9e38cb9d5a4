"""The feed's own counters in its tick ring's header, for the control plane (/metrics, /status,
the run's summary) and anyone who maps the ring.

The feed process (feeds/process.py) writes its source's `stats()` (gaps, lost_messages,
crossed_quotes, unknown_order, ... and the crossed-book watch's) here between batches, never per
tick; a reader copies them under a sequence word (odd while the feed writes), so it never sees a
half-written set. Words from shm.H_FEED_STATS:
  +0 sequence  +1 how many counters  +8.. their values  then the names, ASCII, one per line.
"""
import numpy as np

from . import shm

_SEQ, _N, _VALUES = 0, 1, 8
MAX_STATS = 48
_NAMES = _VALUES + MAX_STATS                              # word offset of the names
NAME_BYTES = (shm.HEADER_WORDS - shm.H_FEED_STATS - _NAMES) * 8
# values that go up and down (the rest only grow): exported as gauges
class _Gauges(frozenset):
    """The names below, and every percentile a live feed reports (`..._p50_us`, feeds/core/feed_latency.py)."""

    def __contains__(self, name):
        return frozenset.__contains__(self, name) or name.endswith("_us")


GAUGES = _Gauges({"instruments", "crossed_instruments", "complete", "files"})


class Writer:
    """The feed's side: write(stats) publishes a dict of counters (names rewritten only when the
    set of names changes)."""

    def __init__(self, hdr):
        self.hdr, self.names = hdr, None
        self.base = shm.H_FEED_STATS

    def write(self, stats):
        names, size = [], 0
        for k in stats:
            size += len(k) + 1
            if len(names) == MAX_STATS or size > NAME_BYTES:
                break  # (no source has this many: the rest are left out, never a failure)
            names.append(k)
        h, b = self.hdr, self.base
        seq = int(h[b + _SEQ])
        h[b + _SEQ] = seq + 1  # odd: being written
        if names != self.names:
            blob = np.frombuffer("\n".join(names).encode("ascii", "replace").ljust(NAME_BYTES, b"\0"), np.uint8)
            h[b + _NAMES:b + _NAMES + NAME_BYTES // 8].view(np.uint8)[:] = blob
            self.names = names
        h[b + _VALUES:b + _VALUES + len(names)] = [int(stats[k]) for k in names]
        h[b + _N] = len(names)
        h[b + _SEQ] = seq + 2


def read(hdr, tries=1000):
    """{name: value} of the feed's counters in a tick ring's header ({} if it wrote none)."""
    b = shm.H_FEED_STATS
    for _ in range(tries):
        s1 = int(hdr[b + _SEQ])
        if s1 & 1:
            continue
        n = min(int(hdr[b + _N]), MAX_STATS)
        values = [int(v) for v in hdr[b + _VALUES:b + _VALUES + n]]
        blob = hdr[b + _NAMES:b + _NAMES + NAME_BYTES // 8].tobytes()
        if int(hdr[b + _SEQ]) != s1:
            continue
        if n == 0:
            return {}
        names = blob.rstrip(b"\0").decode("ascii", "replace").split("\n")
        return dict(zip(names, values))
    return {}


def total(a, b):
    """Counters of two incarnations of a feed added (a restarted feed counts from 0 again);
    gauges are the newer one's."""
    out = dict(a)
    for k, v in b.items():
        out[k] = v if k in GAUGES else out.get(k, 0) + v
    return out

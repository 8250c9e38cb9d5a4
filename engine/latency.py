"""HdrHistogram counts arrays written from numba, in exactly the `hdrh` package's layout.

The hot loop records into plain int64 arrays (about 2 ns a value); the control plane
wraps a copy of the counts in an `hdrh.histogram.HdrHistogram` for percentiles and logs.
"""
import numpy as np
from hdrh.histogram import HdrHistogram
from .jit import njit

from .intrinsics import clz64

LOWEST_NS = 1
HIGHEST_NS = 100_000_000_000  # 100 s: anything slower is clamped here
SIG_FIGS = 3

STAGES = ("ring", "features", "model", "emit", "tick_to_signal")
ST_RING, ST_FEATURES, ST_MODEL, ST_EMIT, ST_TOTAL = range(len(STAGES))
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("p99.99", 99.99))

_ref = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIG_FIGS)
COUNTS_LEN = _ref.counts_len
# Module globals are frozen into the compiled code as constants.
UNIT_MAG = _ref.unit_magnitude
SUB_HALF_MAG = _ref.sub_bucket_half_count_magnitude
_SUB_MASK = _ref.sub_bucket_mask
SUB_HALF = _ref.sub_bucket_half_count
_MAX_VALUE = _ref.highest_trackable_value


@njit(nogil=True, inline="always", cache=True)
def counts_index(v):
    """hdrh's counts index for value v (v clamped to [0, highest trackable])."""
    if v < 0:
        v = 0
    elif v > _MAX_VALUE:
        v = _MAX_VALUE
    bucket = 64 - clz64(v | _SUB_MASK) - UNIT_MAG - (SUB_HALF_MAG + 1)
    return ((bucket + 1) << SUB_HALF_MAG) + ((v >> (bucket + UNIT_MAG)) - SUB_HALF)


@njit(nogil=True, inline="always", cache=True)
def record(counts, stage, v):
    counts[stage, counts_index(v)] += 1


def new_counts():
    return np.zeros((len(STAGES), COUNTS_LEN), np.int64)


def to_hdrh(counts_row):
    """An hdrh histogram holding a copy of one stage's counts."""
    h = HdrHistogram(LOWEST_NS, HIGHEST_NS, SIG_FIGS)
    view = np.ctypeslib.as_array(h.counts)
    view[:] = counts_row  # one copy: the live loop may be adding to counts_row meanwhile
    nz = np.flatnonzero(view)
    if len(nz):
        # (sic) hdrh's spelling; without this its percentiles see nothing. Totals from the copy,
        # or a percentile near 100 looks for counts that are not there and answers 0.
        h.set_internal_tacking_values(int(nz[0]), int(nz[-1]), int(view.sum()))
    return h


def percentiles(counts_row):
    """{p50, p90, p99, p99.9, p99.99, max, count} in ns for one stage."""
    h = to_hdrh(counts_row)
    total = h.get_total_count()
    out = {k: (int(h.get_value_at_percentile(p)) if total else 0) for k, p in PERCENTILES}
    out["max"] = int(h.get_max_value()) if total else 0
    out["count"] = int(total)
    return out


def summary(counts):
    return {stage: percentiles(counts[i]) for i, stage in enumerate(STAGES)}

"""HdrHistogram counts written from numba equal the hdrh package's, value for value."""
import numpy as np
from hdrh.histogram import HdrHistogram
from numba import njit

from engine import latency


@njit(cache=True)
def _record_all(counts, values):
    for v in values:
        latency.record(counts, 0, v)


def test_counts_equal_hdrh_record_value_for_a_million_values():
    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.integers(0, 4096, 200_000),                       # the linear first buckets
        rng.integers(0, 1 << 24, 300_000),
        (rng.pareto(1.2, 490_000) * 500).astype(np.int64),    # heavy tail, like latency
        rng.integers(latency.HIGHEST_NS // 2, latency.HIGHEST_NS, 10_000),
        np.array([0, 1, 2047, 2048, 2049, latency.HIGHEST_NS], np.int64),
    ]).astype(np.int64)
    values = values[values <= latency.HIGHEST_NS]
    assert len(values) >= 1_000_000
    counts = latency.new_counts()
    _record_all(counts, values)
    ref = HdrHistogram(latency.LOWEST_NS, latency.HIGHEST_NS, latency.SIG_FIGS)
    for v in values.tolist():
        ref.record_value(v)
    assert np.array_equal(np.ctypeslib.as_array(ref.counts), counts[0])
    # and the wrapped copy answers percentiles exactly as hdrh does
    mine = latency.percentiles(counts[0])
    for key, p in latency.PERCENTILES:
        assert mine[key] == ref.get_value_at_percentile(p)
    assert mine["max"] == ref.get_max_value() and mine["count"] == len(values)


def test_out_of_range_values_are_clamped_not_lost():
    counts = latency.new_counts()
    _record_all(counts, np.array([-5, latency.HIGHEST_NS * 10], np.int64))
    assert counts[0].sum() == 2
    assert counts[0][latency.counts_index(0)] == 1
    assert counts[0][latency.counts_index(latency.HIGHEST_NS)] == 1

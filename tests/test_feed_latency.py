"""A feed latency spans two clocks (the venue's event time, our receive time): it is reported only
while they are comparable (feeds/core/feed_latency.py), on the real Binance capture's own timestamps,
shifted as a wrong clock or a venue replaying it later would shift them. (The live sources against
the fake venues: tests/test_binance_live.py, tests/test_dbn_live.py.)"""
import numpy as np
import pytest

from feeds.core.feed_latency import MAX_LATENCY_NS, MAX_SKEW_NS, Latencies, on_one_clock, record_feed

from tests.helpers.data import SPOT
from tests.helpers.feedutil import read_all

YEAR_NS = 365 * 86400 * 10**9


@pytest.fixture(scope="module")
def capture():
    """The capture's tick words: ts_event Binance's, ts_recv the capturing machine's clock."""
    t, _ = read_all(f"binance:{SPOT}?depth=0")
    return np.ascontiguousarray(t).view(np.int64).reshape(-1, 8).copy()


def stats(words, shift_ns):
    lat = Latencies("feed_latency")
    w = words.copy()
    w[:, 2] += shift_ns
    record_feed(lat.counts["feed_latency"], w, 0)
    return lat.stats(), w[:, 2] - w[:, 1]


def test_the_bounds():
    assert on_one_clock(0) and on_one_clock(MAX_LATENCY_NS) and on_one_clock(-MAX_SKEW_NS)
    assert not on_one_clock(MAX_LATENCY_NS + 1) and not on_one_clock(-MAX_SKEW_NS - 1)


def test_a_capture_on_a_clock_1_s_behind_the_venues_has_no_latency(capture):
    """The capturing machine's clock was ~1.26 s behind Binance's: every tick 'arrives before it
    happened', which no latency does. No percentile; the offset instead."""
    st, d = stats(capture, 0)
    assert (d < -MAX_SKEW_NS).all()  # (the capture as it is)
    assert "feed_latency_p50_us" not in st and "feed_latency_p99_us" not in st
    assert st["feed_latency_off_clock"] == len(d)
    assert st["feed_latency_clock_offset_us"] == d[-1] // 1000


def test_on_comparable_clocks_the_percentiles_are_the_datas(capture):
    """The same capture with its clock put right (1.3 s on): receive 25 to 240 ms after the event,
    and the percentiles are those of the data (HdrHistogram, 3 significant figures)."""
    st, d = stats(capture, 1_300_000_000)
    assert (d > 0).all() and "feed_latency_off_clock" not in st and "feed_latency_clock_offset_us" not in st
    for name, q in (("feed_latency_p50_us", 50), ("feed_latency_p99_us", 99), ("feed_latency_p999_us", 99.9)):
        # the sample at that rank, as the histogram answers (not a mean of two: far apart in the tail)
        exact = np.percentile(d, q, method="inverted_cdf") / 1000
        assert abs(st[name] - exact) <= 0.002 * exact + 1, (name, st[name], exact)


def test_a_venue_replaying_the_capture_a_year_later_has_no_latency(capture):
    """What a fake venue replaying the capture today gives: receive times a year after the events.
    Nothing near 100 s (the histogram's ceiling, where such a figure used to land) is printed."""
    st, d = stats(capture, 1_300_000_000 + YEAR_NS)
    assert not any(k.startswith("feed_latency_p") for k in st)
    assert st["feed_latency_off_clock"] == len(d)
    assert st["feed_latency_clock_offset_us"] == d[-1] // 1000 > YEAR_NS // 1000


def test_a_few_ticks_off_the_clock_are_left_out_and_counted(capture):
    """Most ticks on one clock, a few a year off (a venue's stale replay mixed in): the percentiles
    are the comparable ticks', the others counted apart."""
    w = capture.copy()
    w[:, 2] += 1_300_000_000
    w[:100, 2] += YEAR_NS
    st, _ = stats(w, 0)
    d = (w[100:, 2] - w[100:, 1]) / 1000
    assert st["feed_latency_off_clock"] == 100 and "feed_latency_clock_offset_us" not in st
    assert abs(st["feed_latency_p50_us"] - np.percentile(d, 50)) <= 0.002 * np.percentile(d, 50) + 1

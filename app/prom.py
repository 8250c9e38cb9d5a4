"""Latency as Prometheus histograms, made at scrape time from the HdrHistogram counts the strategy
loop already records (engine/latency.py): nothing is added to the hot path.

A cumulative bucket `le=B` is the number of values whose HdrHistogram bucket lies wholly at or
below B (B in seconds; the HdrHistogram's 3 significant digits make that exact to 0.1%). The
counts only ever grow, so every bucket, `_count` and `_sum` is a counter: `rate()` over a window
gives that window's distribution, and `histogram_quantile()` over it recovers once a spike has
left the window (since-start percentiles never do: they are in /status and `engine stats`, not
in the metrics, which `promtool check metrics` passes).

    engine_tick_to_signal_seconds        feed publish -> decision, every scored tick
    engine_stage_seconds{stage=...}      ring, features, model, emit

Beside them, the per-source counters of a run with several sources and --paper's money (a
`currency` label: never summed across currencies).
"""
import numpy as np

from engine import latency

# bucket upper bounds, seconds: 100 ns to 1 s, 1-2-5 steps (+Inf is added)
BUCKETS_S = (1e-7, 2e-7, 5e-7, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4,
             1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.25, 1.0)
TOTAL = "engine_tick_to_signal_seconds"
STAGE = "engine_stage_seconds"


def _index_values():
    """(highest, median) equivalent value in ns of every counts index, in hdrh's layout."""
    i = np.arange(latency.COUNTS_LEN, dtype=np.int64)
    bucket = (i >> latency._SUB_HALF_MAG) - 1
    sub = (i & (latency._SUB_HALF - 1)) + latency._SUB_HALF
    first = bucket < 0
    sub = np.where(first, sub - latency._SUB_HALF, sub)
    bucket = np.where(first, 0, bucket)
    shift = bucket + latency._UNIT_MAG
    lowest = sub << shift
    size = np.int64(1) << shift
    return lowest + size - 1, lowest + (size >> 1)


_HIGHEST, _MEDIAN = _index_values()
# how many counts indices lie wholly at or below each bound
_CUT = np.searchsorted(_HIGHEST, np.round(np.array(BUCKETS_S) * 1e9).astype(np.int64), side="right")
_MEDIAN_S = _MEDIAN.astype(np.float64) / 1e9


def _le(b):
    from prometheus_client.utils import floatToGoString
    return floatToGoString(b)


_LES = tuple(_le(b) for b in BUCKETS_S) + ("+Inf",)


def buckets(counts_row):
    """([(le, cumulative count)...] ending with +Inf, sum in seconds) for one stage's counts."""
    c = np.array(counts_row, dtype=np.int64)  # one snapshot: the loop keeps adding meanwhile
    cum = np.cumsum(c)
    count = int(cum[-1]) if len(cum) else 0
    at = [int(cum[k - 1]) if k else 0 for k in _CUT] + [count]
    return list(zip(_LES, at)), float(c.astype(np.float64) @ _MEDIAN_S)


def families(hist):
    """The latency histogram families for a control block's counts [stage, index]."""
    from prometheus_client.core import HistogramMetricFamily
    total = HistogramMetricFamily(TOTAL, "tick-to-signal latency (feed publish to decision) of every scored "
                                  "tick, seconds", labels=[])
    b, s = buckets(hist[latency.ST_TOTAL])
    total.add_metric([], b, s)
    stage = HistogramMetricFamily(STAGE, "latency of each stage of the strategy loop, seconds: ring (feed "
                                  "publish to dequeue), features, model, emit", labels=["stage"])
    for i, name in enumerate(latency.STAGES):
        if i != latency.ST_TOTAL:
            b, s = buckets(hist[i])
            stage.add_metric([name], b, s)
    return [total, stage]


def source_families(sources):
    """Per-source counters of a run with several sources (app/daemon.py source_status), each with a
    `source` label: what the loop read from it, its gaps and losses by kind (ring: the loop was
    lapped on its ring; feed: gap ticks in its stream), ticks whose instrument did not fit its id
    block, its readiness and its restarts. Nothing when the run has one source."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    if not sources:
        return
    ticks = CounterMetricFamily("engine_source_ticks", "ticks the strategy loop read from each source",
                                labels=["source"])
    gaps = CounterMetricFamily("engine_source_gaps", "gap events per source: kind=ring, the loop was lapped on its "
                               "ring; kind=feed, gap ticks in its stream", labels=["source", "kind"])
    lost = CounterMetricFamily("engine_source_lost_ticks", "what each source's gaps lost (kind as engine_source_gaps)",
                               labels=["source", "kind"])
    unmapped = CounterMetricFamily("engine_source_unmapped_ticks", "ticks of an instrument past the source's block "
                                   "of the run's instrument ids (skipped)", labels=["source"])
    ready = GaugeMetricFamily("engine_source_ready", "1 when the source's feed is alive (or played to its end)",
                              labels=["source"])
    restarts = CounterMetricFamily("engine_source_feed_restarts", "times the source's feed was restarted",
                                   labels=["source"])
    for name, s in sources.items():
        c = s["counters"]
        ticks.add_metric([name], c["ticks"])
        gaps.add_metric([name, "ring"], c["gaps"])
        gaps.add_metric([name, "feed"], c["feed_gaps"])
        lost.add_metric([name, "ring"], c["lost"])
        lost.add_metric([name, "feed"], c["feed_lost"])
        unmapped.add_metric([name], c["unmapped"])
        ready.add_metric([name], 1.0 if s["ready"] else 0.0)
        restarts.add_metric([name], s["feed_restarts"])
    yield from (ticks, gaps, lost, unmapped, ready, restarts)


# exported only by a run with --paper (tests/test_paper.py scrapes them; the ops files use them)
PAPER_METRICS = ("engine_paper_pnl", "engine_paper_drawdown", "engine_paper_fills_total", "engine_paper_position",
                 "engine_paper_instrument_pnl", "engine_paper_instrument_drawdown",
                 "engine_paper_instrument_fills_total")


def paper_families(paper):
    """engine_paper_*: --paper's PnL (net, gross) and drawdown per currency (a `currency` label:
    never summed across currencies), fills and positions (none without it); engine_paper_instrument_*:
    each traded instrument's (by id, as engine_paper_position; its PnL with its currency)."""
    if paper is None:
        return
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from .paper_status import traded
    p = paper.pnl()
    pnl = GaugeMetricFamily("engine_paper_pnl", "paper trading PnL of the run in one currency (its instruments'), "
                            "marked to the last mid: kind=net (after fees) or gross", labels=["kind", "currency"])
    dd = GaugeMetricFamily("engine_paper_drawdown", "paper net PnL in one currency below its peak",
                           labels=["currency"])
    for c, f in p["by_currency"].items():
        pnl.add_metric(["net", c], f["net"])
        pnl.add_metric(["gross", c], f["gross"])
        dd.add_metric([c], f["drawdown"])
    yield pnl
    yield dd
    yield CounterMetricFamily("engine_paper_fills", "fills of the paper trader's orders", value=p["fills"])
    pos = GaugeMetricFamily("engine_paper_position", "lots held by the paper trader, per instrument id",
                            labels=["instrument"])
    ipnl = GaugeMetricFamily("engine_paper_instrument_pnl", "paper trading PnL of one instrument (id), marked to "
                             "its last mid, in its currency: kind=net (after fees) or gross",
                             labels=["instrument", "kind", "currency"])
    idd = GaugeMetricFamily("engine_paper_instrument_drawdown", "one instrument's (id) paper net PnL below its peak, "
                            "in its currency", labels=["instrument", "currency"])
    ifills = CounterMetricFamily("engine_paper_instrument_fills", "fills of the paper trader's orders in one "
                                 "instrument (id)", labels=["instrument"])
    for i in traded(p):  # (every instrument traded, flat or not)
        k, c = str(i), str(p["currency"][i])
        pos.add_metric([k], float(p["position"][i]))
        ipnl.add_metric([k, "net", c], float(p["net"][i]))
        ipnl.add_metric([k, "gross", c], float(p["gross"][i]))
        idd.add_metric([k, c], float(p["drawdown_by"][i]))
        ifills.add_metric([k], float(p["fills_by"][i]))
    yield pos
    yield ipnl
    yield idd
    yield ifills

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

from .metrics import METRICS as M, exported

# bucket upper bounds, seconds: 100 ns to 1 s, 1-2-5 steps (+Inf is added)
BUCKETS_S = (1e-7, 2e-7, 5e-7, 1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4,
             1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.25, 1.0)
TOTAL = "engine_tick_to_signal_seconds"
STAGE = "engine_stage_seconds"


def _index_values():
    """(highest, median) equivalent value in ns of every counts index, in hdrh's layout."""
    i = np.arange(latency.COUNTS_LEN, dtype=np.int64)
    bucket = (i >> latency.SUB_HALF_MAG) - 1
    sub = (i & (latency.SUB_HALF - 1)) + latency.SUB_HALF
    first = bucket < 0
    sub = np.where(first, sub - latency.SUB_HALF, sub)
    bucket = np.where(first, 0, bucket)
    shift = bucket + latency.UNIT_MAG
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
    total = M[TOTAL].family()
    b, s = buckets(hist[latency.ST_TOTAL])
    total.add_metric([], b, s)
    stage = M[STAGE].family()
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
    if not sources:
        return
    ticks, gaps, lost, unmapped, ready, restarts = (M[f"engine_source_{n}"].family() for n in (
        "ticks", "gaps", "lost_ticks", "unmapped_ticks", "ready", "feed_restarts"))
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
PAPER_METRICS = exported("--paper")


def paper_families(paper):
    """engine_paper_*: --paper's PnL (net, gross) and drawdown per currency (a `currency` label:
    never summed across currencies), fills and positions (none without it); engine_paper_instrument_*:
    each traded instrument's (by id, as engine_paper_position; its PnL with its currency)."""
    if paper is None:
        return
    from .paper_status import traded
    p = paper.pnl()
    pnl, dd = M["engine_paper_pnl"].family(), M["engine_paper_drawdown"].family()
    for c, f in p["by_currency"].items():
        pnl.add_metric(["net", c], f["net"])
        pnl.add_metric(["gross", c], f["gross"])
        dd.add_metric([c], f["drawdown"])
    yield pnl
    yield dd
    yield M["engine_paper_fills"].family(p["fills"])
    pos, ipnl, idd, ifills = (M[f"engine_paper_{n}"].family() for n in (
        "position", "instrument_pnl", "instrument_drawdown", "instrument_fills"))
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

"""The control plane's Prometheus text (/metrics and /metrics/private), made at scrape time from
what the loop, the feeds, zmq and HTTP already count; each metric as app/metrics.py declares it."""
import re

from engine import control as C
from engine import feed_stats

from . import prom
from .drift_monitor import drift_families
from .metrics import FEED_HELP, METRICS as M


def metrics_text(plane, private=False):
    """What any local process may scrape (health, latency, counts), and with `private`
    (/metrics/private: the owner, or its Prometheus with --metrics-token-file) the money and
    positions of paper trading and the kill switch too."""
    from prometheus_client import CollectorRegistry, generate_latest

    class Collector:
        def collect(self):
            yield from families(plane, private)

    reg = CollectorRegistry()
    reg.register(Collector())
    return generate_latest(reg)


def families(plane, private):
    c = plane.x.ctl_blk.counters()
    yield from loop_families(c)
    if private:
        yield from private_families(plane, c)
    recs = M["engine_signal_records"].family()
    for kind, n in c["signal_counts"].items():
        recs.add_metric([kind], n)
    yield recs
    yield from drift_families(plane.x.drift)
    blocked = M["engine_risk_blocked"].family()
    for rule, n in c["risk_blocked"].items():
        blocked.add_metric([rule], n)
    yield blocked
    yield M["engine_conflation_warn_ratio"].family(plane.cfg.conflate_warn)
    yield from feed_families(plane.feeds.feed_counters())
    yield from prom.source_families(plane.source_status())  # (several sources: each by its label)
    yield M["engine_rings_refused"].family(plane.feeds.refused)
    yield M["engine_drops"].family(int(plane.x.sring.drops))
    yield from io_families(plane)
    yield from prom.families(plane.x.ctl_blk.hist)  # latency: what alerts and dashboards use
    yield from state_families(plane)


def loop_families(c):
    """The loop's counts, and its gaps and losses by where the data was lost."""
    for name, key in (("engine_ticks", "ticks"), ("engine_signals", "signals"), ("engine_scored", "scored"),
                      ("engine_conflated", "conflated"), ("engine_parks", "parks")):
        yield M[name].family(c[key])
    gaps, lost = M["engine_gaps"].family(), M["engine_lost_ticks"].family()
    for kind, g, n in (("feed", "feed_gaps", "feed_lost"), ("ring", "gaps", "lost")):
        gaps.add_metric([kind], c[g])
        lost.add_metric([kind], c[n])
    yield gaps
    yield lost


def private_families(plane, c):
    """What only the owner may scrape: paper trading's money, positions and fills, the kill switch."""
    yield from prom.paper_families(plane.x.paper)
    yield M["engine_killed"].family(1 if c["killed"] else 0)
    kills = M["engine_kills"].family()
    for reason, n in c["kills"].items():
        kills.add_metric([reason], n)
    yield kills


def io_families(plane):
    """zmq's subscribers and HTTP's connections and requests."""
    z = plane.zmq_counters()
    yield M["engine_published"].family(z["published"])
    yield M["engine_zmq_dropped"].family(z["dropped"])
    yield M["engine_zmq_slow_disconnects"].family(z["slow_disconnects"])
    yield M["engine_zmq_refused_subscribers"].family(z["refused"])
    yield M["engine_http_bad_requests"].family(plane.http_log.bad)
    hc = plane.http.conns if plane.http is not None else None  # (httpconns.py: connections over the caps)
    yield M["engine_http_refused_connections"].family(hc.refused if hc else 0)
    yield M["engine_http_evicted_connections"].family(hc.evicted if hc else 0)


def state_families(plane):
    """The model, the loop's scheduling, readiness, and how often other work took the loop's core."""
    pred = plane.x.loaded[-1]
    info = M["engine_model_info"].family()
    info.add_metric([pred.model_id, pred.backend, str(int(plane.ctl[C.L_MODEL_GEN]))], 1.0)
    yield info
    t = plane.x.thread
    yield M["engine_loop_pinned"].family(1.0 if t.core is not None else 0.0)
    yield M["engine_loop_fifo"].family(1.0 if t.policy == "SCHED_FIFO" else 0.0)
    li = M["engine_loop_info"].family()
    li.add_metric([t.policy, t.choice.wait.name, "on" if t.conflate else "off"], 1.0)
    yield li
    ok, _ = plane.ready()
    yield M["engine_ready"].family(float(ok))
    yield M["engine_paused"].family(float(plane.paused))
    yield M["engine_loop_stalled"].family(float(plane.watchdog.stalled))
    yield M["engine_feed_restarts"].family(plane.feeds.respawns)
    p = t.preempted()
    if p is not None:  # (/proc: where the kernel keeps schedstats)
        yield M["engine_loop_preemptions"].family(p["count"])
        yield M["engine_loop_preempted_seconds"].family(p["wait_ms"] / 1e3)


def feed_families(counters):
    """The feed's own counters as engine_feed_<name>_total (gauges: engine_feed_<name>)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    for k, v in sorted(counters.items()):
        name = "engine_feed_" + re.sub(r"[^a-z0-9_]", "_", k.lower())
        if k == "restarts":  # (engine_feed_restarts_total is ours: how often we started the feed again)
            continue
        doc = FEED_HELP.get(name, f"the feed's {k} counter (its source's stats: `engine feed` prints them at its end)")
        if k in feed_stats.GAUGES:
            yield GaugeMetricFamily(name, doc, value=v)
        else:
            yield CounterMetricFamily(name, doc, value=v)

"""Every Prometheus metric `engine run` exports, declared once: its name, type, labels, help, who
may scrape it (/metrics: any local process; /metrics/private: the owner, or its Prometheus with
--metrics-token-file: money, positions, the kill switch), and which runs have it. The control
plane's collector (app/plane_metrics.py), app/prom.py and app/drift_monitor.py make their families
from these; a reference page can be made from them too. Counters are exported with `_total`.

The feed's own counters (engine/feed_stats.py) are exported as they come, each as
engine_feed_<name>: FEED_HELP says the ones alerts and people read most."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str                       # "counter", "gauge" or "histogram"
    help: str
    labels: tuple = ()
    private: bool = False           # only on /metrics/private
    only: str | None = None         # exported only by a run with this ("--paper", "--drift", "several sources")

    def family(self, value=None):
        """An empty family of this metric (labelled: add_metric), or one sample `value`."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        cls = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}[self.kind]
        if value is not None:
            return cls(self.name, self.help, value=value)
        return cls(self.name, self.help, labels=list(self.labels))

    @property
    def exported(self):
        """The name a scrape shows (a counter's with _total)."""
        return self.name + "_total" if self.kind == "counter" else self.name


def _c(name, help, labels=(), **kw):
    return Metric(name, "counter", help, tuple(labels), **kw)


def _g(name, help, labels=(), **kw):
    return Metric(name, "gauge", help, tuple(labels), **kw)


DECLARED = (
    # the loop's counts (engine/control.py counters)
    _c("engine_ticks", "ticks read from the ring"),
    _c("engine_signals", "signals published: targets that moved (clipped and kill-switch flattenings included; "
       "engine/signal_counts.py)"),
    _c("engine_scored", "ticks scored by the model"),
    _c("engine_conflated", "scoreable ticks superseded by a later tick of their instrument before the loop scored "
       "them (conflation)"),
    _c("engine_parks", "sleeps of the loop's wait strategy"),
    _c("engine_gaps", "gap events by where the data was lost: kind=feed, a gap tick in the stream (the feed lost "
       "messages of its source: a venue sequence gap not recovered; or a recording's); kind=ring, the loop was "
       "lapped by its feed", ["kind"]),
    _c("engine_lost_ticks", "what the gaps lost: kind=ring, ticks (exact); kind=feed, the counts the feed's gap "
       "ticks carry (its source's units: MoldUDP64 messages)", ["kind"]),
    _g("engine_killed", "1 while the run is killed (no new exposure until `engine ctl resume --after-kill`)",
       private=True),
    _c("engine_kills", "times the run was killed, by reason (command, file, loss, drawdown, feed)", ["reason"],
       private=True),
    _c("engine_signal_records", "signal records by kind (engine/signal_counts.py: published, clipped, refused by "
       "the risk gate, made while killed)", ["kind"]),
    _c("engine_risk_blocked", "decisions the risk gate cut, by the rule that cut them (engine/risk.py; each cut "
       "counted, a refused one recorded once per wanted target)", ["rule"]),
    _g("engine_conflation_warn_ratio", "the share of scoreable ticks conflated (engine_conflated_total / "
       "(engine_conflated_total + engine_scored_total)) above which the run warns (--conflate-warn); "
       "ops/engine-alerts.yml compares the last minutes' rates with it"),
    _c("engine_rings_refused", "files at the feed ring's name refused (a link, another user's, or writable by "
       "others)"),
    _c("engine_drops", "signals dropped on a full signal ring"),
    # zmq and HTTP
    _c("engine_published", "signals published on zmq"),
    _c("engine_zmq_dropped", "signals zmq subscribers did not get because they stopped reading: the one that found "
       "a queue full, and the queue (SNDHWM signals + the socket's unsent bytes) of each one cut off"),
    _c("engine_zmq_slow_disconnects", "zmq subscribers disconnected for not reading (their queue was full)"),
    _c("engine_zmq_refused_subscribers", "zmq handshakes refused: a client key the owner does not allow "
       "(--pub-clients)"),
    _c("engine_http_bad_requests", "malformed HTTP requests answered 4xx by the parser"),
    _c("engine_http_refused_connections", "HTTP connections closed at once: every slot (overall or the peer's) "
       "busy"),
    _c("engine_http_evicted_connections", "idle HTTP connections closed to make room for a new one over the caps"),
    # latency (app/prom.py: from the loop's HdrHistogram counts)
    Metric("engine_tick_to_signal_seconds", "histogram", "tick-to-signal latency (feed publish to decision) of every "
           "scored tick, seconds"),
    Metric("engine_stage_seconds", "histogram", "latency of each stage of the strategy loop, seconds: ring (feed "
           "publish to dequeue), features, model, emit", ("stage",)),
    # the model and the loop
    _g("engine_model_info", "the model in use", ["model_id", "backend", "generation"]),
    _g("engine_loop_pinned", "1 if the strategy loop is pinned to its core"),
    _g("engine_loop_fifo", "1 if the strategy loop runs SCHED_FIFO"),
    _g("engine_loop_info", "the loop's scheduling policy, wait strategy and conflation", ["policy", "wait", "conflate"]),
    _g("engine_ready", "1 when model, feed and loop are all well"),
    _g("engine_paused", "1 while paused"),
    _g("engine_loop_stalled", "1 when the watchdog sees no loop heartbeat"),
    _c("engine_feed_restarts", "times the feed was restarted"),
    _c("engine_loop_preemptions", "times other work took the strategy loop's core from it (involuntary context "
       "switches)", only="a kernel with schedstats"),
    _c("engine_loop_preempted_seconds", "time the strategy loop waited for its core while other work ran there",
       only="a kernel with schedstats"),
    # each source of a run with several (app/prom.py source_families)
    _c("engine_source_ticks", "ticks the strategy loop read from each source", ["source"], only="several sources"),
    _c("engine_source_gaps", "gap events per source: kind=ring, the loop was lapped on its ring; kind=feed, gap "
       "ticks in its stream", ["source", "kind"], only="several sources"),
    _c("engine_source_lost_ticks", "what each source's gaps lost (kind as engine_source_gaps)", ["source", "kind"],
       only="several sources"),
    _c("engine_source_unmapped_ticks", "ticks of an instrument past the source's block of the run's instrument ids "
       "(skipped)", ["source"], only="several sources"),
    _g("engine_source_ready", "1 when the source's feed is alive (or played to its end)", ["source"],
       only="several sources"),
    _c("engine_source_feed_restarts", "times the source's feed was restarted", ["source"], only="several sources"),
    # --paper's money (app/prom.py paper_families): per currency, never summed across currencies
    _g("engine_paper_pnl", "paper trading PnL of the run in one currency (its instruments'), marked to the last "
       "mid: kind=net (after fees) or gross", ["kind", "currency"], private=True, only="--paper"),
    _g("engine_paper_drawdown", "paper net PnL in one currency below its peak", ["currency"], private=True,
       only="--paper"),
    _c("engine_paper_fills", "fills of the paper trader's orders", private=True, only="--paper"),
    _g("engine_paper_position", "lots held by the paper trader, per instrument id", ["instrument"], private=True,
       only="--paper"),
    _g("engine_paper_instrument_pnl", "paper trading PnL of one instrument (id), marked to its last mid, in its "
       "currency: kind=net (after fees) or gross", ["instrument", "kind", "currency"], private=True, only="--paper"),
    _g("engine_paper_instrument_drawdown", "one instrument's (id) paper net PnL below its peak, in its currency",
       ["instrument", "currency"], private=True, only="--paper"),
    _c("engine_paper_instrument_fills", "fills of the paper trader's orders in one instrument (id)", ["instrument"],
       private=True, only="--paper"),
    # --drift (app/drift_monitor.py drift_families)
    _g("engine_feature_psi", "population stability of each feature of the live rows against the model's training "
       "rows (0 the same; > 0.25 shifted)", ["feature"], only="--drift"),
    _g("engine_score_psi", "population stability of the live model's score (margin) against its training rows",
       only="--drift"),
    _c("engine_drift_rows", "rows the drift monitor binned", only="--drift"),
)
METRICS = {m.name: m for m in DECLARED}


def exported(only):
    """The names a scrape shows of the metrics only a run with `only` exports, in declaration order."""
    return tuple(m.exported for m in DECLARED if m.only == only)


# HELP of the feed's counters that alerts and people read most (every other one gets a generic line)
FEED_HELP = {
    "engine_feed_gaps": "sequence gaps the feed found in its source and could not recover (each one a gap "
                        "tick: the venue's messages in between never arrived)",
    "engine_feed_lost_messages": "messages the feed's source lost in its gaps (MoldUDP64: unrecovered)",
    "engine_feed_rerequests": "MoldUDP64 re-requests sent for missing messages",
    "engine_feed_rerequest_timeouts": "MoldUDP64 re-requests that went unanswered within recover_ms (the "
                                      "messages were declared lost)",
    "engine_feed_recovered_messages": "MoldUDP64 messages recovered by re-requests",
    "engine_feed_bad_packets": "malformed or foreign datagrams the feed dropped",
    "engine_feed_crossed_quotes": "quotes the feed published with the best bid at or above the best ask",
    "engine_feed_unknown_order": "updates for orders the feed's book never saw (lost adds: the book is wrong)",
    "engine_feed_crossed_books": "times a book stayed crossed (best bid at or above best ask) for longer than "
                                 "the feed's --crossed-after, exchange time",
    "engine_feed_crossed_instruments": "instruments whose book is crossed now, and has been for longer than the "
                                       "feed's --crossed-after",
    "engine_feed_feed_latency_off_clock": "ticks whose event time was off the receive clock (received over 100 s "
                                          "after it or over 1 s before): left out of the feed latency percentiles",
    "engine_feed_feed_latency_clock_offset_us": "when most ticks are off the receive clock: the last one's ts_recv "
                                                "- ts_event in us (no feed latency percentile is exported then)",
}

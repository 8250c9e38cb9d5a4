"""The control plane of `engine run`, never on the strategy core. The strategy loop knows nothing
of it: they share only the control block.

A drain thread of its own renews the loop's lease every DRAIN_PERIOD_S and drains signals to the
signal file and to zmq (engine/zpub.py: slow subscribers are cut off), so no HTTP client can
starve either. One asyncio loop
(uvloop) on the main thread serves HTTP (bounded: a /metrics snapshot at most every
METRICS_EVERY_S, MAX_REQUESTS at once, timeouts) (/metrics, /health, /ready; /status and /control/* behind a
bearer token), writes the HdrHistogram interval log, watches the loop (a watchdog on its
heartbeat) and the feed (its ring's heartbeat and state, its process): a feed that is dead or
has ended makes /ready false (logged once). A spawned live feed is started again, with backoff,
whether it died or ended; a spawned file feed that dies ends the run (with a warning); a ring
that reappears under the same name is re-attached. The feed's own counters (its ring's header,
engine/feed_stats.py) are added up over its restarts and exported with the loop's.

Several sources (`engine run --feed A --feed B`, app/multi_rings.py): one FeedWatch per source does
all of the above for its own feed and ring, said by the source's label. /ready is 503 while any
source is down (the run is not whole) and its body names each source's state, so one venue that
is down never marks the others down; /ready?source=LABEL is one source's readiness. /status
`sources` and the engine_source_* metrics (a `source` label) count each one; the run's instrument
table (global ids, VENUE:SYMBOL) is written beside the rings as the feeds find instruments.

Its parts, each in the module named for it: the drain (plane_drain), the HTTP side (plane_http,
http_log, httpconns, ctlauth, ctl_token), the metrics (metrics: each one declared; plane_metrics,
prom), the feeds (feed_watch), the loop's watchdog (watchdog) and lease (lease), the instruments
(plane_instruments), the kill switch (kill_switch).
"""
import asyncio
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from engine import control as C
from engine import latency, risk, shm
from models import registry

from . import kill_file, run_summary, runtime_file
from .ctl_token import ensure_token, read_metrics_token, read_token, remove_token  # noqa: F401 (read_token: the clients')
from .feed_watch import FeedWatch, Feeds
from .http_log import HttpLog
from .kill_switch import kill_switch
from .paper_status import paper_status
from .plane_drain import Drain
from .plane_http import SLOW_COMMANDS, SLOW_REQUEST_TIMEOUT_S, PlaneHttp, off_loop  # noqa: F401 (SLOW_*: the clients')
from .plane_instruments import RunInstruments
from .progress import log
from .prom import PAPER_METRICS  # noqa: F401 (re-exported: the tests, ops files)
from .run_options import RunConfig, risk_limits
from .watchdog import Watchdog

WATCH_PERIOD_S = 0.01             # the HTTP thread's housekeeping (watchdog, feed, hlog); draining has its own thread
WATCH_EVERY_S = 0.05              # the watchdog, the feeds, the kill triggers and the model link, this often


@dataclass
class PlaneInputs:
    """What a run hands its control plane (built in one place: app/live.py _Run.serve)."""
    cfg: RunConfig                  # resolved (RunConfig.resolved): http (host, port) or None, pub, token_file
    ctl_blk: object                 # engine.control.ControlBlock: the only thing the loop shares with us
    sring: object                   # engine.sigring.SignalRing: the loop's signals, drained here
    slog: object                    # engine.signal_log.SignalLog: the signal file
    drain_buf: object               # int64 [n, SIGNAL_WORDS]: what one drain moves at most
    thread: object                  # app.strategy_thread.StrategyThread: the loop (its consumer, exit state, error)
    proc: object                    # the feed's subprocess.Popen (None: attached to a ring); respawn replaces it
    ring_name: str                  # the tick ring's name: a new ring there is re-attached
    stop_event: threading.Event     # set: stop (SIGINT/SIGTERM, a fatal error)
    reload_event: threading.Event   # set: reload the model (SIGHUP)
    loaded: list                    # the model generations still mapped, newest last
    swaps: list                     # every reload's record, for the summary
    model_dir: str
    reload: Callable[[], dict]      # load, verify and publish the model again (/control/reload, SIGHUP)
    respawn: Callable | None        # start the feed again (a live one); None: a feed that dies ends the run
    deadline: float | None          # time.monotonic() at which the run ends (--duration); None: when stopped
    lease_ns: int                   # the loop's lease, renewed every drain_period
    drain_period: float
    sources: list | None = None     # FeedSource per source of a run with several (or --record); None: one
    risk_table: Callable | None = None  # the instruments' records as they come -> the risk gate's multipliers
    paper: object = None            # app.paper.PaperTrader (--paper): given every drained signal
    shadows: object = None          # app.shadow.Shadows (--shadow, ctl shadow): .status(), .add(m), .remove(n)
    drift: object = None            # app.drift_monitor.DriftMonitor (--drift): .figures()
    bridge: object = None           # app.lease.LeaseBridge: renews the lease until the drain thread runs

    # (the run's options, read from its configuration: one owner)
    http = property(lambda self: self.cfg.http)                 # (host, port) or None
    pub = property(lambda self: self.cfg.pub)                   # zmq endpoint or None
    token_file = property(lambda self: self.cfg.token_file)
    hlog_path = property(lambda self: self.cfg.hlog)            # None: no latency log
    hlog_interval = property(lambda self: self.cfg.hlog_interval)
    stall_exit = property(lambda self: self.cfg.stall_exit)


class ControlPlane:
    def __init__(self, ctx):
        self.x = ctx
        self.cfg = ctx.cfg
        self.ctl = ctx.ctl_blk.hdr
        self.paused = False
        self.feed_down_since = None  # (--kill-feed-down: since when a feed is down)
        self.watchdog = Watchdog(self.ctl, ctx.stall_exit)
        self.abnormal = None        # (reason for the signal file, the summary's words): why we ended the run
        self.hlog = None
        self.token = ensure_token(ctx.token_file) if ctx.http else None
        self.table = RunInstruments(ctx)
        self.drain = Drain(ctx, self.table)
        # --model registry:NAME: its live link, and where it pointed last (an operator's own symlink
        # is reloaded by SIGHUP or `engine ctl reload`, when they say, as before)
        self.model_link = ctx.model_dir if (ctx.cfg.model or "").startswith(registry.PREFIX) and \
            os.path.islink(ctx.model_dir) else None
        self.model_target = ctx.loaded[-1].path if ctx.loaded else None
        self.started = time.monotonic()
        self.warnings = []          # for the run's summary: a feed process that failed
        self.http_log, self.http = HttpLog(), None
        self.metrics_token = read_metrics_token(ctx.cfg.metrics_token_file) if ctx.http else None
        self.runtime = None
        self.feeds = Feeds(FeedWatch(self, src) for src in ctx.sources) if ctx.sources else Feeds([FeedWatch(self)])

    # -- what it says of the run ---------------------------------------------------------

    def zmq_counters(self):
        return self.drain.zmq_counters()

    def ready(self):
        why = []
        if not self.x.thread.is_alive():
            why.append("strategy loop not running")
        if self.watchdog.stalled:
            why.append("strategy loop stalled")
        if not self.x.loaded:
            why.append("no model")
        for w in self.feeds:
            fs = w.feed_status()
            if fs not in ("ok", "finished"):
                why.append(f"feed {w.label}: {fs}" if w.label and len(self.feeds) > 1 else f"feed: {fs}")
        return not why, why

    def source_status(self):
        """Each source of a run with several (or --record): its feed, readiness and counters, by label.
        A source that is down is said here alone: the others' entries stay ready."""
        rings = getattr(self.x.thread, "rings", None)
        if not self.x.sources or rings is None:
            return None
        out = {}
        for w, src in zip(self.feeds, self.x.sources):
            k = src.index
            fs = w.feed_status()
            c = w.consumer
            rst = rings.rst[k]
            m = self.x.thread.host.mod
            out[w.label] = {
                "uri": src.uri, "ring": shm.ring_path(src.ring_name), "feed": fs, "ready": fs in ("ok", "finished"),
                "pid": w.proc.pid if w.proc is not None else None,
                "instruments": {"first_id": int(rings.offsets[k]), "ids": int(rings.blocks[k])},
                "counters": {"ticks": int(rst[m.RS_TICKS]), "feed_gaps": int(rst[m.RS_FEED_GAPS]),
                             "feed_lost": int(rst[m.RS_FEED_LOST]), "unmapped": int(rst[m.RS_UNMAPPED]),
                             "gaps": c.gaps if c is not None else 0, "lost": c.lost if c is not None else 0},
                "feed_counters": w.feed_counters(), "feed_restarts": w.respawns, "reattached": w.reattached}
        return out

    def status(self):
        pred = self.x.loaded[-1]
        ok, why = self.ready()
        counters, feed = self.x.ctl_blk.counters(), self.feeds.feed_counters()
        return {"name": self.cfg.name, "pid": os.getpid(), "ready": ok, "not_ready": why,
                "counters": counters, "signal_drops": int(self.x.sring.drops),
                "losses": run_summary.losses(counters, feed, self.cfg.conflate_warn), "feed_counters": feed,
                "published": self.zmq_counters()["published"], "zmq": self.zmq_counters(), "paused": self.paused,
                "risk": {"limits": risk_limits(self.cfg).describe(), **run_summary.risk_state(counters)},
                "paper": paper_status(self.x.paper, self.table.names),
                "shadows": self.x.shadows.status() if self.x.shadows is not None else [],
                "drift": self.x.drift.figures() if self.x.drift is not None else None,
                "feed": self.feeds.feed_status(),
                "feed_restarts": self.feeds.respawns, "reattached": self.x.thread.reattached,
                "sources": self.source_status(),
                "model": {"id": pred.model_id, "backend": pred.backend, "dir": self.x.model_dir,
                          "generation": int(self.ctl[C.L_MODEL_GEN])},
                "loop": {"core": self.x.thread.core, "policy": self.x.thread.policy,
                         "wait": self.x.thread.choice.wait.name, "conflate": self.x.thread.conflate,
                         "state": C.LOOP_STATE_NAMES.get(int(self.ctl[C.L_STATE]), "?"),
                         "preempted": self.x.thread.preempted()},
                "latency_ns": latency.summary(self.x.ctl_blk.hist)}

    # -- the loop ------------------------------------------------------------------------

    async def main(self):
        x = self.x
        http = await self._start()
        next_hlog = time.monotonic() + x.hlog_interval
        next_watch = 0.0
        hup = None  # the SIGHUP reload in progress
        self.table.refresh()
        self.drain.start()
        try:
            while not x.stop_event.is_set():
                if not x.thread.is_alive() or not self.drain.thread.is_alive():
                    break
                if x.reload_event.is_set() and (hup is None or hup.done()):  # (SIGHUPs meanwhile: one more)
                    x.reload_event.clear()
                    hup = off_loop(x.reload)  # not awaited: a stop never waits on a reload (a stalled file)
                t = time.monotonic()
                if x.deadline and t >= x.deadline:
                    break
                if t >= next_watch:
                    next_watch = t + WATCH_EVERY_S
                    self._watch(t)
                if self.hlog is not None and t >= next_hlog:
                    next_hlog = t + x.hlog_interval
                    self.hlog.interval(x.ctl_blk.hist)
                await asyncio.sleep(WATCH_PERIOD_S)
        finally:
            self.drain.stop()
            if self.runtime is not None:
                self.runtime.remove()
            if http is not None:
                await http.cleanup()
            if self.token is not None:
                remove_token(x.token_file, self.token)

    async def _start(self):
        """zmq, HTTP, the latency log, then the runtime file that says where they are; returns the
        HTTP server to clean up at the end (None without --http)."""
        x, http = self.x, None
        if x.pub:
            self.drain.start_pub(self.cfg)
        if x.http:
            self.http = PlaneHttp(self)
            http = await self.http.serve(*x.http)
            unix = f" (or, on {self.http.unix[0]}, this user)" if self.http.unix else ""
            log(f"http://{x.http[0]}:{x.http[1]}/metrics /health /ready; /status and /control/* need the token in "
                f"{x.token_file} (new at each start){unix}")
        if x.hlog_path:
            from engine.hlog import HlogWriter
            self.hlog = HlogWriter(x.hlog_path)
            log(f"latency interval log -> {x.hlog_path} every {x.hlog_interval:g} s")
        self.runtime = self._publish_runtime_file()
        return http

    def _watch(self, now):
        """The plane's housekeeping: the instruments, the loop's heartbeat, the feeds, the kill
        triggers and the model's registry link."""
        self.table.refresh()
        why = self.watchdog.look()
        if why and self.abnormal is None:
            log(f"error: {why}; stopping the run")
            self.abnormal = ("strategy loop hung", why)
            self.x.stop_event.set()
        self.feeds.watch()
        self._kill_triggers(now)
        self._watch_model()
        if self.paused and int(self.ctl[C.CTL_CMD]) == C.CMD_RUN:
            self.ctl[C.CTL_CMD] = C.CMD_PAUSE  # (a re-attach resets the command)

    def kill(self, code):
        kill_switch(self.ctl, code, self.cfg.name)

    def unkill(self):
        if int(self.ctl[C.CTL_KILL]) != 0:
            log(f"kill switch reset (was: {risk.kill_reason(int(self.ctl[C.CTL_KILL]))}): entries allowed again")
            self.ctl[C.CTL_KILL] = 0
            self.feed_down_since = None  # (a feed still down kills again only after the full time)

    def _watch_model(self):
        """registry:NAME's live link moved (`engine model promote` / `rollback`): reload it, once per
        move (a refused artifact is not tried again until the link moves)."""
        if self.model_link is None:
            return
        try:
            now = os.path.realpath(self.model_link)
        except OSError:
            return
        if now != self.model_target:
            self.model_target = now
            log(f"{self.model_link} now points at {now}: reloading the model")
            self.x.reload_event.set()

    def _kill_triggers(self, now):
        """The kill switch's own triggers, every watch: --kill-file appeared, a feed down too long."""
        cfg = self.cfg
        if cfg.kill_file and kill_file.pulled(cfg.kill_file):
            self.kill(risk.KILL_REASONS.index("file"))
        if cfg.kill_feed_down > 0:
            if self.feeds.feed_status() in ("ok", "finished"):
                self.feed_down_since = None
            elif self.feed_down_since is None:
                self.feed_down_since = now
            elif now - self.feed_down_since >= cfg.kill_feed_down:
                self.kill(risk.KILL_REASONS.index("feed"))

    def _publish_runtime_file(self):
        """Where this engine's control plane is (engine/runtime_file.py), once it serves."""
        x, d = self.x, self.drain
        unix = self.http.unix if self.http is not None else None
        info = {"http": f"{x.http[0]}:{x.http[1]}" if x.http else None, "pub": x.pub or None,
                "http_unix": unix[0] if x.http and unix else None,
                "pub_key": d.pub_key.decode() if x.pub else None,
                "pub_key_file": d.pub_key_file if x.pub else None,
                "pub_client_key_file": d.pub_client_key_file if x.pub else None,  # (its owner's subscribers' keypair)
                "token_file": os.path.abspath(x.token_file) if x.http and x.token_file else None,
                "ring": shm.ring_path(x.ring_name)}
        try:
            rf = runtime_file.publish(self.cfg.name, info)
        except (OSError, RuntimeError) as e:  # the engine runs on; clients then need --config or the endpoints
            log(f"warning: cannot write the runtime file for `engine stats/ctl --name {self.cfg.name}`: {e}")
            return None
        log(f"endpoints in {rf.path} (engine stats/ctl/signals --follow --name {self.cfg.name} read it)")
        return rf

    def finish(self):
        """After the loop stopped: the last signals and the last interval, then close (a stuck drain
        thread is left alone: app/plane_drain.py)."""
        if self.runtime is not None:
            self.runtime.remove()
        self.drain.finish()
        self.table.refresh()  # (the run's signal table names them: every one the feed found)
        if self.hlog is not None:
            self.hlog.close(self.x.ctl_blk.hist)
        self.drain.close()


def run_control_plane(ctx):
    """Run the control plane until stop, duration, or the loop's end; returns the plane."""
    plane = ControlPlane(ctx)
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(plane.main())
    return plane

"""`engine run`: feed process -> tick ring -> pinned real-time strategy thread -> signals.

Start-up order follows DESIGN.md: load (or build) the model, compile the loop, create
the rings, spawn the feed, then in the strategy thread: pin, lock memory, pre-fault,
warm the model, switch to SCHED_FIFO, attach to the ring (which releases the feed),
and run. The main thread (on the other cores) drains signals to the signal file,
refreshes the loop's lease, and watches the feed, the clock and SIGINT/SIGTERM.

Application layer (app/). run() is that order as named steps, the methods of _Run:
check_request, open_input, check_machine, check_free, load_model, compile, lock_memory (nothing
created yet), then create_rings, start_feed, start_thread, serve, and stop (always, to the end).
Each step's work is in the module named for it: run_checks, run_input, run_model, feed_procs,
strategy_thread, tap_sides (the tap's readers: recorder, paper, shadows, drift), core_isolation,
the control plane (daemon), run_result and paper_report (what the run hands back and writes).
"""
import threading
import time

import numpy as np

from models.artifact import uses_sigmoid

from engine import control as C
from engine import realtime, risk, shm, sigring
from engine.loop_args import LiveArgs, SignalView, new_tick
from engine.records import MAX_INSTRUMENTS, SIGNAL_WORDS  # feature state for every index a ring may carry
from engine.signal_log import SignalLog

from . import run_checks
from .feed_procs import say_clock, spawn_feed, wait_ring
from .progress import log, set_quiet as quiet_progress
from .run_input import open_input
from .run_model import load_model, load_shadows, reload_model
from .run_options import RunConfig, risk_limits  # every `engine run` option, declared once (with its flag and TOML key)
from .run_result import RunResult, run_result
from .run_stop import stop_run, unlink
from .strategy_thread import STRATEGY_THREAD_NAME  # noqa: F401  (the thread's name: `engine run`'s, as tests see it)
from .strategy_thread import LEASE_NS, MultiStrategyThread, StrategyThread
from .tap_sides import TapRun, TapSides

DRAIN_PERIOD_S = 0.002


def run(cfg: RunConfig, stop_event: threading.Event | None = None,
        reload_event: threading.Event | None = None) -> RunResult:
    """Validate everything, then create rings, spawn the feed, run until stopped; cleans up always.
    The steps, in order, are the methods of _Run (each one named for what it does)."""
    from models.build import set_quiet
    quiet_progress(cfg.quiet)
    set_quiet(cfg.quiet)  # (a default model built on first use: its progress lines too)
    r = _Run(cfg.resolved(), stop_event or threading.Event(), reload_event or threading.Event())
    # 1. everything that can be wrong with the request, before anything is created
    r.check_request()
    r.open_input()
    r.check_machine()
    r.check_free()
    r.load_model()
    r.compile()
    r.lock_memory()
    # 2. resources: everything created from here on is removed by stop(), whatever happens
    try:
        r.create_rings()
        r.isolate_core()
        r.start_feed()
        r.start_thread()
        r.serve()
    finally:
        r.stop()
    return r.result()


class _Run:
    """One `engine run`: its state, and its steps as methods (run() calls them in order)."""

    def __init__(self, cfg, stop_event, reload_event):
        self.cfg, self.stop_event, self.reload_event = cfg, stop_event, reload_event
        self.swaps, self.notes, self.created, self.cleanup_errors = [], [], [], []
        self.ctl_blk = self.sring = self.slog = self.proc = self.thread = self.plane = self.isolation = self.bridge = None
        self.procs, self.rings, self.tap, self.hs = [], None, None, None
        self.sides, self.shadow_models = TapSides(), []
        self.running = False
        self.unpriced = set()  # (risk_table: instruments a gross limit leaves unpriced, said once)
        self.abnormal, self.unread = None, 0  # (short reason, words): why the run ended early; ticks never read
        self.source_feeds = {}  # each source's feed as it was when the run stopped it
        self.t_start = self.t_stop = time.monotonic()

    # -- 1. checks and preparation: nothing created yet --

    def check_request(self):
        """The options, the outputs' paths and the strategy file: refused before anything starts."""
        cfg = self.cfg
        self.choice = run_checks.check_options(cfg)
        self.sig_path, self.parquet_out, self.paper_out = run_checks.output_paths(cfg)
        if cfg.pub_clients:
            from .zauth import read_clients
            read_clients(cfg.pub_clients)  # (a bad --pub-clients file refuses the run now; the plane reads it again)
        from engine.strategy_build import load_host
        self.host = load_host(cfg.strategy, cfg.params, cfg.universe)  # a broken strategy file fails here, before anything
        self.strat = self.host.strategy

    def open_input(self):
        """The tick ring to attach to, or the source the feed process will read (opened once here,
        so a bad URI fails now): its depth, instruments, whether it ends, and conflation."""
        self.inp = open_input(self.cfg, self.strat)

    def check_machine(self):
        """engine doctor for the strategy core: warnings logged; with --strict a fail stops the run."""
        run_checks.check_machine(self.cfg)

    def check_free(self):
        """No live engine owns our rings' names, and the control plane's ports are free."""
        run_checks.check_free(self.cfg, self.inp)

    def risk_table(self, specs):
        """The instruments' records as the control plane learns them: each multiplier the risk gate
        did not have yet is set (a float64 word the loop reads per decision: one store)."""
        hs = self.hs
        if hs is not None and specs:
            for sym in set(risk.set_multipliers(hs.rlim, specs)) - self.unpriced:
                self.unpriced.add(sym)
                log(f"warning: {sym} is in another currency than the instruments --risk-max-gross adds up: "
                    "it is refused new exposure (money is never added across currencies)")
            if self.sides.shadows is not None:
                self.sides.shadows.multipliers_from(specs)

    def load_model(self):
        """The strategy's feature state, and its verified model on the right scale."""
        inp = self.inp
        self.bound = inp.bind(self.strat)
        self.hs = self.host.state(inp.n_inst, inp.levels, self.bound)  # DEPTH beyond the stream's fails here
        self.limits = risk_limits(self.cfg)
        names, specs = inp.start_table()
        risk.configure(self.hs.rlim, self.hs.rg, names, specs, self.limits)  # (an unknown --risk-instrument fails here)
        log(self.limits.describe())
        self.pred, self.model_dir = load_model(self.cfg, self.strat)
        self.strat.check_scale(uses_sigmoid(self.pred))
        self.loaded = [self.pred]
        self.shadow_models = load_shadows(self.cfg, self.strat)

    def compile(self):
        """The loop's configuration words, and the strategy compiled into the live loop."""
        cfg, host, strat, inp = self.cfg, self.host, self.strat, self.inp
        self.cfg_arr = host.loop_cfg(exit_on_eof=inp.finite, warm_every=cfg.warm_every,
                                     sigmoid=uses_sigmoid(self.pred), wait=self.choice.wait, conflate=inp.conflate,
                                     conflate_max=cfg.conflate_max)
        log(f"policy: {self.choice.describe()}; conflation {'on' if inp.conflate else 'off'}"
            + ("; the file feed waits for the loop (lossless)" if inp.file_feed else ""))
        t1 = time.monotonic()
        if inp.multi_loop:
            from .multi_rings import compile_multi
            self.cfg_arr[host.mod.CFG_TAP] = 1.0 if cfg.tapped else 0.0
            self.cfg_arr[host.mod.CFG_MERGE_WINDOW_NS] = round(cfg.merge_window_us * 1000)
            if cfg.merge_window_us and len(inp.ring_names) > 1:
                log(f"merge window {cfg.merge_window_us:g} us: the oldest ready tick waits that long for a quiet source")
            compile_multi(host, len(inp.ring_names))
        else:
            host.compile_live()
        log(f"strategy {strat.describe()} from {strat.path}: compiled into the loop in "
            f"{host.compile_seconds + time.monotonic() - t1:.2f} s; "
            f"params " + ", ".join(f"{k}={v:g}" for k, v in strat.values.items()))

    def lock_memory(self):
        """Keep other work off the strategy core, lock memory, and allocate the loop's buffers."""
        cfg = self.cfg
        if cfg.core is not None:
            ok, msg = realtime.keep_off_core(cfg.core)
            self.notes.append(msg)
            if not ok:
                log(f"warning: {msg}")
        ok, msg = realtime.mlockall()
        self.notes.append(msg)
        if not ok:
            if cfg.strict:
                raise RuntimeError(f"--strict: {msg}")
            log(f"warning: {msg}; running without locked memory")
        self.row = self.host.new_row()
        self.out = np.zeros(1, np.float32)
        self.tick = new_tick()
        self.sig = np.zeros(SIGNAL_WORDS, np.int64)
        self.pvals = self.host.params()
        self.drain_buf = np.zeros((4096, SIGNAL_WORDS), np.int64)

    # -- 2. resources: each one recorded as it is created, for stop() --

    def create_rings(self):
        """Locks on the core and the ring name, the control block, the signal ring, the signal file."""
        from engine import locks
        cfg, inp = self.cfg, self.inp
        if cfg.core is not None:
            locks.acquire("core", cfg.core, cfg.name)
        for rn in inp.ring_names:
            locks.acquire("ring", shm.ring_path(rn), cfg.name)
        self.ctl_blk = C.ControlBlock(f"{cfg.name}.ctl")
        self.created.append(self.ctl_blk.path)
        self.sring = sigring.SignalRing(f"{cfg.name}.signals")
        self.created.append(self.sring.path)
        if not cfg.ring:
            for rn in inp.ring_names:
                self.created += [shm.ring_path(rn), shm.ring_path(rn) + ".instruments"]
        if inp.multi:  # the run's instrument table (global ids), beside its rings
            self.created.append(shm.ring_path(f"{cfg.name}.instruments"))
        if cfg.tapped:  # what the loop reads, published for the recorder and the paper trader
            from engine.tickring import TickRing
            self.tap = TickRing(f"{cfg.name}.tap", inp.tap_capacity(cfg), depth=inp.levels)
            self.created.append(self.tap.path)
        for n in (self.ctl_blk.note, self.sring.note):
            if n:
                log(n)
        ctl = self.ctl_blk.hdr
        ctl[C.CTL_MODEL_ADDR] = self.pred.addr
        ctl[C.CTL_MODEL_ROWS] = self.pred.rows_addr
        ctl[C.CTL_MODEL_GEN] = 1
        ctl[C.L_MODEL_GEN] = 0
        self.slog = SignalLog(self.sig_path, on_error=self._on_write_error)
        if self.slog.regular:  # (a drift record of an earlier run with this file's name is not this run's)
            from .drift_monitor import record_path
            unlink(record_path(self.sig_path))

    def isolate_core(self):
        """--isolate: other tasks, IRQs and unbound kernel work off the strategy core while we run
        (app/core_isolation.py)."""
        if self.cfg.isolate:
            from .core_isolation import CoreIsolation
            self.isolation = CoreIsolation(self.cfg.core, self.cfg.name)  # set first: stop() undoes a partial sweep
            self.isolation.start()

    def _on_write_error(self, msg):  # from the drain thread: stop the run, which still prints its summary
        log(f"error: {msg}; stopping")
        self.stop_event.set()

    def loop_args(self):
        """The loop's arguments but the tick ring (engine/loop_args.py orders them)."""
        return LiveArgs(signals=SignalView.of(self.sring), ctl=self.ctl_blk.hdr, hist=self.ctl_blk.hist,
                        state=self.hs.loop_arrays(), row=self.row, out=self.out, tick=self.tick, sig=self.sig,
                        pvals=self.pvals, cfg=self.cfg_arr)

    def start_feed(self):
        """The feed process (unless attached to a ring), once its ring is there."""
        inp = self.inp
        if not self.cfg.ring:
            for rn, uri, ordered in zip(inp.ring_names, inp.feed_uris, inp.ordered):
                self.procs.append(spawn_feed(self.cfg, rn, uri, run_clock=ordered and inp.multi))
                self.proc = self.procs[0]
                wait_ring(shm.ring_path(rn), self.procs[-1], stop=self.stop_event)
            say_clock(inp, self.cfg.speed)

    def start_thread(self):
        """The strategy thread: ready once pinned, warm and attached to the ring (after the tap's
        readers, so the loop's first tick is theirs too)."""
        cfg, choice, inp = self.cfg, self.choice, self.inp
        start = "now" if cfg.ring else "oldest"
        if inp.multi_loop:
            from .multi_rings import MultiRings
            offsets, blocks = inp.id_blocks if inp.id_blocks is not None else (
                np.zeros(1, np.int64), np.full(1, MAX_INSTRUMENTS, np.int64))  # (--ring: the ring's own ids)
            self.rings = MultiRings(inp.ring_names, inp.labels, offsets, blocks, self.host.mod.RS_WIDTH, tap=self.tap,
                                    ordered=inp.ordered if inp.multi else None, rs_ordered=self.host.mod.RS_ORDERED)
            self.sides.start(self, TapRun(tap=self.tap, host=self.host, n_inst=inp.n_inst, depth=inp.levels,
                                          bound=self.bound, table=lambda: self.rings.table(inp.multi)))
            thread = self.thread = MultiStrategyThread(cfg, inp.ring_name, start, self.loop_args, self.pred, self.host,
                                                       choice, backpressure=True, rings=self.rings)
        else:
            thread = self.thread = StrategyThread(cfg, inp.ring_name, start, self.loop_args,
                                                  self.pred, self.host, choice,
                                                  backpressure=True)  # honoured by file feeds only
        thread.conflate = inp.conflate
        thread.start()
        thread.ready.wait()
        if thread.error is not None and not thread.looping:  # (the loop may already have stopped: the
            raise thread.error                                 # strategy raised at its first tick)
        from .lease import LeaseBridge  # (the loop runs: its lease is renewed until the control plane's thread is)
        self.bridge = LeaseBridge(self.ctl_blk.hdr, self.sring.hdr, LEASE_NS, DRAIN_PERIOD_S, thread)
        self.running = True
        feed = (f"feed pid{'s' if len(self.procs) > 1 else ''} {', '.join(str(p.pid) for p in self.procs)}"
                if self.procs else f"ring {shm.ring_path(inp.ring_name)}")
        log(f"running: core {thread.core if thread.core is not None else 'unpinned'}, {thread.policy}, "
            f"{feed}, signals -> {self.sig_path}")
        if thread.policy == "SCHED_FIFO" and choice.wait.name == "spin":
            note = realtime.rt_throttle_note()
            if note:
                log(f"warning: {note}")
                self.notes.append(note)

    def serve(self):
        """The control plane (app/daemon.py) until the run ends: drains signals, serves HTTP
        and zmq, renews the loop's lease, restarts a live feed that died."""
        from .daemon import PlaneInputs, run_control_plane
        cfg, inp, sides = self.cfg, self.inp, self.sides
        ring_name, feed_uri = inp.ring_name, inp.feed_uri
        self.t_start = time.monotonic()
        ctl = self.ctl_blk.hdr
        px = PlaneInputs(cfg=cfg, ctl_blk=self.ctl_blk, sring=self.sring, slog=self.slog, drain_buf=self.drain_buf,
                         thread=self.thread, proc=self.proc, ring_name=ring_name, stop_event=self.stop_event,
                         reload_event=self.reload_event, loaded=self.loaded, swaps=self.swaps,
                         model_dir=self.model_dir,
                         reload=lambda: reload_model(cfg, self.strat, ctl, self.loaded, self.swaps),
                         respawn=(lambda: spawn_feed(cfg, ring_name, feed_uri))
                         if not cfg.ring and not inp.finite else None,
                         deadline=self.t_start + cfg.duration if cfg.duration else None,
                         lease_ns=LEASE_NS, drain_period=DRAIN_PERIOD_S, sources=self._sources(),
                         risk_table=self.risk_table, paper=sides.paper, shadows=sides.shadows, drift=sides.drift,
                         bridge=self.bridge)
        self.plane = run_control_plane(px)
        self.proc = px.proc
        if px.sources:
            self.procs = [x.proc for x in px.sources]
        if cfg.ring and self.thread.exit_state == C.LOOP_EOF:
            log(f"ring {shm.ring_path(ring_name)}: its producer finished and every tick was read; stopping")

    def _sources(self):
        """Several sources (or --record): one FeedSource each, for the control plane (app/daemon.py)."""
        from .feed_watch import FeedSource
        inp = self.inp
        if not inp.multi_loop:
            return None
        cfg, out = self.cfg, []
        for k, (label, rn, uri) in enumerate(zip(inp.labels, inp.ring_names, inp.feed_uris)):
            proc = self.procs[k] if k < len(self.procs) else None
            live = not cfg.ring and not inp.src_finite[k]
            out.append(FeedSource(label=label, uri=uri, ring_name=rn, proc=proc, index=k,
                                  respawn=(lambda rn=rn, uri=uri: spawn_feed(cfg, rn, uri)) if live else None))
        return out

    # -- 3. stop: always, to the end (app/run_stop.py) --

    def stop(self):
        """Cleanup always runs to the end, whatever fails on the way (each step on its own)."""
        stop_run(self)

    # -- 4. the summary --

    def result(self):
        """The run's RunResult (app/run_result.py); the first cleanup error raised instead."""
        return run_result(self)


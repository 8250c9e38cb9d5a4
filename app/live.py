"""`engine run`: feed process -> tick ring -> pinned real-time strategy thread -> signals.

Start-up order follows DESIGN.md: load (or build) the model, compile the loop, create
the rings, spawn the feed, then in the strategy thread: pin, lock memory, pre-fault,
warm the model, switch to SCHED_FIFO, attach to the ring (which releases the feed),
and run. The main thread (on the other cores) drains signals to the signal file,
refreshes the loop's lease, and watches the feed, the clock and SIGINT/SIGTERM.

Application layer (app/). run() is that order as named steps, the methods of _Run:
check_request, open_input, check_machine, check_free, load_model, compile, lock_memory (nothing
created yet), then create_rings, start_feed, start_thread, serve, and stop (always, to the end).
"""
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from models import artifact
from models.artifact import uses_sigmoid

from engine import control as C
from engine import defaults, latency, realtime, ring_info, risk, shm, sigring, waits, warmup
from engine.loop_args import LiveArgs, SignalView, TickView, new_tick, run_args, run_multi_args
from engine.records import MAX_INSTRUMENTS, SIGNAL_WORDS  # feature state for every index a ring may carry
from engine.signal_log import SignalLog
from engine.tickring import TickConsumer

from .run_options import RunConfig, risk_limits  # every `engine run` option, declared once (with its flag and TOML key)

ISOLATE_SWEEP_S = 2.0  # --isolate: tasks born since the last sweep are moved off the core this often
LEASE_NS = defaults.LEASE_NS  # the loop stops by itself if the main thread goes quiet this long
DRAIN_PERIOD_S = 0.002
TAP_CAPACITY = 1 << 18  # --record: at least this many slots in the tap ring (16 MiB; drained every ms)
TAP_WHOLE_MAX = 1 << 22  # a replay of tick files: a tap that holds all of it, up to this (256 MiB)
STRATEGY_THREAD_NAME = "engine-strategy"
# --name: the longest name whose files fit a file name (NAME_MAX 255) with the longest suffix the engine
# gives one (NAME.ticks.instruments, NAME-YYYYmmddTHHMMSS.hlog, a table's .NAME-....parquet.tmp-PID)
MAX_NAME_BYTES = 200


def check_name(name):
    """An instance name names files in /dev/shm and beside the outputs: it must be one."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else b""
    why = ("is empty" if not raw else "has a '/'" if b"/" in raw else "has a NUL byte" if b"\0" in raw else
           f"is {len(raw)} bytes long (at most {MAX_NAME_BYTES})" if len(raw) > MAX_NAME_BYTES else
           "is '.' or '..'" if name in (".", "..") else None)
    if why:
        raise ValueError(f"--name {name!r} {why}: it names the run's files in /dev/shm (NAME.ctl, NAME.signals, "
                         "NAME.ticks)")


from .progress import log, set_quiet as quiet_progress  # noqa: E402


@dataclass
class RunResult:
    counters: dict
    drops: int
    core: int | None
    policy: str
    wait: str
    choice: str
    conflate: bool
    backpressure: bool
    backend: str
    latency: dict
    signals_path: str
    model_dir: str
    strategy: dict
    run_seconds: float
    notes: list = field(default_factory=list)
    swaps: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # incomplete inputs and outputs, in words (report.warnings)
    error: str | None = None        # an output that could not be written: the run stopped, exit non-zero
    preempted: dict | None = None   # {count, wait_ms}: how often and how long other work held the core
    isolation: str | None = None    # --isolate: what was moved off the core
    feed_counters: dict = field(default_factory=dict)  # the feed's own (engine/feed_stats.py), over its restarts
    conflate_warn: float = RunConfig.conflate_warn  # (the run's, for the summary's warnings)
    crossed_after: float = RunConfig.crossed_after
    abnormal: str | None = None     # why the run ended early (the strategy raised or hung, ...): exit non-zero
    unread: int = 0                 # ticks in the ring the loop never read (its write cursor - our read cursor)
    sources: dict | None = None     # several sources (or --record): each one's feed and counters, by label
    record: dict | None = None      # --record: {out, ticks, gaps, lost, error}
    paper: dict | None = None       # --paper: the paper trader's figures (app/paper.py finish), {out, ...}
    shadows: list | None = None     # --shadow: each shadow's figures (app/shadow.py finish)
    drift: dict | None = None       # --drift: the last drift figures (app/drift_monitor.py)


class StrategyThread(threading.Thread):
    def __init__(self, cfg, ring_name, start, args_fn, predictor, host, choice, backpressure=False):
        super().__init__(name="strategy", daemon=True)
        self.choice, self.backpressure = choice, backpressure
        self.conflate = False
        self.cfg, self.ring_name, self.start_at, self.args_fn, self.predictor = cfg, ring_name, start, args_fn, predictor
        self.host = host
        self.ready = threading.Event()
        self.error = None
        self.looping = False  # set with ready once the loop is entered: an error after it is the run's
        self.tid = None       # end (the summary's abnormal), not a failure to start
        self.core = None
        self.policy = "SCHED_OTHER"
        self.notes = []
        self.consumer = None
        self.exit_state = None
        self.reattached = 0
        self.preempt_start = self.preempt_end = None

    def _want(self, ok, msg, what):
        self.notes.append(msg)
        if not ok:
            if self.cfg.strict:
                raise RuntimeError(f"--strict: {msg}")
            log(f"warning: {msg}; running without {what}")

    def run(self):
        try:
            self.tid = threading.get_native_id()
            realtime.name_current_thread(STRATEGY_THREAD_NAME)
            if self.cfg.core is not None:
                ok, msg = realtime.pin_current_thread(self.cfg.core)
                self._want(ok, msg, "pinning")
                self.core = self.cfg.core if ok else None
            live = self.args_fn()
            for a in live.arrays():
                if a.dtype.kind in "if":
                    warmup.prefault(a)
            row, out = live.row, live.out
            warmup.warm_model(self.predictor.addr, row, out, 20_000)
            row[:] = 0
            if self.choice.wait.name != "spin":
                realtime.set_timer_slack(1000)  # parks as short as asked (the default slack is 50 us)
            if self.choice.policy == "fifo":
                ok, msg = realtime.set_fifo(self.cfg.priority)
                self._want(ok, msg, "SCHED_FIFO")
            self.policy = realtime.policy_name()
            self._attach()  # claiming a consumer line is what releases a spawned feed: ticks start once we are ready
            ctl = live.ctl
            ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + LEASE_NS  # armed only now: warm-up may be slow
            self.preempt_start = realtime.preemption(self.tid)
            self.looping = True
            self.ready.set()
            self._loop(live)
        except BaseException as e:  # reported by the main thread
            self.error = e
            self.ready.set()
        finally:
            if self.preempt_start is not None:
                self.preempt_end = realtime.preemption(self.tid)
            realtime.set_other()

    def _attach(self):
        c = self.consumer = TickConsumer(self.ring_name)
        warmup.prefault(c.data)
        c.claim(start=self.start_at, backpressure=self.backpressure)

    def _loop(self, live):
        c = self.consumer
        while True:
            self.exit_state = self.host.mod.run_loop(*run_args(self.host.mod, TickView.of(c), live))
            if self.exit_state != C.LOOP_REATTACH:
                break
            c = self._reattach(c, live)

    def preempted(self):
        """Since the loop started: how often, and how long, other work held the strategy core
        (realtime.preemption; for a spinning loop every wait on the run queue is that); None where the
        kernel does not say."""
        a = self.preempt_start
        b = self.preempt_end or (realtime.preemption(self.tid) if a is not None and self.is_alive() else None)
        if a is None or b is None:
            return None
        return {"count": b[1] - a[1], "wait_ms": round((b[0] - a[0]) / 1e6, 3)}


    def _reattach(self, old, live):
        """The control plane saw a new ring under our ring's name (the feed was restarted): map
        it, claim a line (which releases a feed that waits for us) and go on. The data is
        discontinuous, so features start again, as after a gap. No recompilation."""
        ctl = live.ctl
        old.close()
        while True:
            if int(ctl[C.CTL_CMD]) == C.CMD_STOP:
                return old
            try:
                c = TickConsumer(self.ring_name)
                break
            except shm.RingError:
                time.sleep(0.01)  # (blocking, not spinning: this thread may be SCHED_FIFO)
        warmup.prefault(c.data)
        c.claim(start="oldest", backpressure=self.backpressure)
        self.host.mod.host_reset(live.state.fstate, live.state.book, live.state.ist, live.state.shared)
        ctl[C.L_GAPS] += 1
        self.consumer = c
        self.reattached += 1
        if int(ctl[C.CTL_CMD]) == C.CMD_REATTACH:
            ctl[C.CTL_CMD] = C.CMD_RUN
        return c


class MultiStrategyThread(StrategyThread):
    """The strategy thread of a run with several sources (or --record): run_loop_multi over every
    ring (app/multi_rings.py). `consumer` is the first ring's (what single-ring code looks at);
    `rings.consumers` are all of them."""

    def __init__(self, *a, rings, **kw):
        super().__init__(*a, **kw)
        self.rings = rings

    def _attach(self):
        self.rings.attach(self.start_at, self.backpressure)
        self.consumer = self.rings.consumers[0]

    def _loop(self, live):
        mod = self.host.mod
        while True:
            self.exit_state = mod.run_loop_multi(*run_multi_args(mod, self.rings.view(), live))
            if self.exit_state != C.LOOP_REATTACH:
                break
            self._reattach_changed(live)

    def _reattach_changed(self, live):
        """The control plane saw a new ring under a source's name (its feed was restarted): map the
        rings that changed, void the books as after a gap, go on. No recompilation."""
        ctl = live.ctl
        for k in self.rings.replaced():
            while True:
                if int(ctl[C.CTL_CMD]) == C.CMD_STOP:
                    return
                try:
                    self.rings.reattach(k, self.backpressure)
                    break
                except shm.RingError:
                    time.sleep(0.01)  # (blocking, not spinning: this thread may be SCHED_FIFO)
            self.reattached += 1
            ctl[C.L_GAPS] += 1
        self.consumer = self.rings.consumers[0]
        mod = self.host.mod
        mod.host_reset(live.state.fstate, live.state.book, live.state.ist, live.state.shared)
        if self.cfg.tapped:  # a gap tick into the recording too: its backtest voids the books here
            from engine.tickring import publish_gap
            tap, cst = self.rings.tap, live.state.cst
            publish_gap(tap.hdr, tap.data, tap.mask, cst[mod.CS_READ])
            cst[mod.CS_READ] += 1
        if int(ctl[C.CTL_CMD]) == C.CMD_REATTACH:
            ctl[C.CTL_CMD] = C.CMD_RUN


def _spawn_feed(cfg, ring_name, uri, run_clock=False):
    cmd = [sys.executable, "-m", "app", "feed", uri, "--ring", ring_name,
           "--capacity", str(cfg.ring_capacity), "--wait-consumers", "1", "--wait-timeout", "0", "--die-with-parent",
           "--crossed-after", f"{cfg.crossed_after:g}"]
    if run_clock:  # one of several files: paced on the clock the run sets in every file's ring
        cmd += ["--run-clock"]
    if cfg.keep_rings:
        cmd += ["--keep"]  # the feed removes its ring on exit unless told to keep it
    if cfg.quiet:
        cmd += ["--quiet"]
    # each feed the run's pace flags it honours (app/source_params.py FLAGS: the run checked them)
    from .source_params import source
    kind = source(uri).kind
    if kind == "synthetic" and "rate=" not in uri:  # (the built-in synthetic source, or a URI without a rate)
        cmd += ["--rate", f"{cfg.rate:g}"]
    if cfg.speed == 0 and kind in ("synthetic", "file"):
        cmd += ["--max"]
    elif kind == "file":
        cmd += ["--speed", f"{cfg.speed:g}"]
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # (app/live.py)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as e:
        raise RuntimeError(f"cannot start the feed process ({cmd[0]}): {e.strerror}") from None


def _first_recv(path):
    """A ring's first tick's receive time (its header, opened as every ring is: checked first)."""
    fd, _ = shm.open_checked(path)
    try:
        return int(shm.read_header_fd(fd, path)[shm.H_FIRST_RECV])
    finally:
        os.close(fd)


def _wait_ring(path, proc, timeout=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"feed process exited with status {proc.returncode} before creating {path}")
        if os.path.exists(path):
            try:
                info = ring_info.inspect(path)
                if info["producer_pid"] == proc.pid:
                    return
            except shm.RingError:
                pass
        time.sleep(0.01)
    raise RuntimeError(f"feed process did not create {path} within {timeout:.0f} s")


def default_signals_path(name):
    from engine import dirs
    return dirs.state_path("signals", f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.sig")


def load_shadow(cfg, strategy, spec):
    """A shadow's model (a directory or registry:NAME[@VERSION]), verified as the live model is:
    (directory, predictor); ValueError naming it."""
    from models.registry import resolve_model
    try:
        model_dir = resolve_model(spec)
        pred = artifact.load(model_dir, backend=cfg.backend, strategy=strategy)
        strategy.check_scale(uses_sigmoid(pred))
    except (ValueError, OSError, artifact.ArtifactError) as e:  # (ArtifactError: missing, changed, unsigned)
        raise ValueError(f"--shadow {spec}: {e}") from None
    return model_dir, pred


def load_shadows(cfg, strategy):
    """--shadow's candidates: [(name, directory, predictor)]; ValueError naming the one that
    fails (the run does not start)."""
    from .shadow import shadow_names
    return [(name, *load_shadow(cfg, strategy, spec)) for name, spec in zip(shadow_names(cfg.shadows), cfg.shadows)]


def load_model(cfg, strategy):
    """The verified model for this strategy: --model, or the strategy's default model (trained
    on the synthetic market and cached on first use)."""
    if cfg.model:
        from models.registry import resolve_model
        model_dir = resolve_model(cfg.model)  # (registry:NAME: the live link of NAME; a move reloads it)
    else:
        from models.default import default_model_dir
        model_dir = str(default_model_dir(strategy))
    if cfg.backend == "fpga-sim":
        import fpga.backend  # noqa: F401  (registers backend="fpga-sim" with models.artifact)
    pred = artifact.load(model_dir, backend=cfg.backend, strategy=strategy)
    timing = f" (measured: {', '.join(pred.notes)})" if pred.notes else ""
    exact = ("the fixed-point emulation, bit-exact with its golden model and within its proven bound of XGBoost"
             if pred.backend == "fpga-sim" else f"bit-exact with XGBoost on {pred.manifest['validation']['rows']} rows")
    log(f"model {pred.model_id} ({pred.manifest['num_trees']} trees) from {model_dir}: verified, {exact}; "
        f"back end {pred.backend}{timing}")
    return pred, model_dir


RELOAD_WAIT_S = 30.0  # a reload waits this long for one in progress (a stalled file system), then is refused
_reload_lock = threading.Lock()  # one reload at a time: each numbers, publishes and reports its own generation


def reload_model(cfg, strategy, ctl, loaded, swaps):
    """SIGHUP or /control/reload: load, verify and validate the model off the hot path, then publish
    its address and a new generation; the loop adopts it between two ticks. A bad artifact (or one
    trained for another strategy) changes nothing. Returns this reload's own record (also appended
    to `swaps`): concurrent reloads each report theirs."""
    if not _reload_lock.acquire(timeout=RELOAD_WAIT_S):
        res = {"ok": False, "error": f"another reload is still in progress after {RELOAD_WAIT_S:g} s; try again"}
        log(f"reload refused: {res['error']}")
        swaps.append(res)
        return res
    try:
        res = _reload(cfg, strategy, ctl, loaded)
        swaps.append(res)
        return res
    finally:
        _reload_lock.release()


def _reload(cfg, strategy, ctl, loaded):
    t0 = time.monotonic()
    release_left(ctl, loaded)
    try:
        pred, model_dir = load_model(cfg, strategy)
        if uses_sigmoid(pred) != uses_sigmoid(loaded[0]):
            pred.release()
            raise ValueError(f"{model_dir}: objective {pred.manifest.get('objective')} scores on another scale "
                             f"than the running {loaded[0].manifest.get('objective')}; restart the engine to "
                             "change it")
    except Exception as e:  # noqa: BLE001 - any failure keeps the running model
        log(f"reload refused, still running generation {int(ctl[C.CTL_MODEL_GEN])}: {e}")
        return {"ok": False, "error": str(e)}
    gen = pred.generation = int(ctl[C.CTL_MODEL_GEN]) + 1
    loaded.append(pred)  # the old library stays mapped until the loop has provably left it (release_left)
    ctl[C.CTL_MODEL_ADDR] = pred.addr
    ctl[C.CTL_MODEL_ROWS] = pred.rows_addr
    t_pub = time.monotonic_ns()
    ctl[C.CTL_MODEL_GEN] = gen  # after the addresses: the loop reads generation, then addresses
    while int(ctl[C.L_MODEL_GEN]) != gen and time.monotonic_ns() - t_pub < 1_000_000_000:
        time.sleep(0.0001)
    adopted = int(ctl[C.L_MODEL_GEN]) == gen
    lag_us = (int(ctl[C.L_SWAP_NS]) - t_pub) / 1e3 if adopted else None
    release_left(ctl, loaded)
    log(f"model generation {gen} ({pred.model_id}, {pred.backend}) prepared off the hot path in "
        f"{(t_pub / 1e9 - t0) * 1e3:.0f} ms; " + (f"adopted by the loop {lag_us:.1f} us after publication"
                                                   if adopted else "NOT adopted within 1 s"))
    return {"ok": adopted, "generation": gen, "model": pred.model_id, "backend": pred.backend,
            "prepare_ms": round((t_pub / 1e9 - t0) * 1e3, 1), "adopted_after_us": lag_us}


def release_left(ctl, loaded):
    """Unload every model generation older than the one the loop reports it adopted (L_MODEL_GEN).
    The loop stores that word only after it took the new address, and addresses only move forward
    (a re-entered loop reads the newest), so it never calls an older one again; the newest one
    published always stays. Until the loop reports (it has not started), nothing is released."""
    adopted = int(ctl[C.L_MODEL_GEN])
    for p in [p for p in loaded[:-1] if p.generation < adopted]:
        loaded.remove(p)
        p.release()


def check_outputs(cfg, sig_path, parquet_out):
    """Every file the run will write can be written: checked before anything is created or
    started, so a bad path leaves nothing behind (an OutputError naming it)."""
    from engine.outputs import OutputError, check_writable
    check_writable(sig_path, "signals")
    if parquet_out:
        check_writable(parquet_out, "the signal table")
    if cfg.hlog:
        check_writable(cfg.hlog, "the latency log")
    if cfg.http and cfg.token_file:
        if os.path.isdir(cfg.token_file):
            raise OutputError(cfg.token_file, "the control token", "Is a directory")
        if not os.path.exists(cfg.token_file):  # created on first use
            check_writable(cfg.token_file, "the control token")
        else:  # one that others can read (or a link) is refused now, not after the model loaded
            from .daemon import _open_token
            fd = _open_token(cfg.token_file)
            if fd is not None:
                os.close(fd)


def _drain_signals(sring, buf, slog):
    """Move pending signals from the ring to the signal file; returns how many."""
    n = sigring.drain(sring.hdr, sring.data, sring.mask, buf)
    slog.write(buf[:n])
    return n


def check_ports(cfg):
    """The control plane's ports must be free before anything is created."""
    import socket
    wanted = []
    if cfg.http:
        wanted.append(("--http", cfg.http[0], cfg.http[1]))
    if cfg.pub and cfg.pub.startswith("tcp://"):
        host, _, port = cfg.pub[6:].rpartition(":")
        if port.isdigit():
            host = host.strip("[]")
            wanted.append(("--pub", "0.0.0.0" if host in ("", "*") else host, int(port)))
    for flag, host, port in wanted:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"{flag} {host}:{port}: {e.strerror} (another engine? pick another port)") from None
        finally:
            s.close()


def _trust_ring_owner(user):
    """--ring-owner: rings this user owns are trusted too (a feed handler running as another user)."""
    import pwd
    try:
        uid = int(user) if str(user).isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"--ring-owner {user}: no such user") from None
    shm.trust_uid(uid)


def feed_list(cfg):
    """The --feed sources of a run, as a list (one `--feed` is a string, several a list)."""
    return [cfg.feed] if isinstance(cfg.feed, str) else list(cfg.feed or [])


def _feed_uri(cfg, strategy=None, uri=None):
    """The source a feed process reads, with the book levels the strategy needs."""
    from feeds.sources import as_uri
    uri = as_uri(uri or (feed_list(cfg) or [None])[0] or f"synthetic://?instruments={cfg.instruments}&seed={cfg.seed}")
    return strategy.source_uri(uri) if strategy is not None else uri


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
        self.isolation_text = None
        self.procs, self.rings, self.recorder, self.tap, self.paper = [], None, None, None, None
        self._tap_cap = None
        self.shadows, self.shadow_models, self.shadow_results = None, [], None
        self.drift, self.drift_result = None, None
        self.running = False
        self.unpriced = set()  # (risk_table: instruments a gross limit leaves unpriced, said once)
        self.abnormal, self.unread = None, 0  # (short reason, words): why the run ended early; ticks never read
        self.t_start = self.t_stop = time.monotonic()

    # -- 1. checks and preparation: nothing created yet --

    def check_request(self):
        """The options, the outputs' paths and the strategy file: refused before anything starts."""
        cfg = self.cfg
        from engine import isolation
        for line in isolation.recover():  # what killed --isolate runs moved (this shell, perhaps): back first
            log(line)
        if cfg.ring_owner:
            _trust_ring_owner(cfg.ring_owner)
        if cfg.core is not None:
            realtime.check_core(cfg.core)
        elif cfg.isolate:
            raise ValueError("--isolate needs --core N: the core to keep for the strategy thread")
        self.choice = waits.choose("other" if not cfg.realtime else cfg.policy, cfg.wait, cfg.core, cfg.priority)
        if cfg.conflate not in ("auto", "on", "off"):
            raise ValueError(f"--conflate must be auto, on or off, got {cfg.conflate!r}")
        if cfg.conflate_max < 1:
            raise ValueError(f"conflate_max must be >= 1, got {cfg.conflate_max}")
        if not 0 <= cfg.conflate_warn <= 1:
            raise ValueError(f"--conflate-warn must be a share between 0 and 1, got {cfg.conflate_warn:g}")
        if not cfg.crossed_after >= 0:
            raise ValueError(f"--crossed-after must be >= 0 seconds, got {cfg.crossed_after:g}")
        if not 1 <= cfg.priority <= 99:
            raise ValueError(f"--priority must be 1..99 for SCHED_FIFO, got {cfg.priority}")
        if cfg.warm_every < 0:
            raise ValueError(f"--warm-every must be >= 0, got {cfg.warm_every}")
        check_name(cfg.name)
        if cfg.kill_file is not None:
            from . import kill_file
            kill_file.check(cfg.kill_file)
        if cfg.duration is not None and not (math.isfinite(cfg.duration) and cfg.duration > 0):
            raise ValueError(f"--duration must be a finite number of seconds > 0, got {cfg.duration!r}")
        if not (math.isfinite(cfg.stall_exit) and cfg.stall_exit >= 0):
            raise ValueError(f"--stall-exit must be a finite number of seconds >= 0, got {cfg.stall_exit!r}")
        sig_path = cfg.signals_out or default_signals_path(cfg.name)
        parquet_out = None
        if sig_path.endswith(".parquet"):  # the raw log goes next to it; the table is written at the end
            parquet_out, sig_path = sig_path, sig_path[:-len(".parquet")] + ".sig"
        check_outputs(cfg, sig_path, parquet_out)
        if cfg.record:
            from engine.outputs import check_writable
            check_writable(cfg.record, "the recording (--record)")
        if cfg.paper:  # (its report is written at the end: a path that cannot take it is refused now)
            from engine.outputs import check_writable
            self.paper_out = cfg.paper_out or (sig_path.rsplit(".", 1)[0] + ".paper")
            check_writable(self.paper_out, "the paper trading report (--paper-out)", directory=True)
        if cfg.pub_clients:
            from .zauth import read_clients
            read_clients(cfg.pub_clients)  # (a bad --pub-clients file refuses the run now; the plane reads it again)
        self.sig_path, self.parquet_out = sig_path, parquet_out
        from engine.strategy_build import load_host
        self.host = load_host(cfg.strategy, cfg.params, cfg.universe)  # a broken strategy file fails here, before anything
        self.strat = self.host.strategy

    def open_input(self):
        """The tick ring to attach to, or the source the feed process will read (opened once here,
        so a bad URI fails now): its depth, instruments, whether it ends, and conflation."""
        from feeds.sources import Synthetic, open_source
        cfg = self.cfg
        src = None
        self.labels = ["ring"]
        if cfg.ring:
            if cfg.feed:
                raise ValueError("--ring attaches to an existing tick ring; --feed spawns a feed: give one of them")
            self.ring_name = cfg.ring
            self.ring_names, self.feed_uris, self.id_blocks, self.src_finite = [cfg.ring], [None], None, [True]
            self.ordered = [False]
            probe = TickConsumer(self.ring_name)  # it must exist and be a tick ring (clear error otherwise)
            self.levels = int(getattr(probe, "depth", 0))
            self.n_inst = MAX_INSTRUMENTS  # whatever the producer publishes
            self.feed_uri = None
            # a ring ends when its producer marks it finished (H_STATE, as `engine feed` does at the end of its
            # source or when stopped): so do we, as with a spawned file feed. A producer that dies without
            # marking it is a feed that is down: we wait for a new ring under the name.
            self.finite = True
        else:
            from .multi_rings import id_blocks, labels, ring_names
            uris = [_feed_uri(cfg, self.strat, u) for u in feed_list(cfg)] or [_feed_uri(cfg, self.strat)]
            if len(set(uris)) != len(uris):
                raise ValueError(f"--feed {next(u for u in uris if uris.count(u) > 1)} is given twice")
            srcs = []
            for u in uris:
                srcs.append(open_source(u))  # a bad URI fails here, before anything is created
                if hasattr(srcs[-1], "sock"):
                    srcs[-1].sock.close()  # the feed process listens, not us
            self.feed_uris, self.feed_uri = uris, uris[0]
            self.labels = labels(uris)
            self.ring_names = ring_names(cfg.name, len(uris))
            self.ring_name = self.ring_names[0]
            depths = [int(getattr(x, "depth", 0)) for x in srcs]
            self.levels = max(depths)
            if len(srcs) > 1 and self.strat.depth > min(depths):  # every source must carry the book it reads
                k = depths.index(min(depths))
                raise ValueError(f"--feed {uris[k]}: carries {depths[k]} book levels a side and strategy "
                                 f"{self.strat.path} reads DEPTH {self.strat.depth}")
            self.id_blocks = id_blocks(srcs)
            from .multi_rings import fixed_instruments
            self.srcs, self.fixed = srcs, [fixed_instruments(x) for x in srcs]
            src = srcs[0]
            if len(srcs) == 1:
                self.n_inst = src.params.instruments if isinstance(src, Synthetic) else MAX_INSTRUMENTS
            else:  # the ids every block covers (dense from 0: all of them when a source finds its instruments)
                self.n_inst = int((self.id_blocks[0] + self.id_blocks[1]).max())
            # a source with an end (a file, a counted simulation) ends the run once it is played (every one of them)
            self.src_finite = [not x.live and (not isinstance(x, Synthetic) or x.params.count > 0) for x in srcs]
            # files: read in receive-time order on the run's one clock (live sources: as they arrive)
            self.ordered = [not x.live and not isinstance(x, Synthetic) for x in srcs]
            self.finite = all(self.src_finite)
        # an incomplete tick file (a killed recorder): its unchecked records, in the summary too
        self.input_warnings = [] if cfg.ring else [w for x in srcs for w in getattr(getattr(x, "file", None),
                                                                                     "warnings", [])]
        for w in self.input_warnings:
            log(f"warning: {w}")
        # A file can wait, a market cannot: a file feed waits for our loop (lossless, every tick scored);
        # live sources never block, and the loop conflates when it falls behind them.
        self.file_feed = not cfg.ring and all(not x.live and not isinstance(x, Synthetic) for x in srcs)
        self.conflate = cfg.conflate == "on" or (cfg.conflate == "auto" and not self.file_feed)
        # several rings, or a recording of what the loop read: run_loop_multi (one ring, no recording: run_loop)
        self.multi = len(self.ring_names) > 1
        self.multi_loop = self.multi or cfg.tapped

    def check_machine(self):
        """engine doctor for the strategy core: warnings logged; with --strict a fail stops the run."""
        cfg = self.cfg
        if not cfg.doctor:
            return
        from .doctor import run_checks
        res = run_checks(cfg.core, cfg.priority)
        bad = [x for x in res if x["status"] in ("warn", "fail")]
        fails = [x for x in bad if x["status"] == "fail"]
        if bad:
            log(f"doctor: {len(fails)} fail, {len(bad) - len(fails)} warn: " +
                "; ".join(f"{x['check']} ({x['status']})" for x in bad) +
                f" - `engine doctor{'' if cfg.core is None else f' --core {cfg.core}'}` says why")
        if fails and cfg.strict:
            raise RuntimeError("--strict: engine doctor fails: " + "; ".join(f"{x['check']}: {x['evidence']}" for x in fails))

    def check_free(self):
        """No live engine owns our rings' names, and the control plane's ports are free."""
        cfg = self.cfg
        own = [f"{cfg.name}.{x}" for x in ("ctl", "signals")] + ([] if cfg.ring else self.ring_names)
        if cfg.tapped:
            own.append(f"{cfg.name}.tap")
        for name in own:  # refuse a live owner (engine first) before creating anything
            shm.check_owner(shm.ring_path(name))
        if not cfg.ring:  # the feed processes make the tick rings: what memory cannot hold is refused now
            need = len(self.ring_names) * shm.ring_bytes(64, cfg.ring_capacity)
            need += shm.ring_bytes(64, self.tap_capacity()) if cfg.tapped else 0
            shm.check_room(shm.ring_path(self.ring_name), need, "--ring-capacity (feed.ring_capacity)")
        check_ports(cfg)

    def tap_capacity(self):
        """--record: the tap ring's slots. The loop never waits for its recorder (a lap is a gap in
        the file), so a replay of tick files, read flat out, gets a tap that holds all of it (up to
        TAP_WHOLE_MAX, in a quarter of the room /dev/shm has): a recorder stalled on a busy disk is
        then late, never lapped (284k ticks went by in 0.3 s, and one whole-suite run lost them)."""
        if self._tap_cap is None:
            from feeds.sources import TickFileSource
            cap = max(self.cfg.ring_capacity, TAP_CAPACITY)
            srcs = getattr(self, "srcs", None) or []
            if not self.cfg.ring and srcs and all(isinstance(x, TickFileSource) for x in srcs):
                want = min(1 << max(sum(len(x.file) for x in srcs) - 1, 1).bit_length(), TAP_WHOLE_MAX)
                tap_dir = os.path.dirname(shm.ring_path(f"{self.cfg.name}.tap"))
                if want > cap and shm.ring_bytes(64, want) <= shm.room(tap_dir)[0] // 4:
                    cap = want
            self._tap_cap = cap
        return self._tap_cap

    def start_table(self):
        """(names, records) of the run's instruments known at start, in id order, named as the run's
        instrument table names them (app/multi_rings.py: venue-qualified with several sources, a
        name two sources share qualified by its source's label) ([] with --ring or for sources
        that find theirs as they read: the control plane fills in their multipliers as they come,
        risk_table)."""
        from engine.instruments import table
        from engine.universe import run_name
        if self.cfg.ring:
            return [], []
        names, recs, seen = [], [], set()
        offsets = self.id_blocks[0] if self.id_blocks is not None else [0]
        for k, src in enumerate(self.srcs):
            while len(names) < offsets[k]:
                names.append("")
                recs.append(None)
            for n, r in zip(src.instruments, table(src.instruments, getattr(src, "specs", None))):
                g = run_name(n, r["venue"], self.labels[k]) if self.multi else n
                if self.multi and g in seen:
                    g = f"{g}@{self.labels[k]}"
                seen.add(g)
                names.append(g)
                recs.append(r)
        return names, recs

    def risk_table(self, specs):
        """The instruments' records as the control plane learns them: each multiplier the risk gate
        did not have yet is set (a float64 word the loop reads per decision: one store)."""
        hs = getattr(self, "hs", None)
        if hs is not None and specs:
            for sym in set(risk.set_multipliers(hs.rlim, specs)) - self.unpriced:
                self.unpriced.add(sym)
                log(f"warning: {sym} is in another currency than the instruments --risk-max-gross adds up: "
                    "it is refused new exposure (money is never added across currencies)")
            if self.shadows is not None:
                self.shadows.multipliers_from(specs)

    def bind(self):
        """A UNIVERSE strategy's members bound to the run's instruments, known at start (ids); else None.
        Sources that find their instruments as they read cannot be bound before the first tick:
        refused, naming the source."""
        if not self.strat.universe:
            return None
        if self.cfg.ring or any(fixed is None for fixed in self.fixed):
            what = "--ring" if self.cfg.ring else self.feed_uris[self.fixed.index(None)]
            raise ValueError(f"{what}: names its instruments only as it reads them, and strategy {self.strat.path} "
                             "binds its UNIVERSE before the run starts: record it (engine record / --record) and run "
                             "the recording (--feed tickfile:FILE)")
        names, recs = self.start_table()
        venues = [r["venue"] if r is not None else "" for r in recs]
        return self.strat.bind_universe(names, venues, "the run's sources")

    def load_model(self):
        """The strategy's feature state, and its verified model on the right scale."""
        self.bound = self.bind()
        self.hs = self.host.state(self.n_inst, self.levels, self.bound)  # DEPTH beyond the stream's fails here
        self.limits = risk_limits(self.cfg)
        names, specs = self.start_table()
        risk.configure(self.hs.rlim, self.hs.rg, names, specs, self.limits)  # (an unknown --risk-instrument fails here)
        log(self.limits.describe())
        self.pred, self.model_dir = load_model(self.cfg, self.strat)
        self.strat.check_scale(uses_sigmoid(self.pred))
        self.loaded = [self.pred]
        self.shadow_models = load_shadows(self.cfg, self.strat)

    def compile(self):
        """The loop's configuration words, and the strategy compiled into the live loop."""
        cfg, host, strat = self.cfg, self.host, self.strat
        self.cfg_arr = host.loop_cfg(exit_on_eof=self.finite, warm_every=cfg.warm_every,
                                     sigmoid=uses_sigmoid(self.pred), wait=self.choice.wait, conflate=self.conflate,
                                     conflate_max=cfg.conflate_max)
        log(f"policy: {self.choice.describe()}; conflation {'on' if self.conflate else 'off'}"
            + ("; the file feed waits for the loop (lossless)" if self.file_feed else ""))
        t1 = time.monotonic()
        if self.multi_loop:
            from .multi_rings import compile_multi
            self.cfg_arr[host.mod.CFG_TAP] = 1.0 if cfg.tapped else 0.0
            self.cfg_arr[host.mod.CFG_MERGE_WINDOW_NS] = round(cfg.merge_window_us * 1000)
            if cfg.merge_window_us and len(self.ring_names) > 1:
                log(f"merge window {cfg.merge_window_us:g} us: the oldest ready tick waits that long for a quiet source")
            compile_multi(host, len(self.ring_names))
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
        cfg = self.cfg
        if cfg.core is not None:
            locks.acquire("core", cfg.core, cfg.name)
        for rn in self.ring_names:
            locks.acquire("ring", shm.ring_path(rn), cfg.name)
        self.ctl_blk = C.ControlBlock(f"{cfg.name}.ctl")
        self.created.append(self.ctl_blk.path)
        self.sring = sigring.SignalRing(f"{cfg.name}.signals")
        self.created.append(self.sring.path)
        if not cfg.ring:
            for rn in self.ring_names:
                self.created += [shm.ring_path(rn), shm.ring_path(rn) + ".instruments"]
        if self.multi:  # the run's instrument table (global ids), beside its rings
            self.table_path = shm.ring_path(f"{cfg.name}.instruments")
            self.created.append(self.table_path)
        if cfg.tapped:  # what the loop reads, published for the recorder and the paper trader
            from engine.tickring import TickRing
            self.tap = TickRing(f"{cfg.name}.tap", self.tap_capacity(), depth=self.levels)
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
            _unlink(record_path(self.sig_path))

    def isolate_core(self):
        """--isolate: other tasks, IRQs and unbound kernel work off the strategy core while we run,
        swept again every ISOLATE_SWEEP_S for tasks born since (engine/isolation.py)."""
        from engine import isolation
        cfg = self.cfg
        if not cfg.isolate:
            return
        self.isolation_stop, self.isolation_keeper = threading.Event(), None
        iso = self.isolation = isolation.Isolation(cfg.core, cfg.name)  # set first: stop() undoes a partial sweep
        iso.sweep()
        log(f"isolate: {iso.describe()}")
        self.isolation_text = iso.describe()

        def keep():
            while not self.isolation_stop.wait(ISOLATE_SWEEP_S):
                try:
                    iso.sweep()
                except OSError as e:  # the record could not be saved (a full disk): moves stay in memory
                    log(f"isolate: sweep failed ({e}); what was moved is still put back at exit")
                    return
        self.isolation_keeper = threading.Thread(target=keep, name="isolation", daemon=True)
        self.isolation_keeper.start()

    def _restore_isolation(self):
        self.isolation_stop.set()
        if self.isolation_keeper is not None:
            self.isolation_keeper.join()
        done, kept = self.isolation.restore()
        log(f"isolate: put back {done} tasks and IRQs" + (f"; {kept} changed by someone else since, left as they are"
                                                           if kept else ""))

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
        if not self.cfg.ring:
            for rn, uri, ordered in zip(self.ring_names, self.feed_uris, self.ordered):
                self.procs.append(_spawn_feed(self.cfg, rn, uri, run_clock=ordered and self.multi))
                self.proc = self.procs[0]
                _wait_ring(shm.ring_path(rn), self.procs[-1])
            self._say_clock()

    def _say_clock(self):
        """Files paced on the run's one clock that start far apart: the later ones wait the time
        between them (at --speed), which is said, with what to do instead."""
        speed = self.cfg.speed
        if not self.multi or not speed:
            return
        firsts = {}
        for rn, uri, ordered in zip(self.ring_names, self.feed_uris, self.ordered):
            t = _first_recv(shm.ring_path(rn)) if ordered else 0
            if t:
                firsts[uri] = t
        if len(firsts) > 1:
            last = max(firsts, key=firsts.get)
            wait = (firsts[last] - min(firsts.values())) / 1e9 / speed
            if wait > 60:
                log(f"warning: the files start {(firsts[last] - min(firsts.values())) / 3.6e12:,.1f} h apart in their "
                    f"receive times: at --speed {speed:g} the run waits {wait / 3600:,.1f} h for {last}'s first tick "
                    "(one clock for all the files); --max reads them in the same order without waiting")

    def start_thread(self):
        """The strategy thread: ready once pinned, warm and attached to the ring."""
        cfg, choice = self.cfg, self.choice
        start = "now" if cfg.ring else "oldest"
        if self.multi_loop:
            from .multi_rings import MultiRings
            offsets, blocks = self.id_blocks if self.id_blocks is not None else (
                np.zeros(1, np.int64), np.full(1, MAX_INSTRUMENTS, np.int64))  # (--ring: the ring's own ids)
            self.rings = MultiRings(self.ring_names, self.labels, offsets, blocks, self.host.mod.RS_WIDTH, tap=self.tap,
                                    ordered=self.ordered if self.multi else None, rs_ordered=self.host.mod.RS_ORDERED)
            if cfg.record:
                from .run_record import TapRecorder
                self.recorder = TapRecorder(self.tap, cfg.record, lambda: self.rings.table(self.multi),
                                            source=" + ".join(u or f"ring:{r}" for u, r in
                                                              zip(self.feed_uris, self.ring_names)),
                                            depth=self.levels)
                self.recorder.start()  # its consumer line first: the loop's first tick is recorded
            if cfg.paper:
                from .cli.exec_options import paper_exec
                from .daemon import kill_switch
                from .paper import PaperTrader
                self.paper = PaperTrader(self.tap, self.n_inst, lambda: self.rings.table(self.multi)[1], self.levels,
                                         paper_exec(cfg.paper_exec), self.strat.values,
                                         kill=lambda code: kill_switch(self.ctl_blk.hdr, code, cfg.name),
                                         loss=cfg.kill_loss, drawdown=cfg.kill_drawdown)
                self.paper.start()
            self.start_shadows()
            if cfg.drift:
                from .drift_monitor import DriftMonitor
                self.drift = DriftMonitor(self.tap, self.host, self.n_inst, self.levels, self.bound,
                                          lambda: self.loaded[-1], cfg.drift_half_life)
                self.drift.start()
            thread = self.thread = MultiStrategyThread(cfg, self.ring_name, start, self.loop_args, self.pred, self.host,
                                                       choice, backpressure=True, rings=self.rings)
        else:
            thread = self.thread = StrategyThread(cfg, self.ring_name, start, self.loop_args,
                                                  self.pred, self.host, choice,
                                                  backpressure=True)  # honoured by file feeds only
        thread.conflate = self.conflate
        thread.start()
        thread.ready.wait()
        if thread.error is not None and not thread.looping:  # (the loop may already have stopped: the
            raise thread.error                                 # strategy raised at its first tick)
        from .daemon import LeaseBridge  # (the loop runs: its lease is renewed until the control plane's thread is)
        self.bridge = LeaseBridge(self.ctl_blk.hdr, self.sring.hdr, LEASE_NS, DRAIN_PERIOD_S, thread)
        self.running = True
        feed = (f"feed pid{'s' if len(self.procs) > 1 else ''} {', '.join(str(p.pid) for p in self.procs)}"
                if self.procs else f"ring {shm.ring_path(self.ring_name)}")
        log(f"running: core {thread.core if thread.core is not None else 'unpinned'}, {thread.policy}, "
            f"{feed}, signals -> {self.sig_path}")
        if thread.policy == "SCHED_FIFO" and choice.wait.name == "spin":
            note = realtime.rt_throttle_note()
            if note:
                log(f"warning: {note}")
                self.notes.append(note)

    def start_shadows(self):
        """--shadow: each candidate's thread on the tap, its signal file beside the live one; and
        the run's Shadows, which `engine ctl shadow add|remove` change while it runs."""
        from .shadow import Shadows
        if self.shadow_models and not self.slog.regular:
            raise ValueError(f"--shadow writes its signals beside the run's signal file, and {self.sig_path} is not "
                             "a regular file: give --signals-out FILE")
        if self.slog.regular:
            self.shadows = Shadows(self._new_shadow, lambda spec: load_shadow(self.cfg, self.strat, spec))
            for name, model_dir, pred in self.shadow_models:
                self.shadows.start(name, model_dir, pred)

    def _new_shadow(self, name, model_dir, pred, start):
        from .shadow import Shadow, shadow_path
        names, specs = self.start_table() if start == "oldest" else self.rings.table(self.multi)
        sh = Shadow(self.tap, name, model_dir, pred, self.host, self.n_inst, self.levels, self.bound, names, specs,
                    self.limits, shadow_path(self.sig_path, name), start)
        log(f"shadow {name}: model {pred.model_id} from {model_dir} -> {sh.path}"
            + (" (from the next tick on)" if start == "now" else ""))
        return sh

    def serve(self):
        """The control plane (app/daemon.py) until the run ends: drains signals, serves HTTP
        and zmq, renews the loop's lease, restarts a live feed that died."""
        from .daemon import PlaneInputs, run_control_plane
        cfg, ring_name, feed_uri = self.cfg, self.ring_name, self.feed_uri
        self.t_start = time.monotonic()
        ctl = self.ctl_blk.hdr
        px = PlaneInputs(cfg=cfg, ctl_blk=self.ctl_blk, sring=self.sring, slog=self.slog, drain_buf=self.drain_buf,
                         thread=self.thread, proc=self.proc, ring_name=ring_name, stop_event=self.stop_event,
                         reload_event=self.reload_event, loaded=self.loaded, swaps=self.swaps,
                         model_dir=self.model_dir,
                         reload=lambda: reload_model(cfg, self.strat, ctl, self.loaded, self.swaps),
                         respawn=(lambda: _spawn_feed(cfg, ring_name, feed_uri))
                         if not cfg.ring and not self.finite else None,
                         deadline=self.t_start + cfg.duration if cfg.duration else None,
                         lease_ns=LEASE_NS, drain_period=DRAIN_PERIOD_S, sources=self._sources(),
                         risk_table=self.risk_table, paper=self.paper, shadows=self.shadows, drift=self.drift,
                         bridge=self.bridge)
        self.plane = run_control_plane(px)
        self.proc = px.proc
        if px.sources:
            self.procs = [x.proc for x in px.sources]
        if cfg.ring and self.thread.exit_state == C.LOOP_EOF:
            log(f"ring {shm.ring_path(ring_name)}: its producer finished and every tick was read; stopping")

    def _sources(self):
        """Several sources (or --record): one FeedSource each, for the control plane (app/daemon.py)."""
        from .daemon import FeedSource
        if not self.multi_loop:
            return None
        cfg, out = self.cfg, []
        for k, (label, rn, uri) in enumerate(zip(self.labels, self.ring_names, self.feed_uris)):
            proc = self.procs[k] if k < len(self.procs) else None
            live = not cfg.ring and not self.src_finite[k]
            out.append(FeedSource(label=label, uri=uri, ring_name=rn, proc=proc, index=k,
                                  respawn=(lambda rn=rn, uri=uri: _spawn_feed(cfg, rn, uri)) if live else None))
        return out

    # -- 3. stop: always, to the end --

    def _step(self, fn, *args):
        """One cleanup step: a failure is logged and reported after the rest is cleaned up."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - reported after the rest is cleaned up
            log(f"error while stopping: {e}")
            self.cleanup_errors.append(e)

    def stop(self):
        """Cleanup always runs to the end, whatever fails on the way (each step on its own)."""
        from engine import locks
        step, proc, thread, slog = self._step, self.proc, self.thread, self.slog
        procs = self.procs if len(self.procs) > 1 else ([proc] if proc is not None else [])
        self.t_stop = time.monotonic()
        if self.ctl_blk is not None:
            self.ctl_blk.hdr[C.CTL_CMD] = C.CMD_STOP
        if self.bridge is not None:
            self.bridge.stop()
        if self.plane is not None:
            step(self.plane.note_feed_exit)  # (before we signal it: an exit of its own, not ours)
            self.source_feeds = {w.label: w.feed_status() for w in self.plane.feeds}  # (before we stop them)
        for p in procs:
            if p.poll() is None:
                step(p.send_signal, signal.SIGTERM)  # it exits while we drain and summarise
        if thread is not None:
            thread.join(timeout=0.2 if self.plane is not None and self.plane.abnormal else 2.0)  # (hung: it never will)
            step(self._count_unread)
        if self.recorder is not None:
            step(self.recorder.finish, not thread.is_alive() if thread is not None else True)
        if self.plane is not None:
            step(self.plane.finish)  # the last signals (file and zmq) and the last latency interval
        elif slog is not None:
            step(self._drain_rest)
        if self.paper is not None:
            step(self._finish_paper)  # (after the last signals reached it)
        if self.shadows is not None:
            step(lambda: setattr(self, "shadow_results", self.shadows.finish() or None))
        if self.drift is not None:
            step(lambda: setattr(self, "drift_result", self.drift.finish(
                self.sig_path if slog is not None and slog.regular else None)))  # (RUN.sig.drift.json)
        self.abnormal = self._abnormal_end()
        if slog is not None:
            step(slog.close, self.abnormal[0] if self.abnormal else None)
            if not self.running and not slog.count and slog.regular:
                step(_unlink, self.sig_path)  # the run never started: no empty signal file left behind
        for p in procs:
            step(_stop_feed, p)
        if self.isolation is not None:
            step(self._restore_isolation)
        if thread is not None and thread.consumer is not None and not thread.is_alive():
            step(self.rings.close if self.rings is not None else thread.consumer.close)  # (a hung loop still
            # reads the rings' memory: they stay mapped until we exit)
        if not self.cfg.keep_rings:
            for p in self.created:
                step(_unlink, p)
        step(realtime.munlockall)
        step(locks.release_all)

    def _count_unread(self):
        """Ticks the loop never read: the ring's write cursor minus the loop's read cursor, now."""
        cs = self.rings.consumers if self.rings is not None else [self.thread.consumer]
        if self.running:
            self.unread = sum(max(0, int(c.hdr[shm.H_WRITE]) - int(c.hdr[c.slot_base + shm.C_CURSOR]))
                              for c in cs if c is not None)

    def _abnormal_end(self):
        """Why the run ended early, if it did: (a short reason for the signal file's header, the
        words for the summary); None for a run that ended as asked (duration, signal, end of input)."""
        thread, plane = self.thread, self.plane
        if thread is None or not self.running:
            return None
        if thread.error is not None:
            e, path = thread.error, self.strat.path
            said = f"{e}" if str(e).startswith(path) else f"strategy {path} raised {type(e).__name__}: {e}"  # (--check)
            return f"raised {type(e).__name__}", f"the strategy loop stopped: {said}"
        if plane is not None and plane.abnormal:
            return plane.abnormal
        if thread.exit_state == C.LOOP_LEASE_EXPIRED:
            return ("lease expired", f"the strategy loop stopped itself: the control thread did not renew its lease "
                                     f"for {LEASE_NS / 1e9:.0f} s while the loop ran (starved or hung?)")
        return None

    def _drain_rest(self):
        while _drain_signals(self.sring, self.drain_buf, self.slog):
            pass

    # -- 4. the summary --

    def result(self):
        """The run's RunResult; the thread's error or the first cleanup error raised instead."""
        thread, slog, sig_path = self.thread, self.slog, self.sig_path
        if self.cleanup_errors:
            raise self.cleanup_errors[0]
        warnings = list(self.input_warnings) + list(getattr(self.plane, "warnings", []))
        error = None
        if slog.error is not None:
            error = str(slog.error)
            warnings.append(f"signal file {sig_path} is incomplete: the writer stopped at record {slog.count:,} "
                            f"({slog.error.reason}); {slog.unwritten:,} records not written (marked in its header: "
                            "`engine signals show` says so)")
        if getattr(self.plane, "drain_stuck", False):
            late = self.paper.after_end if self.paper is not None else 0
            warnings.append(f"the drain thread was stuck writing {sig_path} at the end: the last signals are not in it"
                            + (" nor in the paper trading report" if self.paper is not None else "")
                            + (f" ({late:,} reached the paper trader after its end)" if late else ""))
        hl = getattr(self.plane, "hlog", None)
        if hl is not None and hl.error is not None:
            warnings.append(f"latency log {hl.path} is incomplete after {hl.intervals} intervals: {hl.error.reason}")
            error = error or str(hl.error)
        if self.parquet_out:
            sig_path, error = self._write_table(sig_path, error, warnings)
        sources = self.plane.source_status() if self.plane is not None else None
        for label, st in (sources or {}).items():  # each feed as it was before the run stopped it
            st["feed"] = getattr(self, "source_feeds", {}).get(label, st["feed"])
            st["ready"] = st["feed"] in ("ok", "finished")
        record = self.recorder.summary() if self.recorder is not None else None
        if record is not None:
            if record["error"]:
                error = error or record["error"]
                warnings.append(f"recording {record['out']} is incomplete: {record['error']}")
            elif record["gaps"]:
                warnings.append(f"recording {record['out']}: the recorder fell a tap ring behind the loop and lost "
                                f"{record['lost']:,} ticks in {record['gaps']:,} gaps (marked in the file): its "
                                "backtest is not this run's")
        dr = self.drift_result or {}
        if dr.get("record_error"):
            warnings.append(f"drift record not written: {dr['record_error']}")
        if dr.get("lost"):
            warnings.append(f"drift: the monitor fell a tap ring behind the loop {dr['gaps']:,} times and never binned "
                            f"{dr['lost']:,} ticks: its figures are of part of the run")
        pp = getattr(self, "paper_result", None)
        if pp is not None and pp.get("unmatched_signals"):
            warnings.append(f"paper trading: {pp['unmatched_signals']:,} signals name ticks it never read (it read "
                            f"{pp['ticks_read']:,}): they are not in its figures")
        if pp is not None and (pp["gaps"] or pp["error"] or pp["online"]["late_orders"]):
            warnings.append("paper trading: " + (f"stopped: {pp['error']}; " if pp["error"] else "")
                            + (f"it fell a tap ring behind the loop {pp['gaps']:,} times (ticks lost): its figures are "
                               "not the run's; " if pp["gaps"] else "")
                            + (f"{pp['online']['late_orders']:,} orders came after their tick was simulated "
                               "(conflation held their decisions): the live figures differed from the end's"
                               if pp["online"]["late_orders"] else "").rstrip("; "))
        for sh in self.shadow_results or []:
            if sh["error"] or sh["gaps"]:
                warnings.append(f"shadow {sh['name']}: " + (f"stopped: {sh['error']}" if sh["error"] else
                                f"it fell a tap ring behind the loop {sh['gaps']:,} times (ticks lost): its signals "
                                "are not the recording's backtest"))
        c = self.choice
        return RunResult(counters=self.ctl_blk.counters(), drops=self.sring.drops, core=thread.core,
                         policy=thread.policy, wait=c.wait.name, choice=c.reason, conflate=self.conflate,
                         backpressure=self.file_feed, backend=self.pred.backend,
                         latency=latency.summary(self.ctl_blk.hist), signals_path=sig_path,
                         model_dir=self.model_dir, strategy=self.strat.identity(),
                         run_seconds=self.t_stop - self.t_start, notes=self.notes + thread.notes, swaps=self.swaps,
                         warnings=warnings, error=error, preempted=thread.preempted(),
                         isolation=self.isolation_text,
                         feed_counters=self.plane.feed_counters() if self.plane is not None else {},
                         conflate_warn=self.cfg.conflate_warn, crossed_after=self.cfg.crossed_after,
                         abnormal=self.abnormal[1] if self.abnormal else None, unread=self.unread,
                         sources=sources, record=record, paper=getattr(self, "paper_result", None),
                         shadows=self.shadow_results, drift=self.drift_result)

    def _finish_paper(self):
        """--paper: the last ticks and signals simulated, and the report `engine backtest` writes for
        the run's recording (replay/jobs.write_report: report.md, report.json, plots, signals.parquet)
        in --paper-out DIR (default beside the signal file: RUN.paper/ for RUN.sig), whole or not at all."""
        from engine.outputs import atomic_dir
        from models.artifact import uses_sigmoid
        from replay import jobs, report
        t0 = time.monotonic()
        names = self.rings.table(self.multi)[0] if self.rings is not None else []
        r = self.paper.finish(names, self.ctl_blk.hist.copy(), self.ctl_blk.counters()["risk_blocked"])
        out = self.paper_out
        paper = r.pop("paper")
        head = {"title": "Paper trading", "model": self.model_dir, "model_id": self.pred.model_id,
                "backend": self.pred.backend, "strategy": self.strat.identity(), "workers": 1, "paper": paper}
        thresholds = {k: v for k, v in self.strat.values.items() if k in report.THRESHOLD_PARAMS}
        meta = {"engine.model_id": self.pred.model_id, "engine.inputs": "paper: " + " + ".join(
            u or f"ring:{n}" for u, n in zip(self.feed_uris, self.ring_names)), "engine.strategy": self.strat.describe()}
        with atomic_dir(out, "the paper trading report") as tmp:
            s = jobs.write_report(tmp, [r], self.paper.p, head, [],
                                  {"probability": uses_sigmoid(self.pred)}, thresholds, t0, meta)
        self.paper_result = {"out": out, "pnl": s["pnl"], "pnl_gross": s["pnl_gross"], "fees": s["fees"],
                             "fills": s["fills"], "signals": s["signals"], "ticks": s["ticks"],
                             "max_drawdown": s.get("max_drawdown"), "backtest": self._backtest_command(), **paper}

    def _backtest_command(self):
        """The `engine backtest` whose report the paper report is (the same ticks, signals and execution
        flags: the recording, or the tick files the run read; the run's signal file when the loop
        conflated, or the kill switch or a pause moved, which that backtest then replays), or None
        when nothing the run read can be backtested (a live feed without --record)."""
        import shlex
        from dataclasses import fields

        from .run_options import RISK_FIELDS, RunConfig
        cfg, q = self.cfg, shlex.quote
        if cfg.record:
            inputs = [cfg.record]
        elif all(u and u.startswith("tickfile:") for u in self.feed_uris):
            inputs = ([] if len(self.feed_uris) < 2 else ["--merge"]) + [u[len("tickfile:"):] for u in self.feed_uris]
        else:
            return None
        cmd = ["engine", "backtest", *map(q, inputs), "--out", q(self.sig_path.rsplit(".", 1)[0] + ".backtest")]
        if cfg.strategy:
            cmd += ["--strategy", q(cfg.strategy)]
        cmd += [f"--param {q(f'{k}={v}')}" for k, v in (cfg.params or {}).items()]
        cmd += [f"--universe {q(f'{k}={v}')}" for k, v in (cfg.universe or {}).items()]
        cmd += ["--model", q(str(self.model_dir))]
        defaults = {f.name: f for f in fields(RunConfig)}
        for name in RISK_FIELDS:  # (the gate's limits, as the run had them)
            v, f = getattr(cfg, name), defaults[name]
            if v in (None, f.default, ()) or v == []:
                continue
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                cmd += [f.metadata["opt"].flag, q(f"{x:g}" if isinstance(x, float) else str(x))]
        c = self.ctl_blk.counters()
        if c["marks"] or any(c["kills"].values()) or self.paused_ever():
            cmd += ["--conflate-as-recorded", q(self.sig_path)]
        return " ".join(cmd + ([cfg.paper_exec] if cfg.paper_exec else []))

    def paused_ever(self):
        """Did `engine ctl pause` move the loop in this run (a pause mark in the signal file)?"""
        from engine.signal_log import SignalLogError, read_pauses
        try:
            return bool(len(read_pauses(self.sig_path)))
        except (OSError, SignalLogError):
            return False

    def _write_table(self, sig_path, error, warnings):
        """--signals-out X.parquet: the table from the signal file (and each shadow's beside it, from
        its own: X.shadow-NAME.parquet), whole or not at all; returns (the signals' path for the
        summary, the run's error)."""
        import json

        from engine.instruments import dump
        parquet_out = self.parquet_out
        names, specs = getattr(self.plane, "instruments", None), getattr(self.plane, "specs", None)
        meta = {"engine.instruments": json.dumps(dump(names, specs))} if names and specs is not None else {}
        for sh in self.shadow_results or []:  # (a shadow's file: in the run's format, as its signals are)
            if not sh["error"] and sh["signals_out"].endswith(".sig"):
                out = sh["signals_out"][:-len(".sig")] + ".parquet"
                if self._table(sh["signals_out"], out, names, meta, warnings) is None:
                    sh["signals_out"] = out
        if self.slog.error is not None:
            warnings.append(f"signal table {parquet_out} not written: the signal file is incomplete")
            return sig_path, error
        if self.abnormal:  # the table's end mark, as the signal file's header
            meta = {**meta, "engine.abnormal_end": self.abnormal[1]}
        e = self._table(sig_path, parquet_out, names, meta, warnings)
        return (sig_path, error or e) if e else (parquet_out, error)

    @staticmethod
    def _table(sig_path, parquet_out, names, meta, warnings):
        """One signal table; None when written, else the error (said in warnings)."""
        from engine.outputs import OutputError
        from engine.signal_log import read_signals, write_signals_parquet
        try:
            write_signals_parquet(parquet_out, read_signals(sig_path), tables=[names], metadata=meta)
            return None
        except OutputError as e:  # nothing left at its name: written whole or not at all
            warnings.append(f"signal table {parquet_out} not written ({e.reason}); the signals are in {sig_path}")
            return str(e)


def _stop_feed(proc):
    try:
        proc.wait(timeout=0.3)  # it has nothing to flush; we remove its ring ourselves
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


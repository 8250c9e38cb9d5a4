"""`engine run`: feed process -> tick ring -> pinned real-time strategy thread -> signals.

Start-up order follows DESIGN.md: load (or build) the model, compile the loop, create
the rings, spawn the feed, then in the strategy thread: pin, lock memory, pre-fault,
warm the model, switch to SCHED_FIFO, attach to the ring (which releases the feed),
and run. The main thread (on the other cores) drains signals to the signal file,
refreshes the loop's lease, and watches the feed, the clock and SIGINT/SIGTERM.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from models import artifact

from . import control as C
from . import latency, rt, shm, sigring, waits, warmup
from .records import SIGNAL_WORDS
from .signal_log import SignalLog
from .tickring import TickConsumer

LEASE_NS = 3_000_000_000  # the loop stops by itself if the main thread goes quiet this long
DRAIN_PERIOD_S = 0.002
STRATEGY_THREAD_NAME = "engine-strategy"
MAX_INSTRUMENTS = 65536  # feature state for every possible instrument index of an external ring


def log(msg):
    print(f"[engine] {msg}", file=sys.stderr, flush=True)


@dataclass
class RunConfig:
    core: int | None = None
    priority: int = 80
    realtime: bool = True           # False (--no-rt): the same as policy "other"
    policy: str = "auto"            # auto | fifo | other (engine/waits.py)
    wait: str = "auto"              # auto | spin | backoff | duty
    conflate: str = "auto"          # auto (live sources on, file replays off: they wait) | on | off
    conflate_max: int = 1024        # ticks folded before a conflation window is scored regardless
    strict: bool = False
    duration: float | None = None
    model: str | None = None
    instruments: int = 4
    rate: float = 50_000.0
    seed: int = 1
    feed: str | None = None
    ring: str | None = None  # attach to this existing tick ring instead of spawning a feed
    name: str = "engine"
    signals_out: str | None = None
    strategy: str | None = None     # a built-in name or a .py file (default: microstructure)
    params: dict = field(default_factory=dict)  # strategy parameter overrides
    ring_capacity: int = 1 << 18
    keep_rings: bool = False
    warm_every: int = 0
    backend: str = "auto"
    speed: float = 1.0  # file feeds: recorded pace times this; 0 = as fast as possible
    http: tuple | None = None       # (host, port) of the control plane's HTTP server
    pub: str | None = None          # zmq PUB endpoint for signals
    token_file: str | None = None   # bearer token for /status and /control/*
    hlog: str | None = None         # HdrHistogram interval log path
    hlog_interval: float = 10.0
    doctor: bool = True             # check the machine for the core at start (warnings; --strict: fails fatal)


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


class StrategyThread(threading.Thread):
    def __init__(self, cfg, ring_name, start, args_fn, predictor, host, choice, backpressure=False):
        super().__init__(name="strategy", daemon=True)
        self.choice, self.backpressure = choice, backpressure
        self.conflate = False
        self.cfg, self.ring_name, self.start_at, self.args_fn, self.predictor = cfg, ring_name, start, args_fn, predictor
        self.host = host
        self.ready = threading.Event()
        self.error = None
        self.tid = None
        self.core = None
        self.policy = "SCHED_OTHER"
        self.notes = []
        self.consumer = None
        self.exit_state = None
        self.reattached = 0

    def _want(self, ok, msg, what):
        self.notes.append(msg)
        if not ok:
            if self.cfg.strict:
                raise RuntimeError(f"--strict: {msg}")
            log(f"warning: {msg}; running without {what}")

    def run(self):
        try:
            self.tid = threading.get_native_id()
            rt.name_current_thread(STRATEGY_THREAD_NAME)
            if self.cfg.core is not None:
                ok, msg = rt.pin_current_thread(self.cfg.core)
                self._want(ok, msg, "pinning")
                self.core = self.cfg.core if ok else None
            args = self.args_fn()
            for a in args:
                if isinstance(a, np.ndarray) and a.dtype.kind in "if":
                    warmup.prefault(a)
            row, out = args[A_ROW], args[A_OUT]
            warmup.warm_model(self.predictor.addr, row, out, 20_000)
            row[:] = 0
            if self.choice.wait.name != "spin":
                rt.set_timer_slack(1000)  # parks as short as asked (the default slack is 50 us)
            if self.choice.policy == "fifo":
                ok, msg = rt.set_fifo(self.cfg.priority)
                self._want(ok, msg, "SCHED_FIFO")
            self.policy = rt.policy_name()
            c = self.consumer = TickConsumer(self.ring_name)
            warmup.prefault(c.data)
            # Claiming a consumer line is what releases a spawned feed: ticks start once we are ready.
            c.claim(start=self.start_at, backpressure=self.backpressure)
            ctl = args[A_CTL]
            ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + LEASE_NS  # armed only now: warm-up may be slow
            self.ready.set()
            while True:
                self.exit_state = self.host.mod.run_loop(c.hdr, c.data, c.mask, c.slot_base, *args)
                if self.exit_state != C.LOOP_REATTACH:
                    break
                c = self._reattach(c, args)
        except BaseException as e:  # reported by the main thread
            self.error = e
            self.ready.set()
        finally:
            rt.set_other()


    def _reattach(self, old, args):
        """The control plane saw a new ring under our ring's name (the feed was restarted): map
        it, claim a line (which releases a feed that waits for us) and go on. The data is
        discontinuous, so features start again, as after a gap. No recompilation."""
        ctl = args[A_CTL]
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
        self.host.mod.host_reset(*args[A_FSTATE:A_FSTATE + 3])
        ctl[C.L_GAPS] += 1
        self.consumer = c
        self.reattached += 1
        if int(ctl[C.CTL_CMD]) == C.CMD_REATTACH:
            ctl[C.CTL_CMD] = C.CMD_RUN
        return c


def _spawn_feed(cfg, ring_name, uri):
    cmd = [sys.executable, "-m", "engine.cli", "feed", uri, "--ring", ring_name,
           "--capacity", str(cfg.ring_capacity), "--wait-consumers", "1", "--die-with-parent"]
    if cfg.keep_rings:
        cmd += ["--keep"]  # the feed removes its ring on exit unless told to keep it
    if cfg.feed is None or "rate=" not in cfg.feed:
        cmd += ["--rate", f"{cfg.rate:g}"]
    cmd += ["--max"] if cfg.speed == 0 else ["--speed", f"{cfg.speed:g}"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(__file__)),
                                                      env.get("PYTHONPATH")]))
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as e:
        raise RuntimeError(f"cannot start the feed process ({cmd[0]}): {e.strerror}") from None


def _wait_ring(path, proc, timeout=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"feed process exited with status {proc.returncode} before creating {path}")
        if os.path.exists(path):
            try:
                info = shm.inspect(path)
                if info["producer_pid"] == proc.pid:
                    return
            except shm.RingError:
                pass
        time.sleep(0.01)
    raise RuntimeError(f"feed process did not create {path} within {timeout:.0f} s")


def default_signals_path(name):
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "engine", "signals", f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.sig")


def load_model(cfg, strategy):
    """The verified model for this strategy: --model, or the strategy's default model (trained
    on the synthetic market and cached on first use)."""
    if cfg.model:
        model_dir = cfg.model
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


def uses_sigmoid(pred):
    return pred.manifest.get("objective") == "binary:logistic"


def reload_model(cfg, strategy, ctl, loaded, swaps):
    """SIGHUP: load, verify and validate the model off the hot path, then publish its address and
    a new generation; the loop adopts it between two ticks. A bad artifact (or one trained for
    another strategy) changes nothing."""
    t0 = time.monotonic()
    try:
        pred, model_dir = load_model(cfg, strategy)
        if uses_sigmoid(pred) != uses_sigmoid(loaded[0]):
            raise ValueError(f"{model_dir}: objective {pred.manifest.get('objective')} scores on another scale "
                             f"than the running {loaded[0].manifest.get('objective')}; restart the engine to "
                             "change it")
    except Exception as e:  # noqa: BLE001 - any failure keeps the running model
        log(f"reload refused, still running generation {int(ctl[C.CTL_MODEL_GEN])}: {e}")
        swaps.append({"ok": False, "error": str(e)})
        return
    loaded.append(pred)  # the old library stays mapped: the loop may still be inside it
    gen = int(ctl[C.CTL_MODEL_GEN]) + 1
    ctl[C.CTL_MODEL_ADDR] = pred.addr
    t_pub = time.monotonic_ns()
    ctl[C.CTL_MODEL_GEN] = gen  # after the address: the loop reads generation, then address
    while int(ctl[C.L_MODEL_GEN]) != gen and time.monotonic_ns() - t_pub < 1_000_000_000:
        time.sleep(0.0001)
    adopted = int(ctl[C.L_MODEL_GEN]) == gen
    lag_us = (int(ctl[C.L_SWAP_NS]) - t_pub) / 1e3 if adopted else None
    swaps.append({"ok": adopted, "generation": gen, "model": pred.model_id, "backend": pred.backend,
                  "prepare_ms": round((t_pub / 1e9 - t0) * 1e3, 1), "adopted_after_us": lag_us})
    log(f"model generation {gen} ({pred.model_id}, {pred.backend}) prepared off the hot path in "
        f"{(t_pub / 1e9 - t0) * 1e3:.0f} ms; " + (f"adopted by the loop {lag_us:.1f} us after publication"
                                                   if adopted else "NOT adopted within 1 s"))


def check_outputs(cfg, sig_path, parquet_out):
    """Every file the run will write can be written: checked before anything is created or
    started, so a bad path leaves nothing behind (an OutputError naming it)."""
    from .outputs import OutputError, check_writable
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


def _feed_uri(cfg, strategy=None):
    """The source the feed process reads, with the book levels the strategy needs."""
    uri = cfg.feed or f"synthetic://?instruments={cfg.instruments}&seed={cfg.seed}"
    return strategy.source_uri(uri) if strategy is not None else uri


# indices into the loop's argument tuple (StrategyThread.args_fn): after the ring's own four
A_CTL, A_FSTATE, A_ROW, A_OUT = 4, 6, 13, 14


def run(cfg: RunConfig, stop_event: threading.Event | None = None,
        reload_event: threading.Event | None = None) -> RunResult:
    """Validate everything, then create rings, spawn the feed, run until stopped; cleans up always."""
    stop_event = stop_event or threading.Event()
    reload_event = reload_event or threading.Event()
    swaps = []
    # 1. everything that can be wrong with the request, before anything is created
    if cfg.core is not None:
        rt.check_core(cfg.core)
    choice = waits.choose("other" if not cfg.realtime else cfg.policy, cfg.wait, cfg.core, cfg.priority)
    if cfg.conflate not in ("auto", "on", "off"):
        raise ValueError(f"--conflate must be auto, on or off, got {cfg.conflate!r}")
    if cfg.conflate_max < 1:
        raise ValueError(f"conflate_max must be >= 1, got {cfg.conflate_max}")
    if not 1 <= cfg.priority <= 99:
        raise ValueError(f"--priority must be 1..99 for SCHED_FIFO, got {cfg.priority}")
    if cfg.warm_every < 0:
        raise ValueError(f"--warm-every must be >= 0, got {cfg.warm_every}")
    sig_path = cfg.signals_out or default_signals_path(cfg.name)
    parquet_out = None
    if sig_path.endswith(".parquet"):  # the raw log goes next to it; the table is written at the end
        parquet_out, sig_path = sig_path, sig_path[:-len(".parquet")] + ".sig"
    check_outputs(cfg, sig_path, parquet_out)
    from feeds.sources import Synthetic, open_source

    from .strategy_build import load_host
    host = load_host(cfg.strategy, cfg.params)  # a broken strategy file fails here, before anything
    strat = host.strategy
    if cfg.ring:
        if cfg.feed:
            raise ValueError("--ring attaches to an existing tick ring; --feed spawns a feed: give one of them")
        ring_name = cfg.ring
        probe = TickConsumer(ring_name)  # it must exist and be a tick ring (clear error otherwise)
        levels = int(getattr(probe, "depth", 0))
        n_inst = MAX_INSTRUMENTS  # whatever the producer publishes
        feed_uri = None
    else:
        feed_uri = _feed_uri(cfg, strat)
        src = open_source(feed_uri)  # a bad URI fails here, before anything is created
        levels = int(getattr(src, "depth", 0))
        ring_name = f"{cfg.name}.ticks"
        n_inst = src.params.instruments if isinstance(src, Synthetic) else MAX_INSTRUMENTS
        # a source with an end (a file, a counted simulation) ends the run once it is played
        finite = not src.live and (not isinstance(src, Synthetic) or src.params.count > 0)
        if hasattr(src, "sock"):
            src.sock.close()  # the feed process listens, not us
    if cfg.ring:
        # a ring ends when its producer marks it finished (H_STATE, as `engine feed` does at the end of its
        # source or when stopped): so do we, as with a spawned file feed. A producer that dies without
        # marking it is a feed that is down: we wait for a new ring under the name.
        finite = True
    # an incomplete tick file (a killed recorder): its unchecked records, in the summary too
    input_warnings = [] if cfg.ring else list(getattr(getattr(src, "file", None), "warnings", []))
    for w in input_warnings:
        log(f"warning: {w}")
    # A file can wait, a market cannot: a file feed waits for our loop (lossless, every tick scored);
    # live sources never block, and the loop conflates when it falls behind them.
    file_feed = not cfg.ring and not src.live and not isinstance(src, Synthetic)
    conflate = cfg.conflate == "on" or (cfg.conflate == "auto" and not file_feed)
    if cfg.doctor:
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
    own = ("ctl", "signals") if cfg.ring else ("ctl", "signals", "ticks")
    for suffix in own:  # refuse a live owner (engine first) before creating anything
        shm.check_owner(shm.ring_path(f"{cfg.name}.{suffix}"))
    check_ports(cfg)
    notes = []
    hs = host.state(n_inst, levels)  # DEPTH beyond what the stream carries fails here
    pred, model_dir = load_model(cfg, strat)
    strat.check_scale(uses_sigmoid(pred))
    loaded = [pred]
    cfg_arr = host.loop_cfg(exit_on_eof=finite, warm_every=cfg.warm_every, sigmoid=uses_sigmoid(pred),
                            wait=choice.wait, conflate=conflate, conflate_max=cfg.conflate_max)
    log(f"policy: {choice.describe()}; conflation {'on' if conflate else 'off'}"
        + ("; the file feed waits for the loop (lossless)" if file_feed else ""))
    t1 = time.monotonic()
    host.compile_live()
    log(f"strategy {strat.describe()} from {strat.path}: compiled into the loop in "
        f"{host.compile_seconds + time.monotonic() - t1:.2f} s; "
        f"params " + ", ".join(f"{k}={v:g}" for k, v in strat.values.items()))
    if cfg.core is not None:
        ok, msg = rt.keep_off_core(cfg.core)
        notes.append(msg)
        if not ok:
            log(f"warning: {msg}")
    ok, msg = rt.mlockall()
    notes.append(msg)
    if not ok:
        if cfg.strict:
            raise RuntimeError(f"--strict: {msg}")
        log(f"warning: {msg}; running without locked memory")

    row = host.new_row()
    out = np.zeros(1, np.float32)
    tick = np.zeros(8, np.int64)
    sig = np.zeros(SIGNAL_WORDS, np.int64)
    pvals = host.params()
    drain_buf = np.zeros((4096, SIGNAL_WORDS), np.int64)

    # 2. resources: everything created from here on is removed in the finally block
    created = []
    ctl_blk = sring = slog = proc = thread = plane = None
    t_start = t_stop = time.monotonic()
    running = False
    cleanup_errors = []

    def on_write_error(msg):  # from the drain thread: stop the run, which still prints its summary
        log(f"error: {msg}; stopping")
        stop_event.set()
    from . import locks
    try:
        if cfg.core is not None:
            locks.acquire("core", cfg.core, cfg.name)
        locks.acquire("ring", shm.ring_path(ring_name), cfg.name)
        ctl_blk = C.ControlBlock(f"{cfg.name}.ctl")
        created.append(ctl_blk.path)
        sring = sigring.SignalRing(f"{cfg.name}.signals")
        created.append(sring.path)
        if not cfg.ring:
            created += [shm.ring_path(ring_name), shm.ring_path(ring_name) + ".instruments"]
        for n in (ctl_blk.note, sring.note):
            if n:
                log(n)
        ctl = ctl_blk.hdr
        ctl[C.CTL_MODEL_ADDR] = pred.addr
        ctl[C.CTL_MODEL_GEN] = 1
        ctl[C.L_MODEL_GEN] = 0

        def args_fn():  # (A_* name positions in this tuple)
            return (sring.hdr, sring.data, sring.mask, sring.pstate, ctl, ctl_blk.hist,
                    *hs.loop_arrays(), row, out, tick, sig, pvals, cfg_arr)

        slog = SignalLog(sig_path, on_error=on_write_error)
        if not cfg.ring:
            proc = _spawn_feed(cfg, ring_name, feed_uri)
            _wait_ring(shm.ring_path(ring_name), proc)
        thread = StrategyThread(cfg, ring_name, "now" if cfg.ring else "oldest", args_fn, pred, host, choice,
                                backpressure=True)  # honoured by file feeds only
        thread.conflate = conflate
        thread.start()
        thread.ready.wait()
        if thread.error:
            raise thread.error
        running = True
        feed = f"feed pid {proc.pid}" if proc else f"ring {shm.ring_path(ring_name)}"
        log(f"running: core {thread.core if thread.core is not None else 'unpinned'}, {thread.policy}, "
            f"{feed}, signals -> {sig_path}")
        if thread.policy == "SCHED_FIFO" and choice.wait.name == "spin":
            note = rt.rt_throttle_note()
            if note:
                log(f"warning: {note}")
                notes.append(note)
        t_start = time.monotonic()
        from types import SimpleNamespace

        from .daemon import run_control_plane
        px = SimpleNamespace(cfg=cfg, ctl_blk=ctl_blk, sring=sring, slog=slog, drain_buf=drain_buf, thread=thread,
                             proc=proc, ring_name=ring_name, stop_event=stop_event, reload_event=reload_event,
                             loaded=loaded, swaps=swaps, model_dir=model_dir, lease_ns=LEASE_NS,
                             drain_period=DRAIN_PERIOD_S, deadline=t_start + cfg.duration if cfg.duration else None,
                             http=cfg.http, pub=cfg.pub, token_file=cfg.token_file, hlog_path=cfg.hlog,
                             hlog_interval=cfg.hlog_interval,
                             reload=lambda: reload_model(cfg, strat, ctl, loaded, swaps),
                             respawn=(lambda: _spawn_feed(cfg, ring_name, feed_uri)) if not cfg.ring and not finite
                             else None)
        plane = run_control_plane(px)
        proc = px.proc
        if cfg.ring and thread.exit_state == C.LOOP_EOF:
            log(f"ring {shm.ring_path(ring_name)}: its producer finished and every tick was read; stopping")
    finally:
        # Cleanup always runs to the end, whatever fails on the way (each step on its own).
        def step(fn, *args):
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - reported after the rest is cleaned up
                log(f"error while stopping: {e}")
                cleanup_errors.append(e)
        t_stop = time.monotonic()
        if ctl_blk is not None:
            ctl_blk.hdr[C.CTL_CMD] = C.CMD_STOP
        if proc is not None and proc.poll() is None:
            step(proc.send_signal, signal.SIGTERM)  # it exits while we drain and summarise
        if thread is not None:
            thread.join(timeout=2.0)
        if plane is not None:
            step(plane.finish)  # the last signals (file and zmq) and the last latency interval
        elif slog is not None:
            def drain_rest():
                while _drain_signals(sring, drain_buf, slog):
                    pass
            step(drain_rest)
        if slog is not None:
            step(slog.close)
            if not running and not slog.count and slog.regular:
                step(_unlink, sig_path)  # the run never started: no empty signal file left behind
        if proc is not None:
            def stop_feed():
                try:
                    proc.wait(timeout=0.3)  # it has nothing to flush; we remove its ring ourselves
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            step(stop_feed)
        if thread is not None and thread.consumer is not None:
            step(thread.consumer.close)
        if not cfg.keep_rings:
            for p in created:
                step(_unlink, p)
        step(rt.munlockall)
        step(locks.release_all)
    if thread.error:
        raise thread.error
    if cleanup_errors:
        raise cleanup_errors[0]
    warnings = list(input_warnings)
    error = None
    if slog.error is not None:
        error = str(slog.error)
        warnings.append(f"signal file {sig_path} is incomplete: the writer stopped at record {slog.count:,} "
                        f"({slog.error.reason}); {slog.unwritten:,} records not written (marked in its header: "
                        "`engine signals show` says so)")
    hl = getattr(plane, "hlog", None)
    if hl is not None and hl.error is not None:
        warnings.append(f"latency log {hl.path} is incomplete after {hl.intervals} intervals: {hl.error.reason}")
        error = error or str(hl.error)
    if parquet_out:
        if slog.error is None:
            from .outputs import OutputError
            from .signal_log import read_signals, write_signals_parquet
            try:
                write_signals_parquet(parquet_out, read_signals(sig_path), symbols=getattr(plane, "instruments", None))
                sig_path = parquet_out
            except OutputError as e:  # nothing left at its name: written whole or not at all
                error = error or str(e)
                warnings.append(f"signal table {parquet_out} not written ({e.reason}); the signals are in {sig_path}")
        else:
            warnings.append(f"signal table {parquet_out} not written: the signal file is incomplete")
    if thread.exit_state == C.LOOP_LEASE_EXPIRED:
        raise RuntimeError(f"the strategy loop stopped itself: the control thread did not renew its lease "
                           f"for {LEASE_NS / 1e9:.0f} s (starved or hung?)")
    return RunResult(counters=ctl_blk.counters(), drops=sring.drops, core=thread.core, policy=thread.policy,
                     wait=choice.wait.name, choice=choice.reason, conflate=conflate, backpressure=file_feed,
                     backend=pred.backend, latency=latency.summary(ctl_blk.hist), signals_path=sig_path,
                     model_dir=model_dir, strategy=strat.identity(), run_seconds=t_stop - t_start, notes=notes + thread.notes, swaps=swaps,
                     warnings=warnings, error=error)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


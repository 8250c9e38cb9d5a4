"""`engine run` (the engine end to end: app/live.py) and `engine feed` (a feed handler
process writing a tick ring)."""
import argparse
import math
import os
import signal
import sys
import threading

from engine.waits import WAIT_HELP
from models.artifact import BACKEND_CHOICES

from .common import (SOURCES_HELP, Flag, http_addr, nonneg_float, nonneg_int, overrides, positive_float,
                     positive_int, pow2, pub_endpoint, publisher_args, strategy_args, verify_key_arg, zmq_endpoint)


def _trust_ring_owner(user):
    import pwd

    from engine import shm
    try:
        uid = int(user) if str(user).isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"--ring-owner {user}: no such user") from None
    shm.trust_uid(uid)


def cmd_run(a):
    from app.run_summary import as_json, dumps, table
    from app.live import RunConfig, run

    from app.daemon import runtime_dir
    _check_run_args(a)
    check_mode(a)
    if a.ring_owner:
        _trust_ring_owner(a.ring_owner)
    cfg = RunConfig(core=a.core, priority=a.priority, realtime=a.realtime, policy=a.policy, wait=a.wait,
                    conflate=a.conflate, strict=a.strict, duration=a.duration, model=a.model,
                    instruments=a.instruments, rate=a.rate, seed=a.seed, feed=a.feed, ring=a.ring, name=a.name,
                    signals_out=a.signals_out, strategy=a.strategy, params=overrides(a),
                    ring_capacity=a.ring_capacity, keep_rings=a.keep_rings, warm_every=a.warm_every,
                    backend=a.backend, speed=0.0 if a.max else a.speed,
                    http=http_addr(a.http), pub=None if a.pub in (None, "", "none") else a.pub,
                    token_file=a.token_file or os.path.join(runtime_dir(), f"{a.name}.token"),
                    hlog=None if a.hlog in ("", "none") else (a.hlog or _default_hlog(a.name)),
                    hlog_interval=a.hlog_interval, doctor=a.doctor, isolate=a.isolate,
                    conflate_warn=a.conflate_warn, crossed_after=a.crossed_after, stall_exit=a.stall_exit)
    stop, reload = threading.Event(), threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, lambda signum, frame: reload.set())  # reload --model, swap between ticks
    from app.run_summary import warnings
    if not a.json:
        res = run(cfg, stop, reload)
        print(table(res), flush=True)
    else:
        # --json promises exactly one JSON object on stdout: whatever a library prints on the way
        # goes to stderr
        sys.stdout.flush()
        real_stdout = os.dup(1)
        os.dup2(2, 1)
        try:
            res = run(cfg, stop, reload)
        finally:
            sys.stdout.flush()
            os.dup2(real_stdout, 1)
            os.close(real_stdout)
        print(dumps(as_json(res)), flush=True)
        for w in warnings(res):
            print(f"engine: warning: {w}", file=sys.stderr, flush=True)
    if res.abnormal:  # the strategy raised or hung, its lease expired, its feed died: the summary says what was done
        print(f"engine: error: {res.abnormal}", file=sys.stderr, flush=True)
        return 1
    if res.error:  # an output could not be written: the summary above says what it holds
        raise RuntimeError(res.error)
    if a.strict and warnings(res):
        print("engine: --strict: the run lost data, dropped signals or read an incomplete file (see the warnings "
              "above)", file=sys.stderr)
        return 1
    return 0


def check_arg(p):
    """--check: engine run and engine backtest compile the strategy with numba's boundscheck."""
    p.add_argument("--check", action=Flag,
                   help="testing: compile the strategy's functions with numba's boundscheck, so an index out of "
                        "bounds in on_tick or decide (a write past the end of `row`, `state` or a book array) stops "
                        "the run with one line naming the strategy file and the function, instead of writing "
                        "into memory that is not the strategy's; slower, and compiled apart from (never cached "
                        "with) the normal code. --no-check (the default): as fast as it goes")


def check_mode(a):
    """--check: for this process and the workers it starts (engine/strategy_build.py CHECK_ENV)."""
    from engine.strategy_build import CHECK_ENV
    if getattr(a, "check", False):
        os.environ[CHECK_ENV] = "1"
    else:
        os.environ.pop(CHECK_ENV, None)


def _default_hlog(name):
    import time as _t
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "engine", "latency", f"{name}-{_t.strftime('%Y%m%dT%H%M%S')}.hlog")


def _check_run_args(a):
    """What argparse checks for flags, checked again for values that came from --config."""
    checks = [(a.priority, lambda v: isinstance(v, int), "--priority must be an integer"),
              (a.ring_capacity, lambda v: v >= 2 and not v & (v - 1), "ring_capacity must be a power of two >= 2"),
              (a.hlog_interval, lambda v: v > 0, "hlog_interval must be > 0"),
              (a.speed, lambda v: v > 0, "speed must be > 0"),
              (a.duration, lambda v: v is None or (math.isfinite(v) and v > 0),
               "duration must be a finite number of seconds > 0"),
              (a.stall_exit, lambda v: math.isfinite(v) and v >= 0, "stall_exit must be a finite number of seconds >= 0"),
              (a.rate, lambda v: v >= 0, "rate must be >= 0"),
              (a.backend, lambda v: v in BACKEND_CHOICES, f"backend must be one of {', '.join(BACKEND_CHOICES)}")]
    for v, ok, msg in checks:
        if not ok(v):
            raise ValueError(f"{msg}, got {v!r}")
    if a.pub not in (None, "", "none"):
        try:
            zmq_endpoint(a.pub, bind=True)
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"--pub: {e}") from None
    # (--core: the runner's first step checks it, once what a killed --isolate run moved is back)


def cmd_feed(a):
    from feeds.process import run_feed
    from engine.realtime import die_with_parent

    if a.die_with_parent:
        die_with_parent(signal.SIGTERM)
    run_feed(a.source, a.ring, rate=0.0 if a.max else a.rate, speed=0.0 if a.max else a.speed,
             capacity=a.capacity, wait_consumers=a.wait_consumers, count=a.count, duration=a.duration,
             keep=a.keep, crossed_after=a.crossed_after)
    return 0


def add_parsers(sub):
    _add_run(sub)
    _add_feed(sub)


def _add_run(sub):
    """`engine run` and its options (app/config.py reads the same from --config)."""
    r = sub.add_parser("run", help="run the engine: feed -> ring -> pinned strategy loop -> signals",
                       description="Run the engine end to end. With no --model the default model is used "
                                   "(trained on the synthetic market and cached on first run). On exit "
                                   "(--duration over, SIGINT, SIGTERM) prints a summary; progress goes to stderr.")
    r.add_argument("--config", default=None, help="TOML file with any of these options (ops/engine.toml is a "
                   "commented sample); flags given here win")
    r.add_argument("--core", type=int, default=None, help="CPU core for the strategy thread (default: unpinned)")
    r.add_argument("--priority", type=int, default=80, help="SCHED_FIFO priority 1-99 (default 80)")
    r.add_argument("--isolate", action=Flag,
                   help="while the engine runs, move every other task, IRQ and unbound kernel work that may run "
                        "on --core off it (what isolcpus does at boot; per-CPU kernel threads stay), sweeping "
                        "again every 2 s; every change is undone at exit, and what a killed engine moved is put "
                        "back by the next run of the same --name. Needs root (or CAP_SYS_NICE) for others' tasks. "
                        "--no-isolate (the default) leaves the core as it is")
    r.add_argument("--policy", default="auto", choices=("auto", "fifo", "other"),
                   help="scheduling of the strategy thread: auto (default) = SCHED_FIFO only where RT throttling "
                        "cannot park it (throttling off, or a wait that sleeps), else pinned SCHED_OTHER with "
                        "spin; one line at start says what was chosen and why. fifo|other force it")
    r.add_argument("--wait", default="auto", choices=("auto", "spin", "backoff", "duty"),
                   help="what the loop does while the ring is empty: auto (default: spin); " + WAIT_HELP)
    r.add_argument("--rt", dest="realtime", action=Flag, default=True,
                   help="--no-rt: never SCHED_FIFO, the same as --policy other; --rt (the default): as --policy says")
    r.add_argument("--conflate", default="auto", choices=("auto", "on", "off"),
                   help="when the loop falls behind, fold every waiting tick and score each instrument once, on its "
                        "latest state (counted: conflated). auto (default): on for live sources, off for file "
                        "replays (the file waits for the loop instead: nothing lost, every tick scored)")
    r.add_argument("--no-conflate", dest="conflate", action="store_const", const="off",
                   help="score every tick even when behind (research); the same as --conflate off")
    r.add_argument("--strict", action=Flag,
                   help="fail instead of running unpinned/non-RT/unlocked when the process lacks the rights, "
                        "and exit 1 after the summary when ticks were lost or signals dropped")
    r.add_argument("--duration", type=positive_float, default=None, help="seconds to run (default: until stopped)")
    r.add_argument("--model", default=None, help="model artifact directory, trained for --strategy (default: the "
                   "strategy's default model, trained on the synthetic market and cached on first use)")
    r.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                   help="model back end: auto = the fastest one that is bit-exact on this machine (default); "
                        "flat = the branch-free kernel (best variant this CPU runs); treelite = TL2cgen code; "
                        "xgboost = XGBoost's own predictor (reference, ~200 us a tick)")
    r.add_argument("--instruments", type=positive_int, default=4, help="synthetic instruments (default 4)")
    r.add_argument("--rate", type=nonneg_float, default=50_000.0,
                   help="synthetic ticks per second, 0 = as fast as possible (default 50000)")
    r.add_argument("--seed", type=int, default=1, help="synthetic feed seed (default 1)")
    r.add_argument("--feed", default=None, help="source URI instead of the built-in synthetic feed, e.g. "
                                                "synthetic://?instruments=8&rate=20000")
    r.add_argument("--ring", default=None,
                   help="attach to an existing tick ring (e.g. one `engine feed` writes) instead of spawning a feed; "
                        "reading starts at its newest tick; the run ends when the ring's producer marks it "
                        "finished (the end of its source, or stopped) and every tick is read")
    r.add_argument("--ring-owner", default=None, metavar="USER",
                   help="also trust rings owned by this user (name or uid): a feed handler running as another "
                        "user (default: only the engine's own; a ring anyone else owns, a link, or one others "
                        "can write is refused)")
    r.add_argument("--name", default="engine", help="instance name: rings are /dev/shm/NAME.{ticks,signals,ctl}")
    r.add_argument("--speed", type=positive_float, default=1.0,
                   help="file feeds: replay at the recorded pace times X (default 1); the run ends when the file is played")
    r.add_argument("--max", action=Flag, help="file feeds: publish as fast as possible")
    r.add_argument("--signals-out", default=None,
                   help="signal file (default $XDG_STATE_HOME/engine/signals/NAME-TIME.sig); a .parquet name also gets a table, one row per signal, written at the end")
    strategy_args(r)
    r.add_argument("--warm-every", type=nonneg_int, default=2048,
                   help="while idle, run the model on the last row every N empty polls to keep it hot "
                        "(halves p50 at low tick rates); 0 = never (default 2048)")
    r.add_argument("--ring-capacity", type=pow2, default=1 << 18, help="tick ring slots (power of two)")
    r.add_argument("--keep-rings", action=Flag, help="leave the ring files in /dev/shm on exit")
    r.add_argument("--json", action=Flag, help="print exactly one JSON object instead of the table")
    r.add_argument("--http", default="127.0.0.1:9464",
                   help="control plane HTTP: /metrics /health /ready, and /status /control/* with the token "
                        "(default 127.0.0.1:9464; none = off)")
    r.add_argument("--pub", type=pub_endpoint, default="tcp://127.0.0.1:5556",
                   help="zmq endpoint signals are published on (XPUB: SUB sockets connect): topic = instrument, "
                        "then the 128-byte signal record, then the topic's publication number (uint64 LE: a jump "
                        "is a gap) (default tcp://127.0.0.1:5556; none = off)")
    r.add_argument("--token-file", default=None,
                   help="bearer token for /status and /control/* (default $XDG_RUNTIME_DIR/engine/NAME.token, "
                        "created 0600 if missing)")
    r.add_argument("--hlog", default=None, help="HdrHistogram interval log (default "
                   "$XDG_STATE_HOME/engine/latency/NAME-TIME.hlog; none = off)")
    r.add_argument("--hlog-interval", type=positive_float, default=10.0, help="seconds per .hlog interval (default 10)")
    r.add_argument("--doctor", action=Flag, default=True,
                   help="check the machine for --core at start (the default; warnings, fatal with --strict); "
                        "--no-doctor skips it")
    verify_key_arg(r)  # [model] verify_key; also checked on every SIGHUP / ctl reload
    r.add_argument("--conflate-warn", type=nonneg_float, default=0.5, metavar="SHARE",
                   help="warn at the end when conflation folded more than this share of the scoreable ticks "
                        "unscored (conflated / (conflated + scored); also exported as "
                        "engine_conflation_warn_ratio for the alert) (default 0.5; 1 = never)")
    _crossed_after_arg(r)
    check_arg(r)
    r.add_argument("--stall-exit", type=nonneg_float, default=5.0, metavar="SECONDS",
                   help="a strategy loop that has not beaten its heartbeat for this long (while the engine itself "
                        "ran: a stop of the whole process does not count) is not coming back (an endless loop in "
                        "on_tick or decide): the run ends with the summary, the reason in the signal file and exit 1 "
                        "(default 5; 0 = never; /ready says stalled after 1 s either way)")
    r.set_defaults(fn=cmd_run)


def _crossed_after_arg(q):
    q.add_argument("--crossed-after", type=nonneg_float, default=1.0, metavar="SECONDS",
                   help="the feed counts a book whose best bid stays at or above its best ask for longer than "
                        "this, in exchange time (crossed_books; engine_feed_crossed_books_total; a warning at "
                        "the end of a run) (default 1; 0 = never)")


def _add_feed(sub):
    """`engine feed SOURCE`."""
    f = sub.add_parser("feed", help="run a feed handler process writing a tick ring",
                       description="Publish ticks from SOURCE into a tick ring until the source ends or "
                                   "SIGINT/SIGTERM. " + SOURCES_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("source")
    publisher_args(f)
    f.add_argument("--rate", type=nonneg_float, default=None, help="ticks per second (overrides the URI)")
    f.add_argument("--count", type=positive_int, default=None, help="stop after this many ticks")
    f.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    _crossed_after_arg(f)
    f.set_defaults(fn=cmd_feed)

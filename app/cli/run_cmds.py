"""`engine run` (the engine end to end: app/live.py) and `engine feed` (a feed handler
process writing a tick ring)."""
import argparse
import os
import signal
import sys
import threading

from app import run_options

from .common import (Flag, command, refused, nonneg_float, nonneg_int, overrides, positive_float, positive_int, pow2,
                     pub_endpoint, publisher_args, strategy_args, universe, verify_key_arg)


def cmd_run(a):
    cfg = from_args(a)
    check_mode(a)
    stop, reload = threading.Event(), threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, lambda signum, frame: reload.set())  # reload --model, swap between ticks
    from app.run_summary import warnings
    from app.feed_procs import StoppedBeforeStart
    try:
        res = _run(a, cfg, stop, reload)
    except StoppedBeforeStart as e:  # (a stop asked for before anything ran: no summary to give)
        print(f"engine run: {e}", file=sys.stderr, flush=True)
        return 0
    for w in (warnings(res) if a.json else ()):
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


def cmd_feed(a):
    from feeds.process import run_feed
    from engine.realtime import die_with_parent

    if a.die_with_parent:
        die_with_parent(signal.SIGTERM)
    run_feed(a.source, a.ring, rate=0.0 if a.max else a.rate, speed=0.0 if a.max else a.speed,
             capacity=a.capacity, wait_consumers=a.wait_consumers, wait_timeout=a.wait_timeout, count=a.count, duration=a.duration,
             keep=a.keep, quiet=a.quiet, crossed_after=a.crossed_after, run_clock=a.run_clock)
    return 0


def add_parsers(sub):
    _add_run(sub)
    _add_feed(sub)


def _add_run(sub):
    """`engine run` and its options: the fields of app/run_options.py RunConfig (app/config.py reads
    the same from --config)."""
    r = command(sub, "run", cmd_run, help="run the engine: feed -> ring -> pinned strategy loop -> signals",
                description="Run the engine end to end. With no --model the default model is used "
                            "(trained on the synthetic market and cached on first run). On exit "
                            "(--duration over, SIGINT, SIGTERM) prints a summary; progress goes to stderr.")
    for title in run_options.HEADINGS:
        r.heading(title)
    r.add_argument("--config", default=None, help="TOML file with any of these options (ops/engine.toml is a "
                   "commented sample); flags given here win", group="what to run", metavar="FILE",
                   brief="a TOML file of these options (ops/engine.toml)")
    add_arguments(r)


def _wait_help():
    from engine.waits import WAIT_HELP
    return WAIT_HELP


def _named(name):
    """A function app/run_options.py names: a validator, an option set or a mapping (here or in common)."""
    return {f.__name__: f for f in (nonneg_float, nonneg_int, overrides, positive_float, positive_int, pow2,
                                    pub_endpoint, strategy_args, universe, verify_key_arg)}.get(name) or globals()[name]


def add_arguments(p, only=None):
    """The options of `engine run`, each from its RunConfig field (app/run_options.py), in order,
    its common ones under their headings (Opt.group); only: just those fields (another command
    sharing them: `engine backtest` the risk_* ones)."""
    for name, o in run_options.opts():
        if only is not None and name not in only:
            continue
        if o.flag:
            kw = {"default": getattr(run_options.RunConfig, name), "help": o.help, "group": o.group, "brief": o.brief}
            if o.kind is bool:
                kw.update(action=Flag, dest=o.dest or name)
            else:
                if o.many:
                    kw.update(action="append", default=None)
                if o.parse is not None:
                    kw["type"] = _named(o.parse) if isinstance(o.parse, str) else o.parse
                if o.choices is not None:
                    kw["choices"] = o.choices() if callable(o.choices) else o.choices
                if o.metavar:
                    kw["metavar"] = o.metavar
            a = p.add_argument(o.flag, **kw)
            a.help = a.help.replace("%(wait_help)s", _wait_help())  # (--wait's choices, said by engine/waits.py)
        if o.cli is not None:
            _named(o.cli)(p, **({"group": o.group} if o.group else {}))


def check_args(a):
    """What argparse checks for flags, checked again for values that came from --config."""
    for name, o in run_options.opts():  # (a flag's own validator checked its value where it came in: argparse, apply)
        if o.check is not None and not o.check[0](getattr(a, o.dest or name)):
            raise ValueError(f"{o.check[1]}, got {getattr(a, o.dest or name)!r}")
    if not a.paper:  # (a limit on a PnL nobody computes would protect nothing, silently)
        given = [f for f, v in (("--kill-loss", a.kill_loss), ("--kill-drawdown", a.kill_drawdown),
                                ("--paper-exec", a.paper_exec), ("--paper-out", a.paper_out)) if v not in (None, "")]
        if given:
            raise ValueError(f"{given[0]} needs --paper (paper.on in the config): it is about the paper PnL")
    if a.backend not in run_options.backends():
        raise ValueError(f"backend must be one of {', '.join(run_options.backends())}, got {a.backend!r}")


def from_args(a):
    """The RunConfig of a parsed `engine run` command line (--config applied), its values checked."""
    check_args(a)
    kw = {}
    for name, o in run_options.opts():
        if isinstance(o.arg, str):
            kw[name] = _named(o.arg)(a)
        elif o.arg is not None:
            kw[name] = o.arg(a)
        elif hasattr(a, o.dest or name):
            kw[name] = getattr(a, o.dest or name)
    return run_options.RunConfig(**kw)


def paper_exec_arg(v):
    """--paper-exec 'FLAGS': engine backtest's execution flags (app/exec_options.py)."""
    from app.exec_options import paper_exec
    refused(paper_exec, v)
    return v


def risk_instrument(v):
    """--risk-instrument SYMBOL:NAME=VALUE,... (engine/risk_limits.py parse_instrument)."""
    from engine.risk_limits import parse_instrument
    return refused(parse_instrument, v)


# the flags that follow a field's own (its `cli`): aliases and options of the command line only

def no_conflate_arg(p):
    p.add_argument("--no-conflate", dest="conflate", action="store_const", const="off",
                   help="score every tick even when behind (research); the same as --conflate off")


def max_arg(p):
    p.add_argument("--max", action=Flag, help="file and synthetic feeds: publish as fast as possible")  # speed 0 (feed.max)


class _Renamed(argparse.Action):
    """A flag whose name means something else elsewhere: refused with one line naming what to give."""

    def __init__(self, option_strings, dest, say=None, **kw):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kw)
        self.say = say

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} {self.say}")


def backtest_names_arg(p):
    """--instruments and --seed are engine backtest's (and --paper-exec's): the built-in synthetic
    feed's are --sim-instruments and --sim-seed, and the others are refused by name."""
    p.add_argument("--instruments", action=_Renamed, dest="_renamed", default=argparse.SUPPRESS,
                   say="is a TOML file of instrument records (engine backtest --instruments FILE, and "
                       "--paper-exec '--instruments FILE'); the built-in synthetic feed's instrument count is "
                       "--sim-instruments N")
    p.add_argument("--seed", action=_Renamed, dest="_renamed", default=argparse.SUPPRESS,
                   say="is the execution simulator's seed (engine backtest --seed N, and --paper-exec '--seed N'); "
                       "the built-in synthetic feed's seed is --sim-seed N")


def json_arg(p):
    p.add_argument("--json", action=Flag, help="print exactly one JSON object instead of the table")


def crossed_after_and_check_args(p):
    crossed_after_arg(p, run_options.RunConfig.crossed_after)
    check_arg(p)


def crossed_after_arg(q, default):
    q.add_argument("--crossed-after", type=nonneg_float, default=default, metavar="SECONDS",
                   help="the feed counts a book whose best bid stays at or above its best ask for longer than "
                        "this, in exchange time (crossed_books; engine_feed_crossed_books_total; a warning at "
                        "the end of a run) (default %(default)g; 0 = never)")


def _add_feed(sub):
    """`engine feed SOURCE`."""
    f = command(sub, "feed", cmd_feed, help="run a feed handler process writing a tick ring",
                description="Publish ticks from SOURCE into a tick ring until the source ends or "
                            "SIGINT/SIGTERM. ", sources=True)
    f.add_argument("source")
    publisher_args(f)
    f.add_argument("--rate", type=nonneg_float, default=None,
                   help="a synthetic source without rate= in its URI: ticks per second (0 = as fast as possible)")
    f.add_argument("--count", type=positive_int, default=None,
                   help="stop after this many ticks (a synthetic source: or count= in its URI, not both)")
    f.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    crossed_after_arg(f, run_options.RunConfig.crossed_after)


def _run(a, cfg, stop, reload):
    """The run, its summary printed: a table, or (--json) exactly one JSON object on stdout."""
    from app.live import run
    from app.run_summary import as_json, dumps, table
    if not a.json:
        res = run(cfg, stop, reload)
        print(table(res), flush=True)
        return res
    # (whatever a library prints on the way goes to stderr)
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
    return res

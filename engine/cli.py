"""The `engine` command line."""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np

from models.artifact import BACKEND_CHOICES

from .waits import WAIT_HELP


SOURCES_HELP = """
sources:
  synthetic://?instruments=4&rate=100000&seed=1&trade_prob=0.1&gap_us=10&count=0&depth=10
  itch:FILE[?symbols=A,B&date=YYYY-MM-DD&utc_offset=H&on_error=stop|skip&depth=10]   ITCH 5.0 day file (gzip ok)
  moldudp64://HOST:PORT[?rerequest=HOST:PORT&recover_ms=200&iface=ADDR&idle_s=S&symbols=..&depth=10]   live ITCH
  dbn:FILE[?symbols=ESH4&on_error=stop|skip&depth=10]      Databento DBN (MBO, MBP-1, MBP-10, trades; zstd ok)
  binance:FILE[?size_unit=1e-5&depth=10]                   raw Binance websocket capture (gzip ok)
  tickfile:FILE                                            an engine tick file (engine convert, engine record)
  depth=0..32: book levels a side sent as level ticks (0 = none; capped by what the data has); commands
  that run a strategy ask for what it reads (0 for a touch-only strategy) unless the URI says
"""


def _positive_float(s):
    v = float(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
    return v


def _nonneg_float(s):
    v = float(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def _pow2(s):
    v = int(s)
    if v < 2 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"must be a power of two >= 2, got {s}")
    return v


# argparse type= validators shared by every command: a bad value is one line naming the option
# (argparse adds "argument --NAME:"), before any work starts

def _int(s):
    try:
        return int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None


def _positive_int(s):
    v = _int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {s}")
    return v


def _nonneg_int(s):
    v = _int(s)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def _int_range(lo, hi):
    def check(s):
        v = _int(s)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {s}")
        return v
    return check


def _existing_file(s):
    """A readable regular file (a directory, a missing or unreadable path is refused by name)."""
    import stat
    try:
        st = os.stat(s)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{s}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise argparse.ArgumentTypeError(f"{s}: is a directory, not a file")
    if not os.access(s, os.R_OK):
        raise argparse.ArgumentTypeError(f"{s}: permission denied")
    return s


def _npy_file(s):
    """An existing .npy array file (checked by reading its header)."""
    _existing_file(s)
    try:
        np.load(s, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        why = str(e).splitlines()[0] if str(e) else "empty"
        raise argparse.ArgumentTypeError(f"{s}: not a .npy array file ({why})") from None
    return s


def zmq_endpoint(s, bind=True):
    """tcp://HOST:PORT, ipc://PATH (to bind: in an existing directory) or inproc://NAME."""
    s = str(s)
    if s.startswith("tcp://"):
        host, sep, port = s[6:].rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"{s!r} is not tcp://HOST:PORT (PORT 1-65535)")
    elif s.startswith("ipc://"):
        path = s[6:]
        if not path or len(os.fsencode(path)) > 107:
            raise argparse.ArgumentTypeError(f"{s!r}: ipc://PATH needs a path of 1-107 bytes")
        d = os.path.dirname(os.path.abspath(path))
        if bind and not os.path.isdir(d):
            raise argparse.ArgumentTypeError(f"{s!r}: no directory {d}")
    elif not (s.startswith("inproc://") and len(s) > 9):
        raise argparse.ArgumentTypeError(f"{s!r} is not a zmq endpoint (tcp://HOST:PORT or ipc://PATH)")
    return s


def _pub_endpoint(s):
    return s if s in ("", "none") else zmq_endpoint(s, bind=True)


def _sub_endpoint(s):
    return zmq_endpoint(s, bind=False)


def _horizons_ms(s):
    try:
        hz = tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        hz = ()
    if not hz or min(hz) <= 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive milliseconds (e.g. 100,1000), got {s!r}")
    return s


def _latency(s):
    """Order-entry latency: microseconds, or a distribution lognormal:MEDIAN_US,SIGMA or
    uniform:LO_US,HI_US (drawn per order, seeded)."""
    try:
        return _nonneg_float(s)
    except (ValueError, argparse.ArgumentTypeError):
        pass
    kind, _, args = s.partition(":")
    try:
        a, b = (float(x) for x in args.split(","))
    except ValueError:
        a = b = -1.0
    if kind == "lognormal" and a > 0 and b >= 0:
        return s
    if kind == "uniform" and 0 <= a <= b:
        return s
    raise argparse.ArgumentTypeError(f"expected microseconds, lognormal:MEDIAN_US,SIGMA or uniform:LO_US,HI_US, "
                                     f"got {s!r}")


def _read_latencies(path):
    """Recorded order-entry latencies, ns: a .npy array or text, one number a line."""
    import numpy as np
    try:
        v = np.load(path) if path.endswith(".npy") else np.loadtxt(path, ndmin=1)
    except (OSError, ValueError) as e:
        raise ValueError(f"--latency-file {path}: not a list of nanoseconds ({e})") from None
    v = np.asarray(v).reshape(-1)
    if not len(v) or not np.all(np.isfinite(v)) or (v < 0).any():
        raise ValueError(f"--latency-file {path}: needs one or more non-negative nanosecond values")
    return v.astype(np.int64)


def _session(s):
    """A MoldUDP64 session: up to 10 printable ASCII characters (padded with spaces on the wire)."""
    if not 1 <= len(s) <= 10 or not s.isascii() or not s.isprintable():
        raise argparse.ArgumentTypeError(f"a MoldUDP64 session is 1-10 printable ASCII characters, got {s!r} "
                                         f"({len(s)} characters)")
    return s


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """One line, not the usage block: which argument and why, and where to look."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


STRATEGY_HELP = ("strategy: a built-in name (microstructure, depth_imbalance) or a .py file written to the "
                 "contract in README 'Strategies' (default microstructure)")


def exec_args(bt):
    """The execution simulator's options (backtest, sweep)."""
    bt.add_argument("--orders", choices=("strategy", "taker", "maker"), default="strategy",
                    help="taker orders cross the spread and walk the book; maker orders join their touch and wait "
                         "in its queue; strategy (default): the strategy's `maker` param (1 = maker), taker without one")
    bt.add_argument("--latency-us", type=_latency, default=0.0,
                    help="order-entry latency: microseconds (default 0), or a distribution drawn per order: "
                         "lognormal:MEDIAN_US,SIGMA or uniform:LO_US,HI_US")
    bt.add_argument("--latency-file", default=None, type=_existing_file,
                    help="recorded order-entry latencies in ns (.npy, or text one a line), used in order, cycled")
    bt.add_argument("--response-us", type=_nonneg_float, default=0.0,
                    help="order response latency: when a fill is known to the trader (default 0)")
    bt.add_argument("--feed-latency-us", type=_nonneg_float, default=0.0,
                    help="feed latency for files whose receive stamps are not on the exchange's clock (live "
                         "recordings stamp CLOCK_MONOTONIC); captures use their own ts_recv - ts_event")
    bt.add_argument("--queue-power", type=_nonneg_float, default=3.0,
                    help="maker queue model on L2 data: a cancel comes from ahead of us with probability "
                         "ahead^n / (ahead^n + behind^n) (default 3)")
    bt.add_argument("--l3", default=None, metavar="FILE.dbn.zst", type=_existing_file,
                    help="exact FIFO queue positions from this DBN MBO file (the one the tick file was converted from)")
    bt.add_argument("--fee-bps", type=float, default=None,
                    help="taker fee, basis points of notional (default: --instruments, else 0)")
    bt.add_argument("--maker-bps", type=float, default=None,
                    help="maker fee, bp of notional, negative for a rebate (default: --instruments, else 0)")
    bt.add_argument("--per-lot", type=float, default=None,
                    help="fee per lot per fill in the quote currency (default: --instruments, else 0)")
    bt.add_argument("--instruments", default=None, metavar="FILE.toml", type=_existing_file,
                    help="per-instrument multiplier, fees, currency, calendar (replay/instruments.py says how)")
    bt.add_argument("--seed", type=_nonneg_int, default=0, help="seed for drawn latencies (default 0)")


def strategy_args(q):
    """--strategy and --param: every command that runs a strategy's code takes them."""
    q.add_argument("--strategy", default=None, metavar="NAME|FILE.py", help=STRATEGY_HELP)
    q.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set one of the strategy's PARAMS for this run (repeatable); unknown names are an error")


def _overrides(a):
    """--param NAME=VALUE (repeatable), over [strategy.params] from --config."""
    from .strategy_load import parse_params
    return {**(getattr(a, "param_table", None) or {}), **parse_params(a.param)}


def _host(a):
    from .strategy_build import load_host
    return load_host(a.strategy, _overrides(a))


def _trust_ring_owner(user):
    import pwd

    from . import shm
    try:
        uid = int(user) if str(user).isdigit() else pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"--ring-owner {user}: no such user") from None
    shm.trust_uid(uid)


def cmd_run(a):
    from .report import as_json, dumps, table
    from .runner import RunConfig, run

    from .daemon import runtime_dir
    _check_run_args(a)
    if a.ring_owner:
        _trust_ring_owner(a.ring_owner)
    cfg = RunConfig(core=a.core, priority=a.priority, realtime=not a.no_rt, policy=a.policy, wait=a.wait,
                    conflate=a.conflate, strict=a.strict, duration=a.duration, model=a.model,
                    instruments=a.instruments, rate=a.rate, seed=a.seed, feed=a.feed, ring=a.ring, name=a.name,
                    signals_out=a.signals_out, strategy=a.strategy, params=_overrides(a),
                    ring_capacity=a.ring_capacity, keep_rings=a.keep_rings, warm_every=a.warm_every,
                    backend=a.backend, speed=0.0 if a.max else a.speed,
                    http=_http_addr(a.http), pub=None if a.pub in (None, "", "none") else a.pub,
                    token_file=a.token_file or os.path.join(runtime_dir(), f"{a.name}.token"),
                    hlog=None if a.hlog in ("", "none") else (a.hlog or _default_hlog(a.name)),
                    hlog_interval=a.hlog_interval, doctor=not a.no_doctor)
    stop, reload = threading.Event(), threading.Event()

    def on_signal(signum, frame):
        stop.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, lambda signum, frame: reload.set())  # reload --model, swap between ticks
    from .report import warnings
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
    if res.error:  # an output could not be written: the summary above says what it holds
        raise RuntimeError(res.error)
    if a.strict and warnings(res):
        print("engine: --strict: the run lost ticks, dropped signals or read an incomplete file (see the warnings "
              "above)", file=sys.stderr)
        return 1
    return 0


def _http_addr(v):
    if v in (None, "", "none"):
        return None
    from feeds.uri import hostport
    return hostport(v, "HOST:PORT for --http")


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
    if a.core is not None:
        from .rt import check_core
        check_core(a.core)


def cmd_latency_plot(a):
    from .latency_plot import plot
    out = plot(a.file, a.out, stages=a.stage)
    print(out)
    return 0


def cmd_doctor(a):
    from .doctor import run_checks, format_table
    res = run_checks(a.core)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(format_table(res))
    return 1 if any(r["status"] == "fail" for r in res) else 0


def cmd_feed(a):
    from feeds.process import run_feed
    from .rt import die_with_parent

    if a.die_with_parent:
        die_with_parent(signal.SIGTERM)
    run_feed(a.source, a.ring, rate=0.0 if a.max else a.rate, speed=0.0 if a.max else a.speed,
             capacity=a.capacity, wait_consumers=a.wait_consumers, count=a.count, duration=a.duration,
             keep=a.keep)
    return 0


def cmd_convert(a):
    from feeds.convert import convert

    def wire(src):  # a live source (MoldUDP64) ends on SIGINT/SIGTERM with its file complete
        if src.live:
            for s in (signal.SIGINT, signal.SIGTERM):
                signal.signal(s, lambda *_: src.stop())
    res = convert(a.source, a.out, progress=not a.quiet, on_source=wire)
    if a.json:
        print(json.dumps(res))
    else:
        st = " ".join(f"{k}={v}" for k, v in res["stats"].items() if v)
        print(f"{res['out']}: {res['ticks']:,} ticks, {len(res['instruments'])} instruments, "
              f"{res['seconds']:.2f} s" + (f"\n  {st}" if st else "") + (f"\n  {res['note']}" if "note" in res else ""))
    _print_warnings(res.get("warnings", []), a.json)
    return 0


def _print_warnings(ws, json_out=False):
    """An input's or output's warnings (an incomplete tick file...): in the printed summary, or on
    stderr when stdout is one JSON object."""
    for w in ws:
        print(f"engine: warning: {w}" if json_out else f"  warning: {w}", file=sys.stderr if json_out else sys.stdout,
              flush=True)


def cmd_mold_serve(a):
    from feeds.mold_server import Server
    from feeds.uri import hostport
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    srv = Server(a.source, hostport(a.dest), session=a.session.encode(),
                 rerequest=hostport(a.rerequest) if a.rerequest else None, rate=a.rate,
                 drop=a.drop, drop_every=a.drop_every, linger=a.linger, iface=a.iface)
    res = srv.run(stop.is_set)
    if a.json:
        print(json.dumps(res))
    return 0


def _backtest_params(a, hz, marks=None):
    """runner.Params from backtest/sweep options."""
    from replay.runner import Params
    table = {}
    if a.instruments:
        from replay.instruments import load_file
        table = load_file(a.instruments)
    if a.l3 and len(a.files) != 1:
        raise ValueError("--l3 gives the order-by-order data of one tick file: give that one file")
    lat = a.latency_us if isinstance(a.latency_us, str) else None
    if a.latency_file:
        lat = _read_latencies(a.latency_file)
    return Params(model=a.model, backend=a.backend, strategy=a.strategy, params=_overrides(a), horizons_ms=hz,
               latency_ns=0 if isinstance(a.latency_us, str) else int(a.latency_us * 1000), latency=lat,
               fee_bps=a.fee_bps, maker_bps=a.maker_bps, per_lot=a.per_lot, marks=marks, orders=a.orders,
               response_ns=int(a.response_us * 1000), feed_ns=int(a.feed_latency_us * 1000),
               queue_power=a.queue_power, instruments=table, l3=a.l3, seed=a.seed)


def cmd_backtest(a):
    from replay.runner import backtest
    hz = tuple(int(x) for x in a.horizons_ms.split(",") if x.strip())
    if not hz or min(hz) <= 0:
        raise ValueError(f"--horizons-ms needs positive milliseconds, got {a.horizons_ms!r}")
    if a.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {a.workers}")
    marks = None
    if a.conflate_as_recorded:
        from .signal_log import SignalLogError, read_marks
        if len(a.files) != 1:
            raise ValueError("--conflate-as-recorded replays one live run: give the one tick file it read")
        try:
            marks = read_marks(a.conflate_as_recorded)
        except (OSError, SignalLogError) as e:
            raise ValueError(f"--conflate-as-recorded {a.conflate_as_recorded}: {getattr(e, 'strerror', None) or e}") \
                from None
        print(f"[backtest] replaying {len(marks):,} conflation windows from {a.conflate_as_recorded}",
              file=sys.stderr, flush=True)
        from .signal_log import status
        note = status(a.conflate_as_recorded)["note"]  # a run cut short: its marks stop there too
        if note:
            print(f"[backtest] warning: {a.conflate_as_recorded}: {note}", file=sys.stderr, flush=True)
    p = _backtest_params(a, hz, marks)
    summary = backtest(a.files, a.out, p, workers=a.workers, scheduler=a.scheduler, progress=not a.quiet)
    if a.json:
        print(json.dumps(summary, default=str))
    else:
        keys = ["files", "ticks", "signals"] + [k for k in summary if k.startswith("hit_rate")] + \
            ["ic", "pnl", "pnl_gross", "fees", "fills", "maker_fills", "unfilled_lots", "break_even_fee_bps", "sharpe",
             "max_drawdown", "turnover_units", "loop_ticks_per_s", "wall_seconds"]
        for k in keys:
            print(f"  {k:<20} {summary.get(k)}")
        if summary.get("sharpe") is None and summary.get("sharpe_reason"):
            print(f"  {'':<20} (no Sharpe: {summary['sharpe_reason']})")
        print(f"  money in {summary.get('currency')}")
        print(f"  report: {os.path.join(a.out, 'report.md')}")
    _print_warnings(summary.get("warnings", []), a.json)
    return 0


def cmd_sweep(a):
    from replay.sweep import parse_grid, sweep
    from .strategy_build import load_host
    hz = tuple(int(x) for x in a.horizons_ms.split(",") if x.strip())
    p = _backtest_params(a, hz)
    host = load_host(a.strategy, _overrides(a))
    grid = parse_grid(a.grid, host.strategy.param_names)
    rows, computed, cached = sweep(a.files, a.out, p, grid, workers=a.workers, scheduler=a.scheduler,
                                   progress=not a.quiet)
    if a.json:
        print(json.dumps({"cells": len(rows), "computed": computed, "cached": cached, "rows": rows}, default=str))
        return 0
    names = list(grid)
    print(f"[sweep] {len(rows)} parameter sets x {len(a.files)} file(s): {computed} backtests run, {cached} from "
          f"{os.path.join(a.out, 'cells')}")
    best = sorted(rows, key=lambda r: -(r["pnl"] if r["pnl"] is not None else -np.inf))[:10]
    print("  " + "".join(f"{n:>14}" for n in names) + f"{'pnl':>14}{'fills':>8}{'sharpe':>10}")
    for r in best:
        sh = r["sharpe"]
        print("  " + "".join(f"{r[n]:>14g}" for n in names) + f"{r['pnl']:>14.6g}{r['fills']:>8}"
              + (f"{sh:>10.3g}" if sh is not None else f"{'n/a':>10}"))
    print(f"  table: {os.path.join(a.out, 'sweep.parquet')}  heat map: {os.path.join(a.out, 'heatmap.png')}")
    return 0


def cmd_record(a):
    from replay.record import record
    res = record(a.ring, a.out, start="oldest" if a.from_oldest else "now", core=a.core, duration=a.duration,
                 wait=a.wait)
    if a.json:
        print(json.dumps(res))
    return 0


def cmd_replay(a):
    from feeds.process import run_feed
    from feeds.sources import TickFilesSource
    from .rt import die_with_parent
    if a.die_with_parent:
        die_with_parent(signal.SIGTERM)
    src = TickFilesSource(a.files)
    ws = [w for f in src.files for w in f.file.warnings]  # incomplete files: said now and in the summary
    for w in ws:
        print(f"[replay] warning: {w}", file=sys.stderr, flush=True)
    n = run_feed(src.uri, a.ring, speed=0.0 if a.max else a.speed, capacity=a.capacity,
                 wait_consumers=a.wait_consumers, keep=a.keep, source=src)
    print(f"[replay] {n:,} ticks from {len(a.files)} file(s) into {a.ring}", file=sys.stderr, flush=True)
    for w in ws:
        print(f"[replay] warning: {w}", file=sys.stderr, flush=True)
    return 0


def cmd_fpga_generate(a):
    from fpga.export import generate
    from fpga.fixed import FixedPointError
    strategy = None
    if a.strategy or a.param:
        from .strategy_load import load
        strategy = load(a.strategy, _overrides(a))
    try:
        m = generate(a.model, a.out, leaf_bits=a.leaf_bits, max_width=a.max_width, strategy=strategy,
                     say=lambda msg: print(f"[fpga] {msg}", file=sys.stderr, flush=True))
    except FixedPointError as e:
        raise ValueError(str(e)) from None
    v = m["validation"]
    print(f"{a.out}: {m['n_trees']} trees, {m['n_features']} features; leaf agreement {v['leaf_agreement']:.0%} on "
          f"{v['rows']} rows; max |score - XGBoost margin| {v['max_score_error']:.3g} <= bound "
          f"{v['score_error_bound']:.3g}; accumulator {m['acc_bits']} bits; RTL latency {m['rtl_cycles']} cycles "
          f"({m['rtl_cycles'] * 1000 / m['clock_mhz']:.0f} ns at {m['clock_mhz']} MHz)")
    return 0


def cmd_fpga_sim(a):
    from fpga import sim
    from fpga.fixed import FixedPointError
    try:
        res = sim.run(a.dir, rows=a.rows, with_rtl=a.rtl)
    except FixedPointError as e:
        raise ValueError(str(e)) from None
    if a.json:
        print(json.dumps({k: res[k] for k in sim.KEYS}))
    else:
        for k in sim.KEYS + ("latency_ns",):
            print(f"  {k:<20} {res[k]}")
        if not res["cycles_measured"]:
            print("  (cycles: the generator's prediction; --rtl measures them in simulation)")
    ok = res["leaf_agreement"] == 1.0 and res["cpp_bit_exact"] and res["rtl_bit_exact"] in (None, True)
    return 0 if ok else 1


def cmd_fpga_build(a):
    import shutil
    from fpga.export import read
    from fpga.fixed import FixedPointError
    try:
        read(a.dir)
    except FixedPointError as e:
        raise ValueError(str(e)) from None
    hls_dir = os.path.join(a.dir, "hls")
    steps = [(["vitis_hls", "-f", "run_hls.tcl"], hls_dir),
             (["v++", "-l", "--config", "v++.cfg", "-t", a.target, "--platform", a.platform, "engine_tree.xo",
               "-o", "engine_tree.xclbin"], hls_dir)]
    missing = [c[0][0] for c in steps if not shutil.which(c[0][0])]
    if missing:
        print(f"{', '.join(missing)} not found: no AMD/Xilinx tools here, so nothing was built. With Vitis installed "
              f"(source <Vitis>/settings64.sh and /opt/xilinx/xrt/setup.sh) this runs, in {hls_dir}:")
        for cmd, _ in steps:
            print("  " + " ".join(cmd))
        print("then loads engine_tree.xclbin with fpga.driver.CardPredictor (pyxrt), batched or streaming.")
        return 3
    for cmd, cwd in steps:
        print("+ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, cwd=cwd)
        if r.returncode:
            raise RuntimeError(f"{cmd[0]} failed with status {r.returncode}")
    print(os.path.join(hls_dir, "engine_tree.xclbin"))
    return 0


def _int_list(s):
    try:
        return tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated packet numbers, got {s!r}") from None


def cmd_ring_inspect(a):
    from . import shm

    info = shm.inspect(shm.ring_path(a.name))
    if a.json:
        print(json.dumps(info))
        return 0
    for k, v in info.items():
        if k != "consumers":
            print(f"{k:>18}: {v}")
    for c in info.get("consumers", []):
        print(f"{'consumer':>18}: slot {c['slot']} pid {c['pid']} ({'alive' if c['alive'] else 'dead'}) "
              f"cursor {c['cursor']} lag {c['lag']} lost {c['lost']} gaps {c['gaps']}")
    return 0


VERIFY_KEY_HELP = ("refuse every model artifact (and FPGA directory) not signed by this key: an ed25519 public key "
                   "(engine model keygen) or an HMAC secret (default $ENGINE_MODEL_VERIFY_KEY)")
SIGN_KEY_HELP = ("sign what this writes with this private key (ed25519, or an HMAC secret; default "
                 "$ENGINE_MODEL_SIGN_KEY)")


def verify_key_arg(q):
    """--verify-key: every command that loads a model (or runs an FPGA directory) takes it."""
    q.add_argument("--verify-key", default=None, metavar="KEY", help=VERIFY_KEY_HELP)


def _model_keys(a):
    """--verify-key / [model] verify_key and --sign-key: checked now (a bad key file is an error
    before any work) and put in the environment, where every load, the reload and child
    processes find them (models/signing.py)."""
    if not hasattr(a, "verify_key") and not hasattr(a, "sign_key"):
        return
    from models import signing
    if hasattr(a, "verify_key"):
        signing.use_verify_key(a.verify_key)
    if hasattr(a, "sign_key"):
        key = signing.use_sign_key(a.sign_key)
        vkey = signing.verify_key() if key is None and a.cmd in ("train", "compile") else None
        if vkey is not None:  # before the work: write_manifest would refuse it at the end
            raise ValueError(f"a verify key is configured ({vkey.describe()}) but no signing key, so the artifact "
                             f"would be unsigned and refused; give --sign-key PRIVATE_KEY (or {signing.ENV_SIGN})")


def cmd_model_keygen(a):
    from models.signing import keygen
    key_id, paths = keygen(a.out, a.name, use_hmac=a.hmac)
    if a.hmac:
        print(f"{paths[0]}: HMAC-SHA256 secret, key {key_id} (mode 0600). It both signs and verifies: give it as "
              f"--sign-key where models are built and as --verify-key / [model] verify_key where they run")
    else:
        print(f"{paths[0]}: ed25519 private key {key_id} (mode 0600): keep it on the build host; sign with "
              f"`engine train/compile --sign-key {paths[0]}` or `engine model sign DIR --key {paths[0]}`")
        print(f"{paths[1]}: its public key: configure it where models run (--verify-key, [model] verify_key, "
              "ENGINE_MODEL_VERIFY_KEY)")
    return 0


def cmd_model_sign(a):
    from models import signing
    key = signing.load_key(a.key, private=True)
    path, sha = signing.sign_directory(a.dir, key)
    print(f"{a.dir}: signed (sha256 {sha[:16]}...) with {key.describe()} -> {path}")
    return 0


def cmd_model_default(a):
    from models.default import default_model_dir
    print(default_model_dir())
    return 0


def _strategy_now(ident):
    """Does the strategy file the model was trained for still hold that strategy?"""
    if not isinstance(ident, dict):
        return "no strategy (generic)"
    from .strategy_load import StrategyError, load
    try:
        s = load(ident.get("file"))
    except StrategyError as e:
        return f"cannot load it now: {e}"
    return "unchanged" if s.sha256 == ident.get("sha256") else f"changed since (now sha256 {s.sha256[:12]}): refused"


def cmd_model_inspect(a):
    from models import artifact, signing
    m = artifact.read_manifest(a.dir, check_signature=a.verify)  # --verify: refused here, before any dlopen
    m["signature"] = artifact.signature_status(a.dir)
    if signing.signer(a.dir, artifact.MANIFEST):
        m["signed_by"] = signing.signer(a.dir, artifact.MANIFEST)
    if a.verify:
        artifact.load(a.dir)
        m["verified"] = True
        m["strategy_now"] = _strategy_now(m.get("strategy"))
    print(json.dumps(m, indent=2))
    return 0


def _backends(s):
    names = tuple(x.strip() for x in s.split(",") if x.strip())
    if not names or not set(names) <= {"treelite", "flat"}:
        raise argparse.ArgumentTypeError(f"a comma-separated list of treelite, flat; got {s!r}")
    return names


def cmd_train(a):
    from models.training import run_train
    for flag, v, ok in (("--trees", a.trees, a.trees >= 1), ("--depth", a.depth, 1 <= a.depth <= 16),
                        ("--eta", a.eta, a.eta > 0), ("--horizon", a.horizon, a.horizon > 0),
                        ("--ticks", a.ticks, a.ticks >= 1), ("--early-stopping", a.early_stopping, a.early_stopping >= 1)):
        if not ok:
            raise ValueError(f"{flag} {v}: must be {'1..16' if flag == '--depth' else '> 0'}")
    m = run_train(a.sources, a.out, host=_host(a), trees=a.trees, depth=a.depth, eta=a.eta, horizon=a.horizon, unit=a.horizon_unit,
                  labels=a.labels, dead_band_bps=a.dead_band, objective=a.objective, early_stopping=a.early_stopping,
                  ticks=a.ticks, backends=a.backends, seed=a.seed)
    print(json.dumps({"artifact": str(a.out), "trees": m["num_trees"], **m["training"]["test_metrics"]}))
    return 0


def cmd_compile(a):
    from models.training import run_compile
    m = run_compile(a.model, a.out, host=None if a.generic else _host(a), generic=a.generic, backends=a.backends)
    print(json.dumps({"artifact": str(a.out), "trees": m["num_trees"], "generic": m["generic"],
                      "backends": m["validation"]["checked_backends"]}))
    return 0


def cmd_features(a):
    from models.features_out import write_features
    res = write_features(_host(a), a.sources, a.out, ticks=a.ticks, progress=not a.quiet)
    print(json.dumps(res) if a.json else f"{res['out']}: {res['rows']:,} rows x {res['features']} features from "
          f"{res['ticks']:,} ticks ({res['sources']} source(s)), strategy {res['strategy']}")
    return 0


def cmd_predict(a):
    from models.training import predict_file
    if a.backend == "fpga-sim":
        import fpga.backend  # noqa: F401  (registers backend="fpga-sim" with models.artifact)
    used, n = predict_file(a.dir, a.backend, a.input, a.output, a.margin)
    print(f"{n} rows through {used} -> {a.output} ({'margins' if a.margin else 'scores'})", file=sys.stderr)
    return 0


def build_parser():
    p = _Parser(prog="engine", description="Low-latency trading-signal engine.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run the engine: feed -> ring -> pinned strategy loop -> signals",
                       description="Run the engine end to end. With no --model the default model is used "
                                   "(trained on the synthetic market and cached on first run). On exit "
                                   "(--duration over, SIGINT, SIGTERM) prints a summary; progress goes to stderr.")
    r.add_argument("--config", default=None, help="TOML file with any of these options (ops/engine.toml is a "
                   "commented sample); flags given here win")
    r.add_argument("--core", type=int, default=None, help="CPU core for the strategy thread (default: unpinned)")
    r.add_argument("--priority", type=int, default=80, help="SCHED_FIFO priority 1-99 (default 80)")
    r.add_argument("--policy", default="auto", choices=("auto", "fifo", "other"),
                   help="scheduling of the strategy thread: auto (default) = SCHED_FIFO only where RT throttling "
                        "cannot park it (throttling off, or a wait that sleeps), else pinned SCHED_OTHER with "
                        "spin; one line at start says what was chosen and why. fifo|other force it")
    r.add_argument("--wait", default="auto", choices=("auto", "spin", "backoff", "duty"),
                   help="what the loop does while the ring is empty: auto (default: spin); " + WAIT_HELP)
    r.add_argument("--no-rt", action="store_true", help="the same as --policy other")
    r.add_argument("--conflate", default="auto", choices=("auto", "on", "off"),
                   help="when the loop falls behind, fold every waiting tick and score each instrument once, on its "
                        "latest state (counted: conflated). auto (default): on for live sources, off for file "
                        "replays (the file waits for the loop instead: nothing lost, every tick scored)")
    r.add_argument("--no-conflate", dest="conflate", action="store_const", const="off",
                   help="score every tick even when behind (research); the same as --conflate off")
    r.add_argument("--strict", action="store_true",
                   help="fail instead of running unpinned/non-RT/unlocked when the process lacks the rights, "
                        "and exit 1 after the summary when ticks were lost or signals dropped")
    r.add_argument("--duration", type=_positive_float, default=None, help="seconds to run (default: until stopped)")
    r.add_argument("--model", default=None, help="model artifact directory, trained for --strategy (default: the "
                   "strategy's default model, trained on the synthetic market and cached on first use)")
    r.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                   help="model back end: auto = the fastest one that is bit-exact on this machine (default); "
                        "flat = the branch-free kernel (best variant this CPU runs); treelite = TL2cgen code; "
                        "xgboost = XGBoost's own predictor (reference, ~200 us a tick)")
    r.add_argument("--instruments", type=_positive_int, default=4, help="synthetic instruments (default 4)")
    r.add_argument("--rate", type=_nonneg_float, default=50_000.0,
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
    r.add_argument("--speed", type=_positive_float, default=1.0,
                   help="file feeds: replay at the recorded pace times X (default 1); the run ends when the file is played")
    r.add_argument("--max", action="store_true", help="file feeds: publish as fast as possible")
    r.add_argument("--signals-out", default=None,
                   help="signal file (default $XDG_STATE_HOME/engine/signals/NAME-TIME.sig); a .parquet name also gets a table, one row per signal, written at the end")
    strategy_args(r)
    r.add_argument("--warm-every", type=_nonneg_int, default=2048,
                   help="while idle, run the model on the last row every N empty polls to keep it hot "
                        "(halves p50 at low tick rates); 0 = never (default 2048)")
    r.add_argument("--ring-capacity", type=_pow2, default=1 << 18, help="tick ring slots (power of two)")
    r.add_argument("--keep-rings", action="store_true", help="leave the ring files in /dev/shm on exit")
    r.add_argument("--json", action="store_true", help="print exactly one JSON object instead of the table")
    r.add_argument("--http", default="127.0.0.1:9464",
                   help="control plane HTTP: /metrics /health /ready, and /status /control/* with the token "
                        "(default 127.0.0.1:9464; none = off)")
    r.add_argument("--pub", type=_pub_endpoint, default="tcp://127.0.0.1:5556",
                   help="zmq endpoint signals are published on (XPUB: SUB sockets connect): topic = instrument, "
                        "then the 128-byte signal record, then the topic's publication number (uint64 LE: a jump "
                        "is a gap) (default tcp://127.0.0.1:5556; none = off)")
    r.add_argument("--token-file", default=None,
                   help="bearer token for /status and /control/* (default $XDG_RUNTIME_DIR/engine/NAME.token, "
                        "created 0600 if missing)")
    r.add_argument("--hlog", default=None, help="HdrHistogram interval log (default "
                   "$XDG_STATE_HOME/engine/latency/NAME-TIME.hlog; none = off)")
    r.add_argument("--hlog-interval", type=_positive_float, default=10.0, help="seconds per .hlog interval (default 10)")
    r.add_argument("--no-doctor", action="store_true", help="skip the machine check at start")
    verify_key_arg(r)  # [model] verify_key; also checked on every SIGHUP / ctl reload
    r.set_defaults(fn=cmd_run)

    f = sub.add_parser("feed", help="run a feed handler process writing a tick ring",
                       description="Publish ticks from SOURCE into a tick ring until the source ends or "
                                   "SIGINT/SIGTERM. " + SOURCES_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("source")
    def publisher_args(q):
        """What every process that writes a tick ring takes."""
        q.add_argument("--ring", default="engine.ticks", help="ring name in /dev/shm or a path (default engine.ticks)")
        q.add_argument("--speed", type=_positive_float, default=1.0,
                       help="files: the recorded pace times X (default 1)")
        q.add_argument("--max", action="store_true", help="publish as fast as possible")
        q.add_argument("--capacity", type=_pow2, default=1 << 18, help="ring slots (power of two, default 262144)")
        q.add_argument("--wait-consumers", type=_nonneg_int, default=0,
                       help="hold ticks until this many consumers attach")
        q.add_argument("--keep", action="store_true", help="leave the ring file in place on exit")
        q.add_argument("--die-with-parent", action="store_true", help=argparse.SUPPRESS)

    publisher_args(f)
    f.add_argument("--rate", type=_nonneg_float, default=None, help="ticks per second (overrides the URI)")
    f.add_argument("--count", type=_positive_int, default=None, help="stop after this many ticks")
    f.add_argument("--duration", type=_positive_float, default=None, help="stop after this many seconds")
    f.set_defaults(fn=cmd_feed)

    cv = sub.add_parser("convert", help="write a source's normalised ticks to .parquet, .csv or ITCH 5.0",
                        description="Read SOURCE to its end and write its ticks: .parquet or .csv (one column "
                                    "per tick field, prices int64 at 1e-9, sizes as in the record, seq from 0), "
                                    ".itch / .itch.gz (ITCH 5.0 messages through the ITCH writer). The output "
                                    "appears only when complete; a live source (moldudp64://) runs until its "
                                    "session ends or SIGINT, then its file is completed. " + SOURCES_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    cv.add_argument("source")
    cv.add_argument("--out", required=True, help="output file: .parquet, .csv, .itch or .itch.gz")
    cv.add_argument("--quiet", action="store_true", help="no progress lines")
    cv.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    cv.set_defaults(fn=cmd_convert)

    mo = sub.add_parser("moldudp64", help="MoldUDP64 tools")
    mos = mo.add_subparsers(dest="mold_cmd", required=True, metavar="SUBCOMMAND")
    ms_ = mos.add_parser("serve", help="send an ITCH stream as MoldUDP64 packets and answer re-requests",
                         description="Send SOURCE (itch:FILE, or synthetic://?...&count=N through the ITCH writer) "
                                     "to --dest as MoldUDP64 (unicast or multicast), then end the session and "
                                     "linger, answering re-requests on --rerequest. --drop loses chosen packets "
                                     "on purpose, to test gap handling.")
    ms_.add_argument("source")
    ms_.add_argument("--dest", required=True, help="HOST:PORT to send to (a 224-239.x.x.x group for multicast)")
    ms_.add_argument("--rerequest", default=None, help="HOST:PORT to serve re-requests on (default: none)")
    ms_.add_argument("--rate", type=_nonneg_float, default=100_000.0,
                     help="messages per second (0 = flat out; default 100000)")
    ms_.add_argument("--session", type=_session, default="ENGINE0001",
                     help="session name (up to 10 ASCII characters, space-padded)")
    ms_.add_argument("--drop", type=_int_list, default=(), help="data packets to drop, by number from 0 (e.g. 3,17)")
    ms_.add_argument("--drop-every", type=_nonneg_int, default=0, help="drop every Nth data packet")
    ms_.add_argument("--linger", type=_nonneg_float, default=1.0,
                     help="seconds to keep answering re-requests after the end (default 1)")
    ms_.add_argument("--iface", default=None, help="local interface address to send multicast from (e.g. 127.0.0.1)")
    ms_.add_argument("--json", action="store_true", help="print a summary object")
    ms_.set_defaults(fn=cmd_mold_serve)

    rc = sub.add_parser("record", help="record a live tick ring into a tick file",
                        description="Consume ring NAME like any other reader (never slowing its producer; gaps are "
                                    "recorded with their exact counts) and write FILE.ticks until SIGINT/SIGTERM, "
                                    "--duration, or the producer's end of stream, then completes the file; a write "
                                    "that fails (a full disk) stops it with the file marked incomplete, its whole "
                                    "records kept. "
                                    "Run it off the strategy core (--core pins it).")
    rc.add_argument("--ring", required=True, help="ring name in /dev/shm or a path")
    rc.add_argument("--out", required=True, help="tick file to write (.ticks)")
    rc.add_argument("--from-oldest", action="store_true", help="start at the oldest tick still in the ring (default: now)")
    rc.add_argument("--core", type=int, default=None, help="pin the recorder to this core")
    rc.add_argument("--duration", type=_positive_float, default=None, help="stop after this many seconds")
    rc.add_argument("--wait", type=_nonneg_float, default=0.0,
                    help="wait up to this many seconds for the ring to appear")
    rc.add_argument("--json", action="store_true", help="print a summary object at the end")
    rc.set_defaults(fn=cmd_record)

    rp = sub.add_parser("replay", help="play tick files into a ring",
                        description="Publish FILE.ticks (one after another; instruments matched by name) into a "
                                    "tick ring at the recorded pace times --speed, or flat out with --max, for "
                                    "end-to-end runs: `engine run --ring NAME` reads it.")
    rp.add_argument("files", nargs="+", metavar="FILE.ticks", type=_existing_file)
    publisher_args(rp)
    rp.set_defaults(fn=cmd_replay)

    bt = sub.add_parser("backtest", help="run the strategy over tick files and report what its signals were worth",
                        description="Run the live strategy's own per-tick code (features, model, decision) over "
                                    "memory-mapped tick files (engine convert ... --out X.ticks, engine record), "
                                    "deterministically; fill the signals' orders in the execution simulator "
                                    "(latency, queue position, fees); write OUT/signals.parquet (one row per signal) "
                                    "and OUT/report.{md,json} with its plots. Several files run in parallel on Dask "
                                    "with --workers.")
    bt.add_argument("files", nargs="+", metavar="FILE.ticks", type=_existing_file)
    bt.add_argument("--model", default=None, help="model artifact directory (default: the strategy's default model)")
    bt.add_argument("--out", required=True, help="output directory")
    bt.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="model back end (all are bit-exact)")
    bt.add_argument("--workers", type=_positive_int, default=1,
                    help="files in parallel on a Dask LocalCluster of N processes")
    bt.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (tcp://HOST:PORT)")
    exec_args(bt)
    bt.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000",
                    help="hit-rate horizons, ms (default 100,1000,10000)")
    strategy_args(bt)
    bt.add_argument("--conflate-as-recorded", default=None, metavar="SIGNALS.sig",
                    help="replay the conflation of a live run over this file (`engine run --feed tickfile:F "
                         "--conflate on --signals-out S.sig`): the same ticks folded unscored and the same flush "
                         "points, from the marks in its signal file, so the signals are identical")
    bt.add_argument("--quiet", action="store_true", help="no progress lines")
    bt.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    verify_key_arg(bt)
    bt.set_defaults(fn=cmd_backtest)

    sw = sub.add_parser("sweep", help="backtest every cell of a parameter grid over tick files (Dask)",
                        description="A backtest per parameter set of --grid (the strategy's PARAMS and the execution "
                                    "knobs latency_us, response_us, queue_power, fee_bps, maker_bps, per_lot, maker) "
                                    "over the files, on Dask; writes OUT/sweep.parquet (one row per parameter set) "
                                    "and OUT/heatmap.png; finished cells are cached in OUT/cells, so a rerun resumes.")
    sw.add_argument("files", nargs="+", metavar="FILE.ticks", type=_existing_file)
    sw.add_argument("--grid", required=True, metavar="NAME=LO:HI:STEP|V1|V2,...",
                    help="e.g. 'enter_long=0.6:0.8:0.05,latency_us=0|100|500' (the cross product)")
    sw.add_argument("--model", default=None, help="model artifact directory (default: the strategy's default model)")
    sw.add_argument("--out", required=True, help="output directory (its cells/ cache makes reruns resume)")
    sw.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="model back end")
    sw.add_argument("--workers", type=_positive_int, default=1, help="cells in parallel on a Dask LocalCluster")
    sw.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (tcp://HOST:PORT)")
    sw.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000", help="hit-rate horizons, ms")
    exec_args(sw)
    strategy_args(sw)
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--json", action="store_true", help="print every row as one JSON object")
    verify_key_arg(sw)
    sw.set_defaults(fn=cmd_sweep)

    g = sub.add_parser("ring", help="ring tools")
    gs = g.add_subparsers(dest="ring_cmd", required=True, metavar="SUBCOMMAND")
    gi = gs.add_parser("inspect", help="print a ring's header and counters (read-only)")
    gi.add_argument("name", help="ring name in /dev/shm (e.g. engine.ticks) or a path")
    gi.add_argument("--json", action="store_true")
    gi.set_defaults(fn=cmd_ring_inspect)

    m = sub.add_parser("model", help="model tools")
    ms = m.add_subparsers(dest="model_cmd", required=True, metavar="SUBCOMMAND")
    md = ms.add_parser("default", help="build (if needed) the default model and print its directory")
    md.set_defaults(fn=cmd_model_default)
    mi = ms.add_parser("inspect", help="print an artifact's manifest")
    mi.add_argument("dir")
    mi.add_argument("--verify", action="store_true", help="also verify the signature (with a verify key), "
                    "hashes and bit-exactness")
    verify_key_arg(mi)
    mi.set_defaults(fn=cmd_model_inspect)
    mk = ms.add_parser("keygen", help="make a signing key: ed25519 NAME.key (0600) + NAME.pub, or --hmac",
                       description="Write a new ed25519 key pair into DIR: NAME.key (private, mode 0600; signs on "
                                   "the build host) and NAME.pub (public; engine hosts verify with it). --hmac: one "
                                   "HMAC-SHA256 secret NAME.hmac (0600) that both signs and verifies. Never "
                                   "overwrites a key.")
    mk.add_argument("--out", required=True, metavar="DIR", help="directory to write the key files into")
    mk.add_argument("--name", default="model", help="file name stem (default model)")
    mk.add_argument("--hmac", action="store_true", help="an HMAC-SHA256 secret instead of an ed25519 pair")
    mk.set_defaults(fn=cmd_model_keygen)
    msg = ms.add_parser("sign", help="sign an artifact's manifest (or an FPGA directory's fpga.json)",
                        description="Check every file of DIR against its manifest, then sign the manifest's exact "
                                    "bytes (which hold every file's sha256) with --key, writing DIR/manifest.sig "
                                    "(fpga.sig for an FPGA directory). Engines with a verify key refuse anything "
                                    "not signed by it.")
    msg.add_argument("dir", help="model artifact directory, or an FPGA directory")
    msg.add_argument("--key", required=True, metavar="PRIVATE_KEY", help="ed25519 private key or HMAC secret (0600)")
    msg.set_defaults(fn=cmd_model_sign)

    t = sub.add_parser("train", help="train and compile a model for a strategy from tick sources",
                       description="Build a data set from SOURCE(s) with the strategy's own code (the rows `engine "
                                   "features` writes), label it from future mid moves, split by time (train/validation/"
                                   "test with an embargo), train XGBoost with early stopping, print test metrics, and "
                                   "write a verified artifact that records the strategy it was trained for. "
                                   + SOURCES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("sources", nargs="+", metavar="SOURCE", help="e.g. synthetic://?instruments=4&seed=7")
    strategy_args(t)
    t.add_argument("--out", required=True, help="artifact directory to write")
    t.add_argument("--trees", type=_positive_int, default=200, help="maximum trees (default 200)")
    t.add_argument("--depth", type=_int_range(1, 16), default=6, help="tree depth (default 6)")
    t.add_argument("--eta", type=_positive_float, default=0.1, help="learning rate (default 0.1)")
    t.add_argument("--horizon", type=_positive_float, default=20, help="label horizon (default 20)")
    t.add_argument("--horizon-unit", choices=("ticks", "ms"), default="ticks",
                   help="horizon in the instrument's scored ticks or in exchange-time milliseconds")
    t.add_argument("--labels", choices=("binary", "ternary"), default="binary",
                   help="binary: up/down (flat dropped); ternary: +1/0/-1 with --dead-band")
    t.add_argument("--dead-band", type=_nonneg_float, default=0.5,
                   help="ternary: |move| in bps counted as flat (default 0.5)")
    t.add_argument("--objective", choices=("binary:logistic", "reg:squarederror"), default=None,
                   help="default: binary:logistic for binary labels, reg:squarederror for ternary")
    t.add_argument("--early-stopping", type=_positive_int, default=20,
                   help="rounds without improvement before stopping")
    t.add_argument("--ticks", type=_positive_int, default=400_000,
                   help="ticks per synthetic source without count= (default 400000)")
    t.add_argument("--backends", type=_backends, default=("treelite", "flat"), help="back ends to build (default treelite,flat)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--sign-key", default=None, metavar="PRIVATE_KEY", help=SIGN_KEY_HELP)
    t.set_defaults(fn=cmd_train)

    c = sub.add_parser("compile", help="compile an XGBoost model trained elsewhere into an artifact")
    c.add_argument("model", help="XGBoost model (.json or .ubj)")
    c.add_argument("--out", required=True, help="artifact directory to write")
    c.add_argument("--generic", action="store_true",
                   help="no strategy: usable for predict and benchmarks, refused by `engine run`")
    c.add_argument("--backends", type=_backends, default=("treelite", "flat"), help="back ends to build")
    strategy_args(c)
    c.add_argument("--sign-key", default=None, metavar="PRIVATE_KEY", help=SIGN_KEY_HELP)
    c.set_defaults(fn=cmd_compile)

    fe = sub.add_parser("features", help="write a strategy's feature rows (the data set `engine train` uses)",
                        description="Run the strategy over SOURCE(s) exactly as training does and write one row per "
                                    "tick it scores: seq, ts_event, ts_recv, instrument, symbol (and source, with "
                                    "several), then every feature by name. The output appears only when complete. "
                                    + SOURCES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    fe.add_argument("sources", nargs="+", metavar="SOURCE")
    fe.add_argument("--out", required=True, help="output file: .parquet or .csv")
    strategy_args(fe)
    fe.add_argument("--ticks", type=_positive_int, default=400_000,
                    help="ticks per synthetic source without count= (default 400000)")
    fe.add_argument("--quiet", action="store_true", help="no progress lines")
    fe.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    fe.set_defaults(fn=cmd_features)

    pr = sub.add_parser("predict", help="score float32 rows from a .npy file through one back end")
    pr.add_argument("dir", help="model artifact directory")
    pr.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                    help="auto = the fastest bit-exact back end here; xgboost = the reference")
    pr.add_argument("--input", required=True, type=_npy_file, help="float32 rows [n, features], NaN = missing (.npy)")
    pr.add_argument("--output", required=True, help="float32 results (.npy), written atomically")
    pr.add_argument("--margin", action="store_true", help="raw margins instead of probabilities")
    verify_key_arg(pr)
    pr.set_defaults(fn=cmd_predict)

    from .cli_running import add_parsers
    add_parsers(sub)  # signals, ctl, stats: commands that talk to a running engine
    lp = sub.add_parser("latency-plot", help="plot an .hlog's percentile distribution per stage")
    lp.add_argument("file", type=_existing_file, help="HdrHistogram interval log (.hlog)")
    lp.add_argument("--out", required=True, help="PNG to write")
    lp.add_argument("--stage", action="append", help="only these stages (repeatable; default all)")
    lp.set_defaults(fn=cmd_latency_plot)
    dr = sub.add_parser("doctor", help="check how well this machine is tuned for a strategy core",
                        description="Reads the kernel command line, isolated/nohz_full/rcu_nocbs CPUs, governor, "
                                    "C-states and PM QoS, THP, IRQ affinity, RT throttling, swap, memlock and RT "
                                    "limits, clock source and the SMT sibling, and prints pass/warn/fail/n/a with "
                                    "what it read. Exit status 1 if any check fails.")
    dr.add_argument("--core", type=int, default=None, help="the strategy core (default: the last one)")
    dr.add_argument("--json", action="store_true")
    dr.set_defaults(fn=cmd_doctor)
    fp = sub.add_parser("fpga", help="FPGA offload: HLS tree kernel, bit-accurate C++ and RTL simulation",
                        description="generate: exact fixed point, HLS C++ (+ g++ emulation), Verilog, checked against "
                                    "XGBoost; sim: golden vs C++ emulation vs RTL; build: Vitis, where installed. "
                                    "`engine run --backend fpga-sim` runs the engine through the emulation.")
    fps = fp.add_subparsers(dest="fpga_cmd", required=True, metavar="SUBCOMMAND")
    fg = fps.add_parser("generate", help="fixed point + HLS C++ + emulation + RTL from a model")
    fg.add_argument("model", help="engine model artifact directory, or an XGBoost .json model")
    fg.add_argument("--out", required=True, help="directory to write (replaced whole when complete)")
    fg.add_argument("--leaf-bits", type=_positive_int, default=16,
                    help="fractional bits of the rounded leaves (default 16)")
    fg.add_argument("--strategy", default=None, metavar="NAME|FILE.py",
                    help="check the model was trained for this strategy and takes its FEATURES (default: the "
                         "strategy the artifact records)")
    fg.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help=argparse.SUPPRESS)
    fg.add_argument("--max-width", type=_positive_int, default=None,
                    help="cap every feature's integer width (default: as wide as exactness needs, up to 127)")
    verify_key_arg(fg)
    fg.add_argument("--sign-key", default=None, metavar="PRIVATE_KEY", help=SIGN_KEY_HELP + " (writes fpga.sig)")
    fg.set_defaults(fn=cmd_fpga_generate)
    fsim = fps.add_parser("sim", help="run rows through golden model, C++ emulation and (--rtl) the RTL")
    fsim.add_argument("dir")
    fsim.add_argument("--rtl", action="store_true", help="also simulate the Verilog with Icarus (slower)")
    fsim.add_argument("--rows", type=_positive_int, default=None, help="first N validation rows (default all)")
    fsim.add_argument("--json", action="store_true", help="exactly one JSON object")
    verify_key_arg(fsim)
    fsim.set_defaults(fn=cmd_fpga_sim)
    fb = fps.add_parser("build", help="synthesize and link an xclbin with Vitis (where installed)")
    fb.add_argument("dir")
    fb.add_argument("--platform", default="xilinx_u250_gen3x16_xdma_4_1_202210_1")
    fb.add_argument("--target", default="hw", choices=("sw_emu", "hw_emu", "hw"))
    verify_key_arg(fb)
    fb.set_defaults(fn=cmd_fpga_build)
    p._run_parser = r
    return p


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    try:
        if args.cmd == "run":
            from .config import apply
            apply(args, parser._run_parser, argv)
        _model_keys(args)
        rc = args.fn(args)
    except KeyboardInterrupt:
        rc = 130
    except BrokenPipeError as e:
        if not _stdout_gone():
            print(f"engine: error: {e}", file=sys.stderr)
            rc = 2
        else:
            rc = _quiet_broken_pipe()
    except (ValueError, RuntimeError, OSError) as e:
        print(f"engine: error: {e}", file=sys.stderr)
        rc = 2
    if args.cmd in ("run", "feed", "replay", "backtest", "sweep"):
        # Everything is flushed, fsynced and unlinked by now. Tearing down an interpreter with
        # numba/LLVM and XGBoost loaded takes ~300 ms, which a stop "within a second" cannot spare.
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            rc = _quiet_broken_pipe()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _stdout_gone():
    """Is stdout a pipe whose reader has gone (`engine signals show F | head`)?"""
    import select
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in p.poll(0))
    except (OSError, ValueError):
        return False


def _quiet_broken_pipe():
    """The reader of our output went away: stop quietly, as a tool killed by SIGPIPE does (exit
    status 141), with nothing on stderr and nothing more written (Python's own flush at exit
    goes to /dev/null)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())

"""Replay commands: `engine backtest`, `engine sweep` (replay/) and `engine replay` (tick files
played into a ring)."""
import argparse
import contextlib
import json
import os
import signal
import sys

import numpy as np

from models.artifact import BACKEND_CHOICES

from app.run_options import RISK_FIELDS, risk_limits
from .common import (Flag, existing_file, nonneg_float, nonneg_int, overrides, positive_int, print_warnings, universe,
                     merge_arg, publisher_args, strategy_args, verify_key_arg)


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
        return nonneg_float(s)
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


def exec_args(bt):
    """The execution simulator's options (backtest, sweep)."""
    bt.add_argument("--orders", choices=("strategy", "taker", "maker"), default="strategy",
                    help="taker orders cross the spread and walk the book; maker orders join their touch and wait "
                         "in its queue; strategy (default): the strategy's `maker` param (1 = maker), taker without one")
    bt.add_argument("--latency-us", type=_latency, default=0.0,
                    help="order-entry latency: microseconds (default 0), or a distribution drawn per order: "
                         "lognormal:MEDIAN_US,SIGMA or uniform:LO_US,HI_US")
    bt.add_argument("--latency-file", default=None, type=existing_file,
                    help="recorded order-entry latencies in ns (.npy, or text one a line), used in order, cycled")
    bt.add_argument("--response-us", type=nonneg_float, default=0.0,
                    help="order response latency: when a fill is known to the trader (default 0)")
    bt.add_argument("--feed-latency-us", type=nonneg_float, default=0.0,
                    help="feed latency for files whose receive stamps are not on the exchange's clock (live "
                         "recordings stamp CLOCK_MONOTONIC); captures use their own ts_recv - ts_event")
    bt.add_argument("--queue-power", type=nonneg_float, default=3.0,
                    help="maker queue model on L2 data: a cancel comes from ahead of us with probability "
                         "ahead^n / (ahead^n + behind^n) (default 3)")
    bt.add_argument("--l3", default=None, metavar="FILE.dbn.zst", type=existing_file,
                    help="exact FIFO queue positions from this DBN MBO file (the one the tick file was converted from)")
    bt.add_argument("--fee-bps", type=float, default=None,
                    help="taker fee, basis points of notional (default: --instruments, else the venue's published standard "
                         "tier, e.g. 5 for Binance USD-M; 0 where none is known, said in the summary)")
    bt.add_argument("--maker-bps", type=float, default=None,
                    help="maker fee, bp of notional, negative for a rebate (default: --instruments, else the venue's standard "
                         "tier, e.g. 2 for Binance USD-M)")
    bt.add_argument("--per-lot", type=float, default=None,
                    help="fee per lot per fill in the instrument's currency (default: --instruments, else the venue's: CME "
                         "exchange + NFA fees, e.g. 1.40 USD for ES)")
    bt.add_argument("--instruments", default=None, metavar="FILE.toml", type=existing_file,
                    help="per-instrument multiplier, fees, currency, calendar (replay/costs.py says how)")
    bt.add_argument("--seed", type=nonneg_int, default=0, help="seed for drawn latencies (default 0)")


def _backtest_params(a, hz, marks=None):
    """runner.Params from backtest/sweep options."""
    from replay.jobs import Params
    table = {}
    if a.instruments:
        from replay.costs import load_file
        table = load_file(a.instruments)
    if a.l3 and len(a.files) != 1:
        raise ValueError("--l3 gives the order-by-order data of one tick file: give that one file")
    lat = a.latency_us if isinstance(a.latency_us, str) else None
    if a.latency_file:
        lat = _read_latencies(a.latency_file)
    return Params(model=a.model, backend=a.backend, strategy=a.strategy, params=overrides(a), universe=universe(a),
                  horizons_ms=hz,
               latency_ns=0 if isinstance(a.latency_us, str) else int(a.latency_us * 1000), latency=lat,
               fee_bps=a.fee_bps, maker_bps=a.maker_bps, per_lot=a.per_lot, marks=marks, orders=a.orders,
               response_ns=int(a.response_us * 1000), feed_ns=int(a.feed_latency_us * 1000),
               queue_power=a.queue_power, instruments=table, l3=a.l3, seed=a.seed,
               risk=risk_limits(a) if hasattr(a, "risk_mode") else None)


def _unmerge(merged):
    """A failed --merge backtest leaves nothing: its merged file goes (and OUT, if it made it)."""
    if merged:
        path, made = merged
        with contextlib.suppress(OSError):
            os.unlink(path)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))


def cmd_backtest(a):
    from replay.jobs import backtest
    hz = tuple(int(x) for x in a.horizons_ms.split(",") if x.strip())
    if not hz or min(hz) <= 0:
        raise ValueError(f"--horizons-ms needs positive milliseconds, got {a.horizons_ms!r}")
    if a.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {a.workers}")
    marks = None
    if a.conflate_as_recorded:
        from engine.signal_log import SignalLogError, read_marks
        if len(a.files) != 1:
            raise ValueError("--conflate-as-recorded replays one live run: give the one tick file it read")
        try:
            marks = read_marks(a.conflate_as_recorded)
        except (OSError, SignalLogError) as e:
            raise ValueError(f"--conflate-as-recorded {a.conflate_as_recorded}: {getattr(e, 'strerror', None) or e}") \
                from None
        print(f"[backtest] replaying {len(marks):,} conflation windows from {a.conflate_as_recorded}",
              file=sys.stderr, flush=True)
        from engine.signal_log import status
        note = status(a.conflate_as_recorded)["note"]  # a run cut short: its marks stop there too
        if note:
            print(f"[backtest] warning: {a.conflate_as_recorded}: {note}", file=sys.stderr, flush=True)
    p = _backtest_params(a, hz, marks)
    from .run_cmds import check_mode
    check_mode(a)
    merged = None
    if a.merge and len(a.files) > 1:  # (the report names it: it lives in OUT, and goes if the backtest fails)
        from engine.outputs import check_writable
        from replay.merged import write_merged
        from engine.strategy_load import load
        check_writable(a.out, "the backtest report", directory=True)
        depth = load(a.strategy, overrides(a), universe(a)).depth
        made = not os.path.isdir(a.out)
        os.makedirs(a.out, exist_ok=True)
        try:
            merged = (write_merged(a.files, os.path.join(a.out, "merged.ticks"), depth), made)
        except BaseException:
            _unmerge((os.path.join(a.out, "merged.ticks"), made))
            raise
        a.files = [merged[0]]
        print(f"[backtest] merged by receive time into {a.files[0]}", file=sys.stderr, flush=True)
    try:
        summary = backtest(a.files, a.out, p, workers=a.workers, scheduler=a.scheduler, progress=not a.quiet)
    except IndexError as e:  # --check: what boundscheck caught, one line naming the file and function
        _unmerge(merged)
        if not a.check:
            raise
        raise RuntimeError(str(e)) from None
    except BaseException:
        _unmerge(merged)
        raise
    if a.json:
        print(json.dumps(summary, default=str))
    else:
        from replay.report import money_lines
        for line in money_lines(summary):
            print(f"  {line}")
        keys = ["files", "ticks", "signals"] + [k for k in summary if k.startswith("hit_rate")] + \
            ["ic", "fills", "break_even_fee_bps", "sharpe", "max_drawdown", "turnover_units", "loop_ticks_per_s",
             "wall_seconds"]
        for k in keys:
            print(f"  {k:<20} {summary.get(k)}")
        if summary.get("sharpe") is None and summary.get("sharpe_reason"):
            print(f"  {'':<20} (no Sharpe: {summary['sharpe_reason']})")
        print(f"  report: {os.path.join(a.out, 'report.md')}")
    print_warnings(summary.get("warnings", []), a.json)
    return 0


def cmd_sweep(a):
    from replay.sweep import parse_grid, sweep
    from engine.strategy_build import load_host
    hz = tuple(int(x) for x in a.horizons_ms.split(",") if x.strip())
    p = _backtest_params(a, hz)
    host = load_host(a.strategy, overrides(a), universe(a))
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


def cmd_replay(a):
    from feeds.process import run_feed
    from feeds.sources import TickFilesSource
    from engine.realtime import die_with_parent
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


def add_parsers(sub):
    _add_replay(sub)
    _add_backtest(sub)
    _add_sweep(sub)


def _add_replay(sub):
    """`engine replay FILE.ticks...`."""
    rp = sub.add_parser("replay", help="play tick files into a ring",
                        description="Publish FILE.ticks (one after another; instruments matched by name) into a "
                                    "tick ring at the recorded pace times --speed, or flat out with --max, for "
                                    "end-to-end runs: `engine run --ring NAME` reads it.")
    rp.add_argument("files", nargs="+", metavar="FILE.ticks", type=existing_file)
    publisher_args(rp)
    rp.set_defaults(fn=cmd_replay)


def _add_backtest(sub):
    """`engine backtest FILE.ticks... --out DIR`."""
    bt = sub.add_parser("backtest", help="run the strategy over tick files and report what its signals were worth",
                        description="Run the live strategy's own per-tick code (features, model, decision) over "
                                    "memory-mapped tick files (engine convert ... --out X.ticks, engine record), "
                                    "deterministically; fill the signals' orders in the execution simulator "
                                    "(latency, queue position, fees); write OUT/signals.parquet (one row per signal) "
                                    "and OUT/report.{md,json} with its plots. Several files run in parallel on Dask "
                                    "with --workers.")
    bt.add_argument("files", nargs="+", metavar="FILE.ticks", type=existing_file)
    bt.add_argument("--model", default=None, help="model artifact directory (default: the strategy's default model)")
    bt.add_argument("--out", required=True, help="output directory")
    bt.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="model back end (all are bit-exact)")
    bt.add_argument("--workers", type=positive_int, default=1,
                    help="files in parallel on a Dask LocalCluster of N processes")
    bt.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (tcp://HOST:PORT)")
    exec_args(bt)
    bt.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000",
                    help="hit-rate horizons, ms (default 100,1000,10000)")
    strategy_args(bt)
    merge_arg(bt)
    bt.add_argument("--conflate-as-recorded", default=None, metavar="SIGNALS.sig",
                    help="replay the conflation of a live run over this file (`engine run --feed tickfile:F "
                         "--conflate on --signals-out S.sig`): the same ticks folded unscored and the same flush "
                         "points, from the marks in its signal file, so the signals are identical")
    bt.add_argument("--quiet", action=Flag, help="no progress lines")
    bt.add_argument("--json", action=Flag, help="print the summary as one JSON object")
    verify_key_arg(bt)
    from .run_cmds import add_arguments, check_arg
    add_arguments(bt, only=RISK_FIELDS)  # (the risk gate's flags, as `engine run` has them)
    check_arg(bt)
    bt.set_defaults(fn=cmd_backtest)


def _add_sweep(sub):
    """`engine sweep FILE.ticks... --grid ... --out DIR`."""
    sw = sub.add_parser("sweep", help="backtest every cell of a parameter grid over tick files (Dask)",
                        description="A backtest per parameter set of --grid (the strategy's PARAMS and the execution "
                                    "knobs latency_us, response_us, queue_power, fee_bps, maker_bps, per_lot, maker) "
                                    "over the files, on Dask; writes OUT/sweep.parquet (one row per parameter set) "
                                    "and OUT/heatmap.png; finished cells are cached in OUT/cells, so a rerun resumes.")
    sw.add_argument("files", nargs="+", metavar="FILE.ticks", type=existing_file)
    sw.add_argument("--grid", required=True, metavar="NAME=LO:HI:STEP|V1|V2,...",
                    help="e.g. 'enter_long=0.6:0.8:0.05,latency_us=0|100|500' (the cross product)")
    sw.add_argument("--model", default=None, help="model artifact directory (default: the strategy's default model)")
    sw.add_argument("--out", required=True, help="output directory (its cells/ cache makes reruns resume)")
    sw.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="model back end")
    sw.add_argument("--workers", type=positive_int, default=1, help="cells in parallel on a Dask LocalCluster")
    sw.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (tcp://HOST:PORT)")
    sw.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000", help="hit-rate horizons, ms")
    exec_args(sw)
    strategy_args(sw)
    sw.add_argument("--quiet", action=Flag, help="no progress bar")
    sw.add_argument("--json", action=Flag, help="print every row as one JSON object")
    verify_key_arg(sw)
    sw.set_defaults(fn=cmd_sweep)

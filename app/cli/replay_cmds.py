"""Replay commands: `engine backtest`, `engine sweep` (replay/), `engine replay` (tick files
played into a ring) and `engine shadow report` (a run's shadow models against its live one)."""
import argparse
import contextlib
import json
import os
import signal
import sys

import numpy as np

from models.artifact import BACKEND_CHOICES

from app.run_options import RISK_FIELDS, risk_limits
from .common import (Flag, existing_file, overrides, positive_int, print_warnings, universe,
                     merge_arg, publisher_args, strategy_args, verify_key_arg)
from app.exec_options import exec_args, exec_params


def _horizons_ms(s):
    try:
        hz = tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        hz = ()
    if not hz or min(hz) <= 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive milliseconds (e.g. 100,1000), got {s!r}")
    return s


def _backtest_params(a, hz, marks=None):
    """replay.jobs.Params from backtest/sweep options."""
    from replay.jobs import Params
    if a.l3 and len(a.files) != 1:
        raise ValueError("--l3 gives the order-by-order data of one tick file: give that one file")
    from models.registry import resolve_model
    return Params(model=resolve_model(a.model), backend=a.backend, strategy=a.strategy, params=overrides(a), universe=universe(a),
                  horizons_ms=hz, marks=marks, risk=risk_limits(a) if hasattr(a, "risk_mode") else None,
                  **exec_params(a))


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
    marks, kills, pauses = _recorded_moves(a) if a.conflate_as_recorded else (None, None, None)
    p = _backtest_params(a, hz, marks)
    p.kills, p.pauses = kills, pauses
    from .run_cmds import check_mode
    check_mode(a)
    merged = _merge_inputs(a) if a.merge and len(a.files) > 1 else None
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
        _print_backtest(summary, a.out)
    print_warnings(summary.get("warnings", []), a.json)
    return 0


def _recorded_moves(a):
    """--conflate-as-recorded RUN.sig: (conflation marks, kill switch moves, pause moves) of the run,
    said on stderr (with what keeps this backtest from being the run's)."""
    from engine.signal_log import SignalLogError, model_swaps, read_kills, read_marks, read_pauses, read_records
    if len(a.files) != 1 and not a.merge:  # (with --merge the files are one stream: the run's, over them)
        raise ValueError("--conflate-as-recorded replays one live run: give the one tick file it read (or the "
                         "files it read as feeds, with --merge)")
    try:
        recs = read_records(a.conflate_as_recorded)
        marks, kills, pauses, swaps = read_marks(recs), read_kills(recs), read_pauses(recs), model_swaps(recs)
    except (OSError, SignalLogError) as e:
        raise ValueError(f"--conflate-as-recorded {a.conflate_as_recorded}: {getattr(e, 'strerror', None) or e}") \
            from None
    # (said even with --quiet: what the backtest replays is part of its result, not progress)
    print(f"[backtest] replaying {len(marks):,} conflation windows, {len(kills):,} kill switch moves and "
          f"{len(pauses):,} pause moves from {a.conflate_as_recorded}", file=sys.stderr, flush=True)
    from engine.signal_log import status
    note = status(a.conflate_as_recorded)["note"]  # a run cut short: its marks stop there too
    if note:
        print(f"[backtest] warning: {a.conflate_as_recorded}: {note}", file=sys.stderr, flush=True)
    if len(swaps) > 1:  # (one model here: its signals are the run's only where the run scored with it)
        print(f"[backtest] warning: {a.conflate_as_recorded}: the run swapped models "
              f"({', '.join(f'generation {g} from tick {t:,}' for g, t in swaps)}); this backtest scores "
              "every tick with one model, so only that model's stretch of the run can match",
              file=sys.stderr, flush=True)
    return marks, kills, pauses


def _merge_inputs(a):
    """--merge: the files merged by receive time into OUT/merged.ticks, which a.files then names (the
    report names it: it lives in OUT, and goes if the backtest fails); returns (path, OUT was made)."""
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
    if not a.quiet:
        print(f"[backtest] merged by receive time into {a.files[0]}", file=sys.stderr, flush=True)
    return merged


def _print_backtest(summary, out):
    """The backtest's summary lines (the money per currency first), and where its report is."""
    from replay.report import money_lines
    for line in money_lines(summary):
        print(f"  {line}")
    keys = ["files", "ticks", "signals"] + [k for k in summary if k.startswith("hit_rate")] + \
        ["ic", "fills", "break_even_fee_bps", "sharpe", "max_drawdown", "turnover_units", "loop_ticks_per_s",
         "wall_seconds"]
    from engine import signal_counts
    for k in keys:
        v = summary.get(k)
        if k == "signals" and summary.get("signal_counts"):  # (published; the rest beside: one definition)
            v = signal_counts.detail(summary["signal_counts"])
        print(f"  {k:<20} {v}")
    cut = signal_counts.cuts((summary.get("risk") or {}).get("blocked", {}))
    if cut:
        print(f"  {'risk: cut':<20} {cut}")
    if summary.get("sharpe") is None and summary.get("sharpe_reason"):
        print(f"  {'':<20} (no Sharpe: {summary['sharpe_reason']})")
    print(f"  report: {os.path.join(out, 'report.md')}")


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
    from feeds.core.sources import TickFilesSource
    from engine.realtime import die_with_parent
    if a.die_with_parent:
        die_with_parent(signal.SIGTERM)
    src = TickFilesSource(a.files)
    ws = [w for f in src.files for w in f.file.warnings]  # incomplete files: said now and in the summary
    for w in ws:
        print(f"[replay] warning: {w}", file=sys.stderr, flush=True)
    n = run_feed(src.uri, a.ring, speed=0.0 if a.max else a.speed, capacity=a.capacity,
                 wait_consumers=a.wait_consumers, wait_timeout=a.wait_timeout, keep=a.keep, quiet=a.quiet, source=src)
    print(f"[replay] {n:,} ticks from {len(a.files)} file(s) into {a.ring}", file=sys.stderr, flush=True)
    for w in ws:
        print(f"[replay] warning: {w}", file=sys.stderr, flush=True)
    return 0


def add_parsers(sub):
    _add_replay(sub)
    _add_backtest(sub)
    _add_sweep(sub)
    _add_shadow(sub)


def cmd_shadow_report(a):
    from replay.jobs import Params
    from app.shadow_report import lines, report
    from engine.strategy_load import load
    values = load(a.strategy, overrides(a), universe(a)).values
    hz = tuple(int(x) for x in a.horizons_ms.split(","))
    rep = report(a.signals, a.ticks, Params(horizons_ms=hz, **exec_params(a)), values)
    if a.json:
        print(json.dumps(rep))
    else:
        print("\n".join(lines(rep)))
    return 0


def _add_shadow(sub):
    """`engine shadow report RUN.sig`."""
    sh = sub.add_parser("shadow", help="shadow models: a run's candidates against its live model")
    ss = sh.add_subparsers(dest="shadow_cmd", required=True, metavar="SUBCOMMAND")
    r = ss.add_parser("report", help="compare a run's shadows (engine run --shadow) with its live model",
                      description="Each shadow's signal file beside RUN.sig (RUN.shadow-NAME.sig) against the live "
                                  "one, on the same ticks: signals, agreement (the share of decision points where "
                                  "both hold the same target), score correlation on the ticks both decided, and with "
                                  "--ticks (the run's recording) each model's PnL through "
                                  "engine backtest's execution simulator with the execution flags below.")
    r.add_argument("signals", metavar="RUN.sig", type=existing_file, help="the live run's signal file")
    r.add_argument("--ticks", type=existing_file, default=None, metavar="REC.ticks", group="what to compare",
                   help="the run's recording (what engine run recorded): each model's PnL on it")
    r.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000", help="hit-rate horizons, ms")
    exec_args(r)
    r.show("how orders fill", COMMON_EXEC)
    strategy_args(r, group="what to compare")
    r.add_argument("--json", action=Flag, help="print the report as one JSON object", group="what it writes")
    r.set_defaults(fn=cmd_shadow_report)


def _add_replay(sub):
    """`engine replay FILE.ticks...`."""
    rp = sub.add_parser("replay", help="play tick files into a ring",
                        description="Publish FILE.ticks (one after another; instruments matched by name) into a "
                                    "tick ring at the recorded pace times --speed, or flat out with --max, for "
                                    "end-to-end runs: `engine run --ring NAME` reads it.")
    rp.add_argument("files", nargs="+", metavar="FILE.ticks", type=existing_file)
    publisher_args(rp)
    rp.set_defaults(fn=cmd_replay)


# the execution flags (app/exec_options.py) --help lists, and their one lines there
COMMON_EXEC = {"--orders": "taker, maker, or the strategy's `maker` param",
               "--latency-us": "order-entry latency, us, or a distribution",
               "--fee-bps": "taker fee, bp of notional (default: the venue's)"}


def _model_and_dask_args(p, out_help, unit):
    """backtest's and sweep's model (what _backtest_params reads), output directory and Dask cluster."""
    p.add_argument("--model", default=None, help="model artifact directory, or registry:NAME[@VERSION] (engine model "
                   "list; default: the strategy's default model)", group="what to run",
                   brief="a model directory or registry:NAME[@VERSION]")
    p.add_argument("--out", required=True, metavar="DIR", help=out_help, group="what it writes")
    p.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="model back end (all are bit-exact)")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N", group="where it runs",
                   help=f"{unit} in parallel on a Dask LocalCluster of N processes")
    p.add_argument("--scheduler", default=None, help="address of an existing Dask scheduler (tcp://HOST:PORT)")


def _add_backtest(sub):
    """`engine backtest FILE.ticks... --out DIR`."""
    bt = sub.add_parser("backtest", help="run the strategy over tick files and report what its signals were worth",
                        description="Run the live strategy's own per-tick code (features, model, decision) over "
                                    "memory-mapped tick files (engine convert ... --out X.ticks, engine record), "
                                    "deterministically; fill the signals' orders in the execution simulator "
                                    "(latency, queue position, fees); write OUT/signals.parquet (one row per signal) "
                                    "and OUT/report.{md,json} with its plots. Several files run in parallel on Dask "
                                    "with --workers.")
    bt.headings("what to run", "how orders fill", "what it writes", "where it runs")
    bt.add_argument("files", nargs="+", metavar="FILE.ticks", type=existing_file,
                    help="tick files (engine convert, engine record, engine run --record)")
    strategy_args(bt, group="what to run")
    _model_and_dask_args(bt, "output directory", "files")
    exec_args(bt)
    bt.show("how orders fill", COMMON_EXEC)
    bt.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000",
                    help="hit-rate horizons, ms (default 100,1000,10000)")
    merge_arg(bt)
    bt.add_argument("--conflate-as-recorded", default=None, metavar="SIGNALS.sig",
                    help="replay a live run over this file (`engine run --feed tickfile:F --signals-out S.sig`, "
                         "or the recording of `engine run --record F`) as it ran, from the marks in its signal file: its "
                         "conflation (the same ticks folded unscored, the same flush points), its kill switch "
                         "(killed and resumed before the same ticks) and its pauses (`engine ctl pause/resume`: "
                         "nothing decided between the same ticks), so the signals are identical")
    bt.add_argument("--quiet", action=Flag, help="no progress lines")
    bt.add_argument("--json", action=Flag, help="print the summary as one JSON object", group="what it writes")
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
    sw.headings("what to run", "how orders fill", "what it writes", "where it runs")
    sw.add_argument("files", nargs="+", metavar="FILE.ticks", type=existing_file, help="tick files")
    sw.add_argument("--grid", required=True, metavar="NAME=LO:HI:STEP|V1|V2,...", group="what to run",
                    help="e.g. 'enter_long=0.6:0.8:0.05,latency_us=0|100|500' (the cross product)")
    strategy_args(sw, group="what to run")
    _model_and_dask_args(sw, "output directory (its cells/ cache makes reruns resume)", "cells")
    sw.add_argument("--horizons-ms", type=_horizons_ms, default="100,1000,10000", help="hit-rate horizons, ms")
    exec_args(sw)
    sw.show("how orders fill", COMMON_EXEC)
    sw.add_argument("--quiet", action=Flag, help="no progress bar")
    sw.add_argument("--json", action=Flag, help="print every row as one JSON object", group="what it writes")
    verify_key_arg(sw)
    sw.set_defaults(fn=cmd_sweep)

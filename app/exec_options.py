"""The execution simulator's options (replay/execsim.py): `engine backtest` and `engine sweep` take
them as flags, `engine run --paper` as one string of the same flags (--paper-exec, and `engine
model train --gate-exec`), so a paper run and the backtest of its recording are asked for in the
same words. Below the command line: the run parses --paper-exec with them too."""
import argparse
import math
import shlex

from .arg_types import existing_file, finite_float, nonneg_float, nonneg_int


def _latency(s):
    """Order-entry latency: microseconds, or a distribution lognormal:MEDIAN_US,SIGMA or
    uniform:LO_US,HI_US (drawn per order, seeded), each number finite."""
    try:
        return nonneg_float(s)
    except (ValueError, argparse.ArgumentTypeError):
        pass
    kind, _, args = s.partition(":")
    try:
        a, b = (float(x) for x in args.split(","))
    except ValueError:
        a = b = -1.0
    if not (math.isfinite(a) and math.isfinite(b)):
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
    bt.add_argument("--fee-bps", type=finite_float, default=None,
                    help="taker fee, basis points of notional (default: --instruments, else the venue's published standard "
                         "tier, e.g. 5 for Binance USD-M; 0 where none is known, said in the summary)")
    bt.add_argument("--maker-bps", type=finite_float, default=None,
                    help="maker fee, bp of notional, negative for a rebate (default: --instruments, else the venue's standard "
                         "tier, e.g. 2 for Binance USD-M)")
    bt.add_argument("--per-lot", type=finite_float, default=None,
                    help="fee per lot per fill in the instrument's currency (default: --instruments, else the venue's: CME "
                         "exchange + NFA fees, e.g. 1.40 USD for ES)")
    bt.add_argument("--instruments", default=None, metavar="FILE.toml", type=existing_file,
                    help="per-instrument multiplier, fees, currency, calendar (replay/costs.py says how)")
    bt.add_argument("--fx", action="append", default=None, metavar="BASE/QUOTE=RATE",
                    help="a rate for a total in one currency of money made in several (repeatable, one QUOTE: "
                         "USDT/USD=1.0 is 1 USDT = 1.0 USD); the total is said to be converted, at these rates; "
                         "without: each currency's money apart, never added")
    bt.add_argument("--seed", type=nonneg_int, default=0, help="seed for drawn latencies (default 0)")


def exec_params(a):
    """The execution fields of replay.jobs.Params from exec_args' options."""
    from replay.currency import parse_fx
    table = {}
    if a.instruments:
        from replay.costs import load_file
        table = load_file(a.instruments)
    lat = a.latency_us if isinstance(a.latency_us, str) else None
    if a.latency_file:
        lat = _read_latencies(a.latency_file)
    return dict(latency_ns=0 if isinstance(a.latency_us, str) else int(a.latency_us * 1000), latency=lat,
                fee_bps=a.fee_bps, maker_bps=a.maker_bps, per_lot=a.per_lot, orders=a.orders,
                response_ns=int(a.response_us * 1000), feed_ns=int(a.feed_latency_us * 1000),
                queue_power=a.queue_power, instruments=table, l3=a.l3, seed=a.seed, fx=parse_fx(a.fx))


class _Refuse(argparse.ArgumentParser):
    """A parser whose errors are raised (a ValueError), not printed with an exit."""

    def error(self, message):
        raise ValueError(message)


def paper_exec(s, flag="--paper-exec"):
    """--paper-exec 'FLAGS' (e.g. '--latency-us 200 --fee-bps 4'; also train's --gate-exec: flag):
    replay.jobs.Params with the execution of `engine backtest ... FLAGS`; a ValueError says what is
    wrong."""
    from replay.jobs import Params
    p = _Refuse(prog=flag, add_help=False)
    exec_args(p)
    try:
        words = shlex.split(s or "")
    except ValueError as e:
        raise ValueError(f"{flag} {s!r}: {e}") from None
    try:
        a = p.parse_args(words)
    except ValueError as e:
        raise ValueError(f"{flag} {s!r}: {e}") from None
    if a.l3:  # (one file's order-by-order data: a live run has none, a gate several days)
        raise ValueError(f"{flag}: --l3 replays one file's order-by-order data; not here")
    return Params(**exec_params(a))

"""The shipped lead_lag example, as README gives it, on the two same-day Binance captures in
../shared/data (USD-M BTCUSDT perpetual leading spot BTCUSDT): convert both, train, backtest the
merged stream, run the two files through `engine run --max` and paced (--speed 20), each the whole
command a user types. It writes what README quotes of it (the model's test metrics, the backtest's
signals and money, the runs' signals and whether they are the backtest's bit for bit) to
bench/results/lead_lag.json. No peer: these are the example's own figures, not a speed.

    python bench/lead_lag.py [--quick]   (--quick: --max only, no paced run)
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import _common
from _common import ROOT

DATA = ROOT.parent / "shared" / "data" / "binance"
ENGINE = [sys.executable, "-m", "app"]
QUIET = ("--no-rt", "--no-doctor", "--http", "none", "--pub", "none")


def engine(*args, cwd):
    r = subprocess.run([*ENGINE, *args], cwd=cwd, capture_output=True, text=True, timeout=3600,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        raise SystemExit(f"engine {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r.stdout


def same_signals(a, b):
    """Do two signal files (the run's .sig) and a backtest's signals.parquet hold the same decisions?"""
    import numpy as np
    import pyarrow.parquet as pq

    from engine.records import SIGNAL_FLAG_MARK
    from engine.signal_log import read_signals
    s = read_signals(a)
    s = s[(s["flags"] & SIGNAL_FLAG_MARK) == 0]
    t = pq.read_table(b)
    return len(s) == t.num_rows and all(
        np.array_equal(s[c], t.column(c).to_numpy().astype(s[c].dtype))
        for c in ("tick_seq", "instrument", "ts_recv", "position", "margin", "flags"))


def main():
    a = _common.args(__doc__.split("\n\n")[0])
    if not (DATA / "usdm_btcusdt_20240808.gz").exists():
        raise SystemExit(f"needs the captures in {DATA}")
    with tempfile.TemporaryDirectory() as d:
        for m in ("usdm", "spot"):
            engine("convert", f"binance:{DATA / f'{m}_btcusdt_20240808.gz'}", "--out", f"{m}.ticks", "--quiet", cwd=d)
        engine("train", "--strategy", "lead_lag", "--merge", "tickfile:usdm.ticks", "tickfile:spot.ticks", "--out", "ll",
               "--horizon", "500", "--horizon-unit", "ms", cwd=d)
        tr = json.loads((Path(d) / "ll" / "manifest.json").read_text())["training"]
        bt = json.loads(engine("backtest", "--strategy", "lead_lag", "--model", "ll", "--merge", "usdm.ticks",
                               "spot.ticks", "--out", "bt", "--quiet", "--json", cwd=d))
        runs = {}
        for label, pace in (("max", ("--max",)), ("speed20", ("--speed", "20")))[:1 if a.quick else 2]:
            r = json.loads(engine("run", *QUIET, "--json", "--strategy", "lead_lag", "--model", "ll", "--feed",
                                  "tickfile:usdm.ticks", "--feed", "tickfile:spot.ticks", *pace, "--signals-out",
                                  f"{label}.sig", "--name", f"bench-ll-{label}", cwd=d))
            runs[label] = {"ticks": r["ticks"], "signals": r["signals"],
                           "signals_equal_backtest": int(same_signals(Path(d) / f"{label}.sig",
                                                                       Path(d) / "bt" / "signals.parquet"))}
    tm = tr["test_metrics"]
    metrics = {"train_rows": sum(tr["rows"].values()), "test_rows": tr["rows"]["test"], "trees": tr["trees_kept"],
               "test_auc": round(tm["auc"], 4), "test_accuracy": round(tm["accuracy"], 4),
               "backtest_ticks": bt["ticks"], "backtest_signals": bt["signals"],
               "hit_rate_100ms": bt["hit_rate_100ms"], "hit_rate_1000ms": bt["hit_rate_1000ms"], "ic": bt["ic"],
               "pnl": bt["pnl"], "pnl_gross": bt["pnl_gross"], "fees": bt["fees"],
               "break_even_fee_bps": bt["break_even_fee_bps"],
               **{f"run_{k}_{f}": v for k, r in runs.items() for f, v in r.items()}}
    for k, v in metrics.items():
        print(f"  {k:<36} {v}")
    _common.save("lead_lag", metrics, {}, {})


if __name__ == "__main__":
    main()

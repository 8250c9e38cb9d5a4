"""`engine run --paper` (app/paper.py): the backtest's execution simulator online on the loop's ticks
and signals. Its report is the one a backtest of the run's recording writes, with the same execution
flags (the same fills, fees and PnL to the last digit), the online simulation reaches the same
fills, and a paper drawdown past --kill-drawdown or a loss past --kill-loss kills the run (every
instrument flat, entries refused)."""
import json
import os

import numpy as np
import pytest

from engine.signal_log import read_signals
from tests.conftest import strategy_core
from tests.helpers.daemon import Daemon, wait_until
from tests.helpers.feedutil import cli
from tests.test_replay import REAL, ticks_file


# the same execution flags given to the paper run (--paper-exec) and to the recording's backtest
EXEC = "--latency-us 150 --fee-bps 3 --maker-bps -0.5"


@pytest.mark.parametrize("feed,exec_flags", [("synthetic", EXEC), ("binance", "")])
def test_paper_report_equals_the_backtest_of_the_recording(tmp_path, default_model, feed, exec_flags):
    if feed == "binance" and not REAL["binance"].exists():
        pytest.skip("../shared/data is not here (a user's clone); CI has it")
    src = ticks_file(tmp_path, "synthetic://?instruments=4&count=40000&seed=12" if feed == "synthetic" else
                     f"binance:{REAL['binance']}")
    rec, out, sig = tmp_path / "rec.ticks", tmp_path / "paper", tmp_path / "s.sig"
    r = cli("run", "--no-rt", "--core", str(strategy_core()), "--feed", f"tickfile:{src}", "--max", "--signals-out",
            str(sig), "--record", str(rec), "--paper", "--paper-out", str(out), "--paper-exec", exec_flags, "--json",
            "--name", f"paper{id(tmp_path) % 10**6}", timeout=600)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["paper"]
    why = (p, r.stderr[-3000:])  # (what it read and said, should this fail)
    assert p["out"] == str(out) and p["error"] is None and p["gaps"] == 0 and p["unmatched_signals"] == 0, why
    assert p["signals"] == len(read_signals(sig)), why
    from engine.tickfile import TickFile
    assert p["ticks"] == len(TickFile(src))
    b = cli("backtest", str(rec), "--out", str(tmp_path / "bt"), "--quiet", "--json", *exec_flags.split(),
            timeout=600)
    assert b.returncode == 0, b.stderr
    bt = json.loads(b.stdout)
    assert bt["fills"] == p["fills"] > 20 and bt["fees"] == p["fees"] and bt["pnl"] == p["pnl"], (bt, p)
    assert bt["pnl_gross"] == p["pnl_gross"] and bt["signals"] == p["signals"]
    # the report is the one a backtest writes, with the same figures (bar the run's own: times, inputs)
    rep = json.loads((out / "report.json").read_text())
    btr = json.loads((tmp_path / "bt" / "report.json").read_text())
    same = ("pnl", "pnl_gross", "fees", "fills", "maker_fills", "trades", "turnover_notional", "max_drawdown",
            "sharpe", "hit_rate_1000ms", "execution", "instruments", "currency", "money_warnings")
    assert {k: rep.get(k) for k in same} == {k: btr.get(k) for k in same}
    assert rep["paper"]["online"] == p["online"] and rep["title"] == "Paper trading"
    assert {f.name for f in (tmp_path / "bt").iterdir()} <= {f.name for f in out.iterdir()}
    assert (out / "report.md").read_text().startswith("# Paper trading")
    import pyarrow.parquet as pq
    ours, theirs = pq.read_table(out / "signals.parquet"), pq.read_table(tmp_path / "bt" / "signals.parquet")
    assert ours.schema.names == theirs.schema.names and ours.num_rows == theirs.num_rows == p["signals"]
    for col in set(ours.schema.names) - {"ts_signal", "ts_wall"}:  # (when the live loop wrote them: its own)
        x, y = (t[col].to_numpy(zero_copy_only=False) for t in (ours, theirs))
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), col
    # the simulation as it ran met the same fills, and marks the same PnL to the cent
    assert p["online"]["fills"] == p["fills"] and p["online"]["late_orders"] == 0
    assert round(p["online"]["net"], 2) == round(p["pnl"], 2)


@pytest.mark.parametrize("limit", ["drawdown", "loss"])
def test_a_paper_limit_kills_the_run(tmp_path, default_model, limit):
    name = f"enginetest-paper-{os.getpid()}"
    d = Daemon(tmp_path, name, "--feed", "synthetic://?instruments=4&seed=3&rate=20000", "--paper",
               f"--kill-{limit}", "0.01", core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        wait_until(lambda: d.status()["paper"]["fills"] > 0, "paper fills")
        wait_until(lambda: d.status()["risk"]["killed"] == limit, f"killed by the paper {limit}")
        st = d.status()
        assert st["paper"]["drawdown"] > 0.01 if limit == "drawdown" else st["paper"]["pnl_net"] < -0.01, st
        r = cli("ctl", "risk", "--name", name)
        assert f"killed: {limit}" in r.stdout, r.stdout
        r = cli("stats", "--name", name)
        assert r.returncode == 0 and "  paper: pnl net " in r.stdout and f"KILLED ({limit})" in r.stdout, r.stdout
        from tests.helpers.daemon import scrape
        m = scrape(d)[0]
        assert m["engine_killed"][()] == 1 and m["engine_paper_fills_total"][()] > 0
        assert set(m["engine_paper_pnl"]) == {(("kind", "net"),), (("kind", "gross"),)}
        from app.daemon import PAPER_METRICS
        assert set(PAPER_METRICS) <= set(m), set(PAPER_METRICS) - set(m)
    finally:
        d.stop()
    assert f"KILLED ({limit})" in d.log()
    recs = read_signals(d.sig_path)
    assert ((recs["flags"] & 8) != 0).any()

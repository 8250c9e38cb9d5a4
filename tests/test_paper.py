"""`engine run --paper` (app/paper.py): the backtest's execution simulator online on the loop's ticks
and signals. Its figures equal a backtest of the run's recording (the same fills, fees and PnL to
the last digit), the online simulation reaches the same fills, and a paper drawdown past
--kill-drawdown kills the run (every instrument flat, entries refused)."""
import json
import os

import pytest

from engine.signal_log import read_signals
from tests.conftest import strategy_core
from tests.helpers.daemon import Daemon, wait_until
from tests.helpers.feedutil import cli
from tests.test_replay import REAL, ticks_file


@pytest.mark.parametrize("feed", ["synthetic", "binance"])
def test_paper_figures_equal_the_backtest_of_the_recording(tmp_path, default_model, feed):
    if feed == "binance" and not REAL["binance"].exists():
        pytest.skip("../shared/data is not here (a user's clone); CI has it")
    src = ticks_file(tmp_path, "synthetic://?instruments=4&count=40000&seed=12" if feed == "synthetic" else
                     f"binance:{REAL['binance']}")
    rec, out, sig = tmp_path / "rec.ticks", tmp_path / "paper.json", tmp_path / "s.sig"
    r = cli("run", "--no-rt", "--core", str(strategy_core()), "--feed", f"tickfile:{src}", "--max", "--signals-out",
            str(sig), "--record", str(rec), "--paper", "--paper-out", str(out), "--json",
            "--name", f"paper{id(tmp_path) % 10**6}", timeout=600)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["paper"]
    assert json.loads(out.read_text()) == p and p["out"] == str(out)
    assert p["signals"] == len(read_signals(sig)) and p["gaps"] == 0 and p["error"] is None
    from engine.tickfile import TickFile
    assert p["ticks"] == len(TickFile(src))
    b = cli("backtest", str(rec), "--out", str(tmp_path / "bt"), "--quiet", "--json", timeout=600)
    assert b.returncode == 0, b.stderr
    bt = json.loads(b.stdout)
    assert bt["fills"] == p["fills"] > 20 and bt["fees"] == p["fees"] and bt["pnl"] == p["pnl"], (bt, p)
    assert bt["pnl_gross"] == p["pnl_gross"] and bt["signals"] == p["signals"]
    # the simulation as it ran met the same fills, and marks the same PnL to the cent
    assert p["online"]["fills"] == p["fills"] and p["online"]["late_orders"] == 0
    assert round(p["online"]["net"], 2) == round(p["pnl"], 2)


def test_a_paper_drawdown_past_the_limit_kills_the_run(tmp_path, default_model):
    name = f"enginetest-paper-{os.getpid()}"
    d = Daemon(tmp_path, name, "--feed", "synthetic://?instruments=4&seed=3&rate=20000", "--paper",
               "--kill-drawdown", "0.01", core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        wait_until(lambda: d.status()["paper"]["fills"] > 0, "paper fills")
        wait_until(lambda: d.status()["risk"]["killed"] == "drawdown", "killed by the paper drawdown")
        st = d.status()
        assert st["paper"]["drawdown"] > 0.01
        r = cli("ctl", "risk", "--name", name)
        assert "killed: drawdown" in r.stdout, r.stdout
        r = cli("stats", "--name", name)
        assert r.returncode == 0 and "  paper: pnl net " in r.stdout and "KILLED (drawdown)" in r.stdout, r.stdout
        from tests.helpers.daemon import scrape
        m = scrape(d)[0]
        assert m["engine_killed"][()] == 1 and m["engine_paper_fills_total"][()] > 0
        assert set(m["engine_paper_pnl"]) == {(("kind", "net"),), (("kind", "gross"),)}
        from app.daemon import PAPER_METRICS
        assert set(PAPER_METRICS) <= set(m), set(PAPER_METRICS) - set(m)
    finally:
        d.stop()
    assert "KILLED (drawdown)" in d.log()
    recs = read_signals(d.sig_path)
    assert ((recs["flags"] & 8) != 0).any()

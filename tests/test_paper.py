"""`engine run --paper` (app/paper.py): the backtest's execution simulator online on the loop's ticks
and signals. Its report is the one a backtest of the run's recording writes, with the same execution
flags (the same fills, fees and PnL to the last digit), the online simulation reaches the same
fills, and a paper drawdown past --kill-drawdown or a loss past --kill-loss kills the run (every
instrument flat, entries refused)."""
import json
import os
import time

import numpy as np
import pytest

from engine.signal_log import read_signals
from tests.conftest import strategy_core
from tests.helpers.daemon import Daemon, wait_until
from tests.helpers.feedutil import cli
from tests.helpers.data import ESH4, SPOT
from tests.test_replay import ticks_file


# the same execution flags given to the paper run (--paper-exec) and to the recording's backtest
EXEC = "--latency-us 150 --fee-bps 3 --maker-bps -0.5"


@pytest.mark.parametrize("feed,exec_flags", [("synthetic", EXEC), ("binance", "")])
def test_paper_report_equals_the_backtest_of_the_recording(tmp_path, default_model, feed, exec_flags):
    src = ticks_file(tmp_path, "synthetic://?instruments=4&count=40000&seed=12" if feed == "synthetic" else
                     f"binance:{SPOT}")
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
            "sharpe", "hit_rate_1000ms", "execution", "instruments", "currency", "money_warnings", "by_currency",
            "by_instrument")
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


def _settled(d):
    """The paper figures of /status if they stand still (two reads 0.3 s apart the same), else None."""
    a = d.status()["paper"]
    time.sleep(0.3)
    return a if d.status()["paper"] == a else None


@pytest.mark.parametrize("limit", ["drawdown", "loss"])
def test_a_paper_limit_kills_the_run(tmp_path, default_model, limit):
    """The limit kills the run: every instrument held goes flat on the next tick, the paper book goes
    flat; each instrument's figures are the same in /status, Prometheus and `engine stats`; the
    summary says why the run was killed, and the report is beside the signal file."""
    from tests.helpers.daemon import scrape
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
        # killed: every target flat, entries refused, so the paper book goes flat and its figures stand still
        wait_until(lambda: not d.status()["paper"]["positions"], "the paper positions flat after the kill")
        pp = wait_until(lambda: _settled(d), "paper figures that stand still", timeout=30)
        inst = pp["instruments"]
        assert inst and all(v["position"] == 0 for v in inst.values()), pp
        assert sum(v["fills"] for v in inst.values()) == pp["fills"] > 0, pp
        for k in ("pnl_net", "pnl_gross", "fees"):
            assert abs(sum(v[k] for v in inst.values()) - pp[k]) < 1e-5, (k, pp)
        for v in inst.values():
            assert abs(v["pnl_gross"] - v["fees"] - v["pnl_net"]) < 1e-5 and v["drawdown"] >= 0, v
        # (each instrument's peak is at least its share of the run's: their drawdowns add up to at least its)
        assert sum(v["drawdown"] for v in inst.values()) >= pp["drawdown"] - 1e-5, pp
        r = cli("stats", "--name", name)
        assert r.returncode == 0 and "  paper: pnl net " in r.stdout and f"KILLED ({limit})" in r.stdout, r.stdout
        from replay.currency import money_text as m
        assert pp["currency"] == "USD" and set(pp["by_currency"]) == {"USD"}, pp  # (the synthetic market's)
        for sym, v in inst.items():
            line = (f"    {sym}: position +0, {v['fills']:,} fills, pnl net {m(v['pnl_net'])} USD (gross "
                    f"{m(v['pnl_gross'])}, fees {m(v['fees'])}), drawdown {m(v['drawdown'])}")
            assert line in r.stdout.splitlines(), (line, r.stdout)

        def settled_scrape():  # (/metrics renders at most every 0.25 s: one from after the figures settled)
            m = scrape(d, private=True)[0]
            return m if m["engine_paper_fills_total"][()] == pp["fills"] else None
        m = wait_until(settled_scrape, "a scrape after the figures settled", timeout=5)
        # money, positions and the kill switch are the owner's: not on the /metrics any local process reads
        public = scrape(d)[0]
        assert not [k for k in public if k.startswith(("engine_paper_", "engine_kill"))], sorted(public)
        assert d.get("/metrics/private")[0] == 401 and d.get("/metrics/private", "wrong")[0] == 401
        tok = d.metrics_token_file.read_text().strip()
        code, body = d.get("/metrics/private", tok)  # (the token a Prometheus of another user is given)
        assert code == 200 and b"engine_paper_pnl" in body
        assert d.get("/status", tok)[0] == 401  # (it reads the metrics, nothing more)
        assert m["engine_killed"][()] == 1
        assert {k[0][1]: v for k, v in m["engine_kills_total"].items() if v} == {limit: 1}, m["engine_kills_total"]
        assert set(m["engine_paper_pnl"]) == {(("currency", "USD"), ("kind", k)) for k in ("net", "gross")}
        assert abs(m["engine_paper_pnl"][(("currency", "USD"), ("kind", "net"))] - pp["pnl_net"]) < 1e-5
        assert abs(m["engine_paper_drawdown"][(("currency", "USD"),)] - pp["drawdown"]) < 1e-5
        from app.daemon import PAPER_METRICS
        assert set(PAPER_METRICS) <= set(m), set(PAPER_METRICS) - set(m)
        ids = {str(int(sym[3:])): v for sym, v in inst.items()}  # (SYN000i: instrument id i, the metrics' label)
        assert {k[0][1] for k in m["engine_paper_instrument_fills_total"]} == set(ids)
        for i, v in ids.items():
            lab = (("instrument", i),)
            assert m["engine_paper_instrument_fills_total"][lab] == v["fills"] and m["engine_paper_position"][lab] == 0
            assert abs(m["engine_paper_instrument_drawdown"][(("currency", "USD"), *lab)] - v["drawdown"]) < 1e-5
            for kind in ("net", "gross"):
                assert abs(m["engine_paper_instrument_pnl"][(("currency", "USD"), ("instrument", i), ("kind", kind))]
                           - v[f"pnl_{kind}"]) < 1e-5, (i, kind)
    finally:
        out = d.stop()
    assert f"KILLED ({limit})" in d.log()
    risk_line = next(ln for ln in out.splitlines() if ln.startswith("  risk: "))
    assert risk_line.startswith(f"  risk: KILLED ({limit})   cut killed ") and risk_line.endswith(f"; kills: {limit} 1")
    # no --paper-out: the report goes beside the signal file, SIGNALS.paper/
    beside = tmp_path / f"{name}.paper"
    assert f"fills -> {beside}" in out, out
    rep = json.loads((beside / "report.json").read_text())
    assert rep["title"] == "Paper trading" and rep["paper"]["positions"] == {}, rep["paper"]
    # every instrument held when the run was killed got one flattening signal, on the tick the kill
    # mark names, before anything was decided on a later tick; nothing but refusals after
    from engine.risk import KILL_REASONS
    from engine.signal_log import read_kills
    recs, kills = read_signals(d.sig_path), read_kills(d.sig_path)
    assert kills[:, 2].tolist() == [KILL_REASONS.index(limit)], kills
    after, at = int(kills[0, 0]), int(kills[0, 1])
    assert after in (at, at + 1), kills  # (at a tick, or idle after its last one)
    a = int(np.flatnonzero(recs["flags"] & 8)[0])
    held = {}
    for r in recs[:a]:
        held[int(r["instrument"])] = int(r["position"])
    flat = sorted(i for i, p in held.items() if p != 0)
    first, rest = recs[a:a + len(flat)], recs[a + len(flat):]
    assert sorted(first["instrument"].tolist()) == flat and (first["tick_seq"] == at).all(), first
    assert (first["position"] == 0).all() and (first["wanted"] == 0).all() and np.isnan(first["score"]).all()
    assert (recs[:a]["tick_seq"] < after).all()
    # after it, refusals only: on later ticks, or on ticks conflated before the kill whose flush came
    # after it (decided killed; each later than every tick decided before the kill)
    assert (rest["tick_seq"] > (recs[:a]["tick_seq"].max() if a else -1)).all()
    assert ((rest["flags"] & 8) != 0).all() and (rest["position"] == 0).all() and (rest["prev_position"] == 0).all()


def test_a_paper_run_of_two_venues_keeps_each_currency_and_lists_only_what_it_traded(tmp_path, default_model):
    """Binance spot (USDT) and CME ESH4 (USD) as two feeds of one paper run: ids 1..8191 between the
    two sources' blocks are unnamed and must not appear; ESH4 keeps its CME fees under its run name;
    the money is per currency, online and at the end, and the report is the recording's backtest."""
    rec, out, sig = tmp_path / "rec.ticks", tmp_path / "paper", tmp_path / "s.sig"
    r = cli("run", "--no-rt", "--core", str(strategy_core()), "--feed", f"binance:{SPOT}", "--feed", f"dbn:{ESH4}",
            "--max", "--signals-out", str(sig), "--record", str(rec), "--paper", "--paper-out", str(out),
            "--paper-exec", "--latency-us 150", "--json", "--name", f"paper2v{id(tmp_path) % 10**6}", timeout=900)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["paper"]
    assert p["error"] is None and p["gaps"] == 0 and p["unmatched_signals"] == 0, p
    assert p["pnl"] is None and p["fees"] is None and set(p["by_currency"]) == {"USD", "USDT"}, p
    assert set(p["online"]["by_currency"]) == {"USD", "USDT"} and p["online"]["net"] is None
    for c, f in p["by_currency"].items():
        assert f["fills"] > 20 and round(p["online"]["by_currency"][c]["net"], 2) == round(f["pnl"], 2), (c, p)
    assert set(p["positions"]) <= {"BINANCE:BTCUSDT", "CME:ESH4"}, p["positions"]
    from app.paper_status import summary_line
    line = summary_line(p)
    assert " USD (gross " in line and " USDT (gross " in line and f"-> {out}" in line, line
    rep = json.loads((out / "report.json").read_text())
    assert set(rep["instruments"]) == set(rep["by_instrument"]) == {"BINANCE:BTCUSDT", "CME:ESH4"}, rep["instruments"]
    es = rep["instruments"]["CME:ESH4"]
    assert es["per_lot"] == 1.40 and es["source"] == "dbn" and rep["by_instrument"]["CME:ESH4"]["fees"] > 0
    # what each instrument is and costs is what its own converted file says
    from tests.conftest import converted
    from engine.tickfile import TickFile
    for uri, name in ((f"binance:{SPOT}", "BINANCE:BTCUSDT"), (f"dbn:{ESH4}", "CME:ESH4")):
        (own,) = TickFile(converted(uri)).specs
        assert {k: rep["instruments"][name][k] for k in own if k != "symbol"} == {k: v for k, v in own.items()
                                                                                 if k != "symbol"}, name
    md = (out / "report.md").read_text()
    assert "| USDT |" in md and "mixed" not in md and "quote currency" not in md
    b = cli("backtest", str(rec), "--out", str(tmp_path / "bt"), "--quiet", "--json", "--latency-us", "150",
            timeout=600)
    assert b.returncode == 0, b.stderr
    bt = json.loads(b.stdout)
    for k in ("by_currency", "by_instrument", "trades", "instruments", "currency", "currencies", "fills"):
        assert bt[k] == rep[k], k


def test_paper_money_is_per_currency_in_status_stats_and_metrics(tmp_path, default_model):
    """A live paper run of the synthetic market (USD) beside a Binance capture (USDT): /status,
    `engine stats` and Prometheus (a `currency` label) give each currency's PnL and drawdown, each
    instrument's in its own, and no figure of both added."""
    from tests.helpers.daemon import scrape
    spot = ticks_file(tmp_path, f"binance:{SPOT}", "spot.ticks")
    name = f"enginetest-paper2c-{os.getpid()}"
    # (the 45 s capture plays for 22 s at --speed 2: the kill below comes while it plays, so its position
    # is closed at its prices)
    d = Daemon(tmp_path, name, "--feed", "synthetic://?instruments=2&seed=3&rate=20000", "--feed",
               f"tickfile:{spot}", "--speed", "2", "--paper", core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        wait_until(lambda: {c for c, f in (d.status()["paper"].get("by_currency") or {}).items() if f["fills"]}
                   == {"USD", "USDT"}, "paper fills in USD and USDT", timeout=120)
        assert cli("ctl", "kill", "--name", name).returncode == 0  # (flat: the figures stand still)
        wait_until(lambda: not d.status()["paper"]["positions"], "the paper positions flat after the kill")
        pp = wait_until(lambda: _settled(d), "paper figures that stand still", timeout=30)
        assert pp["currency"] is None and pp["pnl_net"] is None and pp["drawdown"] is None, pp
        by, inst = pp["by_currency"], pp["instruments"]
        assert set(by) == {"USD", "USDT"} and {v["currency"] for v in inst.values()} == {"USD", "USDT"}, pp
        for c, f in by.items():
            mine = [v for v in inst.values() if v["currency"] == c]
            assert sum(v["fills"] for v in mine) == f["fills"] > 0
            for k in ("pnl_net", "pnl_gross", "fees"):
                assert abs(sum(v[k] for v in mine) - f[k]) < 1e-5, (c, k, pp)
        r = cli("stats", "--name", name)
        from replay.currency import money_text as m
        head = next(ln for ln in r.stdout.splitlines() if ln.startswith("  paper: "))
        for c, f in by.items():
            assert f"pnl net {m(f['pnl_net'])} {c} (gross {m(f['pnl_gross'])}, fees {m(f['fees'])}), drawdown " \
                   f"{m(f['drawdown'])}" in head, (c, head)

        def settled_scrape():
            s = scrape(d, private=True)[0]
            return s if s["engine_paper_fills_total"][()] == pp["fills"] else None
        s = wait_until(settled_scrape, "a scrape after the figures settled", timeout=5)
        assert set(s["engine_paper_pnl"]) == {(("currency", c), ("kind", k)) for c in by for k in ("net", "gross")}
        for c, f in by.items():
            assert abs(s["engine_paper_pnl"][(("currency", c), ("kind", "net"))] - f["pnl_net"]) < 1e-5
            assert abs(s["engine_paper_drawdown"][(("currency", c),)] - f["drawdown"]) < 1e-5
        ids = {lab[1][1]: lab[0][1] for lab in s["engine_paper_instrument_pnl"]}  # instrument id -> currency
        assert sorted(ids.values()) == sorted(v["currency"] for v in inst.values()), (ids, inst)
    finally:
        d.stop()

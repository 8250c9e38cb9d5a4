"""One identity and one currency per instrument: a run over several venues is the sum of its parts.

An instrument is known by its venue and its venue's symbol whatever path brought it (a file, a
merge that names it CME:ESH4, a run's recording), so its fees and money facts are the same; a
merged backtest's trades, fees and PnL of each instrument are those of its own file's backtest,
to the last digit; money in USD and in USDT is never added (a total only at rates the user gives)."""
import json

import numpy as np
import pytest

from tests.conftest import converted
from tests.helpers.data import ESH4, SPOT
from tests.helpers.feedutil import cli



def backtest(tmp_path, name, *args):
    r = cli("backtest", *args, "--out", str(tmp_path / name), "--quiet", "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _signals(out, symbol):
    import pyarrow.parquet as pq
    t = pq.read_table(out / "signals.parquet").to_pandas()
    return t[t["symbol"] == symbol]


SYN = "synthetic://?instruments=2&count=40000&seed=3"


@pytest.mark.parametrize("first,orders", [("dbn", "taker"), ("dbn", "maker"), ("synthetic", "taker")])
def test_a_merged_backtest_is_each_files_backtest_instrument_by_instrument(tmp_path, default_model, first, orders):
    """ESH4 (CME, USD) or two synthetic instruments (USD, quotes only: no book levels) and BTCUSDT
    (Binance spot, USDT, ten levels a side), captured on different days, backtested alone and
    merged into one stream: each instrument's decisions, fills, fees, trades and PnL in the merge
    are its own file's; ESH4 keeps its CME fees under its run name CME:ESH4; each currency's money
    is its instruments' and nothing adds USD to USDT."""
    a, spot = converted(f"dbn:{ESH4}" if first == "dbn" else SYN), converted(f"binance:{SPOT}")
    flags = ("--latency-us", "150", "--orders", orders)
    alone = [("a", backtest(tmp_path, "a", str(a), *flags)), ("b", backtest(tmp_path, "b", str(spot), *flags))]
    m = backtest(tmp_path, "m", "--merge", str(a), str(spot), *flags)
    from engine.universe import run_name
    assert sum(s["fills"] for _, s in alone) > 20  # (a maker's on the 45 s of spot: a few)
    for out, s in alone:
        assert s["fills"] > 0 and len(s["currencies"]) == 1, s
        for own, mine in s["by_instrument"].items():
            name = run_name(own, s["instruments"][own]["venue"])
            # the strategy decided on the same ticks the same way (it reads its instrument's ticks alone)
            x, y = _signals(tmp_path / out, own), _signals(tmp_path / "m", name)
            assert len(x) == len(y) > 10
            for col in ("ts_event", "position", "prev_position", "score", "fill_px", "fill_qty", "fill_ts_event"):
                assert np.array_equal(x[col].to_numpy(), y[col].to_numpy(), equal_nan=col == "score"), (name, col)
            assert m["by_instrument"][name] == mine, name
            assert m["trades"][name] == s["trades"][own], name
            assert {k: v for k, v in m["instruments"][name].items() if k != "source"} == s["instruments"][own], name
        cur = s["currency"]
        assert s["by_currency"][cur]["pnl"] == s["pnl"]
        for k in ("pnl", "pnl_gross", "fees", "pnl_closed", "pnl_open", "turnover_notional", "max_drawdown"):
            assert m["by_currency"][cur][k] == pytest.approx(s[k], abs=2e-6), (cur, k)
        assert m["by_currency"][cur]["sharpe"] == pytest.approx(s["sharpe"], abs=2e-3)  # (on its own instruments' span)
        assert m["by_currency"][cur]["fills"] == s["fills"]
        assert m["by_currency"][cur]["trades"]["all"] == s["trades"]["all"]
    if first == "dbn":
        es = m["instruments"]["CME:ESH4"]
        assert es["per_lot"] == 1.40 and "CME" in es["fee_source"] and m["by_instrument"]["CME:ESH4"]["fees"] > 0
        assert not any("zero trading costs" in w for w in m["warnings"]), m["warnings"]
    # money never added across currencies: per currency, and no run-wide sum
    assert m["currencies"] == ["USD", "USDT"] and m["currency"] is None
    assert all(m[k] is None for k in ("pnl", "pnl_gross", "fees", "max_drawdown", "sharpe")), m
    assert m["trades"]["all"]["net"] is None and m["trades"]["all"]["trades"] == sum(
        s["trades"]["all"]["trades"] for _, s in alone)
    assert "converted" not in m
    from replay.report import money_lines
    head = money_lines(m)
    for _, s in alone:  # (its currency's line: as its own backtest prints it, with its drawdown, Sharpe)
        assert any(x.startswith(money_lines(s)[0] + "   (max drawdown ") for x in head), (money_lines(s), head)
    assert any("never added" in x for x in head) and not any("mixed" in x for x in head), head
    md = (tmp_path / "m" / "report.md").read_text()
    assert "## Money per currency" in md and "| USDT |" in md and "mixed" not in md


def test_venue_facts_are_the_venue_symbols_whatever_a_run_calls_the_instrument(tmp_path):
    """The records a merge of two sources makes (CME:ESH4, and CME:ESH4@LABEL when both have it) get
    ESH4's CME fees, and an --instruments entry by the venue's symbol or by VENUE:SYMBOL means the
    same instrument whichever path named it."""
    from engine.universe import merge, run_name, venue_symbol
    from feeds.core.venues import binance, cme, fees
    from replay.costs import load_file, resolve
    es, btc = cme("ESH4"), binance("BTCUSDT")
    words = np.zeros((0, 8), np.int64)
    _, names, recs = merge([(words, ["ESH4"], [es]), (words, ["ESH4", "BTCUSDT"], [es, btc])],
                           ["tickfile-1", "tickfile-2"])
    assert names == ["CME:ESH4", "CME:ESH4@tickfile-2", "BINANCE:BTCUSDT"]
    assert [venue_symbol(r) for r in recs] == ["ESH4", "ESH4", "BTCUSDT"]
    assert [run_name(venue_symbol(r), r["venue"]) for r in recs] == ["CME:ESH4", "CME:ESH4", "BINANCE:BTCUSDT"]
    assert fees(recs[0]) == fees(recs[1]) == fees(es) and fees(es)["per_lot"] == 1.40
    assert fees(recs[2]) == fees(btc)
    toml = tmp_path / "i.toml"
    toml.write_text('["ES*"]\nper_lot = 2.5\n\n["CME:ESH4"]\nmultiplier = 50\nper_lot = 3.0\n\n'
                    '["BTC*"]\ntaker_bps = 7.0\n\n["NQ*"]\nper_lot = 9.0\n')
    table = load_file(toml)
    plain, merged, dup, coin = resolve([es, *recs], table)
    for r in (plain, merged, dup):  # (the VENUE:SYMBOL entry, longer, wins over ES*)
        assert (r["per_lot"], r["multiplier"], r["currency"]) == (3.0, 50.0, "USD"), r
    assert coin["taker_bps"] == 7.0 and coin["per_lot"] == 0.0
    (mes,) = resolve([cme("MESH4")], table)
    assert mes["per_lot"] == 0.37  # (no entry: MES is not ES*, and its CME fee stands)


def test_fx_rates_are_given_whole_or_refused():
    """--fx BASE/QUOTE=RATE: one target currency, positive rates; a total only when every currency
    has a rate, said to be converted and at what rates."""
    from replay.currency import FxError, convert, parse_fx
    fx = parse_fx(["usdt/usd=0.999", "EUR/USD=1.08"])
    assert fx == {"to": "USD", "rates": {"USDT": 0.999, "EUR": 1.08}}
    by = {"USD": {"pnl": -10.0, "pnl_gross": -5.0, "fees": 5.0, "pnl_closed": -9.0, "pnl_open": -1.0,
                  "turnover_notional": 100.0},
          "USDT": {"pnl": 2.0, "pnl_gross": 3.0, "fees": 1.0, "pnl_closed": 2.0, "pnl_open": 0.0,
                   "turnover_notional": 50.0}}
    c = convert(by, fx, {"USD": (np.array([1, 2, 3]), np.array([0.0, -12.0, -10.0])),
                         "USDT": (np.array([2, 3]), np.array([4.0, 2.0]))})
    assert c["pnl"] == round(-10.0 + 0.999 * 2.0, 6) and c["fees"] == round(5.0 + 0.999, 6)
    assert c["max_drawdown"] == pytest.approx(12 - 0.999 * 4)  # (of the converted curve: 0, -8.004, -8.002)
    assert "converted to USD at the rates given (--fx USDT/USD=0.999 --fx EUR/USD=1.08)" in c["note"]
    miss = convert({**by, "BTC": by["USDT"]}, fx)
    assert "pnl" not in miss and miss["missing"] == ["BTC"] and "--fx BTC/USD=RATE" in miss["note"]
    for bad, why in (("USDT=1", "expected BASE/QUOTE=RATE"), ("USDT/USD=0", "positive"),
                     ("USD/USD=1", "against itself"), ("USDT/EUR=x", "positive")):
        with pytest.raises(FxError, match=why):
            parse_fx([bad])
    with pytest.raises(FxError, match="every rate converts to one currency"):
        parse_fx(["USDT/USD=1", "EUR/USDT=1.1"])


def test_a_total_in_one_currency_only_at_the_rates_given(tmp_path, default_model):
    """The merged ESH4 + BTCUSDT backtest with rates (replay.jobs.Params.fx: --fx USDT/USD=RATE):
    a converted total, said to be converted and at what rate, beside each currency's own figures,
    which stay as they are; a rate missing for one currency converts nothing and says which."""
    from replay.currency import parse_fx
    from replay.jobs import Params, backtest as run
    from replay.merged import write_merged
    from replay.report import money_lines
    merged = write_merged([str(converted(f"dbn:{ESH4}")), str(converted(f"binance:{SPOT}"))], tmp_path / "m.ticks")
    plain = run([merged], str(tmp_path / "plain"), Params(latency_ns=150_000), progress=False)
    s = run([merged], str(tmp_path / "fx"), Params(latency_ns=150_000, fx=parse_fx(["USDT/USD=0.998"])),
            progress=False)
    assert s["by_currency"] == plain["by_currency"] and s["pnl"] is None and "converted" not in plain
    usd, usdt, c = s["by_currency"]["USD"], s["by_currency"]["USDT"], s["converted"]
    assert (c["currency"], c["rates"]) == ("USD", {"USDT": 0.998})
    for k in ("pnl", "pnl_gross", "fees"):
        assert c[k] == round(usd[k] + 0.998 * usdt[k], 6), k
    assert c["max_drawdown"] >= max(usd["max_drawdown"], 0.998 * usdt["max_drawdown"]) - 1e-6
    line = next(x for x in money_lines(s) if x.startswith("total pnl net "))
    assert line.endswith("converted to USD at the rates given (--fx USDT/USD=0.998), not market rates"), line
    md = (tmp_path / "fx" / "report.md").read_text()
    assert "| USD (converted) |" in md and "--fx USDT/USD=0.998" in md
    s = run([merged], str(tmp_path / "eur"), Params(latency_ns=150_000, fx=parse_fx(["EUR/USD=1.08"])), progress=False)
    assert "pnl" not in s["converted"] and s["converted"]["missing"] == ["USDT"]
    assert "total: not converted: no rate to USD for USDT" in "\n".join(money_lines(s))


def test_a_bad_rate_is_one_line_naming_the_option(tmp_path):
    (tmp_path / "t.ticks").write_bytes(b"")  # (refused for its --fx before the file is read)
    r = cli("backtest", str(tmp_path / "t.ticks"), "--out", str(tmp_path / "bt"), "--fx", "USDT=1", timeout=120)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [
        "engine: error: --fx 'USDT=1': expected BASE/QUOTE=RATE (1 BASE is RATE QUOTE), e.g. USDT/USD=1.0"], r.stderr
    assert not (tmp_path / "bt").exists()


def test_a_decision_with_legs_in_two_currencies_is_no_sum():
    """A pair decided at once, one leg in USD and one in USDT: its PnL is not added up (its
    currency is ""), a decision of one currency's legs is in it."""
    from engine.records import SIGNAL_DTYPE
    from replay.evaluate import MidIndex, decision_pnl
    from replay.execsim import FILL_DTYPE
    P = 10**9
    words = np.zeros((4, 8), np.int64)
    words[:, 1] = [1, 2, 3, 4]
    words[:, 4], words[:, 5] = [99 * P] * 4, [101 * P] * 4
    words[:, 7] = [(1 << 48) | (i % 2 << 32) for i in range(4)]  # KIND_QUOTE, instruments 0 1 0 1
    from engine.records import tick_instruments
    assert tick_instruments(words).tolist() == [0, 1, 0, 1]
    sig = np.zeros(3, SIGNAL_DTYPE)
    sig["decision"], sig["instrument"], sig["ts_event"] = [7, 7, 8], [0, 1, 0], [1, 2, 3]
    f = np.zeros(2, FILL_DTYPE)
    f["instrument"], f["qty"], f["price"], f["ts_event"] = [0, 1], [1, -1], [101 * P, 99 * P], [1, 2]
    ids, legs, pnl, cur = decision_pnl(sig, f, MidIndex(words), np.ones(2), 4, np.array(["USD", "USDT"], object))
    assert ids.tolist() == [7, 8] and legs.tolist() == [2, 1] and cur.tolist() == ["", "USD"]

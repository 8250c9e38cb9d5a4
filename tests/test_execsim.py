"""The execution simulator (replay/execsim.py) on hand-built books whose fills are known."""
import numpy as np
import pytest

from engine.records import (KIND_BOOK, KIND_LEVEL, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL, SIGNAL_DTYPE,
                            pack_tick_tail)
from replay import execsim

P = 1_000_000_000  # 1.0 in price units


class Tape:
    """Ticks of one instrument, in file order; exchange time = receive time = 1000 * row."""

    def __init__(self):
        self.rows = []

    def _add(self, kind, side=0, price=0, size=0, bid=0, bsz=0, ask=0, asz=0, inst=0):
        w = np.zeros(8, np.int64)
        n = len(self.rows)
        w[0], w[1], w[2], w[3], w[4], w[5] = n, 1000 * n, 1000 * n, price, bid, ask
        pack_tick_tail(w, size, bsz, asz, inst, kind, side)
        self.rows.append(w)
        return n

    def level(self, side, price, size):
        return self._add(KIND_LEVEL, side, price, size)

    def quote(self, bid, bsz, ask, asz):
        return self._add(KIND_QUOTE, bid=bid, bsz=bsz, ask=ask, asz=asz)

    def book(self, bid, bsz, ask, asz):
        return self._add(KIND_BOOK, bid=bid, bsz=bsz, ask=ask, asz=asz)

    def trade(self, aggressor, price, size, bid, bsz, ask, asz):
        return self._add(KIND_TRADE, aggressor, price, size, bid, bsz, ask, asz)

    def words(self):
        return np.array(self.rows, np.int64)


def signals(*rows):
    """(tick row, target position) -> SIGNAL_DTYPE records."""
    s = np.zeros(len(rows), SIGNAL_DTYPE)
    for k, (tick, pos) in enumerate(rows):
        s[k]["tick_seq"], s[k]["position"], s[k]["instrument"] = tick, pos, 0
    return s


def spec(mult=1.0, maker_bps=0.0, taker_bps=0.0, per_lot=0.0):
    return np.array([[mult, maker_bps, taker_bps, per_lot]], np.float64)


def two_sided(t, depth=True):
    """bids 99 x 10, 98 x 20; asks 100 x 5, 101 x 3, 102 x 50."""
    if depth:
        for side, px, sz in ((SIDE_BUY, 99, 10), (SIDE_BUY, 98, 20), (SIDE_SELL, 100, 5), (SIDE_SELL, 101, 3),
                             (SIDE_SELL, 102, 50)):
            t.level(side, px * P, sz)
    return t.quote(99 * P, 10, 100 * P, 5)


def test_a_taker_buy_walks_the_asks_and_pays_the_taker_fee():
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)
    fills, info = execsim.run(t.words(), signals((q, 7)), 1, spec(mult=50.0, taker_bps=2.0, per_lot=1.5),
                              execsim.ExecParams(), depth=10)
    assert list(zip(fills["qty"], fills["price"] // P)) == [(5, 100), (2, 101)]
    assert not fills["maker"].any() and info["unfilled_lots"] == 0
    # fees: notional x 2 bp + 1.5 a lot, with ES's $50 a point
    assert fills["fee"] == pytest.approx([5 * 100 * 50 * 2e-4 + 5 * 1.5, 2 * 101 * 50 * 2e-4 + 2 * 1.5])


def test_a_taker_order_larger_than_the_window_fills_partly_and_counts_the_rest():
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)
    fills, info = execsim.run(t.words(), signals((q, -40)), 1, spec(), execsim.ExecParams(), depth=10)
    assert list(zip(fills["qty"], fills["price"] // P)) == [(-10, 99), (-20, 98)]
    assert info["unfilled_lots"] == 10


def test_entry_latency_meets_the_book_as_it_is_on_arrival():
    t = Tape()
    q = two_sided(t)
    t.level(SIDE_SELL, 100 * P, 0)     # the 100 offer is gone before we arrive
    t.quote(99 * P, 10, 101 * P, 3)
    t.quote(99 * P, 10, 101 * P, 3)
    # arrival 2500 ns after the signal tick: the first tick at or after it is row q+3
    fills, _ = execsim.run(t.words(), signals((q, 2)), 1, spec(), execsim.ExecParams(entry_ns=2500, response_ns=700),
                           depth=10)
    assert list(zip(fills["qty"], fills["price"] // P)) == [(2, 101)]
    assert fills["tick"][0] == q + 3 and fills["ts_local"][0] == fills["ts_event"][0] + 700
    # without latency it takes the 100 offer
    fills, _ = execsim.run(t.words(), signals((q, 2)), 1, spec(), execsim.ExecParams(), depth=10)
    assert fills["price"][0] == 100 * P


def test_a_maker_buy_fills_only_after_the_queue_ahead_of_it_traded():
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)                  # we join 99 with 10 ahead
    t.level(SIDE_BUY, 99 * P, 6)
    t.trade(SIDE_SELL, 99 * P, 4, 99 * P, 6, 100 * P, 5)   # 4 traded: 6 ahead
    t.quote(99 * P, 6, 100 * P, 5)
    t.level(SIDE_BUY, 99 * P, 13)                   # 7 join behind us (sizes exclude our order)
    t.book(99 * P, 13, 100 * P, 5)
    t.level(SIDE_BUY, 99 * P, 5)
    t.trade(SIDE_SELL, 99 * P, 8, 99 * P, 5, 100 * P, 5)   # 8 traded: 6 ahead, then 2 of our 3
    t.quote(99 * P, 5, 100 * P, 5)
    p = execsim.ExecParams(maker=True)
    fills, info = execsim.run(t.words(), signals((q, 3)), 1, spec(maker_bps=-0.5), p, depth=10)
    assert list(zip(fills["qty"], fills["price"] // P, fills["maker"])) == [(2, 99, 1)]
    assert fills["fee"][0] == pytest.approx(2 * 99 * -0.5e-4)  # a rebate
    assert info["working_lots"] == 1


def test_a_trade_through_our_price_fills_all_that_is_left():
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)
    t.level(SIDE_BUY, 99 * P, 0)
    t.trade(SIDE_SELL, 98 * P, 25, 98 * P, 5, 100 * P, 5)
    t.quote(98 * P, 5, 100 * P, 5)
    fills, _ = execsim.run(t.words(), signals((q, 4)), 1, spec(), execsim.ExecParams(maker=True), depth=10)
    assert list(zip(fills["qty"], fills["price"] // P)) == [(4, 99)]


def test_cancels_ahead_follow_the_power_model():
    """A cancel of c lots with a ahead and b behind takes c * a^n / (a^n + b^n) from ahead."""
    for power in (1.0, 3.0):
        t = Tape()
        q = two_sided(t)
        t.quote(99 * P, 10, 100 * P, 5)          # 10 ahead
        t.level(SIDE_BUY, 99 * P, 40)            # 30 join behind
        t.book(99 * P, 40, 100 * P, 5)
        t.level(SIDE_BUY, 99 * P, 32)            # 8 cancelled, no trade
        t.book(99 * P, 32, 100 * P, 5)
        ahead = 10 - 8 * 10 ** power / (10 ** power + 30 ** power)
        need = int(np.floor(ahead)) + 2          # a trade this big fills what exceeds `ahead`
        t.level(SIDE_BUY, 99 * P, 32 - need)
        t.trade(SIDE_SELL, 99 * P, need, 99 * P, 32 - need, 100 * P, 5)
        t.quote(99 * P, 32 - need, 100 * P, 5)
        fills, _ = execsim.run(t.words(), signals((q, 5)), 1, spec(), execsim.ExecParams(maker=True, queue_power=power),
                               depth=10)
        assert fills["qty"].tolist() == [int(np.floor(need - ahead))], power


def test_the_trades_of_an_event_are_not_cancels():
    """Two trades at our price in one event: the level's drop is all trades, nothing cancelled."""
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)              # 10 ahead
    t.level(SIDE_BUY, 99 * P, 4)
    t.trade(SIDE_SELL, 99 * P, 3, 99 * P, 7, 100 * P, 5)
    t.trade(SIDE_SELL, 99 * P, 3, 99 * P, 4, 100 * P, 5)
    t.quote(99 * P, 4, 100 * P, 5)               # 4 ahead now, exactly
    t.level(SIDE_BUY, 99 * P, 0)
    t.trade(SIDE_SELL, 99 * P, 5, 99 * P, 0, 100 * P, 5)  # 4 ahead, then 1 of ours (it was the rest)
    t.quote(0, 0, 100 * P, 5)
    fills, _ = execsim.run(t.words(), signals((q, 3)), 1, spec(), execsim.ExecParams(maker=True), depth=10)
    assert fills["qty"].tolist() == [1]


def test_touch_only_data_tracks_the_queue_from_quotes():
    t = Tape()
    q = t.quote(99 * P, 10, 100 * P, 5)
    t.trade(SIDE_SELL, 99 * P, 6, 99 * P, 4, 100 * P, 5)
    t.quote(99 * P, 4, 100 * P, 5)
    t.trade(SIDE_SELL, 99 * P, 6, 99 * P, 1, 100 * P, 5)   # 4 ahead, then 2 of ours
    fills, _ = execsim.run(t.words(), signals((q, 2)), 1, spec(), execsim.ExecParams(maker=True), depth=0)
    assert fills["qty"].tolist() == [2]


def test_a_later_signal_cancels_the_working_order_and_sizes_from_the_fills():
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)
    t.level(SIDE_BUY, 99 * P, 0)
    t.trade(SIDE_SELL, 99 * P, 12, 98 * P, 20, 100 * P, 5)  # 10 ahead, then 2 of our 5
    s2 = t.quote(98 * P, 20, 100 * P, 5)
    t.quote(98 * P, 20, 100 * P, 5)
    t.trade(SIDE_SELL, 98 * P, 30, 97 * P, 1, 100 * P, 5)   # would fill a working buy at 99: it is gone
    # flat, as a taker: the working 3 are cancelled, the 2 bought are sold at the 98 bid
    fills, info = execsim.run(t.words(), signals((q, 5), (s2, 0)), 1, spec(),
                              execsim.ExecParams(maker=np.array([True, False])), depth=10)
    assert list(zip(fills["signal"], fills["qty"], fills["price"] // P)) == [(0, 2, 99), (1, -2, 98)]
    assert info["working_lots"] == 0
    # short 1, as a maker: an offer of 3 joins the 100 ask and works
    fills, info = execsim.run(t.words(), signals((q, 5), (s2, -1)), 1, spec(), execsim.ExecParams(maker=True), depth=10)
    assert fills["qty"].tolist() == [2] and info["working_lots"] == 3


def test_round_trips_split_a_flip_and_attribute_pnl_and_fees():
    from replay.evaluate import round_trips
    f = np.zeros(3, execsim.FILL_DTYPE)
    # buy 2 @ 100, sell 3 @ 103 (closes the long, opens a 1-lot short), buy 1 @ 101
    f["qty"], f["price"], f["ts_event"], f["fee"] = [2, -3, 1], [100 * P, 103 * P, 101 * P], [1, 2, 3], [0.2, 0.3, 0.1]
    ti, tf = round_trips(f, np.array([50.0]))
    assert ti[:, 1].tolist() == [1, -1] and ti[:, 2].tolist() == [2, 1]
    # long: 2 x 3 points x $50 = 300, fees 0.2 + 2/3 of 0.3; short: 1 x 2 points x $50 = 100, fees 0.1 + 0.1
    assert tf[:, 0] == pytest.approx([300 - 0.4, 100 - 0.2])
    assert tf[:, 2] == pytest.approx([2 * 100 * 50, 103 * 50])


def test_instrument_records_put_pnl_in_money():
    from feeds.core.venues import from_uri
    assert from_uri("dbn:/x/esh4.mbo.dbn.zst", "ESH4")["multiplier"] == 50.0
    assert from_uri("dbn:/x", "ESH4")["calendar"] == "cme"
    assert from_uri("dbn:/x", "ESH4")["tick_size"] == 0.25
    b = from_uri("binance:/x/usdm.gz?size_unit=1e-3", "BTCUSDT")
    assert (b["multiplier"], b["currency"], b["calendar"]) == (0.001, "USDT", "crypto")
    # no size_unit in the URI: the feed's own default (1e-5 BTC a lot), never 1 BTC
    assert from_uri("binance:/x/usdm.gz", "BTCUSDT")["multiplier"] == 1e-5
    assert from_uri("itch:/x", "AAPL")["calendar"] == "us_equities"
    assert not from_uri("ring:/dev/shm/x.ticks", "ESH4")["known"]


def test_venue_fees_are_the_default_and_an_instruments_file_and_flags_override(tmp_path):
    from feeds.core.venues import binance, cme
    from replay.costs import InstrumentsError, load_file, resolve, warnings
    (es,) = resolve([cme("ESH4")])
    assert (es["maker_bps"], es["taker_bps"], es["per_lot"]) == (0.0, 0.0, 1.40) and "CME" in es["fee_source"]
    (f,) = resolve([binance("BTCUSDT", 1e-3, "usdm")])
    assert (f["maker_bps"], f["taker_bps"]) == (2.0, 5.0) and "USD-M" in f["fee_source"]
    (sp,) = resolve([binance("BTCUSDT", 1e-5, "spot")])
    assert (sp["maker_bps"], sp["taker_bps"]) == (10.0, 10.0)
    f = tmp_path / "inst.toml"
    f.write_text('["ES*"]\nper_lot = 1.18\n["ESH4"]\nmaker_bps = -0.1\n')
    t = load_file(str(f))
    (es,) = resolve([cme("ESH4")], t, {"taker_bps": 2.0, "maker_bps": None})
    assert (es["multiplier"], es["maker_bps"], es["taker_bps"], es["per_lot"]) == (50.0, -0.1, 2.0, 1.40)
    assert es["fee_source"].startswith("the command line")
    (esm,) = resolve([cme("ESM4")], t)
    assert esm["per_lot"] == 1.18 and es["symbol"] == "ESH4" and str(f) in esm["fee_source"]
    # zero cost is said, whichever way it came
    (z,) = resolve([cme("ESH4")], None, {"taker_bps": 0.0, "maker_bps": 0.0, "per_lot": 0.0})
    assert any("zero trading costs (as given)" in w for w in warnings([z], {"ESH4"}))
    (cl,) = resolve([cme("CLZ4")])
    assert any("no published fee known for venue CME" in w for w in warnings([cl], {"CLZ4"}))
    assert warnings([cl], set()) == []  # an instrument that did not trade cost nothing
    f.write_text('["ES*"]\nmultiplier = -5\n')
    with pytest.raises(InstrumentsError, match=str(f)):
        load_file(str(f))
    f.write_text('["ES*"]\nfee = 1\n')
    with pytest.raises(InstrumentsError, match="unknown key 'fee'"):
        load_file(str(f))


def test_model_warnings_flag_in_sample_data_and_few_trees(tmp_path):
    from replay.jobs import model_warnings
    t = tmp_path / "day1.ticks"
    t.write_bytes(b"")
    w = model_warnings({"training": {"sources": [f"tickfile:{t}"]}, "num_trees": 7}, [str(t)])
    assert any("trained on this data" in x for x in w) and any("only 7 trees" in x for x in w)
    assert model_warnings({"training": {"sources": ["tickfile:/elsewhere.ticks"]}, "num_trees": 200}, [str(t)]) == []


def test_the_backtest_command_reports_fills_fees_and_trades(tmp_path):
    import json
    import subprocess
    from tests.conftest import engine_cmd, engine_env
    ticks = tmp_path / "s.ticks"
    subprocess.run(engine_cmd("convert", "synthetic://?count=30000&rate=0", "--out", str(ticks)), check=True,
                   env=engine_env(), capture_output=True)
    inst = tmp_path / "i.toml"
    inst.write_text('["SYN*"]\nmultiplier = 2.0\ncurrency = "EUR"\n')
    r = subprocess.run(engine_cmd("backtest", str(ticks), "--out", str(tmp_path / "bt"), "--orders", "maker",
                                  "--latency-us", "uniform:50,150", "--maker-bps", "-0.5", "--fee-bps", "3",
                                  "--instruments", str(inst), "--json", "--quiet"),
                       env=engine_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["currency"] == "EUR" and s["instruments"]["SYN0000"]["multiplier"] == 2.0
    assert s["fills"] > 0 and s["maker_fills"] == s["fills"]
    assert s["fees"] < 0  # maker rebates only
    assert s["pnl_gross"] == pytest.approx(s["pnl"] + s["fees"], abs=1e-4)
    assert s["trades"]["all"]["trades"] == s["trades"]["long"]["trades"] + s["trades"]["short"]["trades"]
    assert s["sharpe"] is None and "minutes" in s["sharpe_reason"]
    md = (tmp_path / "bt" / "report.md").read_text()
    assert "Money in EUR" in md and "## Trades" in md
    for png in ("pnl.png", "drawdown.png", "position.png", "scores.png", "compute_time.png"):
        assert (tmp_path / "bt" / png).stat().st_size > 1000
    bad = subprocess.run(engine_cmd("backtest", str(ticks), "--out", str(tmp_path / "bt2"), "--latency-us", "normal:1"),
                         env=engine_env(), capture_output=True, text=True)
    assert bad.returncode == 2 and "--latency-us" in bad.stderr and "Traceback" not in bad.stderr


def test_spearman_agrees_with_scipy_on_tied_data():
    from scipy.stats import spearmanr
    from replay.evaluate import spearman
    rng = np.random.default_rng(1)
    for n in (5, 200, 20000):
        x = rng.integers(0, 7, n).astype(float)
        y = x + rng.normal(0, 3, n)
        y[::3] = np.round(y[::3])
        assert spearman(x, y) == round(float(spearmanr(x, y).statistic), 4)
    assert spearman(np.ones(10), np.arange(10.0)) is None


def test_ms_horizon_labels_get_an_embargo_in_time():
    from models.training import time_embargo
    ts = np.arange(1000, dtype=np.int64) * 1_000_000  # a row a millisecond
    # 70% / 15% / 15% split at rows 700 and 850: a 20 ms horizon reaches 19 rows back over each
    assert time_embargo(ts, 1000, 20_000_000) == 19
    assert time_embargo(ts, 1000, 1) == 0
    bursty = np.repeat(np.arange(100, dtype=np.int64) * 1_000_000, 10)  # 10 rows per ms
    assert time_embargo(bursty, 1000, 5_000_000) == 40


def test_a_refused_decision_sends_no_order_and_keeps_the_queue():
    """A risk-refused record (position == prev_position) between two orders: the maker order keeps
    its place in the queue (a re-sent order would go to the back and not fill), and the fills name
    the records they came from."""
    from replay.evaluate import execution
    t = Tape()
    q = two_sided(t)
    t.quote(99 * P, 10, 100 * P, 5)
    r = t.level(SIDE_BUY, 99 * P, 6)
    t.trade(SIDE_SELL, 99 * P, 4, 99 * P, 6, 100 * P, 5)
    t.quote(99 * P, 6, 100 * P, 5)
    t.level(SIDE_BUY, 99 * P, 5)
    t.trade(SIDE_SELL, 99 * P, 8, 99 * P, 5, 100 * P, 5)
    t.quote(99 * P, 5, 100 * P, 5)
    plain = signals((q, 3))
    gated = signals((q, 3), (r, 3))
    gated[1]["prev_position"] = 3  # (refused: it moves nothing)
    p = execsim.ExecParams(maker=True)
    a, _ = execution(t.words(), plain, 1, 10, p, spec())
    b, _ = execution(t.words(), gated, 1, 10, p, spec())
    assert len(a) == 1 and list(b["qty"]) == list(a["qty"]) and list(b["signal"]) == [0]
    c, _ = execution(t.words(), gated, 1, 10, execsim.ExecParams(maker=np.array([True, True])), spec())
    assert list(c["qty"]) == list(a["qty"])

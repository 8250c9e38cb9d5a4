"""Money a backtest reports is the money the instruments make: what a lot is worth travels with the
ticks from their source through every path (convert, feed -> ring -> record), fees default to the
venue's published tier and are shown beside the gross, and positions still open at the end and
maker orders that never filled are stated."""
import json
import shutil
import subprocess

import numpy as np
import pytest

from engine.tickfile import TickFile

from tests.conftest import ROOT, converted, engine_cmd, engine_env
from tests.helpers.data import ESH4, SPOT, USDM
from tests.helpers.feedutil import cli



def convert(tmp_path, uri, name):
    """`engine convert URI --out tmp_path/name`: a copy of the session's conversion (conftest.converted)."""
    out = tmp_path / name
    shutil.copyfile(converted(uri), out)
    return out


@pytest.fixture(scope="module")
def esh4_ticks(tmp_path_factory):
    return convert(tmp_path_factory.mktemp("esh4"), f"dbn:{ESH4}", "conv.ticks")


def backtest(tmp_path, ticks, name, *extra):
    r = cli("backtest", str(ticks), "--out", str(tmp_path / name), "--quiet", "--json", *extra, timeout=900)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_binance_backtest_prices_a_lot_as_the_feed_defines_it(tmp_path, default_model):
    """README's own command (no size_unit) and the same with size_unit written out give the same
    money: a lot is 1e-5 BTC either way (it was priced as 1 BTC: PnL 100,000 times too large)."""
    plain = convert(tmp_path, f"binance:{SPOT}", "plain.ticks")
    spelled = convert(tmp_path, f"binance:{SPOT}?size_unit=1e-5", "spelled.ticks")
    assert TickFile(plain).specs == TickFile(spelled).specs
    (spec,) = TickFile(plain).specs
    assert (spec["venue"], spec["multiplier"], spec["lot_size"], spec["currency"]) == ("BINANCE", 1e-5, 1e-5, "USDT")
    a, b = backtest(tmp_path, plain, "a"), backtest(tmp_path, spelled, "b")
    assert a["fills"] > 10
    for k in ("pnl", "pnl_gross", "fees", "turnover_notional", "max_drawdown"):
        assert a[k] == b[k], k
    # a lot of 1e-5 BTC near 57-62k USDT is worth about 0.6 USDT
    assert 0.5 < a["turnover_notional"] / a["turnover_units"] < 0.7
    assert a["instruments"]["BTCUSDT"]["multiplier"] == 1e-5


def test_a_recorded_dbn_ring_backtests_as_the_converted_file(tmp_path, shm_name, default_model, esh4_ticks):
    """feed -> ring -> `engine record` keeps what ESH4 is: 50 USD a point, CME's calendar."""
    rec = tmp_path / "rec.ticks"
    feed = subprocess.Popen(engine_cmd("feed", f"dbn:{ESH4}", "--ring", shm_name, "--max", "--wait-consumers", "1"),
                            cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = cli("record", "--ring", shm_name, "--out", str(rec), "--from-oldest", "--wait", "120", "--json", timeout=900)
    feed.communicate(timeout=120)
    assert r.returncode == 0 and feed.returncode == 0, r.stderr
    converted = esh4_ticks
    assert TickFile(rec).specs == TickFile(converted).specs
    es = {s["symbol"]: s for s in TickFile(rec).specs}["ESH4"]
    assert (es["venue"], es["multiplier"], es["currency"], es["calendar"], es["tick_size"]) == \
        ("CME", 50.0, "USD", "cme", 0.25)
    a = backtest(tmp_path, rec, "rec")["instruments"]["ESH4"]
    b = backtest(tmp_path, converted, "conv")["instruments"]["ESH4"]
    assert a == b and (a["multiplier"], a["currency"], a["calendar"], a["per_lot"]) == (50.0, "USD", "cme", 1.40)


def test_fees_default_to_the_venue_and_the_headline_shows_net_beside_gross(tmp_path, default_model):
    ticks = convert(tmp_path, f"binance:{USDM}?size_unit=1e-3", "usdm.ticks")
    s = backtest(tmp_path, ticks, "bt", "--latency-us", "100")
    bt = s["instruments"]["BTCUSDT"]
    assert (bt["venue"], bt["maker_bps"], bt["taker_bps"]) == ("BINANCE-F", 2.0, 5.0)
    assert "Binance USD-M" in bt["fee_source"] and s["fees"] > 0
    assert s["pnl"] == pytest.approx(s["pnl_gross"] - s["fees"], abs=1e-5)
    r = cli("backtest", str(ticks), "--out", str(tmp_path / "bt2"), "--quiet", "--latency-us", "100", timeout=600)
    head = r.stdout.splitlines()
    assert head[0].startswith("  pnl net ") and "=  gross" in head[0] and "-  fees" in head[0], r.stdout
    assert "Binance USD-M futures" in head[1]
    assert "pnl net" in (tmp_path / "bt2" / "report.md").read_text()


def test_a_run_that_assumes_zero_cost_says_so(tmp_path, default_model):
    ticks = convert(tmp_path, "synthetic://?instruments=2&count=40000&seed=3", "syn.ticks")
    r = cli("backtest", str(ticks), "--out", str(tmp_path / "bt"), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "zero trading costs (no published fee known for venue SYNTHETIC)" in out
    assert "order-entry latency 0" in out
    r = cli("backtest", str(ticks), "--out", str(tmp_path / "bt2"), "--quiet", "--fee-bps", "1", "--latency-us", "50",
            timeout=600)
    assert "zero trading costs" not in r.stdout + r.stderr and "order-entry latency 0" not in r.stdout + r.stderr


def test_maker_run_states_its_open_position_and_the_lots_that_never_filled(tmp_path, default_model, esh4_ticks):
    """The ESH4 maker report: net PnL = closed trades + the positions open at the end (with their
    mark), and every lot ordered is filled, cancelled, never placed or still working."""
    ticks = esh4_ticks
    s = backtest(tmp_path, ticks, "bt", "--strategy", "touch_imbalance", "--orders", "maker", "--latency-us", "50")
    assert s["fills"] > 5 and s["maker_fills"] == s["fills"]
    assert s["pnl"] == pytest.approx(s["pnl_closed"] + s["pnl_open"], abs=1e-6)
    assert s["pnl_closed"] == pytest.approx(s["trades"]["all"]["net"], abs=1e-6)
    filled = s["turnover_units"]
    assert s["ordered_lots"] == filled + s["maker_cancelled_lots"] + s["maker_unplaced_lots"] + s["working_lots"] \
        + s["unfilled_lots"]
    assert s["maker_cancelled_lots"] > 0
    for o in s["open_positions"]:
        assert o["lots"] and o["mark"] > 0 and o["value"] == pytest.approx(o["lots"] * o["mark"] * 50.0)
    assert sum(o["lots"] for o in s["open_positions"]) == _net_lots(tmp_path / "bt")


def _net_lots(bt):
    import pyarrow.parquet as pq
    t = pq.read_table(bt / "signals.parquet")
    return int(np.sum(t.column("fill_qty").to_numpy()))


def test_open_positions_are_marked_at_the_last_mid():
    from replay.evaluate import MidIndex, open_positions
    from replay.execsim import FILL_DTYPE
    P = 10**9
    words = np.zeros((3, 8), np.int64)
    words[:, 1] = [1, 2, 3]
    words[:, 4], words[:, 5] = [99 * P, 100 * P, 101 * P], [101 * P, 102 * P, 103 * P]
    words[:, 7] = 1 << 48  # KIND_QUOTE, instrument 0
    f = np.zeros(2, FILL_DTYPE)
    f["qty"], f["price"], f["ts_event"] = [3, -1], [100 * P, 101 * P], [1, 2]
    (o,) = open_positions(f, MidIndex(words), np.array([50.0]), ["ESH4"], words)
    assert o == {"symbol": "ESH4", "lots": 2, "mark": 102.0, "value": 2 * 102.0 * 50.0}


def test_the_equity_grid_is_bounded_however_far_apart_the_exchange_times_are():
    """Exchange times two years apart (an old capture replayed beside live-stamped messages) mark the
    equity on a coarser grid, not one point a second (which asked for gigabytes); a fill's PnL is
    still there at the end."""
    from replay.evaluate import MAX_GRID, MidIndex, equity_curve
    from replay.execsim import FILL_DTYPE
    P, year = 10**9, 365 * 86400 * 10**9
    words = np.zeros((3, 8), np.int64)
    words[:, 1] = [1_700_000_000 * P, 1_700_000_001 * P, 1_700_000_000 * P + 2 * year]
    words[:, 4], words[:, 5] = [99 * P, 100 * P, 109 * P], [101 * P, 102 * P, 111 * P]
    words[:, 7] = 1 << 48  # KIND_QUOTE, instrument 0
    f = np.zeros(1, FILL_DTYPE)
    f["qty"], f["price"], f["ts_event"] = [1], [100 * P], [words[0, 1]]
    grid, eq = equity_curve(words, f, MidIndex(words), np.array([1.0]))
    assert len(grid) <= MAX_GRID + 1 and grid[0] == words[0, 1] and grid[-1] >= words[2, 1]
    assert eq[-1] == 10.0  # bought at 100, marked at the last mid 110


def test_a_binance_capture_says_which_market_it_is(tmp_path):
    from feeds.binance.capture import _futures_capture
    from feeds.core.sources import open_source
    from feeds.core.uri import FeedError
    assert not _futures_capture(str(SPOT)) and _futures_capture(str(USDM))
    src = open_source(f"binance:{USDM}")
    assert src._specs.make("BTCUSDT")["venue"] == "BINANCE-F"
    assert src._specs.make("BTCUSD_PERP")["venue"] == "BINANCE-D"  # (COIN-M symbols in a futures capture)
    coin = open_source(f"binance:{USDM}?market=coinm")._specs.make("BTCUSD_PERP")
    assert coin["inverse"] and coin["currency"] == "BTC"
    with pytest.raises(FeedError, match="market must be one of auto, spot, usdm, coinm"):
        open_source(f"binance:{SPOT}?market=perp")


def test_a_name_that_is_two_instruments_in_two_files_is_not_replayed_as_one(tmp_path):
    """BTCUSDT recorded with 1e-3 BTC lots in one file and 1e-5 in another: one stream of both
    would give one position two meanings."""
    from engine.tickfile import TickFileWriter
    from feeds.core.sources import TickFilesSource
    from feeds.core.uri import FeedError
    from feeds.core.venues import binance
    paths = []
    for unit in (1e-3, 1e-5, 1e-5):
        p = tmp_path / f"{unit}-{len(paths)}.ticks"
        w = TickFileWriter(p, ["BTCUSDT"], "binance:x", specs=[binance("BTCUSDT", unit, "usdm")])
        w.append(np.zeros((3, 8), np.int64))
        w.close()
        paths.append(str(p))
    assert TickFilesSource(paths[1:]).specs == [binance("BTCUSDT", 1e-5, "usdm")]  # the same instrument: fine
    with pytest.raises(FeedError, match=r"BTCUSDT is not the same instrument in .*a lot = 0\.001.* vs .*a lot = 1e-05"):
        TickFilesSource(paths[:2])

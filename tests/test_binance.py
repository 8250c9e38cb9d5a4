"""Binance captures: the real spot and USD-M files, continuity breaks, bad lines."""
import gzip
import json

import numpy as np
import pytest

from engine.records import KIND_GAP, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL
from feeds.binance import fixed
from feeds.uri import FeedError

from tests.conftest import SHARED_DATA
from tests.helpers.feedutil import cli, one_line_error, read_all, without_depth

DATA = SHARED_DATA / "binance"
REAL = [DATA / "spot_btcusdt_20240808.gz", DATA / "usdm_btcusdt_20240808.gz"]
needs_data = pytest.mark.skipif(not DATA.exists(), reason="../shared/data is not here (a user's clone); CI has it")


def line(ns, msg):
    return f"{ns} {json.dumps(msg)}\n".encode()


def depth(U, u, bids=(), asks=(), E=1, pu=None):
    d = {"e": "depthUpdate", "E": E, "s": "BTCUSDT", "U": U, "u": u, "b": list(bids), "a": list(asks)}
    if pu is not None:
        d["pu"] = pu
    return {"stream": "btcusdt@depth", "data": d}


def snapshot(last, bids, asks):
    return {"lastUpdateId": last, "bids": bids, "asks": asks}


def test_decimal_strings_become_exact_fixed_point():
    assert fixed("61837.63000000", 9) == 61837_630_000_000
    assert fixed("0.00000001", 8) == 1 and fixed("12", 8) == 12 * 10**8
    with pytest.raises(ValueError):
        fixed("1.0000000001", 8)
    with pytest.raises(ValueError):
        fixed("1e5", 8)


@needs_data
@pytest.mark.parametrize("path", REAL, ids=["spot", "usdm"])
def test_book_agrees_with_the_book_ticker_on_every_shared_update_id(path):
    a, src = read_all(f"binance:{path}?size_unit=1e-3")
    st = src.stats()
    assert st["ticker_checked"] > 500 and st["ticker_disagree"] == 0 and st["ticker_agree"] == st["ticker_checked"]
    assert st["snapshots"] == 1 and st["gaps"] == 0 and st["bad_lines"] == 0
    assert st["depth_applied"] + st["depth_dropped_old"] == st["depth_events"]
    q = a[a["kind"] == KIND_QUOTE]
    assert len(q) == st["quotes"] and (q["bid_px"] < q["ask_px"]).all() and (q["bid_px"] > 0).all()
    t = a[a["kind"] == KIND_TRADE]
    assert len(t) == st["trades"] and set(np.unique(t["side"])) == {SIDE_BUY, SIDE_SELL}
    assert (np.diff(a["ts_recv"]) >= 0).all()  # the capture's receive times, in order
    assert src.instruments == ["BTCUSDT"]


def _capture(tmp_path, lines, name="c.gz"):
    p = tmp_path / name
    p.write_bytes(gzip.compress(b"".join(lines)))
    return str(p)


def test_spot_continuity_held_events_gap_and_resync(tmp_path):
    lines = [
        line(1, depth(8, 10, bids=[["99.0", "1.0"]])),                  # before the snapshot: held
        line(2, depth(11, 12, asks=[["101.0", "2.0"]])),                # held, bridges lastUpdateId 10
        line(3, snapshot(10, [["99.0", "1.0"], ["98.0", "3.0"]], [["101.0", "1.0"]])),
        line(4, depth(13, 15, bids=[["99.5", "0.5"]])),                 # continuous
        line(5, {"stream": "btcusdt@trade", "data": {"e": "trade", "E": 5, "s": "BTCUSDT", "t": 1,
                                                     "p": "99.5", "q": "0.25", "T": 5, "m": True}}),
        line(6, depth(20, 22, bids=[["99.6", "1.0"]])),                 # 16..19 missing: gap
        line(7, depth(23, 24, bids=[["99.7", "1.0"]])),                 # held until a snapshot
        line(8, snapshot(23, [["99.0", "1.0"]], [["100.0", "1.0"]])),
        line(9, {"stream": "btcusdt@bookTicker", "data": {"u": 24, "s": "BTCUSDT", "b": "99.7", "B": "1.0",
                                                          "a": "100.0", "A": "1.0"}}),
    ]
    a, src = read_all(f"binance:{_capture(tmp_path, lines)}?size_unit=1e-8")
    a = without_depth(a)
    st = src.stats()
    kinds = list(a["kind"])
    assert kinds == [KIND_QUOTE, KIND_QUOTE, KIND_TRADE, KIND_GAP, KIND_QUOTE]
    assert a[0]["ask_px"] == 101 * 10**9 and a[0]["ask_sz"] == 2 * 10**8   # the held event applied
    assert a[1]["bid_px"] == 99_500_000_000 and a[2]["side"] == SIDE_SELL and a[2]["size"] == 25_000_000
    assert a[3]["price"] == 4                                               # update ids 16..19
    assert a[4]["bid_px"] == 99_700_000_000 and a[4]["ask_px"] == 100 * 10**9
    assert st["depth_dropped_old"] == 2 and st["resyncs"] == 1 and st["snapshots"] == 2
    assert st["ticker_checked"] == st["ticker_agree"] == 1


def test_futures_continuity_uses_pu(tmp_path):
    lines = [
        line(1, snapshot(100, [["10.0", "1"]], [["11.0", "1"]])),
        line(2, depth(90, 105, bids=[["10.5", "1"]], pu=89)),     # U <= 100 <= u: first event
        line(3, depth(106, 110, asks=[["10.9", "1"]], pu=105)),   # pu == previous u
        line(4, depth(111, 115, asks=[["10.8", "1"]], pu=109)),   # pu != 110: out of sync
    ]
    a, src = read_all(f"binance:{_capture(tmp_path, lines)}")
    assert list(without_depth(a)["kind"]) == [KIND_QUOTE, KIND_QUOTE, KIND_GAP]
    assert src.stats()["resyncs"] == 1


@pytest.mark.parametrize("bad", [b"garbage\n", b"123 {not json}\n", b"123 [1, 2]\n",
                                 b'123 {"stream": "x", "data": {"e": "trade", "s": "BTCUSDT"}}\n'])
def test_bad_lines_stop_by_default_and_are_counted_on_request(tmp_path, bad):
    lines = [line(1, snapshot(10, [["99.0", "1.0"]], [["101.0", "1.0"]])), bad,
             line(3, depth(11, 12, bids=[["99.5", "1.0"]]))]
    path = _capture(tmp_path, lines)
    with pytest.raises(FeedError, match="line 2"):
        read_all(f"binance:{path}")
    a, src = read_all(f"binance:{path}?on_error=skip")
    assert src.stats()["bad_lines"] == 1 and len(without_depth(a)) == 1
    res = cli("convert", f"binance:{path}", "--out", str(tmp_path / "o.parquet"), "--quiet")
    assert "line 2" in one_line_error(res)
    assert not list(tmp_path.glob("o.parquet*"))


def test_cut_gzip_is_an_error_not_a_short_file(tmp_path):
    lines = [line(i, depth(i, i, bids=[["99.0", str(i)]])) for i in range(1, 3000)]
    z = gzip.compress(b"".join(lines))
    p = tmp_path / "cut.gz"
    p.write_bytes(z[: len(z) // 2])
    res = cli("convert", f"binance:{p}", "--out", str(tmp_path / "o.csv"), "--quiet")
    assert "corrupted gzip" in one_line_error(res)

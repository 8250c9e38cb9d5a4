"""Binance captures: the real spot and USD-M files, continuity breaks, bad lines."""
import gzip
import json

import numpy as np
import pytest

from engine.records import KIND_GAP, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL
from feeds.binance.capture import fixed, price9, qty8
from feeds.core.uri import FeedError

from tests.helpers.data import SPOT, USDM, cut_and_whole
from tests.helpers.feedutil import cli, one_line_error, read_all, without_depth

REAL = [SPOT, USDM]


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


@pytest.mark.parametrize("path", REAL, ids=["spot", "usdm"])
def test_book_agrees_with_the_book_ticker_on_every_shared_update_id(path):
    a, src = read_all(f"binance:{path}?size_unit=1e-3")
    st = src.stats()
    assert st["ticker_checked"] > 50 and st["ticker_disagree"] == 0 and st["ticker_agree"] == st["ticker_checked"]
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


# --- the numba scanner against the orjson reader it replaced; bookTicker quotes ------------------

def _both(uri_tail, path, **params):
    """(ticks, stats) of the scanner with book_ticker=check and of the orjson reader, same input."""
    from urllib.parse import urlencode
    from tests.helpers.binance_orjson import BinanceFile as Orjson
    from feeds.core.sources import open_source
    out = []
    for src in (open_source(f"binance:{path}?" + urlencode({**params, "book_ticker": "check"})),
                Orjson(f"binance:{path}", str(path), params)):
        parts = [b.copy() for b in src.batches()]
        out.append((np.concatenate(parts) if parts else np.zeros((0, 8), np.int64), src.stats()))
    return out


@pytest.mark.parametrize("depth_", ["0", "10"])
@pytest.mark.parametrize("path", cut_and_whole(SPOT, USDM))
def test_scanner_ticks_are_the_orjson_readers_byte_for_byte(path, depth_):
    (a, sa), (b, sb) = _both("", path, depth=depth_, size_unit="1e-3")
    assert a.shape == b.shape and a.tobytes() == b.tobytes()
    assert {k: sa[k] for k in sb} == sb


def test_plain_shape_read_straight_fills_what_the_general_parser_fills():
    """parse_line's fast path (feeds/binance/message.py _plain_wrapper) against the general _wrapper on every
    2nd line of both real captures (tickers, trades, diffs, the snapshot) and on shapes it must
    leave to the general one: the same end and the same field tables where it takes a line; -1
    where it does not."""
    from feeds.binance import message as M

    def tables(body):
        b = np.frombuffer(body, np.uint8)
        out = []
        for fn in (M._plain_wrapper, M._wrapper):
            F, F1 = np.full((M.NK, 3), 7, np.int64), np.full((M.NK, 3), 7, np.int64)
            j = fn(b, 0, len(b), F, F1)
            seen = F[:, 0] != M.V_NONE
            inner = F1[:, 0] != M.V_NONE if F[M.K_data, 0] == M.V_OBJ else np.zeros(M.NK, bool)
            out.append((j, F[seen].tolist(), F1[inner].tolist()))
        return out

    taken = 0
    for path in REAL:
        for ln in gzip.decompress(path.read_bytes()).split(b"\n")[::2]:
            if ln:
                plain, general = tables(ln.split(b" ", 1)[1])
                assert plain == general and plain[0] == len(ln.split(b" ", 1)[1]), ln[:100]
                taken += 1
    assert taken > 7_000  # (every 2nd line of both captures)
    for body in (b'{"stream":"x", "data":{"u":1}}', b'{"data":{"s":"A\\u0042"}}', b'{"x":{"y":1},"u":2}',
                 b'{"data":{"a":{"b":1}}}', b'{"data":{"u":1}', b'{"u":1,}', b'{"u":1}'[:-1]):
        plain, general = tables(body)
        assert plain[0] == -1, body
    for body in (b'{}', b'{"data":{}}', b'{"data":[1,{"a":"]"}],"u":-1.5e3,"m":true,"x":null}',
                 b'{"e":"x","e":"y","data":{"u":1},"data":{"b":"2"}}'):
        plain, general = tables(body)
        assert plain == general and plain[0] == len(body), body


def _mixed_lines():
    """Shapes the scanner must read as orjson does: whitespace, key orders, no wrapper, unknown
    keys, held events, a gap, futures ids, bad lines among good ones."""
    raw = [
        b'1 {"stream":"btcusdt@depth","data":{"e":"depthUpdate","E":5,"s":"BTCUSDT","U":8,"u":10,"b":[["99.0","1.0"]],"a":[]}}',
        b'2 {"lastUpdateId": 10, "bids": [["99.0", "1.0"], ["98.0", "3.0"]], "asks": [["101.0", "1.0"]]}',
        b'3   { "data" : { "u" : 11 , "U" : 11, "a": [ [ "100.5" , "2" ] ], "s":"BTCUSDT", "e":"depthUpdate",'
        b' "E": 7, "x": {"nested": [1, {"y": "}"}]}, "T": 0 }, "stream": "btcusdt@depth" }',
        b'4 {"e":"trade","E":8,"T":9,"s":"BTCUSDT","t":1,"p":"100.50","q":"0.125","m":false,"M":true}',
        b'5 {"u":11,"s":"BTCUSDT","b":"99.0","B":"1.0","a":"100.5","A":"2.0"}',
        b'',
        b'   ',
        b'6 {"e":"depthUpdate","E":10,"s":"ETHUSDT","U":1,"u":2,"b":[["5.0","1.0"]],"a":[]}',
        b'7 {"e":"kline","s":"BTCUSDT"}',
        b'8 {"e":"depthUpdate","E":11,"s":"BTCUSDT","U":12,"u":12,"b":[["99.5","2.5"]]}',
        b'9 {"e":"depthUpdate","E":12,"s":"BTCUSDT","U":15,"u":16,"b":[["99.6","1"]],"a":[]}',
        b'10 {"e":"trade","E":13,"T":13,"s":"BTCUSDT","t":2,"p":"99.0","q":"1","m":true}',
        b'11 {"e":"depthUpdate","E":14,"s":"BTCUSDT","U":16,"u":17,"b":[],"a":[["100.4","1"]]}',
    ]
    return raw


SAME_AS_ORJSON = [None, b'12 {"e":"trade","s":"BTCUSDT","p":"1.0000000001","q":"1","T":1,"m":true}',
                  b'12 {"stream":"x","data":{"e":"trade","s":"BTCUSDT","p":"1","q":"1","T":1,"m":true}',
                  b'12 {"e":"trade","s":"BTCUSDT","p":"1","q":"1","T":1,"m":true} trailing',
                  b'-1 {}', b'12{}', b'12 {"a":"\\"}', b'12 [1, 2]', b'12 {"s": 1, "e": "trade"}',
                  b'12 {"e":"trade","s":"BTCUSDT","p":"1","q":"1","T":1,"m":true,"x":[[[[']
# where the orjson reader took the line (parsing a ticker's prices only when checked), or crashed
STRICTER = [b'12 {"e":"trade","s":"BTCUSDT","p":"1","q":"1","T":99999999999999999999,"m":true}',
            b'99999999999999999999 {}', b'12 {"u":1,"s":"BTCUSDT","b":"1","B":"1","a":"x","A":"1"}',
            b'12 {"e":"trade","s":"BTCUSDT","p":"1","q":"1","T":1,"m":"yes"}']


def _mixed_capture(tmp_path, bad):
    raw = _mixed_lines() + ([bad] if bad is not None else []) + [
        b'13 {"e":"depthUpdate","E":15,"s":"BTCUSDT","U":18,"u":18,"b":[["99.7","1"]],"a":[]}']
    p = tmp_path / "m.txt"
    p.write_bytes(b"\n".join(raw) + b"\n")
    return p


@pytest.mark.parametrize("bad", SAME_AS_ORJSON, ids=lambda b: "good" if b is None else b[3:40].decode())
def test_scanner_reads_hand_made_shapes_as_orjson_does_and_names_bad_lines(tmp_path, bad):
    p = _mixed_capture(tmp_path, bad)
    (a, sa), (b, sb) = _both("", p, depth="2", size_unit="1e-8", on_error="skip")
    assert a.tobytes() == b.tobytes()
    # (the orjson reader counted a malformed trade in trades too; the scanner only in bad_lines)
    assert {k: sa[k] for k in sb if k != "trades"} == {k: v for k, v in sb.items() if k != "trades"}
    assert sa["trades"] == 2 and sa["gaps"] == 1 and sa["bad_lines"] == (bad is not None)
    if bad is not None:
        with pytest.raises(FeedError, match=rf"^{p}: line 14: "):
            read_all(f"binance:{p}")


@pytest.mark.parametrize("bad", STRICTER, ids=lambda b: b[3:40].decode())
def test_scanner_refuses_what_the_orjson_reader_let_through(tmp_path, bad):
    p = _mixed_capture(tmp_path, bad)
    with pytest.raises(FeedError, match=rf"^{p}: line 14: \S"):
        read_all(f"binance:{p}")
    a, src = read_all(f"binance:{p}?on_error=skip&book_ticker=check")
    (b, _), _ = _both("", _mixed_capture(tmp_path, None), on_error="skip")
    assert src.stats()["bad_lines"] == 1 and a.tobytes() == b.tobytes()


def _ticker(ns, u, b, B, a, A):
    return line(ns, {"stream": "btcusdt@bookTicker", "data": {"u": u, "s": "BTCUSDT", "b": b, "B": B, "a": a,
                                                               "A": A}})


def _touch(r):
    return (int(r["bid_px"]) // 10**8, int(r["bid_sz"]), int(r["ask_px"]) // 10**8, int(r["ask_sz"]))


def test_book_tickers_become_quotes_ordered_by_update_id(tmp_path):
    lines = [
        line(1, snapshot(10, [["99.0", "1"], ["98.0", "1"]], [["101.0", "1"], ["102.0", "1"]])),
        line(2, depth(11, 12, bids=[["99.0", "2"]])),                 # the book at 12: 99x2 / 101x1
        _ticker(3, 12, "99.0", "2", "101.0", "1"),                     # equal ids: dropped (and checked)
        _ticker(4, 11, "98.0", "1", "101.0", "1"),                     # older than the book: dropped
        _ticker(5, 15, "99.5", "3", "101.0", "1"),                     # newer: its touch goes over the book's
        line(6, {"stream": "btcusdt@trade", "data": {"e": "trade", "E": 6, "s": "BTCUSDT", "t": 1, "p": "99.5",
                                                     "q": "1", "T": 6, "m": True}}),
        line(7, depth(13, 14, asks=[["101.0", "5"]])),               # older diff: book moves, the ticker's touch stays
        line(8, depth(15, 16, bids=[["99.5", "0"]], asks=[["100.5", "1"]])),  # reaches 15: the diff's book replaces it
        _ticker(9, 16, "99.0", "2", "100.5", "1"),                     # equal ids again: dropped, agrees
        _ticker(10, 17, "99.0", "2", "100.5", "1"),                    # newer but the same touch: no quote
        _ticker(11, 18, "98.0", "1", "100.5", "1"),                    # the bid at 99 went: 98 is the best
    ]
    a, src = read_all(f"binance:{_capture(tmp_path, lines)}?size_unit=1e-8&depth=0")
    st = src.stats()
    got = [(int(r["kind"]), int(r["ts_recv"])) + _touch(r) for r in a]
    Q, T = KIND_QUOTE, KIND_TRADE
    assert got == [
        (Q, 2, 990, 2 * 10**8, 1010, 10**8),
        (Q, 5, 995, 3 * 10**8, 1010, 10**8),
        (T, 6, 995, 3 * 10**8, 1010, 10**8),
        (Q, 8, 990, 2 * 10**8, 1005, 10**8),
        (Q, 11, 980, 10**8, 1005, 10**8),
    ]
    assert st["ticker_dropped_old"] == 3 and st["ticker_quotes"] == 2 and st["book_tickers"] == 6
    assert st["ticker_checked"] == st["ticker_agree"] == 2
    assert a[1]["ts_event"] == 1_000_000  # a spot ticker has no time: the instrument's latest exchange time
    # with depth, the window follows the published touch (level 0 is what each quote carries)
    from tests.helpers.depthbook import windows
    d, _ = read_all(f"binance:{_capture(tmp_path, lines, 'd.gz')}?size_unit=1e-8&depth=2")
    windows(d, 2)
    assert [_touch(r) for r in d[d["kind"] == Q]] == [g[2:] for g in got if g[0] == Q]
    # book_ticker=check: tickers only checked, as before
    c, src = read_all(f"binance:{_capture(tmp_path, lines, 'c.gz')}?size_unit=1e-8&depth=0&book_ticker=check")
    assert [int(r["kind"]) for r in c] == [Q, T, Q, Q] and src.stats()["ticker_quotes"] == 0


@pytest.mark.parametrize("path,unit", [(REAL[0], "1e-5"), (REAL[1], "1e-3")], ids=["spot", "usdm"])
def test_quote_ticks_cover_every_book_ticker_change_of_the_touch(path, unit):
    """From the raw lines (json, not the scanner): every bookTicker newer than the book's last
    applied diff must be the touch right after its line; the ticks must show exactly that."""
    from collections import Counter
    a, src = read_all(f"binance:{path}?size_unit={unit}&depth=10")
    from tests.helpers.depthbook import windows
    windows(a, 10)  # the published window's level 0 is every quote's touch
    st = src.stats()
    assert st["gaps"] == 0 and st["ticker_disagree"] == 0
    div = src.size_div
    with gzip.open(path) as f:
        msgs = [(int(ln.split(b" ", 1)[0]), json.loads(ln.split(b" ", 1)[1])) for ln in f if ln.strip()]
    per_recv = Counter(r for r, _ in msgs)
    sid, held, book_u, expect, dropped = None, [], None, [], 0
    for recv, m in msgs:
        d = m.get("data", m)
        if "lastUpdateId" in d:
            sid = d["lastUpdateId"]
            fut = any("pu" in h for h in held)
            ok = [h["u"] for h in held if (h["u"] >= sid if fut else h["u"] > sid)]
            book_u = max(ok + [sid])
        elif d.get("e") == "depthUpdate":
            if sid is None:
                held.append(d)
            elif d["u"] > book_u or ("pu" not in d and d["u"] > sid):
                book_u = max(book_u, d["u"])
        elif "A" in d and "u" in d:
            if book_u is None or d["u"] <= book_u:
                dropped += 1
            elif per_recv[recv] == 1:
                expect.append((recv, price9(d["b"]), qty8(d["B"]) // div, price9(d["a"]), qty8(d["A"]) // div))
    recvs = a["ts_recv"]
    assert (np.diff(recvs) >= 0).all()
    for recv, *touch in expect:
        k = np.searchsorted(recvs, recv, side="right") - 1  # the last tick at or before the ticker's line
        r = a[k]
        assert (int(r["bid_px"]), int(r["bid_sz"]), int(r["ask_px"]), int(r["ask_sz"])) == tuple(touch), recv
    assert len(expect) > 0.9 * (st["book_tickers"] - dropped)
    assert st["ticker_dropped_old"] + st["ticker_no_book"] == dropped
    depth_alone = read_all(f"binance:{path}?size_unit={unit}&depth=10&book_ticker=check")[1].stats()["quotes"]
    assert st["quotes"] > 9 * depth_alone  # the tickers change the touch many times between diffs


def test_newline_search_finds_every_position():
    """The scanner's word-at-a-time newline search (feeds/jscan.find_byte) against bytes.find, for
    a newline at every offset of a word, none at all, and spans that do not start at 0."""
    from feeds.core.jscan import find_byte
    for size in (0, 1, 7, 8, 9, 23, 64):
        for at in range(-1, size):
            b = bytearray(b"x" * size)
            if at >= 0:
                b[at] = 10
                b[(at + 3) % size] = 0x8A if (at + 3) % size != at else 10  # a high byte near it
            a = np.frombuffer(bytes(b), np.uint8)
            for start in range(min(size, 9) + 1):
                want = bytes(b).find(b"\n", start)
                assert find_byte(a, start, size, 10) == (size if want < 0 else want), (size, at, start)


@pytest.mark.parametrize("at", [850, 748, 702])
def test_a_ticker_deep_inside_the_book_shows_the_levels_under_it(tmp_path, at):
    """A bookTicker whose bid lies deep inside the diff book (under the ladder part of the book,
    feeds/books/book_deep.py: its best 128 here) still shows the book's next levels under its touch:
    850 finds them in the table's levels the view pulls into the ladder; 748 needs the last of
    those and then the table's; 702 only the table's last level."""
    bids = [[f"{p}.0", "1"] for p in range(1000, 700, -1)]
    asks = [[f"{p}.0", "1"] for p in range(1001, 1301)]
    lines = [line(1, snapshot(10, bids, asks)), _ticker(2, 11, f"{at}.0", "2", "1001.0", "1")]
    from tests.helpers.depthbook import windows
    d, src = read_all(f"binance:{_capture(tmp_path, lines)}?size_unit=1e-8&depth=5")
    h = windows(d, 5)
    assert src.stats()["ticker_quotes"] == 1
    g = 10**9
    assert h.items[-1][2] == (((at * g, 2 * 10**8),) + tuple((p * g, 10**8) for p in range(at - 1, max(at - 5, 700), -1)),
                              tuple((p * g, 10**8) for p in range(1001, 1006)))


def _spoil_capture(lines, every=40):
    """Bad values planted in a capture's lines: every `every`-th trade a negative price, price and
    size 0, a negative or a zero size; every `every`-th bookTicker a negative bid size, a negative
    bid price, an ask price of 0 with a size, a negative ask size; every `every // 2`-th depth diff
    (and the snapshot) a bid level at price 0, and some an ask level at price 0 of size 0. Returns
    (the spoilt lines, the lines a parser that rejects them reads the same: without the spoilt
    trades and tickers, the diffs as they were) and the counts by kind."""
    bad, ref = [], []
    n = {"trade": 0, "ticker": 0, "depth": 0}
    want = dict.fromkeys(("trade_bad_price", "trade_bad_size", "ticker_bad_price", "ticker_bad_size",
                          "depth_bad_levels"), 0)

    def out(ns, msg):
        return f"{ns} {json.dumps(msg, separators=(',', ':'))}".encode()

    for ln in lines:
        ns, body = ln.split(b" ", 1)
        msg = json.loads(body)
        d = msg.get("data", msg)
        if d.get("e") == "trade":
            n["trade"] += 1
            k = n["trade"] // every
            if n["trade"] % every == 0:
                if k % 4 == 0:
                    d["p"] = "-" + d["p"]
                elif k % 4 == 1:
                    d["p"] = d["q"] = "0.00000000"
                elif k % 4 == 2:
                    d["q"] = "-" + d["q"]
                else:
                    d["q"] = "0"
                want["trade_bad_price" if k % 4 < 2 else "trade_bad_size"] += 1
                bad.append(out(ns.decode(), msg))
                continue
        elif "A" in d and "u" in d:
            n["ticker"] += 1
            k = n["ticker"] // every
            if n["ticker"] % every == 0:
                key, value = (("B", "-" + d["B"]), ("b", "-" + d["b"]), ("a", "0.00000000"), ("A", "-1.0"))[k % 4]
                d[key] = value
                want["ticker_bad_size" if key in "BA" else "ticker_bad_price"] += 1
                bad.append(out(ns.decode(), msg))
                continue
        elif d.get("e") == "depthUpdate" or "lastUpdateId" in d:
            n["depth"] += 1
            if n["depth"] % (every // 2) == 0 or "lastUpdateId" in d:
                d["b" if "e" in d else "bids"].append(["0.00000000", "1.50000000"])
                want["depth_bad_levels"] += 1
                if n["depth"] % every == 0:
                    d["a" if "e" in d else "asks"].insert(0, ["0.00000000", "0.00000000"])
                    want["depth_bad_levels"] += 1
                bad.append(out(ns.decode(), msg))
                ref.append(ln)
                continue
        bad.append(ln)
        ref.append(ln)
    return bad, ref, want


def test_bad_values_in_a_real_capture_are_rejected_and_counted(tmp_path):
    """A cut of the spot capture with bad values planted (_spoil_capture): negative trade prices,
    trades of price and size 0, negative and zero trade sizes (the negative one was counted as
    size_saturated), negative bookTicker sizes (one removed the bid), bad ticker prices, depth
    levels at price 0. The ticks, levels included, are exactly those of the cut without the spoilt
    trades and tickers: none reaches the book or a tick. Each is counted by kind; every other
    counter is the clean cut's (lines: the spoilt ones read too)."""
    lines = [ln for ln in gzip.decompress(REAL[0].read_bytes()).split(b"\n")[:20_000] if ln.strip()]
    bad, ref, want = _spoil_capture(lines)
    assert min(want.values()) >= 10
    paths = [_capture(tmp_path, [ln + b"\n" for ln in x], f"{name}.gz") for x, name in ((bad, "bad"), (ref, "ref"))]
    a, src = read_all(f"binance:{paths[0]}?size_unit=1e-8")
    b, rsrc = read_all(f"binance:{paths[1]}?size_unit=1e-8")
    assert a.tobytes() == b.tobytes()
    st, clean = src.stats(), rsrc.stats()
    assert {k: st[k] for k in want} == want and all(clean[k] == 0 for k in want)
    assert st["lines"] == clean["lines"] + len(bad) - len(ref)
    assert {k: v for k, v in st.items() if k not in want and k != "lines"} == \
        {k: v for k, v in clean.items() if k not in want and k != "lines"}
    assert st["bad_lines"] == st["gaps"] == 0 and st["ticker_disagree"] == 0
    from feeds.books.ticks import MAX_PRICE
    t = a[a["kind"] == KIND_TRADE]
    assert ((t["price"] > 0) & (t["price"] <= MAX_PRICE)).all() and (t["size"] > 0).all()
    q = a[a["kind"] == KIND_QUOTE]
    assert (q["bid_px"] > 0).all() and (q["bid_sz"] > 0).all() and (q["bid_px"] < q["ask_px"]).all()

"""Databento DBN: hand-built MBO / MBP-1 / trades streams, the real CME file, hostile input."""
import numpy as np
import pytest

from engine.records import KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_NONE, SIDE_SELL
from feeds.core.uri import FeedError

from tests.helpers.data import ESH4, cut_and_whole
from tests.helpers.feedutil import check_book_consistent, cli, one_line_error, read_all, without_depth

dbn = pytest.importorskip("databento_dbn")
A, S = dbn.Action, dbn.Side
LAST = dbn.F_LAST
PX = 10**9


def meta(schema=None):
    return dbn.Metadata(dataset="GLBX.MDP3", start=0, stype_in=dbn.SType.RAW_SYMBOL,
                        stype_out=dbn.SType.INSTRUMENT_ID, schema=schema or dbn.Schema.MBO).encode()


def mbo(ts, oid, px, size, action, side, flags=LAST, iid=42):
    return bytes(dbn.MBOMsg(1, iid, ts, oid, px, size, action, side, ts + 500, flags=flags))


def write(tmp_path, data, zstd=False):
    p = tmp_path / ("x.dbn.zst" if zstd else "x.dbn")
    if zstd:
        import zstandard
        data = zstandard.ZstdCompressor().compress(data)
    p.write_bytes(data)
    return str(p)


def _mbo_day():
    return meta() + b"".join([
        mbo(100, 1, 4799 * PX, 2, A.ADD, S.BID),
        mbo(200, 2, 4800 * PX, 3, A.ADD, S.ASK),
        mbo(300, 0, 4800 * PX, 1, A.TRADE, S.BID, flags=0),   # one event: trade, fill, cancel
        mbo(300, 2, 4800 * PX, 1, A.FILL, S.ASK, flags=0),
        b"\x0a\x12" + bytes(38),                               # a record type we skip (40 bytes)
        mbo(300, 2, 4800 * PX, 1, A.CANCEL, S.ASK),
        mbo(400, 1, 4799_250_000_000, 5, A.MODIFY, S.BID),     # modify: new price and size
        mbo(500, 99, 4700 * PX, 1, A.CANCEL, S.BID),           # unknown order
        mbo(550, 5, 4801 * PX, 4, A.ADD, S.ASK, iid=77),       # another instrument
        mbo(600, 0, 0, 0, A.CLEAR, S.NONE),                    # clear instrument 42
    ])


def rows(a):
    return [(int(r["kind"]), int(r["instrument"]), int(r["price"]), int(r["size"]), int(r["side"]),
             int(r["bid_px"]), int(r["bid_sz"]), int(r["ask_px"]), int(r["ask_sz"])) for r in without_depth(a)]


@pytest.mark.parametrize("zstd", [False, True])
def test_mbo_events_make_the_book_and_the_ticks(tmp_path, zstd):
    a, src = read_all("dbn:" + write(tmp_path, _mbo_day(), zstd))
    Q, T = KIND_QUOTE, KIND_TRADE
    assert rows(a) == [
        (Q, 0, 0, 0, 0, 4799 * PX, 2, 0, 0),
        (Q, 0, 0, 0, 0, 4799 * PX, 2, 4800 * PX, 3),
        (T, 0, 4800 * PX, 1, SIDE_BUY, 4799 * PX, 2, 4800 * PX, 2),   # held to the event's end
        (Q, 0, 0, 0, 0, 4799 * PX, 2, 4800 * PX, 2),
        (Q, 0, 0, 0, 0, 4799_250_000_000, 5, 4800 * PX, 2),
        (Q, 1, 0, 0, 0, 0, 0, 4801 * PX, 4),
        (Q, 0, 0, 0, 0, 0, 0, 0, 0),
    ]
    assert list(a["ts_recv"]) == list(a["ts_event"] + 500)
    st = src.stats()
    assert st["unknown_order"] == 1 and st["clears"] == 1 and st["skipped_rtypes"] == 1
    assert src.instruments == ["42", "77"]


def test_mbp10_records_use_their_top_level(tmp_path):
    lv = [dbn.BidAskPair((100 - i) * PX, (101 + i) * PX, 7 + i, 9 + i, 1, 1) for i in range(10)]
    data = meta(dbn.Schema.MBP_10) + bytes(dbn.MBP10Msg(1, 5, 10, 100 * PX, 7, A.ADD, S.BID, depth=0, ts_recv=11,
                                                          flags=LAST, levels=lv))
    a, _ = read_all("dbn:" + write(tmp_path, data))
    assert rows(a) == [(KIND_QUOTE, 0, 0, 0, 0, 100 * PX, 7, 101 * PX, 9)]


def test_mbp1_and_trades_records(tmp_path):
    lv = dbn.BidAskPair(100 * PX, 101 * PX, 7, 9, 1, 1)
    lv2 = dbn.BidAskPair(100 * PX, 101 * PX, 7, 5, 1, 1)
    data = meta(dbn.Schema.MBP_1) + b"".join([
        bytes(dbn.MBP1Msg(1, 5, 10, 100 * PX, 7, A.ADD, S.BID, depth=0, ts_recv=11, flags=LAST, levels=lv)),
        bytes(dbn.MBP1Msg(1, 5, 20, 101 * PX, 4, A.TRADE, S.BID, depth=0, ts_recv=21, flags=0, levels=lv2)),
        bytes(dbn.MBP1Msg(1, 5, 20, 101 * PX, 4, A.CANCEL, S.ASK, depth=0, ts_recv=21, flags=LAST, levels=lv2)),
        bytes(dbn.TradeMsg(1, 5, 30, 99 * PX, 2, A.TRADE, S.ASK, depth=0, ts_recv=31)),
        bytes(dbn.TradeMsg(1, 5, 40, 98 * PX, 1, A.TRADE, S.NONE, depth=0, ts_recv=41)),
    ])
    a, _ = read_all("dbn:" + write(tmp_path, data))
    assert rows(a) == [
        (KIND_QUOTE, 0, 0, 0, 0, 100 * PX, 7, 101 * PX, 9),
        (KIND_TRADE, 0, 101 * PX, 4, SIDE_BUY, 100 * PX, 7, 101 * PX, 5),
        (KIND_QUOTE, 0, 0, 0, 0, 100 * PX, 7, 101 * PX, 5),
        (KIND_TRADE, 0, 99 * PX, 2, SIDE_SELL, 100 * PX, 7, 101 * PX, 5),
        (KIND_TRADE, 0, 98 * PX, 1, SIDE_NONE, 100 * PX, 7, 101 * PX, 5),
    ]


@pytest.mark.parametrize("case", ["truncated", "short_record", "bad_length", "corrupt_zstd", "not_dbn"])
def test_hostile_dbn_fails_cleanly(tmp_path, case):
    day = _mbo_day()
    head = len(meta())
    if case == "truncated":
        data = day[:-9]
    elif case == "short_record":
        data = day[:head] + b"\x02" + day[head + 1:]      # a record claiming 8 bytes
    elif case == "bad_length":
        data = day[:head] + b"\x0a" + day[head + 1:]      # an MBO record of 40 bytes
    elif case == "not_dbn":
        data = b"DBX" + day[3:]
    else:
        data = None
    if case == "corrupt_zstd":
        import zstandard
        z = bytearray(zstandard.ZstdCompressor().compress(day * 20))
        z[len(z) // 2:len(z) // 2 + 8] = b"\x00" * 8
        path = tmp_path / "x.dbn.zst"
        path.write_bytes(bytes(z))
        path = str(path)
    else:
        path = write(tmp_path, data)
    res = cli("convert", f"dbn:{path}", "--out", str(tmp_path / "o.csv"), "--quiet")
    line = one_line_error(res)
    assert path in line
    assert not list(tmp_path.glob("o.csv*"))


def test_bad_length_can_be_skipped(tmp_path):
    day = _mbo_day()
    head = len(meta())
    a, src = read_all("dbn:" + write(tmp_path, day[:head] + b"\x0a" + day[head + 1:head + 40] + day[head + 56:]) + "?on_error=skip")
    assert src.stats()["bad_length"] == 1


@pytest.mark.parametrize("REAL", cut_and_whole(ESH4))
def test_real_cme_file_rebuilds_without_inconsistency(REAL):
    a, src = read_all(f"dbn:{REAL}")
    st = src.stats()
    assert src.instruments == ["ESH4"]
    for k in ("unknown_order", "duplicate_order", "negative_level", "bad_length", "bad_side", "bad_action"):
        assert st[k] == 0, k
    assert st["quotes"] == np.count_nonzero(a["kind"] == KIND_QUOTE) > 0
    check_book_consistent(src.ladders, src.orders)  # levels == the orders resting on them
    # crossed only in the pre-open (before the opening trade), never once trading runs
    trades = np.nonzero(a["kind"] == KIND_TRADE)[0]
    q = (a["kind"] == KIND_QUOTE) & (a["bid_px"] > 0) & (a["ask_px"] > 0)
    crossed = np.nonzero(q & (a["bid_px"] >= a["ask_px"]))[0]
    assert len(trades) and (crossed < trades[0]).all()
    assert ((a["bid_sz"] > 0) == (a["bid_px"] > 0)).all() and ((a["ask_sz"] > 0) == (a["ask_px"] > 0)).all()
    # trades: exactly databento-dbn's own decoder's T records, in order
    import zstandard
    dec = dbn.DBNDecoder()
    dec.write(zstandard.ZstdDecompressor().stream_reader(open(REAL, "rb")).read())
    recs = [r for r in dec.decode() if isinstance(r, dbn.MBOMsg)]
    assert st["records"] == len(recs)
    ref = [(r.price, r.size, r.ts_event) for r in recs if r.action == "T"]
    t = a[trades]
    assert ref == list(zip(t["price"].tolist(), t["size"].tolist(), t["ts_event"].tolist()))
    # symbols filter
    b, _ = read_all(f"dbn:{REAL}?symbols=ESH4")
    assert np.array_equal(a, b)
    with pytest.raises(FeedError, match="no instrument NOPE"):
        read_all(f"dbn:{REAL}?symbols=NOPE")


def _prices_a_tick_can_carry(a):
    """No tick carries a price of 0 or below (but an empty side's 0) or above MAX_PRICE."""
    from engine.records import KIND_LEVEL
    from feeds.books.ticks import MAX_PRICE
    t = a[a["kind"] == KIND_TRADE]
    lv = a[(a["kind"] == KIND_LEVEL) & (a["side"] != SIDE_NONE)]
    assert ((t["price"] > 0) & (t["price"] <= MAX_PRICE)).all() and (t["size"] > 0).all()
    assert ((lv["price"] > 0) & (lv["price"] <= MAX_PRICE)).all()
    for k in ("bid_px", "ask_px"):
        assert ((a[k] >= 0) & (a[k] <= MAX_PRICE)).all(), k


def test_bad_prices_and_sizes_in_the_real_day_are_rejected_and_counted(tmp_path):
    """The real day with every 100th add, modify and trade spoilt: a price of 0, negative, 2^63 - 2
    or past MAX_PRICE, or a size of 0. The ticks (levels included) are exactly those of the day with
    each spoilt record made a no-op (an N record: its event still ends), so none reaches the book
    or a tick; each is counted as bad_price or bad_size, every other counter as in that day."""
    from feeds.databento.venue import load, spoil
    _, _, recs = load(ESH4)
    bad, ref, n_price, n_size = spoil(recs, every=100)
    assert n_price > 80 and n_size > 10
    (tmp_path / "bad.dbn").write_bytes(meta() + bad.tobytes())
    (tmp_path / "ref.dbn").write_bytes(meta() + ref.tobytes())
    a, src = read_all(f"dbn:{tmp_path / 'bad.dbn'}")
    b, rsrc = read_all(f"dbn:{tmp_path / 'ref.dbn'}")
    assert np.array_equal(a, b)
    st, want = src.stats(), rsrc.stats()
    assert st["bad_price"] == n_price and st["bad_size"] == n_size
    assert want["bad_price"] == want["bad_size"] == 0
    assert {k: v for k, v in st.items() if k not in ("bad_price", "bad_size")} == \
        {k: v for k, v in want.items() if k not in ("bad_price", "bad_size")}
    _prices_a_tick_can_carry(a)
    check_book_consistent(src.ladders, src.orders)


def test_mbp_and_trade_records_with_bad_prices_are_rejected(tmp_path):
    """MBP-1 records whose touch has a negative or 2^63 - 2 price change nothing; an MBP-1 trade
    of price 0 is not taken (its levels are); trades of size 0, a negative price or no price are
    not taken. MBP-10: a record with one level at price 0 is rejected whole."""
    good = dbn.BidAskPair(100 * PX, 101 * PX, 7, 9, 1, 1)
    after = dbn.BidAskPair(100 * PX, 101 * PX, 7, 5, 1, 1)

    def m1(ts, levels, px=100 * PX, size=7, action=A.ADD):
        return bytes(dbn.MBP1Msg(1, 5, ts, px, size, action, S.BID, depth=0, ts_recv=ts + 1, flags=LAST,
                                 levels=levels))

    def tr(ts, px, size):
        return bytes(dbn.TradeMsg(1, 5, ts, px, size, A.TRADE, S.NONE, depth=0, ts_recv=ts + 1))

    data = meta(dbn.Schema.MBP_1) + b"".join([
        m1(10, good),
        m1(20, dbn.BidAskPair(-PX, 101 * PX, 7, 9, 1, 1)),
        m1(30, dbn.BidAskPair(100 * PX, 2**63 - 2, 7, 9, 1, 1)),
        m1(40, after, px=0, size=4, action=A.TRADE),
        tr(50, 99 * PX, 0), tr(60, -99 * PX, 1), tr(70, 2**63 - 1, 1), tr(80, 98 * PX, 1),
    ])
    a, src = read_all("dbn:" + write(tmp_path, data))
    assert rows(a) == [
        (KIND_QUOTE, 0, 0, 0, 0, 100 * PX, 7, 101 * PX, 9),
        (KIND_QUOTE, 0, 0, 0, 0, 100 * PX, 7, 101 * PX, 5),
        (KIND_TRADE, 0, 98 * PX, 1, SIDE_NONE, 100 * PX, 7, 101 * PX, 5),
    ]
    st = src.stats()
    assert (st["bad_price"], st["bad_size"], st["undef_price"], st["trades"]) == (4, 1, 1, 1)
    _prices_a_tick_can_carry(a)

    lv = [dbn.BidAskPair((100 - i) * PX, (101 + i) * PX, 7 + i, 9 + i, 1, 1) for i in range(10)]
    spoilt = list(lv)
    spoilt[3] = dbn.BidAskPair(0, 104 * PX, 1, 12, 1, 1)
    data = meta(dbn.Schema.MBP_10) + b"".join(
        bytes(dbn.MBP10Msg(1, 5, ts, 100 * PX, 7, A.ADD, S.BID, depth=0, ts_recv=ts + 1, flags=LAST, levels=levels))
        for ts, levels in ((10, lv), (20, spoilt)))
    a, src = read_all("dbn:" + write(tmp_path, data))
    assert rows(a) == [(KIND_QUOTE, 0, 0, 0, 0, 100 * PX, 7, 101 * PX, 9)]
    assert src.stats()["bad_price"] == 1 and len(a) == 1 + 20  # the quote and the first record's 20 levels
    _prices_a_tick_can_carry(a)

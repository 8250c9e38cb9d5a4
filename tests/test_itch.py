"""ITCH 5.0: writer -> parser round trips, every message the book needs, bad input."""
import gzip
import os

import numpy as np
import pytest

from engine.records import KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL
from feeds.nasdaq.itch_writer import message, preamble
from feeds.core.uri import FeedError

from tests.helpers.feedutil import check_book_consistent, cli, one_line_error, read_all

P = 10**5  # ITCH price units (1e-4) in ticks' 1e-9


def be(v, n):
    return int(v).to_bytes(n, "big")


def add(loc, ref, side, qty, sym, px, typ=b"A"):
    body = be(ref, 8) + side + be(qty, 4) + sym.ljust(8) + be(px, 4) + (b"MPID" if typ == b"F" else b"")
    return message(typ, loc, 1000, body)


def write(tmp_path, data, name="day.itch"):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_round_trip_through_the_writer(tmp_path):
    """The simulator's trades come back exactly; its quotes come back as the touch at the end of
    each exchange timestamp; the book never crosses and never meets an unknown order."""
    uri = "synthetic://?instruments=3&count=200000&seed=11"  # (level ticks count too)
    out = str(tmp_path / "syn.itch.gz")
    res = cli("convert", uri, "--out", out, "--quiet")
    assert res.returncode == 0, res.stderr
    date = res.stdout.split("date=")[1].split()[0]
    sim, _ = read_all(uri)
    got, src = read_all(f"itch:{out}?date={date}")
    st = src.stats()
    assert st["unknown_order"] == st["duplicate_order"] == st["crossed_quotes"] == st["bad_length"] == 0
    check_book_consistent(src.books.ladders, src.books.orders)
    assert src.instruments == ["SYN0000", "SYN0001", "SYN0002"]
    ts, gt = sim[sim["kind"] == KIND_TRADE], got[got["kind"] == KIND_TRADE]
    assert len(ts) > 5000
    for f in ("ts_event", "instrument", "price", "size", "side"):
        assert np.array_equal(ts[f], gt[f]), f
    # the touch at the end of each (timestamp, instrument) where the simulator's touch changed
    # (trade ticks carry the touch after the trade, so they count too)
    def touches(a, only_changed):
        last, seen = {}, {}
        for r in a[(a["kind"] == KIND_QUOTE) | (a["kind"] == KIND_TRADE)]:  # level/book ticks: tests/test_depth.py
            t = (int(r["bid_px"]), int(r["bid_sz"]), int(r["ask_px"]), int(r["ask_sz"]))
            i = int(r["instrument"])
            if only_changed and seen.get(i) == t:
                continue
            seen[i] = t
            last[(int(r["ts_event"]), i)] = t
        return last
    want, have = touches(sim, True), touches(got, False)
    assert len(want) > 40000
    assert have == want


def _day():
    return (preamble(["AAPL", "MSFT"])
            + add(1, 1, b"B", 100, b"AAPL", 100_000)        # bid 10.00 x100
            + add(1, 2, b"S", 200, b"AAPL", 105_000, b"F")  # ask 10.50 x200 (with MPID)
            + add(1, 3, b"B", 50, b"AAPL", 101_000)         # bid 10.10 x50
            + add(2, 4, b"B", 10, b"MSFT", 50_000)          # the other instrument
            + message(b"E", 1, 2000, be(3, 8) + be(30, 4) + be(77, 8))            # 30 of ref 3 trade
            + message(b"C", 1, 3000, be(2, 8) + be(50, 4) + be(78, 8) + b"Y" + be(104_000, 4))
            + message(b"C", 1, 3500, be(2, 8) + be(10, 4) + be(79, 8) + b"N" + be(104_000, 4))
            + message(b"X", 1, 4000, be(1, 8) + be(40, 4))                        # bid 10.00 -> 60
            + message(b"D", 1, 5000, be(3, 8))                                     # bid back to 10.00
            + message(b"U", 1, 6000, be(1, 8) + be(9, 8) + be(70, 4) + be(102_000, 4))  # 10.20 x70
            + message(b"P", 1, 7000, be(0, 8) + b"B" + be(5, 4) + b"AAPL    " + be(103_000, 4) + be(80, 8))
            + message(b"I", 1, 7500) + message(b"Y", 1, 7600)              # skipped by length
            + b"\x00\x05Zabcd"                                              # a type ITCH does not have
            + message(b"E", 1, 8000, be(999, 8) + be(1, 4) + be(81, 8))    # unknown order
            + message(b"E", 1, 9000, be(9, 8) + be(500, 4) + be(82, 8)))   # more than it has: clamped


def test_every_message_the_book_needs(tmp_path):
    a, src = read_all("itch:" + write(tmp_path, _day()) + "?symbols=AAPL&date=2024-01-02")
    a = a[(a["kind"] == KIND_QUOTE) | (a["kind"] == KIND_TRADE)]  # the same with or without depth
    st = src.stats()
    assert src.instruments == ["AAPL"]
    assert st["untracked"] == 1 and st["unknown_order"] == 1 and st["over_execution"] == 1
    assert st["skipped_types"] == 2 + 2 + 1  # H x2 in the preamble, I, Y, Z
    day = 1704153600 * 10**9
    assert (a["ts_event"] >= day).all() and (a["ts_event"] == a["ts_recv"]).all()
    rows = [(int(r["kind"]), int(r["price"]) // P, int(r["size"]), int(r["side"]), int(r["bid_px"]) // P,
             int(r["bid_sz"]), int(r["ask_px"]) // P, int(r["ask_sz"])) for r in a]
    Q, T = KIND_QUOTE, KIND_TRADE
    assert rows == [
        (Q, 0, 0, 0, 100_000, 100, 0, 0),                         # A
        (Q, 0, 0, 0, 100_000, 100, 105_000, 200),                 # F
        (Q, 0, 0, 0, 101_000, 50, 105_000, 200),                  # A, a better bid
        (T, 101_000, 30, SIDE_SELL, 101_000, 20, 105_000, 200),   # E on a bid: a seller hit it
        (Q, 0, 0, 0, 101_000, 20, 105_000, 200),
        (T, 104_000, 50, SIDE_BUY, 101_000, 20, 105_000, 150),    # C printable, at its own price
        (Q, 0, 0, 0, 101_000, 20, 105_000, 150),
        (Q, 0, 0, 0, 101_000, 20, 105_000, 140),                  # C non-printable: no trade tick
        # X below the touch: no tick
        (Q, 0, 0, 0, 100_000, 60, 105_000, 140),                  # D of the best bid
        (Q, 0, 0, 0, 102_000, 70, 105_000, 140),                  # U: new ref, price and size
        (T, 103_000, 5, SIDE_SELL, 102_000, 70, 105_000, 140),    # P: a trade, the book unchanged
        (T, 102_000, 70, SIDE_SELL, 0, 0, 105_000, 140),          # E clamped to what the order had
        (Q, 0, 0, 0, 0, 0, 105_000, 140),
    ]
    bids = src.books.depth(0, 0)
    assert list(bids[0]) == [] and list(src.books.depth(0, 1)[1]) == [140]
    check_book_consistent(src.books.ladders, src.books.orders)


def test_bad_length_stops_by_default_and_is_skipped_on_request(tmp_path):
    bad = preamble(["AAPL"]) + b"\x00\x23" + add(1, 1, b"B", 100, b"AAPL", 100_000)[2:-1] + add(1, 2, b"B", 5, b"AAPL", 99_000)
    path = write(tmp_path, bad)
    with pytest.raises(FeedError, match=r"byte \d+: message type 'A' has length 35; ITCH 5.0 says 36"):
        read_all(f"itch:{path}")
    a, src = read_all(f"itch:{path}?on_error=skip&depth=0")
    assert src.stats()["bad_length"] == 1 and len(a) == 1 and a[0]["bid_px"] == 99_000 * P


@pytest.mark.parametrize("case", ["truncated", "zero_length", "corrupt_gzip", "cut_gzip", "not_itch", "missing"])
def test_hostile_files_fail_cleanly_and_write_nothing(tmp_path, case):
    good = _day()
    path = tmp_path / "in.itch"
    if case == "truncated":
        path.write_bytes(good[:-7])
    elif case == "zero_length":
        path.write_bytes(good[:40] + b"\x00\x00" + good[40:])
    elif case in ("corrupt_gzip", "cut_gzip"):
        z = bytearray(gzip.compress(good * 50))
        if case == "corrupt_gzip":
            z[len(z) // 2:len(z) // 2 + 16] = b"\xff" * 16
        else:
            z = z[:len(z) * 2 // 3]
        path.write_bytes(bytes(z))
    elif case == "not_itch":
        path.write_bytes(os.urandom(3000))
    out = tmp_path / "out.parquet"
    res = cli("convert", f"itch:{path}", "--out", str(out), "--quiet")
    line = one_line_error(res)
    assert str(path) in line
    assert list(tmp_path.glob("out.parquet*")) == []


def test_convert_writes_every_tick_field(tmp_path):
    import pyarrow.parquet as pq
    path = write(tmp_path, _day())
    out = tmp_path / "t.parquet"
    res = cli("convert", f"itch:{path}?symbols=AAPL", "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    t = pq.read_table(out)
    a, _ = read_all(f"itch:{path}?symbols=AAPL")
    assert t.column_names == ["seq", "ts_event", "ts_recv", "instrument", "kind", "side", "price", "size",
                              "bid_px", "bid_sz", "ask_px", "ask_sz", "symbol"]
    assert t.column("seq").to_pylist() == list(range(len(a)))
    for f in t.column_names[1:-1]:
        assert t.column(f).to_numpy().tolist() == a[f].tolist(), f
    assert set(t.column("symbol").to_pylist()) == {"AAPL"}
    assert str(t.schema.field("price").type) == "int64"


# sha256 of the ticks the parser wrote before its rewrite for speed (refcount-free arrays, one
# event epilogue, locality hashing of order refs), computed with that code on the input below:
# the rewrite must write the same bytes. Depth 3 and 10 with a tick buffer that holds barely one
# message (a resume after every few messages), windows forgotten every 300 resumes, and an
# order table that starts at 16 slots (it grows under the parser).
_INPUT_SHA = "136163dd1e04a693ad93331d8401765f54465266fccf30a3de830ac49072abe7"
_TICKS_SHA = {0: "57d94f6255781c33e31c2737299bdb4c469bd6db2a721848f5b79796fad82fa1",
              3: "ea55bec34a2590d8242f9a7545e1b20486373ab7174b659628075ab35a517dc1",
              10: "0cc9f92f7b19dcd878572f6ddac3eb6b0cd361abbbe2bfce68872c17ef02f909"}


def test_ticks_are_byte_identical_to_the_reference_parser(tmp_path):
    import hashlib

    from feeds.books.book import Orders
    from feeds.convert import convert
    from feeds.nasdaq.itch import ST_OUT, ItchBooks
    path = tmp_path / "syn.itch"
    convert("synthetic://?instruments=3&count=30000&seed=5&depth=10", str(path), progress=False)
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == _INPUT_SHA, "the synthetic day changed: recompute the digests"
    buf = np.frombuffer(data, np.uint8)
    for depth, want in _TICKS_SHA.items():
        books = ItchBooks(depth=depth)
        books.orders = Orders(16)
        out = np.zeros((2 + 4 * depth + 1 + 5, 8), np.int64)
        h, pos, n, resumes = hashlib.sha256(), 0, 0, 0
        while True:
            pos, n, _, st = books.apply(buf, pos, len(buf), out, n)
            h.update(out[:n].tobytes())
            if st != ST_OUT:
                break
            n = 0
            resumes += 1
            if resumes % 300 == 0:
                books.forget()
        assert pos == len(buf) and books.stats_dict()["messages"] == 16136
        assert h.hexdigest() == want, f"depth {depth}"
        check_book_consistent(books.ladders, books.orders)

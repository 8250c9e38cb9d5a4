"""Book depth in the tick stream (engine/records.py): every feed's level ticks rebuild, at every
quote, book and trade tick, the top N of a book built independently from the raw data; quotes
and trades do not depend on depth; depth travels with tick files and rings; resync re-sends."""
import gzip
import json
import struct
import time

import numpy as np
import pytest

from engine.records import (KIND_BOOK, KIND_GAP, KIND_LEVEL, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_NONE,
                            SIDE_SELL, TICK_DTYPE)
from feeds.core.uri import FeedError

from tests.conftest import engine_cmd, spawn
from tests.helpers.data import ESH4, SPOT, USDM, cut_and_whole, whole_capture
from tests.helpers.depthbook import (DepthBooks, History, check_window, quotes_and_trades, same_history,
                                     sat_size, side_pair, window_of, windows)
from tests.helpers.feedutil import cli, read_all

BINANCE = {"spot": (SPOT, "size_unit=1e-5"), "usdm": (USDM, "size_unit=1e-3")}
BINANCE.update({f"{k}-whole": (whole_capture(p), u) for k, (p, u) in list(BINANCE.items()) if whole_capture(p)})
PX = 10**9


def same_quotes_and_trades(a, b, prefix=False, skip=()):
    qa, qb = quotes_and_trades(a), quotes_and_trades(b)
    if prefix:
        k = min(len(qa), len(qb))
        qa, qb = qa[:k], qb[:k]
    assert len(qa) == len(qb) > 0
    for f in TICK_DTYPE.names:
        if f not in skip:
            assert np.array_equal(qa[f], qb[f]), f


# --- the synthetic market ------------------------------------------------------------------

def test_synthetic_windows_are_the_simulators_own_book():
    from feeds.synthetic.market import Simulator, parse_uri
    sim = Simulator(parse_uri("synthetic://?instruments=3&seed=5&depth=10"))
    one = np.zeros((1, 8), np.int64)
    books, kinds = DepthBooks(10), []
    for _ in range(12_000):  # one tick at a time: the book is the one after that tick's event
        r = sim.generate(one).view(TICK_DTYPE).reshape(-1)[0]
        books.apply(r)
        kinds.append(int(r["kind"]))
        if r["kind"] in (KIND_QUOTE, KIND_BOOK, KIND_TRADE):
            inst = int(r["instrument"])
            want = tuple(tuple(zip(*(x[:10].tolist() for x in sim.book(inst, s)))) for s in (0, 1))
            assert books.window(inst) == want
    assert set(kinds) == {KIND_LEVEL, KIND_QUOTE, KIND_TRADE, KIND_BOOK}


def test_synthetic_stream_keeps_the_protocol_and_quotes_do_not_depend_on_depth():
    a, src = read_all("synthetic://?instruments=4&seed=2&count=40000&depth=10")
    assert src.depth == 10
    h = windows(a, 10)
    assert len(h.items) > 10_000
    z, src0 = read_all("synthetic://?instruments=4&seed=2&count=40000&depth=0")
    assert src0.depth == 0 and not np.isin(z["kind"], [KIND_LEVEL, KIND_BOOK]).any()
    same_quotes_and_trades(a, z, prefix=True)  # count counts level ticks too: a is a prefix
    w, _ = read_all("synthetic://?instruments=4&seed=2&count=40000&depth=32")
    same_quotes_and_trades(w, z, prefix=True)
    windows(w, 32)
    q = a[a["kind"] == KIND_QUOTE]
    assert (q["ask_px"] > q["bid_px"]).all() and (q["ask_px"] - q["bid_px"] <= 4 * PX // 100).all()
    assert (q["bid_sz"] > 0).all() and (q["ask_sz"] > 0).all()
    b, _ = read_all("synthetic://?instruments=4&seed=2&count=40000&depth=10")
    assert np.array_equal(a, b)  # deterministic under the seed


def test_synthetic_depth_imbalance_predicts_beyond_the_touch():
    """Levels 1..9 carry information about the mid 20 quotes ahead that the touch does not."""
    a, _ = read_all("synthetic://?instruments=4&seed=20240808&count=400000&depth=10")
    touch, deep, mid, inst = _imbalances(a.view(np.int64).reshape(-1, 8), 4)
    fut = np.full(len(mid), np.nan)
    for i in range(4):
        r = np.flatnonzero(inst == i)
        fut[r[:-20]] = mid[r[20:]]
    move = fut - mid
    ok = ~np.isnan(move) & (move != 0)
    x, d, y = touch[ok], deep[ok], np.sign(move[ok])
    resid = d - np.polyval(np.polyfit(x, d, 1), x)  # what depth says that the touch does not
    assert np.corrcoef(x, y)[0, 1] > 0.2           # the touch is informative (about 0.28)
    assert np.corrcoef(resid, y)[0, 1] > 0.1       # and depth beyond it (about 0.17)


def _imbalances(w, k):
    from numba import njit

    @njit(cache=False)
    def run(w, k, out):
        px = np.zeros((k, 2, 10), np.int64)
        sz = np.zeros((k, 2, 10), np.int64)
        cnt = np.zeros((k, 2), np.int64)
        m = 0
        for t in range(w.shape[0]):
            kind = (w[t, 7] >> 48) & 0xFF
            i = (w[t, 7] >> 32) & 0xFFFF
            if kind == KIND_LEVEL:
                s = ((w[t, 7] >> 56) & 0xFF) - 1
                p, q, n = w[t, 3], w[t, 6] & 0xFFFFFFFF, cnt[i, s]
                j = 0
                while j < n and (px[i, s, j] > p if s == 0 else px[i, s, j] < p):
                    j += 1
                if j < n and px[i, s, j] == p:
                    if q:
                        sz[i, s, j] = q
                    else:
                        px[i, s, j:n - 1] = px[i, s, j + 1:n].copy()
                        sz[i, s, j:n - 1] = sz[i, s, j + 1:n].copy()
                        cnt[i, s] = n - 1
                elif q:
                    px[i, s, j + 1:n + 1] = px[i, s, j:n].copy()
                    sz[i, s, j + 1:n + 1] = sz[i, s, j:n].copy()
                    px[i, s, j], sz[i, s, j] = p, q
                    cnt[i, s] = n + 1
            elif kind == KIND_QUOTE:
                b, a = sz[i, 0, 1:cnt[i, 0]].sum(), sz[i, 1, 1:cnt[i, 1]].sum()
                out[m, 0] = (w[t, 6] >> 32) - (w[t, 7] & 0xFFFFFFFF)
                out[m, 0] /= (w[t, 6] >> 32) + (w[t, 7] & 0xFFFFFFFF)
                out[m, 1] = (b - a) / (b + a)
                out[m, 2] = 0.5 * (w[t, 4] + w[t, 5])
                out[m, 3] = i
                m += 1
        return m
    out = np.zeros((len(w), 4))
    m = run(w, k, out)
    return out[:m, 0], out[:m, 1], out[:m, 2], out[:m, 3]


# --- ITCH ----------------------------------------------------------------------------------

def itch_reference(data, depth):
    """A Python order book from ITCH messages: the window history an ITCH reader must produce."""
    orders, books, locmap, h = {}, {}, {}, History()

    def ev(inst):
        bids, asks = books[inst]
        return window_of(bids, asks, depth)

    pos = 0
    while pos + 2 <= len(data):
        ln = int.from_bytes(data[pos:pos + 2], "big")
        m = data[pos + 2:pos + 2 + ln]
        pos += 2 + ln
        t, loc = m[:1], int.from_bytes(m[1:3], "big")
        if t == b"R":
            if loc not in locmap:
                locmap[loc] = len(locmap)
                books[locmap[loc]] = side_pair()
        elif t in (b"A", b"F"):
            ref, side, qty, px = struct.unpack_from(">QcI8xI", m, 11)
            if ref not in orders:
                inst = locmap[loc]
                orders[ref] = [inst, 0 if side == b"B" else 1, px * 10**5, qty]
                books[inst][orders[ref][1]].add(px * 10**5, qty)
                h.event(inst, ev(inst))
        elif t in (b"E", b"C", b"X", b"D") and struct.unpack_from(">Q", m, 11)[0] in orders:
            ref = struct.unpack_from(">Q", m, 11)[0]
            o = orders[ref]
            take = min(o[3], o[3] if t == b"D" else struct.unpack_from(">I", m, 19)[0])
            books[o[0]][o[1]].add(o[2], -take)
            o[3] -= take
            if not o[3]:
                del orders[ref]
            if t == b"E" or (t == b"C" and m[31:32] == b"Y"):
                h.trade(o[0], ev(o[0]))
            h.event(o[0], ev(o[0]))
        elif t == b"U" and struct.unpack_from(">Q", m, 11)[0] in orders:
            old, new, qty, px = struct.unpack_from(">QQII", m, 11)
            if new not in orders:
                inst, side, opx, oq = orders.pop(old)
                books[inst][side].add(opx, -oq)
                orders[new] = [inst, side, px * 10**5, qty]
                books[inst][side].add(px * 10**5, qty)
                h.event(inst, ev(inst))
        elif t == b"P":
            inst = locmap[loc]
            h.trade(inst, ev(inst))
            h.event(inst, ev(inst))
    return h


@pytest.fixture(scope="module")
def itch_day(tmp_path_factory):
    d = tmp_path_factory.mktemp("itch")
    uri = "synthetic://?instruments=3&count=60000&seed=7&depth=10"
    path = d / "syn.itch"
    res = cli("convert", uri, "--out", str(path), "--quiet")
    assert res.returncode == 0, res.stderr
    return path, uri, res.stdout.split("date=")[1].split()[0]


def test_itch_reader_windows_equal_a_python_book_of_the_messages(itch_day):
    path, uri, date = itch_day
    a, src = read_all(f"itch:{path}?date={date}&depth=10")
    assert src.depth == 10 and src.stats()["unknown_order"] == 0
    h = windows(a, 10)
    same_history(h, itch_reference(path.read_bytes(), 10))
    # the day file holds the simulator's window: the reader ends with the simulator's last windows
    sim, _ = read_all(uri)
    last = windows(sim, 10)
    for i in range(3):
        assert h.last[i] == last.last[i]
    z, _ = read_all(f"itch:{path}?date={date}&depth=0")
    same_quotes_and_trades(a, z)
    three, _ = read_all(f"itch:{path}?date={date}&depth=3")
    same_history(windows(three, 3), itch_reference(path.read_bytes(), 3))


def test_itch_out_of_room_resumes_without_losing_or_repeating_a_level(itch_day, monkeypatch):
    import feeds.nasdaq.itch_file
    path, _, date = itch_day
    a, _ = read_all(f"itch:{path}?date={date}&depth=5")
    monkeypatch.setattr(feeds.nasdaq.itch_file, "BATCH", 2 + 4 * 5 + 1)  # exactly one message's worth
    b, _ = read_all(f"itch:{path}?date={date}&depth=5")
    assert np.array_equal(a, b)


def _itch_messages():
    from feeds.nasdaq.itch_writer import message, preamble

    def add(ref, side, qty, px):
        return message(b"A", 1, 1000 + ref, ref.to_bytes(8, "big") + side + qty.to_bytes(4, "big") + b"AAPL    "
                       + (px * 10**4).to_bytes(4, "big"))
    return (preamble(["AAPL"]) + add(1, b"B", 10, 100) + add(2, b"B", 5, 99) + add(3, b"S", 7, 101)
            + message(b"X", 1, 2000, (2).to_bytes(8, "big") + (2).to_bytes(4, "big"))   # deep: a book tick
            + add(4, b"B", 4, 98)                                                      # outside a window of 2
            + message(b"E", 1, 3000, (1).to_bytes(8, "big") + (10).to_bytes(4, "big") + (9).to_bytes(8, "big")))


def test_itch_hand_made_messages_give_the_protocols_ticks(tmp_path):
    p = tmp_path / "d.itch"
    p.write_bytes(_itch_messages())
    a, src = read_all(f"itch:{p}?depth=2")
    rows = [(int(r["kind"]), int(r["side"]), int(r["price"]) // PX, int(r["size"]),
             int(r["bid_px"]) // PX, int(r["bid_sz"]), int(r["ask_px"]) // PX, int(r["ask_sz"])) for r in a]
    L, Q, B, T = KIND_LEVEL, KIND_QUOTE, KIND_BOOK, KIND_TRADE
    assert rows == [
        (L, SIDE_BUY, 100, 10, 0, 0, 0, 0), (Q, 0, 0, 0, 100, 10, 0, 0),
        (L, SIDE_BUY, 99, 5, 0, 0, 0, 0), (B, 0, 0, 0, 100, 10, 0, 0),           # a level behind the touch
        (L, SIDE_SELL, 101, 7, 0, 0, 0, 0), (Q, 0, 0, 0, 100, 10, 101, 7),
        (L, SIDE_BUY, 99, 3, 0, 0, 0, 0), (B, 0, 0, 0, 100, 10, 101, 7),         # X behind the touch
        # the add at 98 is outside the window of 2: nothing
        (L, SIDE_BUY, 100, 0, 0, 0, 0, 0), (L, SIDE_BUY, 98, 4, 0, 0, 0, 0),     # removals first
        (T, SIDE_SELL, 100, 10, 99, 3, 101, 7), (Q, 0, 0, 0, 99, 3, 101, 7),     # levels, trade, quote
    ]
    windows(a, 2)


def test_moldudp64_gap_voids_every_book_and_each_window_is_resent():
    """Lost packets: a gap tick (the consumer voids every book), then each instrument's next
    event brings a clear tick and its whole window, so the stream stays consistent."""
    import io
    import socket
    from feeds.nasdaq.itch_sink import ItchSink
    from feeds.nasdaq.mold_server import frame_offsets
    from feeds.nasdaq.moldudp64 import packet
    from feeds.core.sources import open_source
    syn = open_source("synthetic://?instruments=3&count=20000&seed=9&depth=10")
    sink = ItchSink(None, ".itch", syn, fileobj=io.BytesIO())
    for t in syn.batches():
        sink.write(t, 0)
    data = sink.f.getvalue()
    offs = np.zeros(len(data) // 3, np.int64)
    k, _ = frame_offsets(np.frombuffer(data, np.uint8), offs)
    msgs = [data[offs[i]:offs[i + 1] if i + 1 < k else len(data)] for i in range(k)]
    pkts = [packet(b"DEPTHTEST1", 1 + i, msgs[i:i + 5]) for i in range(0, len(msgs), 5)]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    src = open_source(f"moldudp64://127.0.0.1:{port}?depth=10&start_seq=1")
    out, n, parts, pending = np.zeros((4096, 8), np.int64), 0, [], {}
    try:
        for j, d in enumerate(pkts):
            if j in (300, 301, 700):  # lost
                continue
            gen = src.datagram(d, pending, out, n)
            while True:
                try:
                    full = next(gen)
                except StopIteration as e:
                    n = e.value
                    break
                parts.append(full.copy())
                n = 0
        parts.append(out[:n].copy())
    finally:
        src.sock.close()
    a = np.concatenate(parts).view(TICK_DTYPE).reshape(-1)
    gaps = np.flatnonzero(a["kind"] == KIND_GAP)
    assert len(gaps) == 2 and src.stats()["lost_messages"] == 15
    windows(a, 10)  # strict: no removal of a level the consumer does not hold after the gap
    for g in gaps:
        first = {}
        for r in a[g + 1:]:
            first.setdefault(int(r["instrument"]), r)
        assert all(r["kind"] == KIND_LEVEL and r["side"] == SIDE_NONE for r in first.values())


# --- DBN -----------------------------------------------------------------------------------

def dbn_reference(path, depth):
    """A book from databento-dbn's own decoder: orders dict -> levels, events ending at F_LAST."""
    import databento_dbn as dbn
    import zstandard
    dec = dbn.DBNDecoder()
    dec.write(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")).read())
    orders, books, idx, h, held = {}, {}, {}, History(), {}

    def level(inst, s, px, dq):
        books[inst][s].add(px, dq)

    for r in dec.decode():
        if not isinstance(r, dbn.MBOMsg):
            continue
        inst = idx.setdefault(r.instrument_id, len(idx))
        if inst not in books:
            books[inst] = side_pair()
        a = r.action
        if a in ("A", "M") and r.side in ("B", "A") and r.price != dbn.UNDEF_PRICE:
            if a == "A" and r.order_id in orders:
                pass  # a duplicate add
            else:
                if r.order_id in orders:  # modify: out of its old level, into the new one
                    i, s, px, q = orders.pop(r.order_id)
                    level(i, s, px, -q)
                if r.size > 0:
                    s = 0 if r.side == "B" else 1
                    orders[r.order_id] = (inst, s, r.price, r.size)
                    level(inst, s, r.price, r.size)
        elif a == "C" and r.order_id in orders:
            i, s, px, q = orders[r.order_id]
            take = min(q, r.size)
            level(i, s, px, -take)
            if take == q:
                del orders[r.order_id]
            else:
                orders[r.order_id] = (i, s, px, q - take)
        elif a == "R":
            for oid in [o for o, v in orders.items() if v[0] == inst]:
                del orders[oid]
            books[inst] = side_pair()
        elif a == "T":
            held[inst] = held.get(inst, 0) + 1
        if r.flags & dbn.F_LAST:
            w = window_of(*books[inst], depth)
            for _ in range(held.pop(inst, 0)):
                h.trade(inst, w)
            h.event(inst, w)
    return h


@pytest.mark.parametrize("DBN_REAL", cut_and_whole(ESH4))
def test_dbn_real_file_windows_equal_databento_dbns_decoder_book(DBN_REAL):
    a, src = read_all(f"dbn:{DBN_REAL}?depth=10")
    assert src.depth == 10
    same_history(windows(a, 10), dbn_reference(DBN_REAL, 10))
    z, src0 = read_all(f"dbn:{DBN_REAL}?depth=0")
    assert src0.depth == 0
    same_quotes_and_trades(a, z)


def test_dbn_out_of_room_resumes_without_losing_or_repeating_a_level(monkeypatch):
    from feeds.databento import dbn
    a, _ = read_all(f"dbn:{ESH4}?depth=4")
    monkeypatch.setattr(dbn.DbnFile, "OUT_ROWS", dbn.PENDING + 4 + 2 * (4 * 4 + 1))
    b, _ = read_all(f"dbn:{ESH4}?depth=4")
    assert np.array_equal(a, b)


def _dbn_meta(schema):
    import databento_dbn as dbn
    return dbn.Metadata(dataset="GLBX.MDP3", start=0, stype_in=dbn.SType.RAW_SYMBOL,
                        stype_out=dbn.SType.INSTRUMENT_ID, schema=schema).encode()


def test_dbn_mbp10_mbp1_trades_and_clears(tmp_path):
    dbn = pytest.importorskip("databento_dbn")
    A, S, LAST = dbn.Action, dbn.Side, dbn.F_LAST

    def mbp10(ts, bids, asks):
        lv = [dbn.BidAskPair(b[0] * PX if b else dbn.UNDEF_PRICE, a[0] * PX if a else dbn.UNDEF_PRICE,
                             b[1] if b else 0, a[1] if a else 0, 1, 1)
              for b, a in zip(bids + [None] * (10 - len(bids)), asks + [None] * (10 - len(asks)))]
        return bytes(dbn.MBP10Msg(1, 5, ts, 0, 0, A.ADD, S.BID, depth=0, ts_recv=ts + 1, flags=LAST, levels=lv))
    book1 = [(100 - i, 10 + i) for i in range(10)], [(101 + i, 20 + i) for i in range(10)]
    book2 = [(100 - i, 10 + i) for i in range(10) if i != 2], [(101, 5)] + [(101 + i, 20 + i) for i in range(1, 10)]
    path = tmp_path / "m.dbn"
    path.write_bytes(_dbn_meta(dbn.Schema.MBP_10) + mbp10(10, *book1) + mbp10(20, *book2) + mbp10(30, [], []))
    a, src = read_all(f"dbn:{path}?depth=3")
    assert src.depth == 3  # known right after the source was opened
    rows = [(int(r["kind"]), int(r["side"]), int(r["price"]) // PX, int(r["size"])) for r in a]
    L, Q, B = KIND_LEVEL, KIND_QUOTE, KIND_BOOK
    assert rows == ([(L, SIDE_BUY, 100 - i, 10 + i) for i in range(3)]
                    + [(L, SIDE_SELL, 101 + i, 20 + i) for i in range(3)]
                    + [(Q, 0, 0, 0)]
                    + [(L, SIDE_BUY, 98, 0), (L, SIDE_BUY, 97, 13), (L, SIDE_SELL, 101, 5), (Q, 0, 0, 0)]
                    + [(L, SIDE_BUY, 100, 0), (L, SIDE_BUY, 99, 0), (L, SIDE_BUY, 97, 0)]
                    + [(L, SIDE_SELL, 101 + i, 0) for i in range(3)] + [(Q, 0, 0, 0)])
    windows(a, 3)
    assert read_all(f"dbn:{path}")[1].depth == 10 and read_all(f"dbn:{path}?depth=20")[1].depth == 10

    lv = dbn.BidAskPair(100 * PX, 101 * PX, 7, 9, 1, 1)
    p1 = tmp_path / "one.dbn"
    p1.write_bytes(_dbn_meta(dbn.Schema.MBP_1) + bytes(dbn.MBP1Msg(1, 5, 10, 0, 0, A.ADD, S.BID, depth=0,
                                                                    ts_recv=11, flags=LAST, levels=lv)))
    a, src = read_all(f"dbn:{p1}")
    assert src.depth == 1 and list(a["kind"]) == [L, L, Q]
    windows(a, 1)
    pt = tmp_path / "t.dbn"
    pt.write_bytes(_dbn_meta(dbn.Schema.TRADES) + bytes(dbn.TradeMsg(1, 5, 30, 99 * PX, 2, A.TRADE, S.ASK, depth=0,
                                                                      ts_recv=31)))
    a, src = read_all(f"dbn:{pt}?depth=10")
    assert src.depth == 0 and list(a["kind"]) == [KIND_TRADE]

    def mbo(ts, oid, px, size, action, side, flags=LAST):
        return bytes(dbn.MBOMsg(1, 42, ts, oid, px * PX, size, action, side, ts + 5, flags=flags))
    pm = tmp_path / "r.dbn"
    pm.write_bytes(_dbn_meta(dbn.Schema.MBO) + mbo(1, 1, 99, 2, A.ADD, S.BID) + mbo(2, 2, 98, 3, A.ADD, S.BID)
                   + mbo(3, 0, 0, 0, A.CLEAR, S.NONE, flags=0) + mbo(3, 3, 97, 1, A.ADD, S.BID))
    a, _ = read_all(f"dbn:{pm}")
    rows = [(int(r["kind"]), int(r["side"]), int(r["price"]) // PX, int(r["size"])) for r in a]
    assert rows == [(L, SIDE_BUY, 99, 2), (Q, 0, 0, 0), (L, SIDE_BUY, 98, 3), (B, 0, 0, 0),
                    (L, SIDE_NONE, 0, 0), (L, SIDE_BUY, 97, 1), (Q, 0, 0, 0)]  # R: a clear tick, the window again
    windows(a, 10)


# --- Binance -------------------------------------------------------------------------------

def binance_reference(path, depth, div):
    """A dict L2 book from the raw lines with Binance's documented continuity rules."""
    from feeds.binance.capture import price9, qty8
    insts, h, orphan = {}, History(), [None]
    size = lambda q: sat_size(q, div)  # noqa: E731

    def inst_of(sym):
        if sym not in insts:
            insts[sym] = {"i": len(insts), "b": side_pair(), "sid": None, "synced": False, "last": None, "held": [],
                          "w": ((), ())}
            if orphan[0] is not None:
                place(insts[sym], orphan[0])
                orphan[0] = None
        return insts[sym]

    def win(s):  # recomputed when the book changes: trades reuse it
        s["w"] = window_of(*s["b"], depth, size)
        return s["w"]

    def place(s, d):
        s["b"] = side_pair()
        for k, levels in enumerate((d["bids"], d["asks"])):
            for p, q in levels:
                s["b"][k].set(price9(p), qty8(q))
        s["sid"], s["synced"], s["last"] = int(d["lastUpdateId"]), False, None
        h.event(s["i"], win(s))
        held, s["held"] = s["held"], []
        for e in held:
            depth_event(s, e)

    def lose(s, d):
        s["b"] = side_pair()
        win(s)
        s["synced"], s["sid"], s["last"], s["held"] = False, None, None, [d]
        h.void()

    def depth_event(s, d):
        U, u, fut = int(d["U"]), int(d["u"]), "pu" in d
        if s["sid"] is None and not s["synced"]:
            s["held"].append(d)
            return
        if not s["synced"]:
            sid = s["sid"]
            if (u < sid) if fut else (u <= sid):
                return
            if not ((U <= sid <= u) if fut else (U <= sid + 1 <= u)):
                return lose(s, d)
            s["synced"], s["sid"] = True, None
        elif not ((int(d["pu"]) == s["last"]) if fut else (U == s["last"] + 1)):
            return lose(s, d)
        for k, key in enumerate(("b", "a")):
            for p, q in d.get(key, ()):
                s["b"][k].set(price9(p), qty8(q))
        s["last"] = u
        h.event(s["i"], win(s))

    with gzip.open(path) if str(path).endswith(".gz") else open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line.partition(b" ")[2])
            d = d.get("data", d)
            if "lastUpdateId" in d:
                if insts:
                    place(next(iter(insts.values())), d)
                else:
                    orphan[0] = d
            elif d.get("e") == "depthUpdate":
                depth_event(inst_of(d["s"]), d)
            elif d.get("e") == "trade":
                s = inst_of(d["s"])
                h.trade(s["i"], s["w"])
            elif "s" in d:
                inst_of(d["s"])
    return h


@pytest.mark.parametrize("which", sorted(BINANCE))
def test_binance_real_captures_windows_equal_a_python_book_of_the_lines(which):
    path, unit = BINANCE[which]
    # book_ticker=check: the diff book alone, as the reference builds it (the bookTicker touch
    # over it: tests/test_binance.py)
    a, src = read_all(f"binance:{path}?{unit}&depth=10&book_ticker=check")
    assert src.depth == 10 and src.stats()["size_saturated"] == 0
    div = src.size_div
    same_history(windows(a, 10), binance_reference(path, 10, div))
    z, _ = read_all(f"binance:{path}?{unit}&depth=0&book_ticker=check")
    same_quotes_and_trades(a, z)


def _line(ns, msg):
    return f"{ns} {json.dumps(msg)}\n".encode()


def _depth(U, u, bids=(), asks=(), E=1):
    return {"stream": "x@depth", "data": {"e": "depthUpdate", "E": E, "s": "BTCUSDT", "U": U, "u": u,
                                          "b": list(bids), "a": list(asks)}}


def _trade(p, q, T=5, t=1):
    return {"stream": "x@trade", "data": {"e": "trade", "E": T, "s": "BTCUSDT", "t": t, "p": p, "q": q, "T": T,
                                          "m": False}}


def test_binance_snapshot_gap_and_resend(tmp_path, monkeypatch):
    lines = [
        _line(1, _depth(8, 10, bids=[["99.0", "1.0"]])),                          # held until the snapshot
        _line(2, {"lastUpdateId": 9, "bids": [["99.0", "2.0"], ["98.0", "3.0"]], "asks": [["101.0", "1.0"]]}),
        _line(3, _depth(11, 12, bids=[["97.0", "1.0"]])),                         # behind a window of 2
        _line(4, _trade("101.0", "0.5")),
        _line(5, _depth(20, 22, bids=[["99.5", "1.0"]])),                         # 13..19 missing: a gap
        _line(6, _trade("101.0", "0.25", t=2)),                                    # the book is void: a clear
        _line(7, {"lastUpdateId": 22, "bids": [["99.0", "1.0"]], "asks": [["100.0", "1.0"]]}),
        _line(8, _depth(23, 23, asks=[["100.5", "2.0"]])),
    ]
    p = tmp_path / "c.gz"
    p.write_bytes(gzip.compress(b"".join(lines)))
    a, src = read_all(f"binance:{p}?size_unit=1e-8&depth=2")
    rows = [(int(r["kind"]), int(r["side"]), int(r["price"]) * 10 // PX, int(r["size"]) // 10**7) for r in a]
    L, Q, B, T, G = KIND_LEVEL, KIND_QUOTE, KIND_BOOK, KIND_TRADE, KIND_GAP
    assert rows == [
        # the snapshot: a clear tick, its window, a book tick carrying the book's touch
        (L, SIDE_NONE, 0, 0), (L, SIDE_BUY, 990, 20), (L, SIDE_BUY, 980, 30), (L, SIDE_SELL, 1010, 10), (B, 0, 0, 0),
        (L, SIDE_BUY, 990, 10), (Q, 0, 0, 0),        # the held event, applied after it
        # 97.0 lands behind a window of 2: no tick at all
        (T, SIDE_BUY, 1010, 5),
        (G, 0, 0, 0),                                # update ids 13..19 missing
        (L, SIDE_NONE, 0, 0), (T, SIDE_BUY, 1010, 2), (B, 0, 0, 0),   # the void book, re-sent before the trade
        (L, SIDE_NONE, 0, 0), (L, SIDE_BUY, 990, 10), (L, SIDE_SELL, 1000, 10), (B, 0, 0, 0),   # the new snapshot
        (L, SIDE_SELL, 1005, 20), (Q, 0, 0, 0),
    ]
    assert a[8]["price"] == 7
    assert (a[4]["bid_px"], a[4]["bid_sz"], a[4]["ask_px"], a[4]["ask_sz"]) == (99 * PX, 2 * 10**8, 101 * PX, 10**8)
    same_history(windows(a, 2), binance_reference(p, 2, src.size_div))
    monkeypatch.setattr(type(src), "OUT_ROWS", 2 + 4 * 2 + 1)
    b, _ = read_all(f"binance:{p}?size_unit=1e-8&depth=2")
    assert np.array_equal(a, b)


# --- depth travels with the data -----------------------------------------------------------

def test_tick_files_keep_the_depth(tmp_path):
    from engine.tickfile import TickFile, TickFileWriter
    out = tmp_path / "s.ticks"
    res = cli("convert", "synthetic://?instruments=2&count=3000&seed=3&depth=5", "--out", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    f = TickFile(out)
    assert f.depth == 5
    a, src = read_all(f"tickfile:{out}")
    assert src.depth == 5
    windows(a, 5)
    old = tmp_path / "old.ticks"
    w = TickFileWriter(old, ["X"])
    w.meta.pop("depth")  # a file from before depth
    w.close()
    assert TickFile(old).depth == 0
    z = tmp_path / "z.ticks"
    res = cli("convert", "synthetic://?instruments=2&count=100&seed=3&depth=0", "--out", str(z), "--quiet")
    assert res.returncode == 0
    from feeds.core.sources import TickFilesSource
    with pytest.raises(FeedError, match=r"different depth.*s\.ticks \(depth 5\).*z\.ticks \(depth 0\)"):
        TickFilesSource([str(out), str(z)])
    two = TickFilesSource([str(out), str(out)])
    assert two.depth == 5
    b = np.concatenate([x.copy() for x in two.batches()]).view(TICK_DTYPE).reshape(-1)
    assert len(b) == 2 * len(a) + 2  # the second file starts with a clear tick per instrument
    windows(b, 5)


def test_replay_and_record_carry_the_depth_through_the_ring(tmp_path, shm_name):
    import subprocess
    from engine.tickfile import TickFile
    src = tmp_path / "s.ticks"
    assert cli("convert", "synthetic://?instruments=2&count=5000&seed=4&depth=5", "--out", str(src),
               "--quiet").returncode == 0
    rec = tmp_path / "rec.ticks"
    player = spawn(engine_cmd("replay", str(src), "--ring", shm_name, "--max", "--wait-consumers", "1"),
                   stderr=subprocess.DEVNULL)
    r = cli("record", "--ring", shm_name, "--out", str(rec), "--from-oldest", "--wait", "60", "--json")
    player.wait(timeout=60)
    assert r.returncode == 0 and player.returncode == 0, r.stderr
    a, b = TickFile(src), TickFile(rec)
    assert a.depth == b.depth == 5 and len(a) == len(b)
    assert np.array_equal(a.ticks["price"], b.ticks["price"]) and np.array_equal(a.ticks["kind"], b.ticks["kind"])


def test_ring_header_carries_depth_and_a_lapped_consumer_asks_for_a_resync(shm_name):
    from engine import ring_info as shm  # (inspect: engine/ring_info.py)
    from engine.tickring import POLL_GAP, POLL_TICK, TickConsumer, TickRing, poll, publish
    ring = TickRing(shm_name, 64, depth=7)
    c = TickConsumer(shm_name, start="now")
    assert c.depth == 7 and shm.inspect(ring.path)["depth"] == 7
    assert not ring.resync_requested() and c.resyncs == 0
    w = np.zeros(8, np.int64)
    for _ in range(200):
        publish(ring.hdr, ring.data, ring.mask, w)
    assert poll(c.hdr, c.data, c.mask, c.slot_base, c.out) == POLL_GAP
    assert c.resyncs == 1 and ring.resync_requested() and not ring.resync_requested()
    assert poll(c.hdr, c.data, c.mask, c.slot_base, c.out) == POLL_TICK
    c.request_resync()
    assert ring.resync_requested() and shm.inspect(ring.path)["consumers"][0]["resyncs"] == 2
    late = TickConsumer(shm_name, start="now")  # joins after ticks were published: asks by itself
    assert late.resyncs >= 1 and ring.resync_requested()
    c.close()
    late.close()
    ring.unlink()


def test_a_resync_request_makes_the_feed_process_resend_every_window(shm_name):
    """A real feed process: the consumer voids its books mid-stream and asks; every instrument's
    next event then brings a clear tick and its whole window, and from there its windows are the
    stream's own again."""
    from engine.shm import RingError
    from engine.tickring import POLL_EMPTY, POLL_TICK, TickConsumer, poll
    uri = "synthetic://?instruments=3&seed=8&count=60000&depth=6"
    proc = spawn(engine_cmd("feed", uri, "--ring", shm_name, "--wait-consumers", "1", "--rate", "200000",
                            "--capacity", str(1 << 17)))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                c = TickConsumer(shm_name, start="oldest")
                break
            except RingError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        assert c.depth == 6
        got, asked = [], None
        while time.monotonic() < deadline:
            st = poll(c.hdr, c.data, c.mask, c.slot_base, c.out)
            if st == POLL_TICK:
                got.append(c.out.copy())
                if len(got) == 20_000:
                    asked = len(got)
                    c.request_resync()
            elif st == POLL_EMPTY:
                if proc.poll() is not None and c.producer_finished():
                    break
                time.sleep(0.0002)
            else:
                raise AssertionError("lapped")
        c.close()
    finally:
        proc.kill()
        proc.wait()
    a = np.array(got).view(TICK_DTYPE).reshape(-1)
    ref, _ = read_all(uri)
    # the re-sent windows only add level and book ticks (seq and ts_recv are the ring's)
    same_quotes_and_trades(a, ref, prefix=True, skip=("seq", "ts_recv"))
    # the consumer voids its books when it asks; the rest of the batch in flight may leave stale
    # levels, which each instrument's clear tick then removes
    books, seen_clear = DepthBooks(6, strict=False), set()
    refq = iter(_terminal_windows(ref, 6))
    for k, r in enumerate(a):
        if k == asked:
            books.books.clear()
        if r["kind"] == KIND_LEVEL and r["side"] == SIDE_NONE and k >= asked:
            seen_clear.add(int(r["instrument"]))
        books.apply(r)
        if r["kind"] in (KIND_QUOTE, KIND_TRADE):
            inst, want = next(refq)
            assert inst == int(r["instrument"])
            if k < asked or inst in seen_clear:
                assert books.window(inst) == want, k
    assert seen_clear == {0, 1, 2}


def _terminal_windows(a, depth):
    books = DepthBooks(depth)
    for r in a:
        books.apply(r)
        if r["kind"] in (KIND_QUOTE, KIND_TRADE):
            w = books.window(int(r["instrument"]))
            check_window(w, depth)
            yield int(r["instrument"]), w


def test_sources_report_depth_and_validate_it(tmp_path):
    from feeds.core.sources import open_source
    assert open_source("synthetic://?depth=0").depth == 0 and open_source("synthetic://").depth == 10
    p = tmp_path / "x.itch"
    p.write_bytes(_itch_messages())
    assert open_source(f"itch:{p}").depth == 10 and open_source(f"itch:{p}?depth=32").depth == 32
    for bad in (f"itch:{p}?depth=33", f"itch:{p}?depth=-1", "synthetic://?depth=40", f"itch:{p}?depth=x"):
        with pytest.raises(FeedError, match="depth"):
            open_source(bad)

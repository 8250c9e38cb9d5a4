"""Feed handlers: parse + book throughput in messages/s on one core, against a pure-Python
reading of the same data in the same run.

- ITCH 5.0: a synthetic day (one instrument, so meatpy's one-instrument processor sees every
  message it must) from the ITCH writer. Ours: length framing, every message applied to the
  order book, ticks written. Peer: meatpy's ITCH50MessageReader + ITCH50MarketProcessor (its
  limit order book), on the first PEER_MSGS messages of the same file.
- DBN: the real CME MBO file in ../shared/data. Ours: records -> L3 book -> ticks. Peer:
  databento-dbn's own decoder, iterating records in Python into a dict order book (Databento's
  example design, SortedDict levels).
- Binance: the real spot capture, lines/s (a line is one message). Ours: the numba byte scanner
  (feeds/binance/scan.py): parse, continuity, L2 book, ticks written, bookTickers as quotes.
  Peer: orjson (the fastest decoder installed here) + a SortedDict book with the same continuity
  checks, ticks as tuples. Both run alternately, best of N, in the same run.
Both sides work from bytes already in memory (decompressed), so neither times gunzip/zstd.

Depth cost: each of ours runs at depth 0 (quotes and trades only, the peers' output) and at
depth 10 (the default: level ticks for the top 10 levels a side, engine/records.py), on the same
input; the synthetic market's own generation is timed both ways too (per market event).
"""
import gzip
import time

import _common  # noqa: F401
import numpy as np

from _common import ROOT

DATA = ROOT.parent / "shared" / "data"
CACHE = ROOT / "bench" / "results" / "cache"


def best_of_pair(fn0, fn1, reps):
    """Best times of two runs alternated, so machine noise hits both alike."""
    b0 = b1 = None
    for _ in range(reps):
        t0, r0 = best_of(fn0, 1)
        t1, r1 = best_of(fn1, 1)
        b0 = t0 if b0 is None else min(b0, t0)
        b1 = t1 if b1 is None else min(b1, t1)
    return (b0, r0), (b1, r1)


def best_of(fn, reps):
    best = None
    for _ in range(reps):
        t = time.perf_counter()
        r = fn()
        dt = time.perf_counter() - t
        best = dt if best is None or dt < best else best
    return best, r


# --- ITCH -------------------------------------------------------------------------------

def itch_file(ticks):
    from feeds.convert import convert
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"syn1-depth10-{ticks}.itch"  # an order per level of the market's top 10
    if not path.exists():
        convert(f"synthetic://?instruments=1&count={ticks}&seed=21&depth=10", str(path), progress=False)
    return path


def ours_itch(data, depth=0):
    from feeds.nasdaq.itch import ST_OUT, ItchBooks
    buf = np.frombuffer(data, np.uint8)
    out = np.zeros((8192, 8), np.int64)
    books = ItchBooks(depth=depth)
    pos, n = 0, 0
    while True:
        pos, n, _, st = books.apply(buf, pos, len(buf), out, n)
        if st != ST_OUT:
            break
        n = 0
    return int(books.stats[0])


def meatpy_itch(path, limit):
    import datetime
    from meatpy.itch50 import ITCH50MessageReader
    from meatpy.itch50.itch50_market_processor import ITCH50MarketProcessor
    proc = ITCH50MarketProcessor("SYN0000", datetime.datetime(2023, 11, 14))
    n = 0
    with ITCH50MessageReader(path) as reader:
        for msg in reader:
            proc.process_message(msg)
            n += 1
            if n >= limit:
                break
    return n


# --- DBN --------------------------------------------------------------------------------

def ours_dbn(raw, depth=0):
    from feeds.core.sources import open_source
    from feeds.databento import dbn as D
    f = open_source(f"dbn:/dev/null?depth={depth}")
    off = f._start(raw)
    out = np.zeros((8192, 8), np.int64)
    buf = np.frombuffer(raw, np.uint8)
    pos, n = off, 0
    while True:
        pos, n, st = f._apply(buf, pos, out, n)
        if st != D.ST_OUT:
            break
        n = 0
    return int(f.stats_a[D.S_RECORDS])


def python_dbn(raw):
    """databento-dbn decoding, the book in Python (orders dict + SortedDict levels)."""
    import databento_dbn as dbn
    from sortedcontainers import SortedDict
    dec = dbn.DBNDecoder()
    dec.write(raw)
    orders, bids, asks = {}, SortedDict(), SortedDict()
    n = 0
    tops = []
    for r in dec.decode():
        if not isinstance(r, dbn.MBOMsg):
            continue
        n += 1
        a = r.action
        if a == "A" or a == "M":
            if r.order_id in orders:
                side, px, sz = orders.pop(r.order_id)
                lv = bids if side == "B" else asks
                lv[px] -= sz
                if lv[px] <= 0:
                    del lv[px]
            lv = bids if r.side == "B" else asks
            lv[r.price] = lv.get(r.price, 0) + r.size
            orders[r.order_id] = (r.side, r.price, r.size)
        elif a == "C" and r.order_id in orders:
            side, px, sz = orders[r.order_id]
            lv = bids if side == "B" else asks
            take = min(sz, r.size)
            lv[px] -= take
            if lv[px] <= 0:
                del lv[px]
            if take == sz:
                del orders[r.order_id]
            else:
                orders[r.order_id] = (side, px, sz - take)
        if r.flags & dbn.F_LAST:
            tops.append((bids.peekitem(-1) if bids else None, asks.peekitem(0) if asks else None))
    return n


# --- Binance ----------------------------------------------------------------------------

def ours_binance(path, raw, depth=0):
    """The scanner over the decompressed bytes in memory (`path` only names the source)."""
    from feeds.core.sources import open_source
    src = open_source(f"binance:{path}?depth={depth}")
    out = np.zeros((src.OUT_ROWS, 8), np.int64)
    for _ in src._scan(np.frombuffer(raw, np.uint8), 0, True, out):
        pass
    return src.stats()["lines"]


def python_binance(lines):
    """orjson + SortedDict book, the same continuity rules (spot), ticks as tuples."""
    import orjson
    from sortedcontainers import SortedDict

    def num(s):
        ip, _, fp = s.partition(".")
        return int(ip) * 10**9 + int(fp.ljust(9, "0")[:9])
    bids, asks = SortedDict(), SortedDict()
    held, last, snap, ticks = [], None, None, []
    top = None

    def apply(d):
        nonlocal last, top
        for key, book in (("b", bids), ("a", asks)):
            for p, q in d[key]:
                px, qty = num(p), num(q)
                if qty:
                    book[px] = qty
                else:
                    book.pop(px, None)
        last = d["u"]
        t = (bids.peekitem(-1) if bids else None, asks.peekitem(0) if asks else None)
        if t != top:
            top = t
            ticks.append(t)
    for line in lines:
        ts, _, body = line.partition(b" ")
        m = orjson.loads(body)
        d = m.get("data", m)
        if "lastUpdateId" in d:
            snap = d["lastUpdateId"]
            for p, q in d["bids"]:
                bids[num(p)] = num(q)
            for p, q in d["asks"]:
                asks[num(p)] = num(q)
            for ev in held:
                if ev["u"] > snap and (last is not None or ev["U"] <= snap + 1):
                    apply(ev)
            continue
        e = d.get("e")
        if e == "depthUpdate":
            if snap is None:
                held.append(d)
            elif d["u"] > snap and (last is None or d["U"] == last + 1):
                apply(d)
        elif e == "trade":
            ticks.append((num(d["p"]), num(d["q"]), d["m"]))
    return len(lines)


def synthetic_events(depth, events):
    """Simulate at least `events` market events (their ticks written) at this depth; returns how many."""
    from feeds.synthetic.market import G_EVENTS, Simulator, parse_uri
    sim = Simulator(parse_uri(f"synthetic://?instruments=4&seed=3&depth={depth}"))
    out = np.zeros((8192, 8), np.int64)
    while sim.g[G_EVENTS] < events:
        sim.generate(out)
    return int(sim.g[G_EVENTS])


def main():
    a = _common.args(__doc__)
    metrics, peers, ratios, notes = {}, {}, {}, {}
    rows = []
    # ITCH
    ticks = 300_000 if a.quick else 3_000_000
    path = itch_file(ticks)
    data = path.read_bytes()
    ours_itch(data[:10_000])  # compile
    (dt, msgs), (dt10, _) = best_of_pair(lambda: ours_itch(data), lambda: ours_itch(data, 10), 9)
    metrics["itch_messages_per_s"] = round(msgs / dt)
    metrics["itch_messages"] = msgs
    metrics["itch_depth10_messages_per_s"] = round(msgs / dt10)
    limit = 50_000 if a.quick else 200_000
    dtp, pm = best_of(lambda: meatpy_itch(path, limit), 1)
    peers["meatpy"] = {"itch_messages_per_s": round(pm / dtp)}
    ratios["itch_vs_meatpy_messages_per_s"] = _common.ratio(metrics["itch_messages_per_s"],
                                                            peers["meatpy"]["itch_messages_per_s"], True)
    rows.append(("ITCH 5.0 parse + book", {"ours msgs/s": metrics["itch_messages_per_s"],
                                           "peer msgs/s": peers["meatpy"]["itch_messages_per_s"]}))
    # DBN
    dbn_path = DATA / "dbn" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
    if dbn_path.exists():
        import zstandard
        raw = zstandard.ZstdDecompressor().stream_reader(open(dbn_path, "rb")).read()
        ours_dbn(raw)
        (dt, recs), (dt10, _) = best_of_pair(lambda: ours_dbn(raw), lambda: ours_dbn(raw, 10), 25)
        metrics["dbn_messages_per_s"] = round(recs / dt)
        metrics["dbn_depth10_messages_per_s"] = round(recs / dt10)
        dtp, pr = best_of(lambda: python_dbn(raw), 1 if a.quick else 2)
        peers["databento_dbn_python"] = {"dbn_messages_per_s": round(pr / dtp)}
        ratios["dbn_vs_databento_dbn_python_messages_per_s"] = _common.ratio(
            metrics["dbn_messages_per_s"], peers["databento_dbn_python"]["dbn_messages_per_s"], True)
        rows.append(("DBN MBO parse + L3 book", {"ours msgs/s": metrics["dbn_messages_per_s"],
                                                 "peer msgs/s": peers["databento_dbn_python"]["dbn_messages_per_s"]}))
    else:
        notes["dbn"] = f"skipped: {dbn_path} not here"
    # Binance
    bpath = DATA / "binance" / "spot_btcusdt_20240808.gz"
    if bpath.exists():
        raw = gzip.decompress(bpath.read_bytes())
        plain = CACHE / "spot_btcusdt_20240808.txt"
        CACHE.mkdir(parents=True, exist_ok=True)
        plain.write_bytes(raw)
        lines = raw.split(b"\n")[:-1]
        ours_binance(plain, raw)
        ours_binance(plain, raw, 10)  # compile
        (dt, n), (dtp, pn) = best_of_pair(lambda: ours_binance(plain, raw), lambda: python_binance(lines), 5)
        (dt10, _), _ = best_of_pair(lambda: ours_binance(plain, raw, 10), lambda: None, 5)
        metrics["binance_messages_per_s"] = round(n / dt)  # lines/s: one message a line
        metrics["binance_depth10_messages_per_s"] = round(n / dt10)
        peers["orjson_sorteddict"] = {"binance_messages_per_s": round(pn / dtp)}
        ratios["binance_vs_orjson_sorteddict_messages_per_s"] = _common.ratio(
            metrics["binance_messages_per_s"], peers["orjson_sorteddict"]["binance_messages_per_s"], True)
        notes["binance"] = ("lines/s from the decompressed capture in memory (gunzip not timed), parse + book + "
                            "ticks, one core, best of 5 alternated runs; ours also turns bookTickers into quotes")
        rows.append(("Binance capture + L2 book", {"ours msgs/s": metrics["binance_messages_per_s"],
                                                   "peer msgs/s": peers["orjson_sorteddict"]["binance_messages_per_s"]}))
    else:
        notes["binance"] = f"skipped: {bpath} not here"
    _common.table("feed handlers, one core (best of runs)", ["ours msgs/s", "peer msgs/s"], rows)
    # depth: the same inputs with level ticks for the top 10 levels a side
    events = 300_000 if a.quick else 3_000_000
    synthetic_events(0, 10_000)
    synthetic_events(10, 10_000)  # compile
    (dt, ev), (dt10, ev10) = best_of_pair(lambda: synthetic_events(0, events), lambda: synthetic_events(10, events), 5)
    metrics["synthetic_depth0_events_per_s"] = round(ev / dt)
    metrics["synthetic_depth10_events_per_s"] = round(ev10 / dt10)
    drows = []
    for feed, unit in (("itch", "msgs"), ("dbn", "msgs"), ("binance", "msgs"), ("synthetic", "events")):
        k0 = f"{feed}_messages_per_s" if unit == "msgs" else "synthetic_depth0_events_per_s"
        k10 = f"{feed}_depth10_messages_per_s" if unit == "msgs" else "synthetic_depth10_events_per_s"
        if k0 in metrics and k10 in metrics:
            metrics[f"{feed}_depth10_cost_pct"] = round(100 * (metrics[k0] / metrics[k10] - 1), 1)
            drows.append((f"{feed} ({unit}/s)", {"depth 0": metrics[k0], "depth 10": metrics[k10],
                                                 "cost %": metrics[f"{feed}_depth10_cost_pct"]}))
    _common.table("depth: parse + book (+ level ticks) at depth 0 and 10", ["depth 0", "depth 10", "cost %"], drows)
    _common.save("feeds", metrics, peers, ratios, notes or None)


if __name__ == "__main__":
    main()

"""Fuzz the parsers: ITCH 5.0 streams, MoldUDP64 datagrams, DBN records and metadata, Binance
capture lines (scanned as bytes in numba).

Run by tests/test_fuzz.py in a child process with NUMBA_BOUNDSCHECK=1, so any out-of-bounds
access in the numba code raises IndexError instead of reading past a buffer. Hypothesis picks
the seed stream and a random seed per example; each example runs CASES mutated inputs through
the parser (state carried across them, as a live feed would). Accepted outcomes: the parser
consumes the input, or stops with its own error (FeedError / ST_ERROR). Anything else fails.

usage: python -m tests.helpers.fuzz_parsers PARSERS CASES   (PARSERS: itch, moldudp64, dbn, binance, a comma
separated list of them, or all)
"""
import json
import socket
import sys
import time

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from feeds.nasdaq import itch
from feeds.core.sources import open_source
from feeds.core.uri import FeedError

PER_EXAMPLE = 25


def fuzz_settings(cases):
    """Enough examples for `cases` inputs, reproducible, no deadline (compiles happen inside)."""
    return settings(max_examples=max(1, cases // PER_EXAMPLE), deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


def mutate(rng, data):
    b = bytearray(data)
    op = rng.integers(7)
    if op == 0 and b:                                   # flip bytes
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(len(b)))] = int(rng.integers(256))
    elif op == 1:                                       # truncate
        b = b[:int(rng.integers(len(b) + 1))]
    elif op == 2:                                       # insert garbage
        at = int(rng.integers(len(b) + 1))
        b[at:at] = rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
    elif op == 3 and len(b) > 4:                        # a hostile length field
        at = int(rng.integers(len(b) - 2))
        b[at:at + 2] = int(rng.choice([0, 1, 2, 0xFFFF, int(rng.integers(65536))])).to_bytes(2, "big")
    elif op == 4 and b:                                 # duplicate a slice (replays, reorders)
        i, j = sorted(int(x) for x in rng.integers(0, len(b), 2))
        b[j:j] = b[i:j + 1]
    elif op == 5:                                       # pure garbage
        b = bytearray(rng.integers(0, 256, int(rng.integers(0, 400)), dtype=np.uint8).tobytes())
    return bytes(b)                                     # op 6: unchanged


def itch_seeds():
    from feeds.nasdaq.itch_writer import ItchWriter, message
    from feeds.core.sources import open_source
    src = open_source("synthetic://?instruments=3&count=400&seed=4")
    t = next(src.batches()).copy()
    w = ItchWriter(3, t[0, 1] - t[0, 1] % (86_400 * 10**9))
    day = w.start(int(t[0, 1])) + b"".join(w.write(t)) + w.finish(int(t[-1, 1]))
    extra = message(b"P", 1, 5, bytes(33)) + message(b"C", 1, 6, bytes(25)) + message(b"U", 2, 7, bytes(24))
    return [day, day[:600] + extra, extra * 3]


def run_itch(cases, seeds):
    out = np.zeros((16, 8), np.int64)  # small: the out-of-room path runs all the time

    @fuzz_settings(cases)
    @given(st.integers(0, 2**63 - 1), st.sampled_from(range(len(seeds))), st.booleans())
    def one(seed, which, strict):
        rng = np.random.default_rng(seed)
        books = itch.ItchBooks(strict=strict, depth=3)  # depth 3: a message's ticks just fit in `out`
        for _ in range(PER_EXAMPLE):
            data = np.frombuffer(mutate(rng, seeds[which]), np.uint8)
            pos, n = 0, 0
            while True:
                pos, n, k, stt = books.apply(data, pos, len(data), out, n)
                assert 0 <= pos <= len(data) and 0 <= n <= len(out) and k >= 0
                if stt == itch.ST_OUT:
                    n = 0
                    continue
                break
            assert (books.stats >= 0).all()
            counter[0] += 1
    counter = [0]
    one()
    return counter[0]


def run_mold(cases, seeds):
    from feeds.nasdaq.moldudp64 import packet
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    from feeds.nasdaq.mold_server import frame_offsets
    arr = np.frombuffer(seeds[0], np.uint8)
    offs = np.zeros(len(arr), np.int64)
    k, _ = frame_offsets(arr, offs)
    msgs = [seeds[0][offs[i]:(offs[i + 1] if i + 1 < k else len(seeds[0]))] for i in range(k)]
    pkts, seq = [], 1
    for i in range(0, len(msgs), 7):
        pkts.append(packet(b"FUZZSESS01", seq, msgs[i:i + 7]))
        seq += len(msgs[i:i + 7])
    out = np.zeros((16, 8), np.int64)
    counter = [0]

    @fuzz_settings(cases)
    @given(st.integers(0, 2**63 - 1), st.booleans())
    def one(seed, rerequest):
        rng = np.random.default_rng(seed)
        src = open_source(f"moldudp64://127.0.0.1:{port}?depth=3" + ("&rerequest=127.0.0.1:9" if rerequest else ""))
        pending, n = {}, 0
        try:
            for _ in range(PER_EXAMPLE):
                d = pkts[int(rng.integers(len(pkts)))]
                d = mutate(rng, d) if rng.random() < 0.7 else d
                gen = src.datagram(d, pending, out, n)
                while True:
                    try:
                        next(gen)
                    except StopIteration as e:
                        n = e.value
                        break
                    n = 0
                if pending and rng.random() < 0.2:
                    for _ in src._run(src._give_up(pending), out, 0):
                        pass
                    n = 0
                counter[0] += 1
        finally:
            src.sock.close()
    one()
    return counter[0]


def dbn_seed():
    import databento_dbn as dbn
    A, S = dbn.Action, dbn.Side
    recs = []
    for i in range(40):
        act = [A.ADD, A.ADD, A.CANCEL, A.MODIFY, A.TRADE, A.FILL, A.CLEAR][i % 7]
        recs.append(bytes(dbn.MBOMsg(1, 40 + i % 3, i, i % 9, (4800 + i % 5) * 10**9, 1 + i % 4, act,
                                     S.BID if i % 2 else S.ASK, i, flags=dbn.F_LAST if i % 3 else 0)))
    lv = dbn.BidAskPair(10, 11, 1, 2, 1, 1)
    recs.append(bytes(dbn.MBP1Msg(1, 5, 1, 10, 1, A.TRADE, S.BID, depth=0, ts_recv=2, flags=dbn.F_LAST, levels=lv)))
    recs.append(bytes(dbn.TradeMsg(1, 5, 1, 10, 1, A.TRADE, S.BID, depth=0, ts_recv=2)))
    meta = dbn.Metadata(dataset="GLBX.MDP3", start=0, stype_in=dbn.SType.RAW_SYMBOL,
                        stype_out=dbn.SType.INSTRUMENT_ID, schema=dbn.Schema.MBO).encode()
    return meta, b"".join(recs)


def run_dbn(cases, _):
    from feeds.databento import dbn as D
    meta, recs = dbn_seed()
    out = np.zeros((D.PENDING + 64, 8), np.int64)
    counter = [0]

    @fuzz_settings(cases)
    @given(st.integers(0, 2**63 - 1), st.booleans())
    def one(seed, strict):
        rng = np.random.default_rng(seed)
        f = open_source("dbn:/dev/null?depth=3" + ("" if strict else "&on_error=skip"))
        for _ in range(PER_EXAMPLE):
            if rng.random() < 0.1:  # the metadata header
                try:
                    D.read_metadata("fuzz", mutate(rng, meta))
                except FeedError:
                    pass
            data = np.frombuffer(mutate(rng, recs), np.uint8)
            pos, n = 0, 0
            while True:
                pos, n, stt = f._apply(data, pos, out, n)
                assert 0 <= pos <= len(data) and 0 <= n <= len(out)
                if stt == D.ST_OUT:
                    n = 0
                    continue
                break
            counter[0] += 1
    one()
    return counter[0]


def binance_seed():
    """Capture lines of every shape the scanner reads (snapshot, diffs held and applied, a gap,
    trades, book tickers, a second symbol), in the capture's "<ns> <json>" form."""
    def line(ns, msg):
        return f"{ns} {json.dumps(msg)}\n".encode()

    def diff(U, u, bids=(), asks=(), sym="BTCUSDT"):
        return {"stream": f"{sym.lower()}@depth", "data": {"e": "depthUpdate", "E": U, "s": sym, "U": U, "u": u,
                                                           "b": list(bids), "a": list(asks)}}
    out = [line(1, diff(8, 10, bids=[["99.0", "1.0"]])),
           line(2, {"lastUpdateId": 10, "bids": [["99.0", "1.0"], ["98.5", "2.5"]], "asks": [["101.0", "1.0"]]}),
           line(3, diff(11, 12, asks=[["100.5", "0.25"]])),
           line(4, {"stream": "btcusdt@trade", "data": {"e": "trade", "E": 5, "s": "BTCUSDT", "t": 1, "p": "99.5",
                                                        "q": "0.25", "T": 5, "m": True}}),
           line(5, {"stream": "btcusdt@bookTicker", "data": {"u": 13, "s": "BTCUSDT", "b": "99.1", "B": "1.0",
                                                             "a": "100.4", "A": "2.0"}}),
           line(6, diff(13, 14, bids=[["99.1", "0"]])),
           line(7, diff(20, 22, bids=[["99.6", "1.0"]])),
           line(8, diff(5, 6, asks=[["7.5", "3"]], sym="ETHUSDT"))]
    return b"".join(out)


def run_binance(cases, _):
    import tempfile

    from feeds.binance import capture as B
    seed = binance_seed()
    counter = [0]
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(seed)
        f.flush()

        @fuzz_settings(cases)
        @given(st.integers(0, 2**63 - 1), st.booleans(), st.sampled_from([0, 3]))
        def one(seed_, strict, depth):
            rng = np.random.default_rng(seed_)
            src = open_source(f"binance:{f.name}?depth={depth}" + ("" if strict else "&on_error=skip"))
            out = np.zeros((2 + B.depth.room(depth) + 4, 8), np.int64)  # small: the out-of-room path runs
            for _ in range(PER_EXAMPLE):
                data = np.frombuffer(mutate(rng, seed), np.uint8)
                src.scanner.n = 0
                try:
                    for _b in src._scan(data, 0, bool(rng.integers(2)), out):
                        assert 0 <= src.scanner.n <= len(out)
                except FeedError:
                    pass
                counter[0] += 1
        one()
    return counter[0]


RUNNERS = {"itch": run_itch, "moldudp64": run_mold, "dbn": run_dbn, "binance": run_binance}


def main():
    which, cases = sys.argv[1], int(sys.argv[2])
    for name in (RUNNERS if which == "all" else which.split(",")):
        t0 = time.monotonic()
        done = RUNNERS[name](cases, itch_seeds() if name != "dbn" else None)
        print(json.dumps({"parser": name, "cases": done, "seconds": round(time.monotonic() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()

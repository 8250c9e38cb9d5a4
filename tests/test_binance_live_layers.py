"""binance-live's layers, each alone (feeds/binance/live.py's module doc lists them): the transport
(live_conn: one websocket connection, against the fake venue's websocket only), the venue protocol
(live_protocol: stream names, replies, the snapshot rules on a real scanner fed the real capture,
no network), the REST client (live_rest: the weight budget and bans with no socket, then against
the fake venue's REST only), the session (live_session: what is due with no network; a reconnect
and a make-before-break rotation against the fake venue's websocket, with no REST and no scanner)
and the stop every wait ends at (live_waits)."""
import asyncio
import gzip
import json
import threading
import time

import numpy as np
import pytest

from feeds.binance import live_protocol as P
from feeds.binance.live_conn import Conn
from feeds.binance.live_rest import MAX_BAN_S, REST_FLOOR_S, Budget, Rest, RestError
from feeds.binance.live_session import Session
from feeds.binance.live_waits import Stopped, Waits, new_loop
from feeds.binance.params import LIVE
from feeds.core.uri import FeedError
from feeds.core.venue_text import Limit

from tests.helpers.data import USDM

DEPTH = "btcusdt@depth@0ms"


def _capture(n):
    with gzip.open(USDM, "rb") as f:
        return [next(f) for _ in range(n)]


def _frames(lines, stream):
    """The capture's websocket frames (JSON, as sent) of `stream`, in order."""
    return [ln.split(b" ", 1)[1].rstrip(b"\n") for ln in lines if b'"stream":"%s"' % stream.encode() in ln]


def _payloads(buf):
    return [ln.split(b" ", 1)[1] for ln in bytes(buf).split(b"\n") if ln]


def _venue(**kw):
    from feeds.binance.venue import BinanceVenue
    return BinanceVenue(USDM, market="usdm", **kw)


# -- the transport ----------------------------------------------------------------------------

def test_a_connection_queues_its_lines_unless_fast_takes_them_and_keeps_the_first_reason():
    taking, taken, woken = [True], [], []
    c = Conn(fast=lambda conn, data: taking[0] and not taken.append(bytes(data)))
    c.wake = lambda: woken.append(1)
    c.lines(b"1 a\n", 1)
    assert taken == [b"1 a\n"] and not c.buf and c.frames == 1 and not woken
    taking[0] = False
    c.lines(b"2 b\n", 1)
    assert bytes(c.buf) == b"2 b\n" and woken == [1]
    taking[0] = True  # (lines queued before: the new ones queue behind them, fast is not asked)
    c.lines(b"3 c\n4 d\n", 2)
    assert bytes(c.buf) == b"2 b\n3 c\n4 d\n" and taken == [b"1 a\n"] and c.frames == 4
    c.lost("first")
    c.lost("second")
    assert c.closed and c.reason == "first" and len(woken) == 4 and not c.whole()


def test_a_connection_makes_each_frame_a_line_until_the_venue_closes():
    """Against the fake venue's websocket alone: every depth frame the venue sends is one line, its
    receive time then the payload as sent; the close frame ends the connection, its reason kept."""
    want = _frames(_capture(2000), DEPTH)[:40]

    async def run(url):
        c = Conn()
        ended = asyncio.Event()
        c.wake = lambda: c.closed and ended.set()
        t0 = time.monotonic_ns()
        c.transport = await c.connect(url, 0)
        await ended.wait()
        return c, t0

    with _venue(close_after=40) as fb:
        c, t0 = asyncio.run(run(P.stream_url("t", fb.ws_url, [DEPTH])))
    assert _payloads(c.buf) == want and c.frames == 40
    stamps = [int(ln.split(b" ", 1)[0]) for ln in bytes(c.buf).split(b"\n") if ln]
    assert stamps == sorted(stamps) and stamps[0] >= t0
    assert c.reason.startswith("close frame 1001"), c.reason


# -- the venue protocol ---------------------------------------------------------------------------

def test_stream_names_and_the_connection_url():
    assert P.streams(("BTCUSDT", "ETHUSDT"), "100ms", "quote", "trade") == [
        "btcusdt@depth@100ms", "btcusdt@bookTicker", "btcusdt@trade",
        "ethusdt@depth@100ms", "ethusdt@bookTicker", "ethusdt@trade"]
    assert P.streams(("BTCUSDT",), "none", "off", "none") == ["btcusdt@depth"]
    assert P.streams(("BTCUSDT",), "0ms", "check", "aggTrade") == ["btcusdt@depth@0ms", "btcusdt@bookTicker",
                                                                   "btcusdt@aggTrade"]
    assert P.stream_url("u", "ws://h:1/", ["a@depth", "a@trade"]) == "ws://h:1/stream?streams=a@depth/a@trade"
    with pytest.raises(FeedError, match="1025 streams; one connection carries at most 1024"):
        P.stream_url("u", "ws://h", ["x"] * 1025)
    with pytest.raises(FeedError, match="is not a ws:// or wss://HOST URL"):
        P.check_url("u", "ws", "http://h", ("ws", "wss"))


def test_rest_requests_and_their_replies():
    assert [P.depth_weight("spot", n) for n in (100, 500, 1000, 5000)] == [5, 25, 50, 250]
    assert [P.depth_weight("usdm", n) for n in (50, 100, 500, 1000)] == [2, 5, 10, 20]
    url, weight, cap = P.depth_request("http://h", "/fapi/v1", "usdm", "BTCUSDT", 1000)
    assert url == "http://h/fapi/v1/depth?symbol=BTCUSDT&limit=1000" and weight == 20 and cap == 4096 + 256 * 1000
    url, weight, cap = P.info_request("http://h", "/api/v3", "spot", ("BTCUSDT", "ETHUSDT"))
    assert url.endswith("/api/v3/exchangeInfo?symbols=%5B%22BTCUSDT%22%2C%22ETHUSDT%22%5D") and weight == 20
    assert cap == P.INFO_BYTES + 2 * P.INFO_SYMBOL_BYTES

    def info(*syms):
        return json.dumps({"symbols": [{"symbol": s, "status": st} for s, st in syms]}).encode()
    assert P.read_info("u", "spot", "R", ("A", "B"), 200, info(("A", "TRADING"), ("B", "BREAK"))) == ["B"]
    with pytest.raises(FeedError, match="unknown symbol B on Binance spot"):
        P.read_info("u", "spot", "R", ("A", "B"), 200, info(("A", "TRADING")))
    with pytest.raises(FeedError, match=r"unknown symbol among A on Binance spot \(exchangeInfo: Invalid "
                                        r"symbol\.\\x1b"):  # (the venue's words, escaped)
        P.read_info("u", "spot", "R", ("A",), 400, b'{"code":-1121,"msg":"Invalid symbol.\\u001b[2J"}')
    with pytest.raises(FeedError, match="exchangeInfo refused A: HTTP 503 <html>"):
        P.read_info("u", "spot", "R", ("A",), 503, b"<html>")
    with pytest.raises(FeedError, match=r"is not Binance's \(not JSON\)"):
        P.read_info("u", "spot", "R", ("A",), 200, b"{")

    assert P.snapshot_line(7, "BTCUSDT", 200, b' {"lastUpdateId":1,\n"bids":[]}') == \
        b'7 {"s":"BTCUSDT","lastUpdateId":1, "bids":[]}\n'
    assert P.snapshot_line(7, "BTCUSDT", 429, b'{"code":-1003}') is None
    assert P.snapshot_line(7, "BTCUSDT", 200, b"<html>") is None
    assert P.gap_line(5_000_000_123, 'a "b"') == b'5000000123 {"e":"gap","E":5000,"reason":"a \\"b\\""}\n'


def test_which_books_need_a_snapshot_on_a_real_scanner():
    """Binance's sync procedure as the protocol reads the scanner: a declared symbol needs a
    snapshot; its diffs held meanwhile do not change that; the venue's reply as the line
    snapshot_line makes syncs the book (nothing wanted, unless a refresh asks every one); a gap
    line (gap_line) wants one again."""
    from feeds.binance.capture import Scanner
    lines = _capture(3000)
    at = next(i for i, ln in enumerate(lines) if b'"lastUpdateId"' in ln)
    sc = Scanner("test", strict=False, quote=True, size_div=1000, depth=10)
    sc.declare(["BTCUSDT"])
    out = np.zeros((4096, 8), np.int64)

    def scan(data):
        sc.n = 0
        for _ in sc.scan(np.frombuffer(data, np.uint8), 0, False, out):
            sc.n = 0
    assert P.needs_any(sc, 1) and P.wanted(sc, ("BTCUSDT",), False) == ["BTCUSDT"]
    scan(b"".join(lines[:at]))
    assert P.needs_any(sc, 1) and P.wanted(sc, ("BTCUSDT",), False) == ["BTCUSDT"]
    ns, body = lines[at].split(b" ", 1)
    scan(P.snapshot_line(int(ns), "BTCUSDT", 200, body) + b"".join(lines[at + 1:]))
    assert sc.stats()["snapshots"] == 1 and sc.stats()["depth_applied"] > 100
    assert not P.needs_any(sc, 1) and P.wanted(sc, ("BTCUSDT",), False) == []
    assert P.synced(sc, ["BTCUSDT"]) == ["BTCUSDT"] and P.wanted(sc, ("BTCUSDT",), True) == ["BTCUSDT"]
    assert P.needs_any(sc, 2)  # (a second symbol the scanner has not met)
    scan(P.gap_line(int(ns) + 10**9, "lost"))
    assert sc.stats()["stream_gaps"] == 1
    assert P.needs_any(sc, 1) and P.wanted(sc, ("BTCUSDT",), False) == ["BTCUSDT"] and P.synced(sc, ["BTCUSDT"]) == []


# -- REST: the budget and bans (no socket), the client (the fake venue's REST alone) ---------

def test_the_weight_budget_waits_for_the_next_minute_past_90_percent():
    b = Budget(2400, 0.1, 30.0)
    now, wall = 100.0, 60 * 1000 + 20.0  # (20 s into a minute)
    assert b.wait_s(20, now, wall) == 0.0
    assert b.heard(200, {"X-MBX-USED-WEIGHT-1M": "2100"}, now, wall) is None
    assert b.weight == (1000, 2100)
    assert b.wait_s(60, now, wall) == 0.0  # 2160: 90% exactly
    assert b.wait_s(61, now, wall) == pytest.approx(40.05)  # past it: the minute's end
    assert b.wait_s(61, now, wall + 40.0) == 0.0  # (a new minute)
    b.heard(200, {"X-MBX-USED-WEIGHT-1M": "x"}, now, wall)  # (not a number: the last word stands)
    assert b.weight == (1000, 2100)


def test_bans_last_what_the_venue_says_never_less_than_the_backoff():
    b = Budget(2400, 0.1, 8.0)
    assert (b.base, b.cap) == (REST_FLOOR_S, 8.0)  # (the REST backoff's floor)
    now = 1000.0
    assert b.heard(429, {"Retry-After": "5"}, now, 0.0) == 5.0  # (the backoff's first, 0.25..0.5, is less)
    assert b.wait_s(1, now + 1.0, 0.0) == 4.0 and b.wait_s(1, now + 5.0, 0.0) == 0.0
    assert b.heard(418, {}, now, 0.0) == 120.0  # (none given: the venue's usual ban)
    assert b.heard(429, {"Retry-After": "nan"}, now, 0.0) == 60.0
    assert b.heard(429, {"Retry-After": "1e23"}, now, 0.0) == MAX_BAN_S
    for bans in range(5, 10):  # Retry-After 0, in a row: the backoff doubles up to its cap
        d = min(8.0, REST_FLOOR_S * 2 ** (bans - 1))
        assert d / 2 <= b.heard(429, {"Retry-After": "0"}, now, 0.0) <= d and b.bans == bans
    assert b.heard(200, {}, now, 0.0) is None and b.bans == 0


def _rest(fb, waits=None):
    said = []
    waits = waits or Waits()
    return Rest(fb.rest_url, "/fapi/v1", Budget(2400, 0.1, 1.0), waits, Limit(said.append, "x"), said.append), said


def _on_rest_thread(rest, coro_of):
    async def main():
        await rest.start()
        try:
            return await coro_of()
        finally:
            await rest.close()
    loop = new_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_the_rest_client_waits_out_a_ban_and_asks_again():
    with _venue(rest_status=[429], retry_after=1) as fb:
        rest, said = _rest(fb)
        halted = _on_rest_thread(rest, lambda: rest.check_symbols("u", "usdm", ("BTCUSDT",)))
        calls = list(fb.rest_calls)
    assert halted == [] and rest.counts["rest_banned"] == 1
    assert [c[2] for c in calls] == [429, 200] and calls[0][:2] == calls[1][:2]
    assert said == ["REST 429 (too many requests); no requests for 1 s"]


def test_the_rest_client_refuses_a_reply_over_its_cap_and_names_unknown_symbols():
    with _venue() as fb:
        rest, _ = _rest(fb)
        url = f"{fb.rest_url}/fapi/v1/exchangeInfo"
        with pytest.raises(RestError, match=r"a reply (of \d+ bytes \(over 100\)|over 100 bytes)"):
            _on_rest_thread(rest, lambda: rest.call(rest.get(url, 1, 100)))
        rest, _ = _rest(fb)
        with pytest.raises(FeedError, match="unknown symbol among BTCUSDT, NOPE on Binance usdm"):
            _on_rest_thread(rest, lambda: rest.check_symbols("u", "usdm", ("BTCUSDT", "NOPE")))


# -- the stop -----------------------------------------------------------------------------------

def test_stop_ends_a_wait_of_any_length_from_another_thread():
    waits = Waits()
    threading.Timer(0.05, waits.stop).start()
    with pytest.raises(Stopped):
        asyncio.run(waits.sleep(1e9))
    with pytest.raises(Stopped):  # (stopped already: a new wait ends at once)
        asyncio.run(waits.sleep(1e9))


# -- the session --------------------------------------------------------------------------------

def _params(**q):
    return LIVE.parse("t", "usdm", {"symbols": "BTCUSDT", **{k: str(v) for k, v in q.items()}})


def test_what_the_session_does_next():
    """due(): a lost or silent connection is replaced, an old one rotated, a standby whose overlap
    is over (or that was lost) switched to; nothing otherwise."""
    s = Session("t", "ws://h", _params(silence_s=10, rotate_s=100, overlap_s=1), Waits(), None, None, 0)
    now = time.monotonic()
    s.active = Conn()
    assert s.due() is None
    s.active.last = now - 11
    assert s.due() == "replace"
    s.active.last = now
    s.active.opened = now - 101
    assert s.due() == "rotate"
    s.standby = Conn()
    assert s.due() is None
    s.standby.opened = now - 2
    assert s.due() == "switch"
    s.standby.opened = now
    s.standby.lost("x")
    assert s.due() == "switch"
    s.active.lost("y")
    assert s.due() == "replace"


def _run_session(fb, until, **q):
    """A session on the fake venue's depth stream (no REST, no scanner): its lines until
    until(session, lines), then closed."""
    said, gaps = [], []
    p = _params(ws=fb.ws_url, **q)
    s = Session("t", P.stream_url("t", p.ws, [DEPTH]), p, Waits(), Limit(said.append, "x"), said.append, 0,
                on_gap=lambda: gaps.append(1))
    loop = s.loop = new_loop()
    got = bytearray()
    try:
        loop.run_until_complete(s.open())
        deadline = time.monotonic() + 300  # (a guard: the run ends on until())
        while not until(s, got) and time.monotonic() < deadline:
            s.wait()
            assert s.step()
            got += s.take()
    finally:
        loop.run_until_complete(s.close())
        loop.close()
    return s, got, said, gaps


def test_a_lost_connection_is_a_gap_line_then_a_new_connection():
    want = _frames(_capture(6000), DEPTH)
    with _venue(drop_after=30, speed=2.0, max_lines=6000) as fb:  # (paced: the market goes on meanwhile)
        s, got, said, gaps = _run_session(
            fb, lambda s, got: b'"e":"gap"' in got and got.count(b"\n") >= 80, backoff_s=0.05, backoff_max_s=0.1)
    before, gap, after = bytes(got).partition(b'"e":"gap"')
    assert gap
    old, new = _payloads(before.rsplit(b"\n", 1)[0] + b"\n"), _payloads(after.split(b"\n", 1)[1])
    assert old == want[:len(old)] and len(old) <= 30  # (what the drop cut off is lost)
    assert new == want[want.index(new[0]):][:len(new)] and want.index(new[0]) >= len(old)
    assert s.counts == {"connects": 2, "reconnects": 1, "rotations": 0, "silences": 0} and gaps == [1]
    assert len(said) == 1 and said[0].startswith("connection lost (") and "reconnecting" in said[0]


def test_a_rotation_opens_the_next_connection_before_the_old_one_closes():
    """Make-before-break: the standby runs beside the old connection for overlap_s, then takes over;
    no gap, and every frame once the overlap's duplicates are dropped."""
    want = _frames(_capture(6000), DEPTH)
    with _venue(speed=2.0, max_lines=6000) as fb:
        s, got, said, gaps = _run_session(fb, lambda s, got: s.counts["rotations"] >= 2 and got.count(b"\n") >= 150,
                                          rotate_s=0.5, overlap_s=0.2)
    lines = _payloads(got)
    assert b'"e":"gap"' not in got and not gaps and not said
    assert s.counts["reconnects"] == 0 and s.counts["rotations"] >= 2 and s.counts["connects"] >= 3
    seen, once = set(), []
    for ln in lines:
        if ln not in seen:
            seen.add(ln)
            once.append(ln)
    assert len(once) < len(lines)  # the overlaps, carried by both connections
    assert once == want[:len(once)]

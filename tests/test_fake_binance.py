"""The Binance venue (feeds/binance/venue/) against a plain aiohttp client, on the real
captures: replay order and completeness, subscriptions, REST depth against a book rebuilt here
independently (Decimal keys), exchangeInfo, pings, and every fault."""
import asyncio
import gzip
import json
import signal
import subprocess
import time
import urllib.parse
from decimal import Decimal

import aiohttp
import pytest

from feeds.binance.venue import BinanceVenue

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import SPOT, USDM

CAPTURES = {"spot": SPOT, "usdm": USDM}
STREAMS = {"spot": "btcusdt@depth@100ms/btcusdt@bookTicker/btcusdt@trade",
           "usdm": "btcusdt@depth@0ms/btcusdt@bookTicker/btcusdt@trade"}
REST = {"spot": "/api/v3", "usdm": "/fapi/v1"}
HANG = 20.0  # guard against a hung test, not a timing assertion


def capture(market, n):
    """The first n lines as (body text, parsed JSON), read here without the server's code."""
    out = []
    with gzip.open(CAPTURES[market], "rt") as f:
        for _ in range(n):
            body = f.readline().rstrip("\n").split(" ", 1)[1]
            out.append((body, json.loads(body)))
    return out


def stream_lines(lines, streams=None):
    return [b for b, m in lines if "stream" in m and (streams is None or m["stream"] in streams)]


def is_diff(m):
    return "stream" in m and m["stream"].split("@", 1)[1].startswith("depth@")


def run(coro):
    async def guarded():
        async with aiohttp.ClientSession() as s:
            return await asyncio.wait_for(coro(s), HANG)
    return asyncio.run(guarded())


async def texts(ws, n):
    out = []
    while len(out) < n:
        m = await ws.receive()
        assert m.type == aiohttp.WSMsgType.TEXT, (len(out), m)
        out.append(m.data)
    return out


async def until_set(cond):
    while not cond():
        await asyncio.sleep(0.005)


def rebuild(lines, upto):
    """The book from the capture's snapshot and the diffs up to update id `upto`."""
    snap = next(m for _, m in lines if "lastUpdateId" in m)
    book = {side: {Decimal(p): q for p, q in snap[side]} for side in ("bids", "asks")}
    for _, m in lines:
        if is_diff(m) and snap["lastUpdateId"] < m["data"]["u"] <= upto:
            for side, key in (("bids", "b"), ("asks", "a")):
                for p, q in m["data"][key]:
                    if Decimal(q) == 0:
                        book[side].pop(Decimal(p), None)
                    else:
                        book[side][Decimal(p)] = q
    return book


def top(book, limit):
    bids = sorted(book["bids"].items(), reverse=True)[:limit]
    asks = sorted(book["asks"].items())[:limit]
    return [[f"{p}", q] for p, q in bids], [[f"{p}", q] for p, q in asks]


def same_levels(reply_levels, expected):
    assert [[Decimal(p), q] for p, q in reply_levels] == [[Decimal(p), q] for p, q in expected]
    # the reply keeps the capture's own decimal strings
    assert all(isinstance(p, str) and isinstance(q, str) for p, q in reply_levels)


@pytest.mark.parametrize("market", ["spot", "usdm"])
def test_flat_out_every_line_in_order(market):
    lines = capture(market, 3000)
    want = stream_lines(lines)

    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS[market]}") as ws:
            got = await texts(ws, len(want))
            await ws.send_json({"method": "LIST_SUBSCRIPTIONS", "id": 7})
            after = await texts(ws, 1)
        return got, after

    with BinanceVenue(CAPTURES[market], market=market, max_lines=3000) as fb:
        got, after = run(go)
        assert fb.done.wait(HANG)
        assert got == want  # byte for byte, in capture order
        assert json.loads(after[0]) == {"result": sorted(STREAMS[market].split("/")), "id": 7}  # nothing extra
        assert fb.frames_sent == len(want) and fb.position == 3000 and fb.connections == 1


def test_paced_replay_keeps_order():
    lines = capture("spot", 300)  # 0.92 s of capture at speed 10
    want = stream_lines(lines)

    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws:
            return await texts(ws, len(want))

    with BinanceVenue(SPOT, market="spot", speed=10.0, max_lines=300) as fb:
        assert run(go) == want
        assert fb.done.wait(HANG)


def test_only_subscribed_streams_and_live_subscribe():
    lines = capture("usdm", 2000)
    want = stream_lines(lines, {"btcusdt@trade"})

    async def go(s):
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await s.ws_connect(f"{fb.ws_url}/stream?streams=btcusdt@nonsense")
        async with s.ws_connect(f"{fb.ws_url}/stream") as ws:
            await ws.send_json({"method": "SUBSCRIBE", "params": ["BTCUSDT@trade"], "id": 1})
            err = json.loads((await texts(ws, 1))[0])
            await ws.send_json({"method": "SUBSCRIBE", "params": ["btcusdt@trade", "ethusdt@aggTrade"], "id": 2})
            got = await texts(ws, len(want) + 1)
        return err, got

    with BinanceVenue(USDM, market="usdm", max_lines=2000) as fb:
        err, got = run(go)
    assert err["id"] == 1 and err["error"]["code"] == 2 and err["error"]["msg"].startswith("Invalid request")
    replies = [g for g in got if g.startswith('{"result"')]
    assert [json.loads(r) for r in replies] == [{"result": None, "id": 2}]
    assert [g for g in got if g not in replies] == want


@pytest.mark.parametrize("market", ["spot", "usdm"])
def test_depth_first_is_recorded_snapshot_later_is_the_book(market):
    lines = capture(market, 3000)
    recorded = next(b for b, m in lines if "lastUpdateId" in m)
    frames = stream_lines(lines)
    rest = f"{REST[market]}/depth?symbol=BTCUSDT"

    async def go(s):
        first = asyncio.ensure_future(s.get(f"{fb.rest_url}{rest}&limit=1000"))
        await until_set(lambda: fb.rest_waiting == 1)  # asked before the market started: it waits
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS[market]}") as ws:
            r = await first
            first_body = await r.text()
            seen = await texts(ws, 1500)
            later = []
            for limit in (1000, 5):
                async with s.get(f"{fb.rest_url}{rest}&limit={limit}") as r2:
                    later.append(await r2.json())
        return first_body, seen, later

    with BinanceVenue(CAPTURES[market], market=market, max_lines=3000) as fb:
        first, seen, (later, small) = run(go)
    assert first == recorded
    assert seen == frames[:1500]
    u_seen = max(json.loads(f)["data"]["u"] for f in seen if is_diff(json.loads(f)))
    diffs = {m["data"]["u"]: m["data"] for _, m in lines if is_diff(m)}
    assert later["lastUpdateId"] >= u_seen and later["lastUpdateId"] in diffs  # the market is where the client is, or ahead
    bids, asks = top(rebuild(lines, later["lastUpdateId"]), 1000)
    same_levels(later["bids"], bids)
    same_levels(later["asks"], asks)
    assert len(small["bids"]) == len(small["asks"]) == 5
    if market == "usdm":
        d = diffs[later["lastUpdateId"]]
        assert (later["E"], later["T"]) == (d["E"], d["T"])
    else:
        assert "E" not in later


def test_exchange_info_and_unknown_symbol():
    async def go(s):
        out = {}
        for market, url, query in (("spot", spot.rest_url, "symbol=BTCUSDT"),
                                   ("usdm", usdm.rest_url, "symbols=" + urllib.parse.quote('["BTCUSDT"]'))):
            p = REST[market]
            async with s.get(f"{url}{p}/exchangeInfo?{query}") as r:
                out[market] = (r.status, r.headers["X-MBX-USED-WEIGHT-1M"], await r.json())
            async with s.get(f"{url}{p}/exchangeInfo?symbol=NOPEUSDT") as r:
                out[market + "_bad"] = (r.status, await r.json())
            async with s.get(f"{url}{p}/depth?symbol=NOPEUSDT") as r:
                out[market + "_bad_depth"] = (r.status, await r.json())
        return out

    with BinanceVenue(SPOT, market="spot", max_lines=100) as spot, \
            BinanceVenue(USDM, market="usdm", max_lines=100) as usdm:
        out = run(go)
    for market, (tick, step, weight) in {"spot": ("0.01000000", "0.00001000", "20"),
                                         "usdm": ("0.10", "0.001", "1")}.items():
        status, used, info = out[market]
        assert status == 200 and used == weight
        (sym,) = info["symbols"]
        assert sym["symbol"] == "BTCUSDT" and sym["status"] == "TRADING"
        assert (sym["baseAsset"], sym["quoteAsset"]) == ("BTC", "USDT")
        f = {x["filterType"]: x for x in sym["filters"]}
        assert (f["PRICE_FILTER"]["tickSize"], f["LOT_SIZE"]["stepSize"]) == (tick, step)
        for bad in ("_bad", "_bad_depth"):
            assert out[market + bad] == (400, {"code": -1121, "msg": "Invalid symbol."})
    usdm_sym = out["usdm"][2]["symbols"][0]
    assert (usdm_sym["pricePrecision"], usdm_sym["quantityPrecision"]) == (2, 3)
    assert "pricePrecision" not in out["spot"][2]["symbols"][0]


def test_depth_weights_add_up():
    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams=btcusdt@trade"):
            await until_set(fb.done.is_set)  # the market is past the snapshot: depth answers at once
            used = []
            for limit in (100, 500, 1000, 5000, 9999):
                async with s.get(f"{fb.rest_url}/api/v3/depth?symbol=BTCUSDT&limit={limit}") as r:
                    body = await r.json()
                    used.append((int(r.headers["X-MBX-USED-WEIGHT-1M"]), len(body["bids"])))
            return used

    with BinanceVenue(SPOT, market="spot", max_lines=100) as fb:
        used = run(go)
    prev = 0
    for (u, _), w in zip(used, (5, 25, 50, 250, 250)):
        assert u == prev + w or u == w  # (the count restarts at a minute boundary)
        prev = u
    n = [n for _, n in used]  # the snapshot holds 1000 levels a side, fewer after the diffs removed some
    assert n[:2] == [100, 500] and 500 < n[2] <= 1000 and n[2] == n[3] == n[4]


def test_pings_and_pongs():
    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream", autoping=False) as ws:
            for _ in range(2):
                m = await ws.receive()
                assert m.type == aiohttp.WSMsgType.PING
                await ws.pong(m.data)
            await until_set(lambda: fb.pongs == 2)
            await ws.ping(b"hi")
            m = await ws.receive()
            assert (m.type, m.data) == (aiohttp.WSMsgType.PONG, b"hi")

    with BinanceVenue(SPOT, market="spot", max_lines=100, ping_s=0.05) as fb:
        run(go)
        assert fb.pings_sent >= 2


def test_pong_timeout_closes():
    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream", autoping=False) as ws:
            pings = 0
            while True:
                m = await ws.receive()
                if m.type != aiohttp.WSMsgType.PING:
                    return pings, m
                pings += 1  # and never answered

    with BinanceVenue(SPOT, market="spot", max_lines=100, ping_s=0.05, pong_timeout_s=0.3) as fb:
        pings, m = run(go)
        assert pings >= 1 and m.type == aiohttp.WSMsgType.CLOSE and m.data == 1008
        assert (1, "pong_timeout") in fb.closed_reasons and fb.pongs == 0


# ---- faults

# (slices longer than the server's per-connection queue, so the market is still playing when the
# fault fires and a second connection has something to join)

def test_drop_after_aborts_without_close_frame_first_connection_only():
    want = stream_lines(capture("spot", 4000))

    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws:
            got = await texts(ws, 5)
            end = await ws.receive()
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws2:
            more = await texts(ws2, 20)
        return got, end, more

    with BinanceVenue(SPOT, market="spot", max_lines=4000, drop_after=5) as fb:
        got, end, more = run(go)
        assert got == want[:5]
        assert end.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)  # no CLOSE frame came
        assert (1, "drop_after") in fb.closed_reasons and fb.connections == 2
    j = want.index(more[0])
    assert j >= 5 and more == want[j:j + 20]  # the second connection joins the market where it is


def test_close_after_every_connection():
    want = stream_lines(capture("spot", 4000))

    async def go(s):
        out = []
        for _ in range(2):
            async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws:
                out.append((await texts(ws, 5), await ws.receive()))
        return out

    with BinanceVenue(SPOT, market="spot", max_lines=4000, close_after=5, fault_every_connection=True) as fb:
        out = run(go)
        assert [r for r in fb.closed_reasons if r[1] == "close_after"] == [(1, "close_after"), (2, "close_after")]
    (a, end_a), (b, end_b) = out
    assert a == want[:5]
    assert (end_a.type, end_a.data) == (end_b.type, end_b.data) == (aiohttp.WSMsgType.CLOSE, 1001)
    j = want.index(b[0])
    assert j >= 5 and b == want[j:j + 5]


def test_silence_keeps_answering_pings_then_resumes():
    want = stream_lines(capture("spot", 600))

    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}", autoping=False) as ws:
            got = await texts(ws, 3)
            await ws.ping(b"alive?")
            m = await ws.receive()  # during the silence the pong is all that comes
            got += await texts(ws, len(want) - 3)
        return m, got

    with BinanceVenue(SPOT, market="spot", max_lines=600, silence_after=3, silence_s=1.0) as fb:
        m, got = run(go)
    assert (m.type, m.data) == (aiohttp.WSMsgType.PONG, b"alive?")
    assert got == want  # flat out the market waited for the silent connection: nothing lost


def test_half_open_answers_nothing_and_keeps_the_socket():
    want = stream_lines(capture("spot", 4000))

    async def go(s):
        ws = await s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}", autoping=False,
                                timeout=aiohttp.ClientWSTimeout(ws_close=0.3))
        got = await texts(ws, 3)
        await ws.ping(b"alive?")
        with pytest.raises(asyncio.TimeoutError):
            await ws.receive(timeout=0.5)
        live = fb.live_connections
        await ws.close()  # the server never answers the close: the client gives up and drops TCP
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws2:
            more = await texts(ws2, 20)
        return got, live, more

    with BinanceVenue(SPOT, market="spot", max_lines=4000, half_open_after=3) as fb:
        got, live, more = run(go)
        assert (1, "half_open_after") in fb.closed_reasons and fb.pongs == 0
    assert got == want[:3] and live == 1
    j = want.index(more[0])
    assert j >= 3 and more == want[j:j + 20]


def test_skip_and_dup_diffs():
    lines = capture("spot", 600)
    want, n = [], 0
    for body, m in lines:
        if "stream" not in m:
            continue
        if is_diff(m):
            n += 1
            if n == 2:
                continue
            if n == 3:
                want.append(body)
        want.append(body)

    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws:
            return await texts(ws, len(want))

    with BinanceVenue(SPOT, market="spot", max_lines=600, skip_diffs={2}, dup_diffs={3}) as fb:
        assert run(go) == want
        assert fb.done.wait(HANG) and fb.frames_sent == len(want)


def test_malformed_and_oversized_frames():
    want = stream_lines(capture("usdm", 200))

    async def go(s):
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['usdm']}", max_msg_size=8 << 20) as ws:
            return await texts(ws, 10)

    with BinanceVenue(USDM, market="usdm", max_lines=200, malformed_at={2}, oversized_at={4}) as fb:
        got = run(go)
    assert got[0] == want[0] and got[2:4] == want[1:3] and got[5:] == want[3:8]
    with pytest.raises(ValueError):
        json.loads(got[1])
    assert len(got[4].encode()) == 2 * 1024 * 1024 and json.loads(got[4])["stream"] == "oversized@pad"


def test_stale_snapshot_first_reply_only():
    lines = capture("usdm", 1000)
    snap = next(m for _, m in lines if "lastUpdateId" in m)

    async def go(s):
        first = asyncio.ensure_future(s.get(f"{fb.rest_url}/fapi/v1/depth?symbol=BTCUSDT&limit=1000"))
        await until_set(lambda: fb.rest_waiting == 1)
        async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['usdm']}") as ws:
            a = await (await first).json()
            await texts(ws, 300)
            async with s.get(f"{fb.rest_url}/fapi/v1/depth?symbol=BTCUSDT&limit=1000") as r:
                b = await r.json()
        return a, b

    with BinanceVenue(USDM, market="usdm", max_lines=1000, stale_snapshot=True) as fb:
        a, b = run(go)
    assert a == {**snap, "lastUpdateId": snap["lastUpdateId"] - 1000}
    assert b["lastUpdateId"] > snap["lastUpdateId"]


def test_rest_status_retry_after_and_delay():
    path = "/api/v3/exchangeInfo"

    async def go(s):
        out = []
        for _ in range(3):
            t = time.monotonic()
            async with s.get(f"{fb.rest_url}{path}?symbol=BTCUSDT") as r:
                out.append((r.status, r.headers.get("Retry-After"), "X-MBX-USED-WEIGHT-1M" in r.headers,
                            await r.json(), time.monotonic() - t))
        return out

    with BinanceVenue(SPOT, market="spot", max_lines=100, rest_status=[429, 418], retry_after=2,
                     rest_delay_s=0.2) as fb:
        out = run(go)
        assert fb.rest_calls == [(path, "symbol=BTCUSDT", 429), (path, "symbol=BTCUSDT", 418),
                                 (path, "symbol=BTCUSDT", 200)]
    (s1, ra1, w1, b1, t1), (s2, ra2, w2, b2, t2), (s3, ra3, w3, b3, t3) = out
    assert (s1, ra1, b1["code"]) == (429, "2", -1003) and b1["msg"].startswith("Too many requests")
    assert (s2, ra2, b2["code"]) == (418, "2", -1003) and "banned" in b2["msg"]
    assert s3 == 200 and ra3 is None and b3["symbols"][0]["symbol"] == "BTCUSDT"
    assert w1 and w2 and w3
    assert min(t1, t2, t3) >= 0.2  # every reply waited rest_delay_s (a lower bound: the fault is the wait)


def test_max_conn_s_closes_every_connection():
    async def go(s):
        ends = []
        for _ in range(2):
            async with s.ws_connect(f"{fb.ws_url}/stream?streams={STREAMS['spot']}") as ws:
                while True:
                    m = await ws.receive()
                    if m.type != aiohttp.WSMsgType.TEXT:
                        ends.append((m.type, m.data))
                        break
        return ends

    with BinanceVenue(SPOT, market="spot", max_lines=200, max_conn_s=0.3) as fb:
        ends = run(go)
        assert [r for r in fb.closed_reasons if r[1] == "max_conn_s"] == [(1, "max_conn_s"), (2, "max_conn_s")]
    assert ends == [(aiohttp.WSMsgType.CLOSE, 1001)] * 2


# ---- the command (`engine venue binance`; tests/test_venue_cmd.py runs clients against it)

def test_cli_serves_until_sigterm():
    p = subprocess.Popen(engine_cmd("venue", "binance", str(SPOT), "--market", "spot", "--speed", "0", "--port", "0"),
                         cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        uri = p.stdout.readline().strip()
        assert uri.startswith("binance-live://spot?symbols=BTCUSDT&"), uri
        urls = dict(urllib.parse.parse_qsl(uri.split("?", 1)[1]))
        assert urls["ws"].startswith("ws://127.0.0.1:") and urls["rest"].startswith("http://127.0.0.1:")

        async def go(s):
            async with s.get(f"{urls['rest']}/api/v3/exchangeInfo?symbol=BTCUSDT") as r:
                return r.status
        assert run(go) == 200
        p.send_signal(signal.SIGTERM)
        assert p.wait(HANG) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_cli_bad_capture_is_one_line(tmp_path):
    res = subprocess.run(engine_cmd("venue", "binance", str(tmp_path / "none.gz")),
                         cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=HANG)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "none.gz" in lines[0] and "Traceback" not in res.stderr

"""The venue's REST: every reply carries X-MBX-USED-WEIGHT-1M (the weight used in the current
wall-clock minute), the REST faults apply here (rest_faults.py), and depth is answered from the
venue's book at the market's position."""
import asyncio
import time

import orjson
from aiohttp import web

from .rest_faults import hostile as hostile_reply, status as status_reply
from .tables import BAD_LIMIT, INVALID_SYMBOL, NO_SYMBOL, REST_FAULTS


def route(v, handler, weight, name=None):
    """The aiohttp handler of endpoint `name` of venue v: handler(v, request) -> (response, weight);
    weight None: the handler's own weight counts when a status fault answers instead."""
    async def wrapped(request):
        v.rest_times.append((time.monotonic(), request.path))
        hostile = v.rest_fault.get(name)
        if hostile is not None and hostile != "stale":
            if hostile not in REST_FAULTS:
                raise ValueError(f"rest_fault {hostile!r}: one of {', '.join(REST_FAULTS)}")
            resp = await hostile_reply(v, request, hostile)
            v.rest_calls.append((request.path, request.query_string, resp.status))
            return resp
        status_fault = v.rest_status.pop(0) if v.rest_status else None
        if v.rest_delay_s:
            await asyncio.sleep(v.rest_delay_s)
        if status_fault is not None:
            resp, w = status_reply(v, status_fault), weight if weight is not None else 1
        else:
            resp, w = await handler(v, request)
        resp.headers["X-MBX-USED-WEIGHT-1M"] = str(_use_weight(v, w))
        v.rest_calls.append((request.path, request.query_string, resp.status))
        return resp
    return wrapped


def error(body, status=400):
    return web.json_response(body, status=status)


def _use_weight(v, w):
    minute = int(time.time() // 60)
    if v.weight[0] != minute:
        v.weight = [minute, 0]
    v.weight[1] += w
    return v.weight[1]


def depth_weight(market, limit):
    """A depth request's weight, by limit, as Binance documents it."""
    if market == "spot":
        return 5 if limit <= 100 else 25 if limit <= 500 else 50 if limit <= 1000 else 250
    return 2 if limit <= 50 else 5 if limit <= 100 else 10 if limit <= 500 else 20


async def depth(v, request):
    """lastUpdateId = the last applied diff's u, bids descending, asks ascending, `limit` levels,
    futures also "E"/"T" of that diff. Before the market reached the capture's snapshot line, the
    request waits for it and gets the recorded snapshot (its bytes as recorded when `limit`
    covers it), so a client that asks at once sees what the capture saw."""
    q = request.query
    sym = q.get("symbol")
    if not sym:
        return error(NO_SYMBOL), 1
    if sym not in v.cap.symbols:
        return error(INVALID_SYMBOL), 1
    limit_s = q.get("limit", str(v.depth_default))
    if not limit_s.isdigit() or int(limit_s) < 1:
        return error(BAD_LIMIT), 1
    limit = min(int(limit_s), v.depth_max)
    weight = depth_weight(v.market, limit)
    body = None
    if v.cap.snapshot_at is not None and not v.snap_reached.is_set():
        v.rest_waiting += 1
        try:
            await v.snap_reached.wait()
        finally:
            v.rest_waiting -= 1
        body = v.cap.body[v.cap.snapshot_at]
        snap = orjson.loads(body)
        if limit < max(len(snap["bids"]), len(snap["asks"])) or _stale_now(v):
            snap["bids"], snap["asks"] = snap["bids"][:limit], snap["asks"][:limit]
            body = None
    else:
        _book_catch_up(v)
        bids, asks = v.book.top(limit)
        snap = {"lastUpdateId": v.book.last_id}
        if v.market != "spot":
            now = int(time.time() * 1000)
            snap.update(E=v.book.E or now, T=v.book.T or now)
        snap.update(bids=bids, asks=asks)
    if _stale_now(v):  # (older than the diffs it should bridge: spot's ids move ~10 an event,
        # futures' thousands, so a hostile venue's "stale" goes back 10^7)
        snap["lastUpdateId"] -= 10**7 if v.rest_fault.get("depth") == "stale" else 1000
    v.depth_replies += 1
    if body is None:
        body = orjson.dumps(snap)
    return web.Response(body=body, content_type="application/json"), weight


def _book_catch_up(v):
    """Apply what the market has played since the last depth request (parsing diffs is the costly
    part of the replay, so it is done only when a depth reply needs them)."""
    cap, book = v.cap, v.book
    for j in range(v.book_at, v.position):
        if j == cap.snapshot_at:
            book.reset(orjson.loads(cap.body[j]))
            for i in range(j):  # diffs received before the snapshot but newer than it (u > lastUpdateId)
                if cap.diff_no[i]:
                    book.apply(orjson.loads(cap.body[i])["data"])
        elif cap.diff_no[j] and (book.last_id is not None or cap.snapshot_at is None):
            book.apply(orjson.loads(cap.body[j])["data"])
    v.book_at = max(v.book_at, v.position)


def _stale_now(v):
    return (v.stale_snapshot and v.depth_replies == 0) or v.rest_fault.get("depth") == "stale"


async def ping(v, request):
    return web.json_response({}), 1


async def server_time(v, request):
    return web.json_response({"serverTime": int(time.time() * 1000)}), 1

"""REST faults: a status the venue answers instead (rest_status: 429/418 with Retry-After and
Binance's error body), and a hostile venue's replies (rest_fault)."""
import time

from aiohttp import web

from .tables import ERRORS, UNKNOWN_ERROR


def status(v, code):
    """Binance's error reply of HTTP status `code`, with Retry-After (v.retry_after seconds)."""
    body = dict(ERRORS.get(code, UNKNOWN_ERROR))
    body["msg"] = body["msg"].replace("{until}", str(int(time.time() * 1000) + int(v.retry_after * 1000)))
    return web.json_response(body, status=code, headers={"Retry-After": str(v.retry_after)})


async def hostile(v, request, fault):
    """The reply of hostile REST fault `fault` (tables.REST_FAULTS, "stale" aside: rest.depth's)."""
    if fault.startswith("retry_after"):
        return web.json_response(ERRORS[429], status=429,
                                 headers={"Retry-After": "0" if fault == "retry_after_0" else "1e23"})
    if fault == "refused":
        return web.json_response({"code": -1121, "msg": v.venue_text}, status=400)
    if fault == "never":
        await v.stopping.wait()
        return web.Response(status=503)
    if fault == "huge":
        return await _huge(v, request)
    body = {"garbage": b"<html><body>502 Bad Gateway</body></html>", "bad_json": b'{"lastUpdateId":12,"bids":[["6',
            "list": b'[{"symbol":"BTCUSDT"}]', "not_objects": b'{"symbols":[1,"BTCUSDT",null]}',
            "nested": b'{"symbols":' + b"[" * 100_000 + b"]" * 100_000 + b"}"}[fault]
    return web.Response(body=body, content_type="text/html" if fault == "garbage" else "application/json")


async def _huge(v, request):
    """200, a chunked body that never ends (up to hostile_budget)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    sent, pad = 0, b" " * (64 << 10)
    try:
        await resp.write(b'{"symbols":[')
        while sent + len(pad) <= v.hostile_budget:
            await resp.write(pad)
            sent += len(pad)
            v.hostile_sent += len(pad)
        v.hostile_spent += 1
        await resp.write_eof()
    except (ConnectionError, RuntimeError):  # the client dropped it
        pass
    return resp

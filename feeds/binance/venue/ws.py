"""A websocket connection to the venue: `/stream?streams=a/b` and the live SUBSCRIBE, UNSUBSCRIBE
and LIST_SUBSCRIPTIONS requests, the venue's pings and the client's, and the connection's end.
What the market sends it goes through ws_writer.py."""
import asyncio
import json
import time

import orjson
from aiohttp import WSMsgType, web

from .tables import CLOSED, ERRORS, HALF_OPEN, LIVE, QUEUE_FRAMES, SILENT, STREAM_RE, WS_FAULTS
from .ws_writer import write


class Conn:
    """One websocket connection: its streams, frames sent (k), state and per-connection faults."""

    def __init__(self, no, ws, request, faulted):
        self.no, self.ws, self.request, self.faulted = no, ws, request, faulted
        self.streams, self.k, self.state = set(), 0, LIVE
        self.fault = self.fault_after = None  # a hostile fault (ws_fault) and after which frame
        self.queue = asyncio.Queue(QUEUE_FRAMES)
        self.resume = asyncio.Event()
        self.unanswered = None  # loop time of the first ping not yet answered
        self.tasks = []


async def handle(v, request):
    """The aiohttp handler of /stream on venue v."""
    streams = [s for s in request.query.get("streams", "").split("/") if s]
    bad = [s for s in streams if not STREAM_RE.match(s)]
    if bad:
        return web.json_response({"code": -1100, "msg": f"Invalid stream name {bad[0]!r}."}, status=400)
    if v.ws_refuse:
        v.ws_refused += 1
        return web.json_response(ERRORS[503], status=503)
    ws = web.WebSocketResponse(autoping=False, autoclose=False, compress=False, max_msg_size=1 << 20)
    await ws.prepare(request)
    v.connections += 1
    v.conn_times.append(time.monotonic())
    v.live_connections += 1
    no = v.connections
    c = Conn(no, ws, request, v.fault_every_connection or no == 1)
    if v.ws_fault is not None:
        if v.ws_fault not in WS_FAULTS:
            raise ValueError(f"ws_fault {v.ws_fault!r}: one of {', '.join(WS_FAULTS)}")
        c.fault, c.fault_after = v.ws_fault, v.ws_fault_after
    v.conns[no] = c
    v.frames_by_conn[no] = 0
    loop = asyncio.get_running_loop()
    c.tasks.append(loop.create_task(write(v, c)))
    c.tasks.append(loop.create_task(_pinger(v, c)))
    if v.max_conn_s is not None:
        c.tasks.append(loop.create_task(_lifetime(v, c)))
    _subscribe(v, c, streams)
    try:
        await _reader(v, c)
    finally:
        if c.state != CLOSED:
            v.mark_closed(c, "client")
        for t in c.tasks:
            t.cancel()
    return ws


def _subscribe(v, c, streams):
    for s in streams:
        c.streams.add(s)
        v.subs.setdefault(s, set()).add(c)
    if c.streams:
        v.started.set()
    v.update_consumers()


async def _reader(v, c):
    ws = c.ws
    while True:
        if c.state == HALF_OPEN:
            await _half_open_wait(c)
            return
        msg = await ws.receive()
        if msg.type == WSMsgType.TEXT:
            if c.state != HALF_OPEN:
                await _control(v, c, msg.data)
        elif msg.type == WSMsgType.PING:
            if c.state != HALF_OPEN:
                await ws.pong(msg.data)
        elif msg.type == WSMsgType.PONG:
            if c.state != HALF_OPEN:
                v.pongs += 1
                c.unanswered = None
        elif msg.type == WSMsgType.CLOSE:
            if c.state == HALF_OPEN:
                await _half_open_wait(c)
            else:
                await v.close_conn(c, 1000, "client")
            return
        elif msg.type in (WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR):
            return


async def _half_open_wait(c):
    """A half-open server reads nothing and answers nothing until the peer drops the TCP connection."""
    tr = c.request.transport
    while tr is not None and not tr.is_closing():
        await asyncio.sleep(0.05)


async def _control(v, c, text):
    try:
        req = json.loads(text)
        rid, method, params = req.get("id"), req.get("method"), req.get("params", [])
    except (ValueError, AttributeError):
        await _send_json(v, c, {"error": {"code": 3, "msg": "Invalid JSON: expected value at line 1 column 1"}})
        return
    if method in ("SUBSCRIBE", "UNSUBSCRIBE"):
        bad = [p for p in params if not isinstance(p, str) or not STREAM_RE.match(p)] \
            if isinstance(params, list) else [params]
        if bad:
            await _send_json(v, c, {"error": {"code": 2, "msg": f"Invalid request: invalid stream name {bad[0]!r}"},
                                    "id": rid})
            return
        if method == "SUBSCRIBE":
            _subscribe(v, c, params)
        else:
            for s in params:
                c.streams.discard(s)
                v.subs.get(s, set()).discard(c)
            v.update_consumers()
        await _send_json(v, c, {"result": None, "id": rid})
    elif method == "LIST_SUBSCRIPTIONS":
        await _send_json(v, c, {"result": sorted(c.streams), "id": rid})
    else:
        await _send_json(v, c, {"error": {"code": 2, "msg": f"Invalid request: unknown method {method!r}"},
                                "id": rid})


async def _send_json(v, c, obj):
    try:
        await c.ws.send_frame(orjson.dumps(obj), WSMsgType.TEXT)
    except Exception:
        v.mark_closed(c, "send_error")


async def _pinger(v, c):
    loop = asyncio.get_running_loop()
    next_ping = loop.time() + v.ping_s
    while c.state in (LIVE, SILENT):
        deadline = c.unanswered + v.pong_timeout_s if c.unanswered is not None else float("inf")
        await asyncio.sleep(max(0.0, min(next_ping, deadline) - loop.time()))
        if c.state not in (LIVE, SILENT):
            return
        now = loop.time()
        if c.unanswered is not None and now >= c.unanswered + v.pong_timeout_s:
            await v.close_conn(c, 1008, "pong_timeout")
            return
        if now >= next_ping:
            next_ping += v.ping_s
            try:
                await c.ws.ping(str(int(time.time() * 1000)).encode())
            except Exception:
                v.mark_closed(c, "send_error")
                return
            v.pings_sent += 1
            if c.unanswered is None:
                c.unanswered = now


async def _lifetime(v, c):
    """The 24-hour close: frame 1001 max_conn_s after the connection opened."""
    await asyncio.sleep(v.max_conn_s)
    if c.state in (LIVE, SILENT):
        await v.close_conn(c, 1001, "max_conn_s")

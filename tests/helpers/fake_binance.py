"""A local fake Binance venue (websocket + REST) that replays a real capture, with faults on demand.

    with FakeBinance(capture_path, market="spot", speed=0.0, **faults) as fb:
        fb.ws_url    # ws://127.0.0.1:PORT    /stream?streams=btcusdt@depth@100ms/btcusdt@trade
        fb.rest_url  # http://127.0.0.1:PORT  /api/v3/depth, /fapi/v1/exchangeInfo, ...

    python -m tests.helpers.fake_binance CAPTURE --market usdm --speed 0 --port 0
        prints `ws=URL rest=URL` on one line and serves until SIGTERM/SIGINT

The capture is the `<receive ns> <json>` file feeds/binance/capture.py reads (max_lines=N: its first N
lines only). Every websocket text frame is a capture line's JSON byte for byte, sent to the
connections that subscribed its "stream" (in the URL, or by a live SUBSCRIBE; UNSUBSCRIBE and
LIST_SUBSCRIPTIONS too). A stream name that is not `<symbol>@<known type>` (lower case) gets
{"error": {"code": 2, ...}, "id": N} from SUBSCRIBE, HTTP 400 in the URL. Streams the capture lacks
stay quiet.

The market is ONE position in the capture (a market clock) shared by all connections, as a real
venue: it starts when the first connection has subscribed something, and a connection that joins
later gets the market from where it is then. speed > 0 plays at the capture's receive-time spacing
divided by speed; speed = 0 plays flat out but never runs ahead of the connections: each
connection has a queue (QUEUE_FRAMES), the market awaits room in it, and its writer awaits the
socket (TCP back-pressure), so a flat-out client gets every line. At speed 0 the market also waits
while no connection can take data (none yet, or all silent / half-open), so a client that
reconnects after a fault loses only what was queued for the old connection. At speed > 0 it keeps
real time and a connection that is away misses what was played meanwhile.

The server keeps its own book at the market position (the capture's snapshot, then every played
depth diff newer than it, including those received before the snapshot line, applied by exact
decimal string; qty 0 removes), and answers REST depth from it: lastUpdateId = the last applied
diff's u, bids descending, asks ascending, `limit` levels (default 100 spot / 500 futures, as
Binance; capped at 5000 / 1000), futures also "E"/"T" of that diff. A depth request that arrives
before the market reached the capture's snapshot line waits for it and gets the recorded snapshot
(its bytes as recorded when `limit` covers it), so a client that connects at the start and asks at
once sees what the capture saw. Diffs are parsed only when a depth reply needs them.

exchangeInfo (symbol=X, symbols=["X",...] or neither) describes the capture's symbol(s) with
Binance's filters (SYMBOLS); any other symbol, there or in depth, is HTTP 400 -1121. Every REST
reply carries X-MBX-USED-WEIGHT-1M: the weight used in the current wall-clock minute (depth by
limit as Binance documents it, exchangeInfo 20 spot / 1 futures). The server pings every ping_s
(default 20 s spot, 180 s futures), answers client pings, counts pongs, and closes (1008) a
connection that leaves a ping unanswered for pong_timeout_s.

Faults (constructor keywords; each applies to the first websocket connection only unless
fault_every_connection=True). k counts the capture frames sent on a connection from 1 (a
duplicated diff counts; the injected malformed/oversized frames do not):
  drop_after=k        abort the TCP connection after the k-th frame (no close frame)
  close_after=k       close frame 1001 after the k-th frame
  silence_after=k     no data frames for silence_s seconds (pings still answered), then resume;
                      what the market plays meanwhile is lost to it (at speed 0 the market waits
                      if no other connection takes data)
  half_open_after=k   send nothing more (no data, no pings), answer no pings, no close reply:
                      the socket stays open until the client drops it
  skip_diffs={i}      never send the capture's i-th depth diff (from 1): a missing diff
  dup_diffs={i}       send the i-th depth diff twice
  malformed_at={k}    a text frame that is not JSON just before the k-th frame
  oversized_at={k}    a 2 MiB JSON text frame (stream "oversized@pad") just before the k-th frame
  stale_snapshot      the first depth reply's lastUpdateId is 1000 lower (same levels)
  rest_delay_s        every REST reply waits that long (then answers from the market of that time)
  rest_status=[...]   the first REST calls answer these HTTP statuses, in order, with Retry-After
                      (retry_after seconds) and Binance's error body (429/418: code -1003)
  max_conn_s          close every connection (frame 1001) that many seconds after it opened
                      (except a half-open one: it sends nothing)

Hostile faults (a broken or hostile venue; attributes too, read when a connection opens or a
request comes, so a driver can change them as it goes): ws_fault applies to every connection
opened while it is set, after its ws_fault_after-th frame; it then sends no more market data and
streams its attack (never more than hostile_budget bytes a connection: hostile_spent counts the
connections that sent all of it, i.e. the client never dropped them):
  "fragments"   a text frame without FIN, then 64 KiB continuation frames for ever
  "big_pings"   1 MiB pings for ever; reads nothing more from the client
  "ping_flood"  125-byte pings for ever; reads nothing more (the client's pongs pile up)
  "trickle"     a 1000-byte text frame a byte every trickle_s (the frame never completes)
  "close"       a close frame (1000, its reason venue_text): a connection that dies young
rest_fault maps an endpoint ("depth", "exchangeInfo") to the reply every call gets:
  "retry_after_0" / "retry_after_huge"  429 with Retry-After 0 / 1e23
  "garbage"     200, an HTML body          "bad_json"  200, JSON cut short after its '{'
  "stale"       the book's reply with lastUpdateId 10^7 lower (every reply, older than any diff)
  "huge"        200, a chunked body that never ends (up to hostile_budget)
  "never"       no reply at all (the request waits until the server stops)
  "list"        200, a JSON list           "not_objects"  200, {"symbols": [1, "x", null]}
  "nested"      200, {"symbols": [[[...]]]} nested 100,000 deep
  "refused"     400, {"code": -1121, "msg": venue_text} (Binance's refusal, in the venue's words)
ws_refuse (an attribute, read as an upgrade comes): refuse every new websocket connection (HTTP 503,
Binance's overloaded body; counted in ws_refused), as a venue under maintenance does.
venue_text is what a hostile venue says in its own words (default a plain "Invalid symbol."): a
control sequence or a newline in it tries to forge the client's log.

Counters (read from any thread): connections (accepted), conn_times (monotonic s of each accept),
rest_times [(monotonic s, path)] of every REST request as it arrives, hostile_sent (bytes of
attacks), hostile_spent, live_connections (open sockets),
frames_sent (capture frames, all connections), rest_calls [(path, decoded query string, status)],
pongs, pings_sent, closed_reasons [(connection number, reason)] with reason one of client,
drop_after, close_after, half_open_after (recorded when it goes half-open; "client" follows when
the peer drops it), pong_timeout, max_conn_s, send_error, server_stop, kick (kick()), close
(ws_fault "close"); frames_by_conn {connection
number: k}, position (capture lines played), rest_waiting (depth requests waiting for the
capture's snapshot), done (threading.Event: every line played and every live connection's queue
written).
"""
import argparse
import asyncio
import gzip
import json
import re
import signal
import struct
import sys
import threading
import time
from pathlib import Path

import orjson
from aiohttp import WSMsgType, web

MARKETS = {
    # market: (REST prefix, depth max limit, default depth limit, exchangeInfo weight, default ping s)
    "spot": ("/api/v3", 5000, 100, 20, 20.0),
    "usdm": ("/fapi/v1", 1000, 500, 1, 180.0),
    "coinm": ("/dapi/v1", 1000, 500, 1, 180.0),
}

# The instruments the venue describes in exchangeInfo (values as Binance publishes them).
SYMBOLS = {
    ("spot", "BTCUSDT"): dict(base="BTC", quote="USDT", tick="0.01000000", min_px="0.01000000",
                              max_px="1000000.00000000", step="0.00001000", min_qty="0.00001000",
                              max_qty="9000.00000000"),
    ("spot", "ETHUSDT"): dict(base="ETH", quote="USDT", tick="0.01000000", min_px="0.01000000",
                              max_px="1000000.00000000", step="0.00010000", min_qty="0.00010000",
                              max_qty="9000.00000000"),
    ("usdm", "BTCUSDT"): dict(base="BTC", quote="USDT", tick="0.10", min_px="556.80", max_px="4529764",
                              step="0.001", min_qty="0.001", max_qty="1000", px_prec=2, qty_prec=3),
    ("usdm", "ETHUSDT"): dict(base="ETH", quote="USDT", tick="0.01", min_px="39.86", max_px="306177",
                              step="0.001", min_qty="0.001", max_qty="10000", px_prec=2, qty_prec=3),
    ("coinm", "BTCUSD_PERP"): dict(base="BTC", quote="USD", tick="0.1", min_px="1000", max_px="4520958",
                                   step="1", min_qty="1", max_qty="1000000", px_prec=1, qty_prec=0,
                                   contract_size=100),
    ("coinm", "ETHUSD_PERP"): dict(base="ETH", quote="USD", tick="0.01", min_px="50", max_px="306177",
                                   step="1", min_qty="1", max_qty="1000000", px_prec=2, qty_prec=0,
                                   contract_size=10),
}

# `<symbol>@<type>` as Binance names streams (lower case); `!` streams are market-wide.
STREAM_RE = re.compile(
    r"^(?:[a-z0-9_]+@(?:depth(?:5|10|20)?(?:@(?:0|100|250|500|1000)ms)?|bookTicker|trade|aggTrade"
    r"|kline_(?:1s|1m|3m|5m|15m|30m|1h|2h|4h|6h|8h|12h|1d|3d|1w|1M)|miniTicker|ticker|ticker_(?:1h|4h|1d)"
    r"|avgPrice|markPrice(?:@1s)?|indexPrice(?:@1s)?|forceOrder|rpiDepth@500ms)"
    r"|!(?:bookTicker|miniTicker@arr|ticker@arr|markPrice@arr(?:@1s)?|forceOrder@arr))$")

ERRORS = {  # HTTP status -> Binance's error body for rest_status faults
    429: {"code": -1003, "msg": "Too many requests; current limit of IP(127.0.0.1) request weight per minute is 6000. "
                               "Please use WebSocket Streams for live updates to avoid polling the API."},
    418: {"code": -1003, "msg": "Way too much request weight used; IP banned until {until}. "
                               "Please use WebSocket Streams for live updates to avoid bans."},
    403: {"code": -1003, "msg": "WAF limit violated."},
    500: {"code": -1001, "msg": "Internal error; unable to process your request. Please try again."},
    503: {"code": -1008, "msg": "Server is currently overloaded with other requests. Please try again in a few minutes."},
}
INVALID_SYMBOL = {"code": -1121, "msg": "Invalid symbol."}
UNKNOWN_ERROR = {"code": -1000, "msg": "An unknown error occured while processing the request."}
NO_SYMBOL = {"code": -1102, "msg": "Mandatory parameter 'symbol' was not sent, was empty/null, or malformed."}
BAD_LIMIT = {"code": -1100, "msg": "Illegal characters found in parameter 'limit'; legal range is '^[0-9]{1,20}$'."}
BAD_SYMBOLS = {"code": -1100, "msg": "Illegal characters found in parameter 'symbols'; legal range is "
                                     "'^\\[(\"[A-Z0-9-_.]{1,20}\"(,\"[A-Z0-9-_.]{1,20}\"){0,}){0,1}\\]$'."}
QUEUE_FRAMES = 1024  # how far the market may run ahead of one connection's socket
WRITE_BATCH = 256  # frames per socket write
OVERSIZED_BYTES = 2 * 1024 * 1024

LIVE, SILENT, HALF_OPEN, CLOSED, HOSTILE = "live", "silent", "half_open", "closed", "hostile"
WS_FAULTS = ("fragments", "big_pings", "ping_flood", "trickle", "close")
REST_FAULTS = ("retry_after_0", "retry_after_huge", "garbage", "bad_json", "stale", "huge", "never", "list",
               "not_objects", "nested", "refused")


def _raw_frame(op, payload, fin=None):
    """An unmasked server frame with opcode op (FIN set unless op starts a fragmented message: 0x1
    here always begins one, a continuation 0x0 never ends it)."""
    fin = op not in (0x0, 0x1) if fin is None else fin
    n = len(payload)
    b0 = (0x80 if fin else 0) | op
    if n < 126:
        return bytes((b0, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", b0, 126, n) + payload
    return struct.pack("!BBQ", b0, 127, n) + payload


def _frame(payload):
    """An unmasked websocket text frame (server to client), RFC 6455 5.2."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


class CaptureError(ValueError):
    pass


class Capture:
    """The capture's lines: receive ns, JSON bytes, stream name (None: the REST snapshot) and depth
    diff number (from 1; 0 for other lines). Diffs are parsed only when a depth request needs them."""

    def __init__(self, path, max_lines=None):
        path = Path(path)
        try:
            raw = path.read_bytes()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise CaptureError(f"{path}: cannot read the capture ({e})") from None
        self.ns, self.body, self.stream, self.diff_no = [], [], [], []
        self.snapshot_at, self.symbols = None, []
        n_diff = 0
        for no, ln in enumerate(raw.split(b"\n"), 1):
            ln = ln.rstrip(b"\r")
            if not ln:
                continue
            if max_lines is not None and len(self.ns) >= max_lines:
                break
            sp = ln.find(b" ")
            try:
                ns, body = int(ln[:sp]), ln[sp + 1:]
                if sp < 1 or not body.startswith(b"{"):
                    raise ValueError
                if body.startswith(b'{"stream":"'):
                    stream = body[11:body.index(b'"', 11)].decode()
                else:
                    msg = orjson.loads(body)
                    stream = msg.get("stream")
            except ValueError:
                raise CaptureError(f"{path}: line {no} is not '<ns> <json>'") from None
            diff_no = 0
            if stream is None:
                if self.snapshot_at is None:
                    self.snapshot_at = len(self.ns)
            elif "@depth@" in stream or stream.endswith("@depth"):  # diffs, not partial depth
                n_diff += 1
                diff_no = n_diff
                if n_diff == 1:
                    self.symbols.append(orjson.loads(body)["data"]["s"])
            self.ns.append(ns)
            self.body.append(body)
            self.stream.append(stream)
            self.diff_no.append(diff_no)
        if not self.ns:
            raise CaptureError(f"{path}: the capture has no lines")
        if not self.symbols:  # no depth stream: name the symbol from the first stream
            self.symbols = [s.split("@")[0].upper() for s in self.stream if s][:1]


class Book:
    """One side per dict: price string -> (price as float for sorting, qty string). Exact strings in,
    exact strings out, as Binance's REST depth gives them."""

    def __init__(self):
        self.bids, self.asks, self.last_id = {}, {}, None
        self.E = self.T = None  # futures: the event/transaction time (ms) of what the book last applied

    def reset(self, snap):
        self.E, self.T = snap.get("E"), snap.get("T")
        self.bids = {p: (float(p), q) for p, q in snap["bids"]}
        self.asks = {p: (float(p), q) for p, q in snap["asks"]}
        self.last_id = snap["lastUpdateId"]

    def apply(self, d):
        u = d["u"]
        if self.last_id is not None and u <= self.last_id:
            return  # already in the snapshot
        for side, levels in ((self.bids, d["b"]), (self.asks, d["a"])):
            for p, q in levels:
                if float(q) == 0.0:
                    side.pop(p, None)
                else:
                    side[p] = (float(p), q)
        self.last_id = u
        self.E, self.T = d.get("E"), d.get("T", d.get("E"))

    def top(self, limit):
        b = sorted(self.bids.items(), key=lambda kv: kv[1][0], reverse=True)[:limit]
        a = sorted(self.asks.items(), key=lambda kv: kv[1][0])[:limit]
        return [[p, v[1]] for p, v in b], [[p, v[1]] for p, v in a]


class _Conn:
    def __init__(self, no, ws, request, faulted):
        self.no, self.ws, self.request, self.faulted = no, ws, request, faulted
        self.streams, self.k, self.state = set(), 0, LIVE
        self.fault = self.fault_after = None  # a hostile fault (ws_fault) and after which frame
        self.queue = asyncio.Queue(QUEUE_FRAMES)
        self.resume = asyncio.Event()
        self.unanswered = None  # loop time of the first ping not yet answered
        self.tasks = []


class FakeBinance:
    def __init__(self, capture_path, market="spot", speed=0.0, *, host="127.0.0.1", port=0,
                 ping_s=None, pong_timeout_s=60.0, max_lines=None,
                 drop_after=None, close_after=None, silence_after=None, silence_s=1.0,
                 half_open_after=None, skip_diffs=(), dup_diffs=(), malformed_at=(), oversized_at=(),
                 stale_snapshot=False, rest_delay_s=0.0, rest_status=(), retry_after=1,
                 max_conn_s=None, fault_every_connection=False, ws_fault=None, ws_fault_after=1,
                 rest_fault=None, trickle_s=0.5, hostile_budget=256 << 20, venue_text="Invalid symbol."):
        if market not in MARKETS:
            raise ValueError(f"market {market!r}: one of {', '.join(MARKETS)}")
        if speed < 0:
            raise ValueError(f"speed {speed}: must be >= 0")
        self.cap = Capture(capture_path, max_lines)
        self.market, self.speed, self.host, self.port = market, float(speed), host, port
        self.prefix, self.depth_max, self.depth_default, self.info_weight, ping_default = MARKETS[market]
        self.ping_s = ping_default if ping_s is None else ping_s
        self.pong_timeout_s = pong_timeout_s
        self.drop_after, self.close_after = drop_after, close_after
        self.silence_after, self.silence_s, self.half_open_after = silence_after, silence_s, half_open_after
        self.skip_diffs, self.dup_diffs = set(skip_diffs), set(dup_diffs)
        self.malformed_at, self.oversized_at = set(malformed_at), set(oversized_at)
        self.stale_snapshot, self.rest_delay_s = stale_snapshot, rest_delay_s
        self.rest_status, self.retry_after = list(rest_status), retry_after
        self.max_conn_s, self.fault_every_connection = max_conn_s, fault_every_connection
        self.ws_fault, self.ws_fault_after, self.rest_fault = ws_fault, ws_fault_after, dict(rest_fault or {})
        self.trickle_s, self.hostile_budget, self.venue_text = trickle_s, hostile_budget, venue_text
        self.conn_times, self.rest_times = [], []
        self.ws_refuse, self.ws_refused = False, 0
        self.hostile_sent = self.hostile_spent = 0
        # counters
        self.connections = self.live_connections = self.frames_sent = self.pongs = self.pings_sent = 0
        self.rest_calls, self.closed_reasons, self.frames_by_conn = [], [], {}
        self.position = self.rest_waiting = 0
        self.done = threading.Event()
        self.ws_url = self.rest_url = None
        self._loop = self._thread = None
        self._depth_replies = 0
        self._book_at = 0  # the book has applied capture lines [0, _book_at)
        self._weight = [0, 0]  # [minute, used weight]

    # ---- lifecycle (the server runs in its own thread with its own event loop)
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        ready, failure = threading.Event(), []

        def run():
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve_start())
            except BaseException as e:  # reported to start()'s caller
                failure.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._serve_stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-binance", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self):
        if self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None

    def kick(self):
        """Close every live connection (frame 1001, as the venue's maintenance does): the client's
        next connection gets the faults set now. From any thread."""
        asyncio.run_coroutine_threadsafe(self._kick(), self._loop).result(10)

    async def _kick(self):
        await asyncio.gather(*(self._close(c, 1001, "kick") for c in list(self._conns.values())
                               if c.state in (LIVE, SILENT)))

    async def _serve_start(self):
        self._conns = {}
        self._stopping = asyncio.Event()  # (what waits for ever waits for this)
        self._subs = {}  # stream -> set of connections
        self._started = asyncio.Event()
        self._snap_reached = asyncio.Event()
        self._consumers = asyncio.Event()  # some connection can take data
        self.book = Book()
        if self.cap.snapshot_at is None:
            self._snap_reached.set()  # no snapshot recorded: the book is built from the diffs alone
        app = web.Application()
        app.router.add_get("/stream", self._ws_handler)
        p = self.prefix
        app.router.add_get(f"{p}/depth", self._rest(self._depth, None, "depth"))
        app.router.add_get(f"{p}/exchangeInfo", self._rest(self._exchange_info, self.info_weight, "exchangeInfo"))
        app.router.add_get(f"{p}/ping", self._rest(self._ping, 1))
        app.router.add_get(f"{p}/time", self._rest(self._time, 1))
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.ws_url = f"ws://{self.host}:{self.port}"
        self.rest_url = f"http://{self.host}:{self.port}"
        self._market_task = asyncio.get_running_loop().create_task(self._market())

    async def _serve_stop(self):
        self._stopping.set()
        self._market_task.cancel()
        for c in list(self._conns.values()):
            if c.state in (HALF_OPEN, HOSTILE):
                self._abort(c)
        await asyncio.gather(*(self._close(c, 1001, "server_stop") for c in list(self._conns.values())))
        await self._runner.cleanup()
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]  # (requests still waiting)
        for t in left:
            t.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    # ---- the market clock
    async def _market(self):
        cap, loop = self.cap, asyncio.get_running_loop()
        await self._started.wait()
        t0, ns0 = loop.time(), cap.ns[0]
        for i in range(len(cap.ns)):
            if self.speed > 0:
                delay = t0 + (cap.ns[i] - ns0) / 1e9 / self.speed - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            elif not self._consumers.is_set():
                await self._consumers.wait()
            stream = cap.stream[i]
            if stream is None:
                if i == cap.snapshot_at:
                    self.position = i + 1
                    self._snap_reached.set()
                continue
            for c in tuple(self._subs.get(stream, ())):
                if c.state == LIVE:
                    if c.queue.full():
                        await c.queue.put(i)
                    else:
                        c.queue.put_nowait(i)
            self.position = i + 1
        while any(c.state in (LIVE, SILENT) and c.queue._unfinished_tasks for c in self._conns.values()):
            await asyncio.sleep(0.001)
        self.done.set()

    def _update_consumers(self):
        if any(c.state == LIVE and c.streams for c in self._conns.values()):
            self._consumers.set()
        else:
            self._consumers.clear()

    # ---- websocket
    async def _ws_handler(self, request):
        raw = request.query.get("streams", "")
        streams = [s for s in raw.split("/") if s]
        bad = [s for s in streams if not STREAM_RE.match(s)]
        if bad:
            return web.json_response({"code": -1100, "msg": f"Invalid stream name {bad[0]!r}."}, status=400)
        if self.ws_refuse:
            self.ws_refused += 1
            return web.json_response(ERRORS[503], status=503)
        ws = web.WebSocketResponse(autoping=False, autoclose=False, compress=False, max_msg_size=1 << 20)
        await ws.prepare(request)
        self.connections += 1
        self.conn_times.append(time.monotonic())
        self.live_connections += 1
        no = self.connections
        c = _Conn(no, ws, request, self.fault_every_connection or no == 1)
        if self.ws_fault is not None:
            if self.ws_fault not in WS_FAULTS:
                raise ValueError(f"ws_fault {self.ws_fault!r}: one of {', '.join(WS_FAULTS)}")
            c.fault, c.fault_after = self.ws_fault, self.ws_fault_after
        self._conns[no] = c
        self.frames_by_conn[no] = 0
        loop = asyncio.get_running_loop()
        c.tasks.append(loop.create_task(self._writer(c)))
        c.tasks.append(loop.create_task(self._pinger(c)))
        if self.max_conn_s is not None:
            c.tasks.append(loop.create_task(self._lifetime(c)))
        self._subscribe(c, streams)
        try:
            await self._reader(c)
        finally:
            if c.state != CLOSED:
                self._closed(c, "client")
            for t in c.tasks:
                t.cancel()
        return ws

    def _subscribe(self, c, streams):
        for s in streams:
            c.streams.add(s)
            self._subs.setdefault(s, set()).add(c)
        if c.streams:
            self._started.set()
        self._update_consumers()

    async def _reader(self, c):
        ws = c.ws
        while True:
            if c.state == HALF_OPEN:
                await self._half_open_wait(c)
                return
            msg = await ws.receive()
            if msg.type == WSMsgType.TEXT:
                if c.state != HALF_OPEN:
                    await self._control(c, msg.data)
            elif msg.type == WSMsgType.PING:
                if c.state != HALF_OPEN:
                    await ws.pong(msg.data)
            elif msg.type == WSMsgType.PONG:
                if c.state != HALF_OPEN:
                    self.pongs += 1
                    c.unanswered = None
            elif msg.type == WSMsgType.CLOSE:
                if c.state == HALF_OPEN:
                    await self._half_open_wait(c)
                else:
                    await self._close(c, 1000, "client")
                return
            elif msg.type in (WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR):
                return

    async def _half_open_wait(self, c):
        """A half-open server reads nothing and answers nothing until the peer drops the TCP connection."""
        tr = c.request.transport
        while tr is not None and not tr.is_closing():
            await asyncio.sleep(0.05)

    async def _control(self, c, text):
        try:
            req = json.loads(text)
            rid, method, params = req.get("id"), req.get("method"), req.get("params", [])
        except (ValueError, AttributeError):
            await self._send_json(c, {"error": {"code": 3, "msg": "Invalid JSON: expected value at line 1 column 1"}})
            return
        if method in ("SUBSCRIBE", "UNSUBSCRIBE"):
            bad = [p for p in params if not isinstance(p, str) or not STREAM_RE.match(p)] \
                if isinstance(params, list) else [params]
            if bad:
                await self._send_json(c, {"error": {"code": 2, "msg": f"Invalid request: invalid stream name {bad[0]!r}"},
                                          "id": rid})
                return
            if method == "SUBSCRIBE":
                self._subscribe(c, params)
            else:
                for s in params:
                    c.streams.discard(s)
                    self._subs.get(s, set()).discard(c)
                self._update_consumers()
            await self._send_json(c, {"result": None, "id": rid})
        elif method == "LIST_SUBSCRIPTIONS":
            await self._send_json(c, {"result": sorted(c.streams), "id": rid})
        else:
            await self._send_json(c, {"error": {"code": 2, "msg": f"Invalid request: unknown method {method!r}"},
                                      "id": rid})

    async def _send_json(self, c, obj):
        try:
            await c.ws.send_frame(orjson.dumps(obj), WSMsgType.TEXT)
        except Exception:
            self._closed(c, "send_error")

    async def _writer(self, c):
        """Writes what the market queued for this connection: the frames of a batch go to the socket
        in one write (headers built here), then the writer waits while the socket is paused (TCP
        back-pressure, as aiohttp's own send does). Pings and control replies go through aiohttp's
        writer onto the same transport, unbuffered, so the order on the wire is the order written."""
        cap, q = self.cap, c.queue
        transport, protocol = c.request.transport, c.ws._writer.protocol
        parts = []
        actions = {self.drop_after, self.close_after, self.half_open_after, self.silence_after} - {None} \
            if c.faulted else set()
        if c.fault is not None:
            actions.add(c.fault_after)
        skip, dup = (self.skip_diffs, self.dup_diffs) if c.faulted else (set(), set())
        inject = (self.oversized_at | self.malformed_at) if c.faulted else set()

        def flush():
            if parts:
                transport.write(b"".join(parts))
                parts.clear()

        try:
            while True:
                batch = [await q.get()]
                while len(batch) < WRITE_BATCH and not q.empty():
                    batch.append(q.get_nowait())
                try:
                    for i in batch:
                        if c.state == SILENT:
                            flush()
                            await c.resume.wait()
                        if c.state not in (LIVE, SILENT) or transport.is_closing():
                            flush()
                            return
                        n = cap.diff_no[i]
                        if n and n in skip:
                            continue
                        for _ in range(2 if n and n in dup else 1):
                            k = c.k + 1
                            if k in inject:
                                if k in self.oversized_at:
                                    head = b'{"stream":"oversized@pad","data":{"p":"'
                                    parts.append(_frame(head + b"x" * (OVERSIZED_BYTES - len(head) - 3) + b'"}}'))
                                if k in self.malformed_at:
                                    cut = b'{"stream":"' + cap.stream[i].encode() + b'","data":{"e":"depthUpd'
                                    parts.append(_frame(cut))
                            parts.append(_frame(cap.body[i]))
                            c.k = k
                            self.frames_sent += 1
                            if k in actions:
                                flush()
                                self.frames_by_conn[c.no] = k
                                if await self._after_frame(c, k):
                                    return
                    flush()
                    self.frames_by_conn[c.no] = c.k
                    if protocol._paused:
                        await protocol._drain_helper()
                finally:
                    for _ in batch:
                        q.task_done()
        except asyncio.CancelledError:
            raise
        except Exception:  # the peer is gone
            self._closed(c, "send_error")
        finally:
            self.frames_by_conn[c.no] = c.k
            while not q.empty():
                q.get_nowait()
                q.task_done()

    async def _after_frame(self, c, k):
        """The per-connection faults that fire after the k-th frame; True: stop writing."""
        if c.fault is not None and k == c.fault_after:
            await self._hostile(c)
            return True
        if not c.faulted:
            return False
        if k == self.drop_after:
            self._closed(c, "drop_after")
            self._abort(c)
            return True
        if k == self.close_after:
            await self._close(c, 1001, "close_after")
            return True
        if k == self.half_open_after:
            c.state = HALF_OPEN
            self.closed_reasons.append((c.no, "half_open_after"))
            self._update_consumers()
            return True
        if k == self.silence_after:
            c.state = SILENT
            c.resume.clear()
            self._update_consumers()
            asyncio.get_running_loop().call_later(self.silence_s, self._unsilence, c)
        return False

    async def _hostile(self, c):
        """c's hostile fault (ws_fault), streamed until the client drops it or hostile_budget is spent."""
        fault = c.fault
        if fault == "close":
            await self._close(c, 1000, "close", self.venue_text.encode()[:123])
            return
        c.state = HOSTILE
        self._update_consumers()
        tr, protocol = c.request.transport, c.ws._writer.protocol
        if fault in ("big_pings", "ping_flood"):
            tr.pause_reading()  # (the client's pongs go unread)
        if fault == "fragments":
            chunks = [_raw_frame(0x1, b'{"stream":"btcusdt@trade","data":{"p":"'), _raw_frame(0x0, b"x" * (64 << 10))]
        elif fault == "big_pings":
            chunks = [_raw_frame(0x9, b"p" * (1 << 20))]
        elif fault == "ping_flood":
            chunks = [_raw_frame(0x9, b"p" * 125) * 512]
        else:  # trickle: a byte at a time of a frame that never ends
            whole = _frame(b'{"stream":"btcusdt@trade","data":{"p":"' + b"1" * 1000)
            chunks = [whole[i:i + 1] for i in range(len(whole))]
        sent, i = 0, 0
        try:
            while c.state == HOSTILE and not tr.is_closing():
                b = chunks[i % len(chunks)] if fault == "trickle" else chunks[min(i, len(chunks) - 1)]
                if sent + len(b) > self.hostile_budget:
                    self.hostile_spent += 1
                    return
                tr.write(b)
                sent += len(b)
                self.hostile_sent += len(b)
                i += 1
                if fault == "trickle":
                    await asyncio.sleep(self.trickle_s)
                elif protocol._paused:
                    await protocol._drain_helper()
                else:
                    await asyncio.sleep(0)
        except (ConnectionError, RuntimeError):  # the client dropped it
            pass

    def _unsilence(self, c):
        if c.state == SILENT:
            c.state = LIVE
            c.resume.set()
            self._update_consumers()

    def _abort(self, c):
        tr = c.request.transport
        if tr is not None:
            tr.abort()

    async def _close(self, c, code, reason, message=b""):
        if c.state == CLOSED:
            return
        self._closed(c, reason)
        try:
            await asyncio.wait_for(c.ws.close(code=code, message=message), 2.0)
        except Exception:
            self._abort(c)

    def _closed(self, c, reason):
        if c.state == CLOSED:
            return
        c.state = CLOSED
        c.resume.set()
        self.live_connections -= 1
        self.closed_reasons.append((c.no, reason))
        for s in c.streams:
            self._subs.get(s, set()).discard(c)
        self._update_consumers()

    async def _pinger(self, c):
        loop = asyncio.get_running_loop()
        next_ping = loop.time() + self.ping_s
        while c.state in (LIVE, SILENT):
            deadline = c.unanswered + self.pong_timeout_s if c.unanswered is not None else float("inf")
            await asyncio.sleep(max(0.0, min(next_ping, deadline) - loop.time()))
            if c.state not in (LIVE, SILENT):
                return
            now = loop.time()
            if c.unanswered is not None and now >= c.unanswered + self.pong_timeout_s:
                await self._close(c, 1008, "pong_timeout")
                return
            if now >= next_ping:
                next_ping += self.ping_s
                try:
                    await c.ws.ping(str(int(time.time() * 1000)).encode())
                except Exception:
                    self._closed(c, "send_error")
                    return
                self.pings_sent += 1
                if c.unanswered is None:
                    c.unanswered = now

    async def _lifetime(self, c):
        await asyncio.sleep(self.max_conn_s)
        if c.state in (LIVE, SILENT):
            await self._close(c, 1001, "max_conn_s")

    # ---- REST
    def _rest(self, handler, weight, name=None):
        async def wrapped(request):
            self.rest_times.append((time.monotonic(), request.path))
            hostile = self.rest_fault.get(name)
            if hostile is not None and hostile != "stale":
                if hostile not in REST_FAULTS:
                    raise ValueError(f"rest_fault {hostile!r}: one of {', '.join(REST_FAULTS)}")
                resp = await self._hostile_rest(request, hostile)
                self.rest_calls.append((request.path, request.query_string, resp.status))
                return resp
            status_fault = self.rest_status.pop(0) if self.rest_status else None
            if self.rest_delay_s:
                await asyncio.sleep(self.rest_delay_s)
            if status_fault is not None:
                body = dict(ERRORS.get(status_fault, UNKNOWN_ERROR))
                body["msg"] = body["msg"].replace("{until}", str(int(time.time() * 1000) + int(self.retry_after * 1000)))
                resp = web.json_response(body, status=status_fault, headers={"Retry-After": str(self.retry_after)})
                w = weight if weight is not None else 1
            else:
                resp, w = await handler(request)
            resp.headers["X-MBX-USED-WEIGHT-1M"] = str(self._use_weight(w))
            self.rest_calls.append((request.path, request.query_string, resp.status))
            return resp
        return wrapped

    async def _hostile_rest(self, request, fault):
        if fault.startswith("retry_after"):
            return web.json_response(ERRORS[429], status=429,
                                     headers={"Retry-After": "0" if fault == "retry_after_0" else "1e23"})
        if fault == "refused":
            return web.json_response({"code": -1121, "msg": self.venue_text}, status=400)
        if fault == "never":
            await self._stopping.wait()
            return web.Response(status=503)
        if fault == "huge":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            sent, pad = 0, b" " * (64 << 10)
            try:
                await resp.write(b'{"symbols":[')
                while sent + len(pad) <= self.hostile_budget:
                    await resp.write(pad)
                    sent += len(pad)
                    self.hostile_sent += len(pad)
                self.hostile_spent += 1
                await resp.write_eof()
            except (ConnectionError, RuntimeError):  # the client dropped it
                pass
            return resp
        body = {"garbage": b"<html><body>502 Bad Gateway</body></html>", "bad_json": b'{"lastUpdateId":12,"bids":[["6',
                "list": b'[{"symbol":"BTCUSDT"}]', "not_objects": b'{"symbols":[1,"BTCUSDT",null]}',
                "nested": b'{"symbols":' + b"[" * 100_000 + b"]" * 100_000 + b"}"}[fault]
        return web.Response(body=body, content_type="text/html" if fault == "garbage" else "application/json")

    def _use_weight(self, w):
        minute = int(time.time() // 60)
        if self._weight[0] != minute:
            self._weight = [minute, 0]
        self._weight[1] += w
        return self._weight[1]

    def _depth_weight(self, limit):
        if self.market == "spot":
            return 5 if limit <= 100 else 25 if limit <= 500 else 50 if limit <= 1000 else 250
        return 2 if limit <= 50 else 5 if limit <= 100 else 10 if limit <= 500 else 20

    @staticmethod
    def _err(body, status=400):
        return web.json_response(body, status=status)

    async def _depth(self, request):
        q = request.query
        sym = q.get("symbol")
        if not sym:
            return self._err(NO_SYMBOL), 1
        if sym not in self.cap.symbols:
            return self._err(INVALID_SYMBOL), 1
        limit_s = q.get("limit", str(self.depth_default))
        if not limit_s.isdigit() or int(limit_s) < 1:
            return self._err(BAD_LIMIT), 1
        limit = min(int(limit_s), self.depth_max)
        weight = self._depth_weight(limit)
        recorded = self.cap.snapshot_at is not None and not self._snap_reached.is_set()
        if recorded:  # before the capture's snapshot: wait for it and answer it as recorded
            self.rest_waiting += 1
            try:
                await self._snap_reached.wait()
            finally:
                self.rest_waiting -= 1
            body = self.cap.body[self.cap.snapshot_at]
            snap = orjson.loads(body)
            if limit < max(len(snap["bids"]), len(snap["asks"])) or self._stale_now():
                snap["bids"], snap["asks"] = snap["bids"][:limit], snap["asks"][:limit]
                body = None
        else:
            self._book_catch_up()
            bids, asks = self.book.top(limit)
            snap = {"lastUpdateId": self.book.last_id}
            if self.market != "spot":
                now = int(time.time() * 1000)
                snap.update(E=self.book.E or now, T=self.book.T or now)
            snap.update(bids=bids, asks=asks)
            body = None
        if self._stale_now():  # (older than the diffs it should bridge: spot's ids move ~10 an event,
            # futures' thousands, so a hostile venue's "stale" goes back 10^7)
            snap["lastUpdateId"] -= 10**7 if self.rest_fault.get("depth") == "stale" else 1000
        self._depth_replies += 1
        if body is None:
            body = orjson.dumps(snap)
        return web.Response(body=body, content_type="application/json"), weight

    def _book_catch_up(self):
        """Apply what the market has played since the last depth request (parsing diffs is the costly
        part of the replay, so it is done only when a depth reply needs them)."""
        cap, book = self.cap, self.book
        for j in range(self._book_at, self.position):
            if j == cap.snapshot_at:
                book.reset(orjson.loads(cap.body[j]))
                for i in range(j):  # diffs received before the snapshot but newer than it (u > lastUpdateId)
                    if cap.diff_no[i]:
                        book.apply(orjson.loads(cap.body[i])["data"])
            elif cap.diff_no[j] and (book.last_id is not None or cap.snapshot_at is None):
                book.apply(orjson.loads(cap.body[j])["data"])
        self._book_at = max(self._book_at, self.position)

    def _stale_now(self):
        return (self.stale_snapshot and self._depth_replies == 0) or self.rest_fault.get("depth") == "stale"

    def _symbol_info(self, sym):
        info = SYMBOLS.get((self.market, sym))
        if info is None:  # a symbol the table lacks: sizes as the capture's strings show them
            info = dict(base=sym[:3], quote=sym[3:].split("_")[0], tick="0.01", min_px="0.01", max_px="1000000",
                        step="0.001", min_qty="0.001", max_qty="1000", px_prec=2, qty_prec=3, contract_size=1)
        filters = [
            {"filterType": "PRICE_FILTER", "minPrice": info["min_px"], "maxPrice": info["max_px"],
             "tickSize": info["tick"]},
            {"filterType": "LOT_SIZE", "minQty": info["min_qty"], "maxQty": info["max_qty"], "stepSize": info["step"]},
        ]
        if self.market == "spot":
            filters.append({"filterType": "NOTIONAL", "minNotional": "5.00000000", "applyMinToMarket": True,
                            "maxNotional": "9000000.00000000", "applyMaxToMarket": False, "avgPriceMins": 5})
            return {"symbol": sym, "status": "TRADING", "baseAsset": info["base"], "baseAssetPrecision": 8,
                    "quoteAsset": info["quote"], "quotePrecision": 8, "quoteAssetPrecision": 8,
                    "orderTypes": ["LIMIT", "LIMIT_MAKER", "MARKET", "STOP_LOSS_LIMIT", "TAKE_PROFIT_LIMIT"],
                    "isSpotTradingAllowed": True, "filters": filters, "permissions": [], "permissionSets": [["SPOT"]]}
        filters.append({"filterType": "MARKET_LOT_SIZE", "minQty": info["min_qty"], "maxQty": info["max_qty"],
                        "stepSize": info["step"]})
        d = {"symbol": sym, "pair": sym.split("_")[0], "contractType": "PERPETUAL", "status": "TRADING",
             "baseAsset": info["base"], "quoteAsset": info["quote"],
             "marginAsset": info["quote"] if self.market == "usdm" else info["base"],
             "pricePrecision": info["px_prec"], "quantityPrecision": info["qty_prec"],
             "baseAssetPrecision": 8, "quotePrecision": 8, "filters": filters}
        if self.market == "coinm":
            d.update(contractStatus="TRADING", contractSize=info["contract_size"])
        return d

    async def _exchange_info(self, request):
        q = request.query
        if "symbol" in q:
            wanted = [q["symbol"]]
        elif "symbols" in q:
            try:
                wanted = json.loads(q["symbols"])
                if not isinstance(wanted, list) or not all(isinstance(s, str) for s in wanted):
                    raise ValueError
            except ValueError:
                return self._err(BAD_SYMBOLS), self.info_weight
        else:
            wanted = list(self.cap.symbols)
        if any(s not in self.cap.symbols for s in wanted):
            return self._err(INVALID_SYMBOL), self.info_weight
        now = int(time.time() * 1000)
        body = {"timezone": "UTC", "serverTime": now,
                "rateLimits": [{"rateLimitType": "REQUEST_WEIGHT", "interval": "MINUTE", "intervalNum": 1,
                                "limit": 6000 if self.market == "spot" else 2400}],
                "exchangeFilters": [], "symbols": [self._symbol_info(s) for s in wanted]}
        return web.json_response(body), self.info_weight

    async def _ping(self, request):
        return web.json_response({}), 1

    async def _time(self, request):
        return web.json_response({"serverTime": int(time.time() * 1000)}), 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.helpers.fake_binance",
                                 description="Serve a Binance capture as a local fake venue (websocket + REST).")
    ap.add_argument("capture")
    ap.add_argument("--market", default="spot", choices=sorted(MARKETS))
    ap.add_argument("--speed", type=float, default=0.0, help="0: flat out (default); 1: capture pace")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ping-s", type=float, default=None)
    ap.add_argument("--max-lines", type=int, default=None)
    a = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        fb = FakeBinance(a.capture, market=a.market, speed=a.speed, host=a.host, port=a.port,
                         ping_s=a.ping_s, max_lines=a.max_lines)
        fb.start()
    except (CaptureError, ValueError, OSError) as e:
        print(f"fake_binance: {e}", file=sys.stderr)
        return 2
    print(f"ws={fb.ws_url} rest={fb.rest_url}", flush=True)
    try:
        while not stop.wait(0.2):
            pass
    finally:
        fb.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The venue's server: its options, counters and lifecycle (an aiohttp server on its own thread
and event loop). The market clock (market.py), the websocket (ws.py, ws_writer.py, ws_hostile.py)
and REST (rest.py, rest_faults.py, exchange_info.py) act on it."""
import asyncio
import threading

from aiohttp import web

from .book import Book
from .capture import Capture
from .exchange_info import reply as exchange_info
from .market import play
from .rest import depth, ping, route, server_time
from .tables import CLOSED, HALF_OPEN, HOSTILE, LIVE, MARKETS, SILENT
from .uri import live_uri
from .ws import handle


class BinanceVenue:
    """See the package's docstring for the options (faults) and the counters. market "auto": the
    capture's (Capture.market)."""

    def __init__(self, capture_path, market="spot", speed=0.0, *, host="127.0.0.1", port=0,
                 ping_s=None, pong_timeout_s=60.0, max_lines=None,
                 drop_after=None, close_after=None, silence_after=None, silence_s=1.0,
                 half_open_after=None, skip_diffs=(), dup_diffs=(), malformed_at=(), oversized_at=(),
                 stale_snapshot=False, rest_delay_s=0.0, rest_status=(), retry_after=1,
                 max_conn_s=None, fault_every_connection=False, ws_fault=None, ws_fault_after=1,
                 rest_fault=None, trickle_s=0.5, hostile_budget=256 << 20, venue_text="Invalid symbol."):
        if market not in MARKETS and market != "auto":
            raise ValueError(f"market {market!r}: one of {', '.join(MARKETS)} or auto")
        if speed < 0:
            raise ValueError(f"speed {speed}: must be >= 0")
        self.cap = Capture(capture_path, max_lines)
        market = self.cap.market() if market == "auto" else market
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
        self.ws_url = self.rest_url = self.uri = None
        self.depth_replies = 0
        self.book_at = 0  # the book has applied capture lines [0, book_at)
        self.weight = [0, 0]  # [minute, used weight]
        self._loop = self._thread = None

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

        self._thread = threading.Thread(target=run, name="binance-venue", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
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
        await asyncio.gather(*(self.close_conn(c, 1001, "kick") for c in list(self.conns.values())
                               if c.state in (LIVE, SILENT)))

    async def _serve_start(self):
        self.conns = {}
        self.stopping = asyncio.Event()  # (what waits for ever waits for this)
        self.subs = {}  # stream -> set of connections
        self.started = asyncio.Event()
        self.snap_reached = asyncio.Event()
        self.consumers = asyncio.Event()  # some connection can take data
        self.book = Book()
        if self.cap.snapshot_at is None:
            self.snap_reached.set()  # no snapshot recorded: the book is built from the diffs alone
        app = web.Application()

        async def stream(request):
            return await handle(self, request)
        app.router.add_get("/stream", stream)
        p = self.prefix
        app.router.add_get(f"{p}/depth", route(self, depth, None, "depth"))
        app.router.add_get(f"{p}/exchangeInfo", route(self, exchange_info, self.info_weight,
                                                           "exchangeInfo"))
        app.router.add_get(f"{p}/ping", route(self, ping, 1))
        app.router.add_get(f"{p}/time", route(self, server_time, 1))
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.ws_url = f"ws://{self.host}:{self.port}"
        self.rest_url = f"http://{self.host}:{self.port}"
        self.uri = live_uri(self.market, self.cap, self.ws_url, self.rest_url)
        self._market_task = asyncio.get_running_loop().create_task(play(self))

    async def _serve_stop(self):
        self.stopping.set()
        self._market_task.cancel()
        for c in list(self.conns.values()):
            if c.state in (HALF_OPEN, HOSTILE):
                self.abort(c)
        await asyncio.gather(*(self.close_conn(c, 1001, "server_stop") for c in list(self.conns.values())))
        await self._runner.cleanup()
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]  # (requests still waiting)
        for t in left:
            t.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    # ---- the connections' states, which the market clock follows
    def update_consumers(self):
        if any(c.state == LIVE and c.streams for c in self.conns.values()):
            self.consumers.set()
        else:
            self.consumers.clear()

    def abort(self, c):
        tr = c.request.transport
        if tr is not None:
            tr.abort()

    async def close_conn(self, c, code, reason, message=b""):
        if c.state == CLOSED:
            return
        self.mark_closed(c, reason)
        try:
            await asyncio.wait_for(c.ws.close(code=code, message=message), 2.0)
        except Exception:
            self.abort(c)

    def mark_closed(self, c, reason):
        if c.state == CLOSED:
            return
        c.state = CLOSED
        c.resume.set()
        self.live_connections -= 1
        self.closed_reasons.append((c.no, reason))
        for s in c.streams:
            self.subs.get(s, set()).discard(c)
        self.update_consumers()

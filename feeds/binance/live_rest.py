"""binance-live's REST client: GETs on a thread and event loop of their own, within the venue's
request-weight budget, waiting out its bans, each reply read up to a size cap.

The budget (`Budget`, no I/O): the weight the venue says we used this minute (its
X-MBX-USED-WEIGHT-1M header) is kept under 90% of the market's limit; a 429 (too many requests) or
418 (banned) stops every request for the Retry-After it gives, never less than the REST backoff
(doubling with each ban in a row, from REST_FLOOR_S up), never more than MAX_BAN_S.

Why a thread: a snapshot's request and reply then progress while the source's thread scans (its
numba calls release the GIL), not a step per pass of its loop between socket reads. Flat out
(bench/live.py), a snapshot asked at connect took 40-130 ms that way in half the sessions, every
diff meanwhile held and parsed twice; on a busy market a resync would wait the same."""
import asyncio
import math
import threading
import time

from feeds.binance import live_protocol as P
from feeds.binance.live_waits import backoff, new_loop, why
from feeds.core import uri as U
from feeds.core.venue_text import escape

REST_FLOOR_S = 0.5  # the REST backoff's least base, whatever backoff_s or the venue says (a flood ends in a ban)
MAX_BAN_S = 3 * 86400.0  # the longest Retry-After honoured: the venue's longest IP ban


class RestError(Exception):
    """A REST reply that is not the venue's (over its size cap)."""


class Budget:
    """The request-weight budget a minute and the bans, shared by every request. `base`, `cap`: the
    REST backoff's (from the source's backoff_s, backoff_max_s, never under REST_FLOOR_S)."""

    def __init__(self, limit, backoff_s, backoff_max_s):
        self.limit = limit  # the market's weight a minute
        self.base = max(backoff_s, REST_FLOOR_S)
        self.cap = max(backoff_max_s, self.base)
        self.ban_until = 0.0  # no request before this (monotonic s): a 429/418's Retry-After
        self.weight = (0, 0)  # (minute, weight used in it as the venue last said)
        self.bans = 0  # 429/418 in a row

    def wait_s(self, weight, now, wall):
        """How long a request of `weight` waits at monotonic `now`, wall clock `wall` (0: none): the
        ban's rest, or to the next minute when it would spend over 90% of this one's weight."""
        if now < self.ban_until:
            return self.ban_until - now
        minute, used = self.weight
        if minute == int(wall // 60) and used + weight > 0.9 * self.limit:
            return 60 - wall % 60 + 0.05
        return 0.0

    def heard(self, status, headers, now, wall):
        """A reply's status and headers, at `now` / `wall`: the weight used as it says; for a 429 or
        418 the ban's length (every request waits it out), else None."""
        w = headers.get("X-MBX-USED-WEIGHT-1M", "")
        if w.isdigit():
            self.weight = (int(wall // 60), int(w))
        if status not in (429, 418):
            self.bans = 0
            return None
        self.bans += 1
        try:
            said = float(headers.get("Retry-After", ""))
        except ValueError:
            said = math.nan
        if not said >= 0:  # (none, nan, negative: the venue's usual)
            said = 60.0 if status == 429 else 120.0
        wait = min(MAX_BAN_S, max(said, backoff(self.bans, self.base, self.cap)))
        self.ban_until = now + wait
        return wait


class Rest:
    """GETs to `base` + path on the REST thread (`start` makes it), within `budget`; every wait ends
    at waits.stop(). `log`, `say`: the rate-limited venue lines (feeds/core/venue_text.py Limit)."""

    def __init__(self, base, api, budget, waits, log, say):
        self.base, self.api, self.budget, self.waits, self.log, self.say = base, api, budget, waits, log, say
        self.counts = {"rest_banned": 0}
        self.loop = self.thread = self.http = None
        self.errors = (OSError, RestError)  # (a request that failed, one kind; aiohttp's added at start)

    async def start(self):
        """(The source's loop) the REST thread, its loop and HTTP session."""
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="binance-rest", daemon=True)
        self.thread.start()
        await self.call(self._open_http())

    async def _open_http(self):
        import aiohttp
        self.errors = (OSError, RestError, aiohttp.ClientError)
        # (no compression: a reply's size is its size on the wire, so its cap holds)
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), auto_decompress=False,
                                          headers={"Accept-Encoding": "identity"})

    def run(self, coro):
        """coro run on the REST thread's loop: its concurrent future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def call(self, coro):
        """coro run on the REST thread's loop, awaited here (until stop(): Stopped)."""
        return await self.waits.stoppable(asyncio.wrap_future(self.run(coro)))

    async def get(self, url, weight, cap):
        """(The REST thread) one GET within the budget: (status, body, headers), the body at most cap
        bytes (RestError past it). Waits out a ban, then asks again; Stopped at stop()."""
        b = self.budget
        while True:
            wait = b.wait_s(weight, time.monotonic(), time.time())
            if wait > 0:
                await self.waits.sleep(wait)
                continue
            status, body, headers = await self.waits.stoppable(self._request(url, cap))
            ban = b.heard(status, headers, time.monotonic(), time.time())
            if ban is None:
                return status, body, headers
            self.counts["rest_banned"] += 1
            if self.log.allow():
                self.say(f"REST {status} ({'banned' if status == 418 else 'too many requests'}); "
                         f"no requests for {round(ban, 2):g} s")

    async def check_symbols(self, u, market, symbols):
        """(The source's loop) exchangeInfo: every symbol must exist (FeedError, one line, otherwise);
        those not trading now."""
        url, weight, cap = P.info_request(self.base, self.api, market, symbols)
        try:
            status, body, _ = await self.call(self.get(url, weight, cap))
        except RestError as e:
            raise U.FeedError(f"{u}: exchangeInfo from {self.base}: {e}") from None
        except self.errors as e:
            raise U.FeedError(f"{u}: cannot reach {self.base}: {escape(why(e))}") from None
        return P.read_info(u, market, self.base, symbols, status, body)

    async def _request(self, url, cap):
        """GET url: (status, body, headers), reading no more than cap bytes of body."""
        async with self.http.get(url) as r:
            n = r.content_length
            if n is not None and n > cap:
                raise RestError(f"a reply of {n} bytes (over {cap})")
            body = bytearray()
            async for chunk in r.content.iter_chunked(1 << 16):
                body += chunk
                if len(body) > cap:
                    raise RestError(f"a reply over {cap} bytes")
            return r.status, bytes(body), r.headers

    async def close(self):
        """(The source's loop) the HTTP session closed (2 s at most), the thread ended."""
        rest = self.loop
        if rest is None:
            return
        if self.http is not None:
            try:
                await asyncio.wait_for(asyncio.wrap_future(self.run(self.http.close())), 2.0)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - closing: what is left goes with the loop
                pass
        rest.call_soon_threadsafe(rest.stop)
        self.thread.join()
        rest.close()

"""binance-live's depth snapshots: a REST snapshot for each book that needs one (feeds/binance/
live_protocol.py `wanted`), one request at a time per symbol, asked until a usable reply comes
(backing off), and its line handed to the source's thread at the point its reply arrived, unless
a gap came since it was asked (the next connection asks its own).

The pacing: a symbol's first snapshot since its book was synced (or in a while) is asked at once,
then with the REST backoff, counted across requests: a snapshot the book could not use (not JSON,
older than the diffs, cut by a gap) is asked again no sooner than a failed one."""
import time

from feeds.binance import live_protocol as P
from feeds.binance.live_waits import Stopped, backoff


class Snapshots:
    """The snapshots of `symbols`' books in `scanner`, asked of `rest` (feeds/binance/live_rest.py).
    `place(line)` (the source's thread, on `loop`) puts a reply's line where the lines are read."""

    def __init__(self, scanner, symbols, rest, market, limit, offset, waits, place):
        self.scanner, self.symbols, self.rest, self.market, self.limit = scanner, symbols, rest, market, limit
        self.offset, self.waits, self.place = offset, waits, place
        self.loop = None  # the source's event loop (set when it runs)
        self.counts = dict.fromkeys(("snapshots_asked", "rest_errors"), 0)
        self.asking = {}  # symbol -> its request (a future of the REST thread's task)
        self.gen = 0  # gaps so far: a snapshot asked before a gap is not placed after it
        self.refresh = False  # ask every symbol's snapshot again (a new raw piece)
        self.tries = {}  # symbol -> (snapshots asked in a row, monotonic s of the last): their backoff

    def want(self):
        """(The source's thread) ask a snapshot for each symbol whose book needs one and has none on
        the way: at connect, after a gap, on a refresh."""
        refresh, self.refresh = self.refresh, False
        if not refresh and not P.needs_any(self.scanner, len(self.symbols)):  # (every step: the common case)
            return
        P.compact_held(self.scanner)
        for name in P.wanted(self.scanner, self.symbols, refresh):
            if name not in self.asking:
                self.asking[name] = self.rest.run(self._ask(name, self.gen))

    def gap(self):
        """The connection was lost: the requests on the way are void (the next connection asks)."""
        for t in self.asking.values():
            t.cancel()
        self.asking.clear()
        self.gen += 1

    def close(self):
        for t in self.asking.values():
            t.cancel()

    def forget_synced(self):
        """A symbol whose book is synced (the last snapshot was one it could use) starts its next
        snapshot's backoff afresh: the backoff is for snapshots that fail, not each gap of a book."""
        for name in P.synced(self.scanner, list(self.tries)):
            if name not in self.asking:
                self.tries.pop(name, None)

    async def _ask(self, symbol, gen):
        """(The REST thread) symbol's depth snapshot, asked until it comes (backing off), then handed
        to the source's thread as a capture line."""
        url, weight, cap = P.depth_request(self.rest.base, self.rest.api, self.market, symbol, self.limit)
        try:
            while not self.waits.stopped:
                await self._turn(symbol)
                try:
                    status, body, _ = await self.rest.get(url, weight, cap)
                except self.rest.errors:
                    status, body = 0, b""
                line = P.snapshot_line(time.monotonic_ns() + self.offset, symbol, status, body)
                if line is not None:
                    self.counts["snapshots_asked"] += 1
                    self.loop.call_soon_threadsafe(self._placed, gen, line)
                    return
                self.counts["rest_errors"] += 1
        except Stopped:
            pass
        finally:
            if not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._asked, symbol, gen)

    async def _turn(self, symbol):
        """(The REST thread) wait for symbol's next request (the module's pacing)."""
        base, cap = self.rest.budget.base, self.rest.budget.cap
        n, last = self.tries.get(symbol, (0, 0.0))
        if n and time.monotonic() - last > 2 * cap:  # (the last was long ago: a new start)
            n = 0
        if n:
            await self.waits.sleep(last + backoff(n, base, cap) - time.monotonic())
        self.tries[symbol] = (n + 1, time.monotonic())

    def _placed(self, gen, line):
        if gen == self.gen and not self.waits.stopped:
            self.place(line)

    def _asked(self, symbol, gen):
        if gen == self.gen:
            self.asking.pop(symbol, None)

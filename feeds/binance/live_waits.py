"""binance-live's waits: how long a retry waits (`backoff`), and that every wait ends at stop().

A backoff, a ban, a connect or a REST reply, on either of the source's event loops (its own and the
REST thread's), ends the moment stop() is called (a signal handler may call it), whatever the
venue's Retry-After or a reply that never comes: the wait raises Stopped and the caller unwinds."""
import asyncio
import random


class Stopped(Exception):
    """stop() came while we waited (a backoff, a ban, a connect, a REST reply): unwind and close."""


def backoff(attempt, base, cap):
    """The wait before retry `attempt` (1, 2, ...): base doubled each attempt up to cap, drawn from
    its upper half (a floor of half, and jitter that keeps many clients apart)."""
    d = min(cap, base * 2.0 ** min(attempt - 1, 60))
    return random.uniform(d / 2, d)


def why(e):
    """An exception as words (a timeout's str() is empty)."""
    return str(e) or ("timed out" if isinstance(e, TimeoutError) else type(e).__name__)


def new_loop():
    try:
        import uvloop
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class Waits:
    """The stop shared by every wait of one source, on any of its event loops."""

    def __init__(self):
        self.stopped = False
        self._halts = {}  # event loop -> its asyncio.Event set by stop(): every wait ends on it

    def stop(self):
        """Stop (a signal handler may call it): every wait in every loop ends now."""
        self.stopped = True
        for loop, ev in list(self._halts.items()):
            try:
                loop.call_soon_threadsafe(ev.set)
            except RuntimeError:  # (that loop is closed)
                pass

    def _halt(self):
        """The running loop's stop event (made on first use; set at once if we are stopped)."""
        loop = asyncio.get_running_loop()
        ev = self._halts.get(loop)
        if ev is None:
            self._halts[loop] = ev = asyncio.Event()
            if self.stopped:  # (stop() came before the entry: it did not see it)
                ev.set()
        return ev

    async def stoppable(self, aw):
        """aw's result, unless stop() comes first: then aw is cancelled and Stopped raised."""
        if self.stopped:
            if asyncio.iscoroutine(aw):
                aw.close()
            raise Stopped
        task = asyncio.ensure_future(aw)
        halt = asyncio.ensure_future(self._halt().wait())
        try:
            await asyncio.wait((task, halt), return_when=asyncio.FIRST_COMPLETED)
        finally:
            halt.cancel()
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            return task.result()
        await asyncio.wait((task,), timeout=1.0)  # (its cancellation runs: a socket closed, a request let go)
        raise Stopped

    async def sleep(self, s):
        """asyncio.sleep(s) that ends at stop() (Stopped)."""
        await self.stoppable(asyncio.sleep(max(0.0, s)))

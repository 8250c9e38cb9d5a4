"""Say what numba is compiling, while it compiles.

A cold cache (the first use of a parser or a strategy, or the first run after an upgrade, which
starts a new cache: engine/__init__.py) makes a command wait tens of seconds before its first
tick, and a progress line that reads `4,055 ticks (84/s)` explains nothing. numba broadcasts a
"numba:compile" event when it compiles a function instead of loading it from its on-disk cache,
before the work starts (numba.core.event, a documented API). `shown()` turns each outermost
compile that lasts (not the many short ones) into a line on stderr naming what it is, and its
end into a second with the time it took; and a wait for another process compiling the same
function (engine/numba_lock.py) into a line saying so. The engine's commands show them unless --quiet.
"""
import sys
import threading
import time
from contextlib import contextmanager

from numba.core import event

from .components import component_of

HOST_PREFIX = "engine_host_"  # engine/strategy_build.py's generated modules: engine_host_<name>_<key>


def component(dispatcher):
    """(prefix, what) for a numba dispatcher (engine/components.py names them), or None for numba's
    own helpers."""
    mod = getattr(dispatcher.py_func, "__module__", "") or ""
    if mod.startswith(HOST_PREFIX):
        return "strategy", f"strategy {mod[len(HOST_PREFIX):].rpartition('_')[0]} into the engine's loops"
    named = component_of(mod)
    if named is not None:
        return named
    if mod.partition(".")[0] == "numba":
        return None
    return "numba", f"{mod}.{dispatcher.py_func.__qualname__}"


def _cached(dispatcher):
    return type(getattr(dispatcher, "_cache", None)).__name__ not in ("NullCache", "NoneType")


class _Compile:
    """The outermost compile in progress."""

    def __init__(self, prefix, what, note):
        self.prefix, self.what, self.note = prefix, what, note
        self.t0 = time.monotonic()
        self.announced = False
        self.timer = None


class Notices(event.Listener):
    """The listener. An outermost compile still running after `after` seconds (0: at once) is
    announced (from a timer thread: numba holds no lock that printing needs), and its end with
    the time it took; the many short ones (a second or less each) stay quiet."""

    def __init__(self, out=None, after=1.0):
        self.out, self.after = out, after
        self.depth = 0
        self.current = None  # the outermost compile (numba compiles one at a time: its compiler lock)
        self.lock = threading.Lock()

    def _print(self, line):
        print(line, file=self.out or sys.stderr, flush=True)

    def on_start(self, ev):
        self.depth += 1
        if self.depth != 1:
            return  # a callee compiled as part of the outermost function
        d = ev.data["dispatcher"]
        c = component(d)
        if c is None:
            return
        cur = _Compile(*c, "first use; cached afterwards" if _cached(d) else "not cached")
        with self.lock:
            self.current = cur
        if not self.after:
            self._announce(cur)
            return
        cur.timer = threading.Timer(self.after, self._announce, (cur,))
        cur.timer.daemon = True
        cur.timer.start()

    def _announce(self, cur):
        with self.lock:
            if self.current is cur:
                cur.announced = True
                self._print(f"[{cur.prefix}] compiling {cur.what} ({cur.note})")

    def waiting(self, dispatcher):
        """engine/numba_lock.py: another process is compiling what we need; we load it when it is done."""
        c = component(dispatcher)
        if c is not None:
            self._print(f"[{c[0]}] waiting for another process compiling {c[1]} (first use; loaded from the cache "
                        "when it is done)")

    def on_end(self, ev):
        self.depth -= 1
        if self.depth:
            return
        with self.lock:
            cur, self.current = self.current, None
        if cur is None:
            return
        if cur.timer is not None:
            cur.timer.cancel()
        # a failure is the command's to report (numba 0.68's Event.is_failed reads its flag inverted)
        if cur.announced and getattr(ev, "_exc_details", None) is None:
            self._print(f"[{cur.prefix}] compiled {cur.what} in {time.monotonic() - cur.t0:.1f} s")


@contextmanager
def shown(enabled=True, out=None, after=1.0):
    """Within the block, every component numba compiles (rather than loads from its cache) is
    announced on stderr (or `out`). A no-op when not enabled (--quiet)."""
    if not enabled:
        yield None
        return
    from . import numba_lock
    notices = Notices(out, after)
    event.register("numba:compile", notices)
    numba_lock.on_wait = notices.waiting
    try:
        yield notices
    finally:
        numba_lock.on_wait = None
        event.unregister("numba:compile", notices)

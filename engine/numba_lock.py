"""One process compiles a cached numba function; the others wait for it and load what it saved
(for the engine's own functions: engine/jit.py takes the lock around each of their compiles).

numba looks in its on-disk cache, and on a miss compiles; it locks nothing across processes. Two
processes that need the same cold function compile it both, side by side: `engine run --feed A
--feed B` with two Binance feeds started the 65 s scanner compile twice at once on a fresh cache
(and each took longer, sharing the cores), as did two test workers. Here `Dispatcher.compile`,
for a function cached on disk, takes an exclusive flock on a file beside the function's cache
index first: the second process blocks until the first has saved its result, then numba's own
lookup finds it in the cache and loads it.

Deadlock-free: the file lock is taken inside numba's compiler lock (one thread of a process
compiles at a time, so a process holds only the locks of the call chain it is compiling, caller
before callee, and two processes could wait on each other only for functions that call each
other). A wait is bounded (WAIT_S): past it the function is compiled as before, a duplicate
compile being the old behaviour, never a failure. Lock files live in the cache directory, which
is the user's own (engine/__init__.py); one that cannot be opened is no lock, not an error.
"""
import fcntl
import os
import time

WAIT_S = 900.0  # the longest compile measured (the Binance scanner, cold, on a loaded 2-core VM) is ~120 s
SAY_AFTER_S = 1.0  # a wait longer than this is said (on_wait), so a command does not sit silent for a minute
on_wait = None  # on_wait(dispatcher): set by engine/compile_notice.py shown() while a command shows compiles


def lock_path(dispatcher):
    """The lock file for a dispatcher's on-disk cache, or None (not cached on disk)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return None if index is None else index + ".lock"


def _acquire(path, wait_s, waiting=None):
    """An fd holding an exclusive flock on path, or None (could not open it, or waited wait_s);
    waiting() is called once if the lock is not ours within SAY_AFTER_S."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    t0 = time.monotonic()
    end, said = t0 + wait_s, waiting is None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            now = time.monotonic()
            if now >= end:
                os.close(fd)
                return None
            if not said and now - t0 >= SAY_AFTER_S:
                said = True
                waiting()
            time.sleep(0.05)
        except OSError:
            os.close(fd)
            return None


def acquire_for(dispatcher):
    """The cross-process lock of a dispatcher's cached function, before it compiles (engine/jit.py
    calls it inside numba's compiler lock): an fd to `release`, or None (not cached on disk, no
    lock file, or waited WAIT_S: compiled as numba would, a duplicate compile, never a failure)."""
    path = lock_path(dispatcher)
    if path is None:
        return None
    say = on_wait
    return _acquire(path, WAIT_S, None if say is None else (lambda: say(dispatcher)))


def release(fd):
    if fd is not None:
        os.close(fd)  # (closing the only fd releases the flock)

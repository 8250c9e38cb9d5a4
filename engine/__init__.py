"""Low-latency trading-signal engine: the core (README "Layout").

Every module in engine/ is the bottom layer: records, tick files, rings and shared memory,
intrinsics and the clock, latency, the strategy contract, loader, host and loop, real-time
setup, waits, locks, outputs, signal files. It imports nothing else of the project; feeds/,
models/, fpga/, replay/ and the application (app/: the `engine` command, the run, the daemon)
build on it. tests/test_layers.py checks it.
"""
import hashlib
import os
import sys
from pathlib import Path

from .dirs import cache_dir  # (the cache, state and runtime directories: engine/dirs.py)

__version__ = "0.1.0"


KEEP_NUMBA_CACHES = 4  # the newest caches kept (each engine version makes one; the older go)


def private_tree(path):
    """What was just written into the cache (a default model): directories 0700, files 0600."""
    for d, dirs, files in os.walk(path):
        os.chmod(d, 0o700)
        for f in files:
            if not os.path.islink(os.path.join(d, f)):
                os.chmod(os.path.join(d, f), 0o600)


CACHE_KEY_MARK = b"\nNUMBA_CACHE_KEY = True"  # in a package's __init__.py: its sources key the numba cache


def numba_cache_dir():
    """numba's on-disk cache checks only a cached function's own file, not the functions it
    inlines from other modules; after an edit or upgrade it could run stale machine code.
    So the cache lives in a directory named by a hash of the sources numba compiles: the engine's
    and those of each package beside it whose __init__.py says `NUMBA_CACHE_KEY = True` (the
    packages above the core say so themselves: the core names none of them)."""
    here = Path(__file__).resolve().parent
    keyed = sorted(p.parent for p in here.parent.glob("*/__init__.py")
                   if p.parent != here and CACHE_KEY_MARK in p.read_bytes())
    h = hashlib.sha256()
    for pkg in [here, *keyed]:
        for p in sorted(pkg.rglob("*.py")):  # (a package's subpackages too)
            h.update(str(p.relative_to(pkg)).encode())
            h.update(p.read_bytes())
    return cache_dir("numba", h.hexdigest()[:16])


def _last_written(path):
    """When numba last wrote into a cache (it writes into one directory per source tree)."""
    with os.scandir(path) as it:
        return max([os.stat(path).st_mtime] + [e.stat().st_mtime for e in it])


def _prune_numba_caches(current, idle_s=3600):
    """A new cache (this version's first run): drop the others but the newest KEEP_NUMBA_CACHES,
    and never one written in the last `idle_s` (a process of another version may be using it)."""
    import shutil
    import time
    parent = os.path.dirname(current)
    try:
        old = sorted((_last_written(e.path), e.path) for e in os.scandir(parent) if e.is_dir() and e.path != current)
    except OSError:
        return
    for t, path in old[:-KEEP_NUMBA_CACHES]:
        if t < time.time() - idle_s:
            shutil.rmtree(path, ignore_errors=True)


if "NUMBA_CACHE_DIR" not in os.environ:
    os.environ["NUMBA_CACHE_DIR"] = numba_cache_dir()
    if not os.path.isdir(os.environ["NUMBA_CACHE_DIR"]):
        _prune_numba_caches(os.environ["NUMBA_CACHE_DIR"])
    if "numba" in sys.modules:
        sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

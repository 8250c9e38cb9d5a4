"""Low-latency trading-signal engine. This package is two layers (README "Layout"):

- the core: every module directly in engine/ (records, tick files, rings and shared memory,
  intrinsics and the clock, latency, the strategy contract, loader, host and loop, real-time
  setup, waits, locks, outputs, signal files). It imports nothing from feeds/, models/,
  replay/, fpga/, strategies/ or engine/app/: everything else builds on it.
- the application, engine/app/: the `engine` command line, the orchestration of a run, the
  control plane, doctor, config. It may import everything; nothing imports it.

engine/__main__.py (`python -m engine`) is an entry point, not part of the core.
tests/test_layers.py checks these rules.
"""
import hashlib
import os
import sys
from pathlib import Path

__version__ = "0.1.0"


def _numba_cache_dir():
    """numba's on-disk cache checks only a cached function's own file, not the functions it
    inlines from other modules; after an edit or upgrade it could run stale machine code.
    So the cache lives in a directory named by a hash of all of the engine's sources."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in ("engine", "feeds", "models", "replay"):
        for p in sorted((root / pkg).glob("*.py")):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "engine", "numba", h.hexdigest()[:16])


if "NUMBA_CACHE_DIR" not in os.environ:
    os.environ["NUMBA_CACHE_DIR"] = _numba_cache_dir()
    if "numba" in sys.modules:
        sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

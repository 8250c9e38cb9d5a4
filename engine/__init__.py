"""Low-latency trading-signal engine: rings, strategy loop, latency, CLI."""
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

"""First run (issue 26): what a parser compiles once is loaded from numba's on-disk cache by the
next process, from the engine's own per-user cache directory (never next to the sources), named
by a hash of the engine's sources so an edit never runs stale code; a command that compiles
says what it compiles while it does, and --quiet says nothing."""
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np

from feeds.nasdaq.itch_writer import message, preamble

from tests.conftest import ROOT, engine_cmd, engine_env


def be(v, n):
    return int(v).to_bytes(n, "big")


def _day(path):
    """A small ITCH 5.0 day: a few orders on each side of one book, one cancel."""
    orders = [message(b"A", 1, 1000 + i, be(i + 1, 8) + side + be(100, 4) + b"AAPL    " + be(px, 4))
              for i, (side, px) in enumerate([(b"B", 100_000 - 100 * j) for j in range(3)]
                                             + [(b"S", 101_000 + 100 * j) for j in range(3)])]
    path.write_bytes(preamble(["AAPL"]) + b"".join(orders) + message(b"X", 1, 9000, be(1, 8) + be(40, 4)))
    return f"itch:{path}?date=2024-01-02"


def _env(cache, tree=None):
    env = engine_env(XDG_CACHE_HOME=str(cache))
    env.pop("NUMBA_CACHE_DIR", None)  # the engine's own cache directory, as a user has it
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def _frozen_tree(tmp_path):
    """A copy of the sources, as an installed engine has them: the working tree may be edited
    while the test runs, and any edit names a new cache (test_an_edited_source_gets_a_cache_of_its_own)."""
    tree = tmp_path / "tree"
    for pkg in ("engine", "feeds", "models", "replay", "strategies", "fpga"):
        shutil.copytree(ROOT / pkg, tree / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


PROBE = """
import gc, json, sys
from numba.core.registry import CPUDispatcher
from feeds.nasdaq import itch
from feeds.core.sources import open_source
n = sum(len(b) for b in open_source(sys.argv[1]).batches())
every = [d for d in gc.get_objects() if isinstance(d, CPUDispatcher)]  # every numba function in the process
print(json.dumps({"ticks": n, "hits": sum(itch.parse.stats.cache_hits.values()),
                  "compiled": sorted(d.py_func.__qualname__ for d in every if sum(d.stats.cache_misses.values()))}))
"""


def test_a_second_process_loads_the_itch_parser_from_the_engine_cache(tmp_path):
    uri = _day(tmp_path / "day.itch")
    cache, tree = tmp_path / "cache", _frozen_tree(tmp_path)

    def run(*args):
        r = subprocess.run(args, cwd=tree, env=_env(cache, tree), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r

    cold = run(*engine_cmd("convert", uri, "--out", str(tmp_path / "a.ticks")))
    # the compile was said while it ran: a cache miss (numba announces only those)
    assert "[feed] compiling the ITCH 5.0 parser (first use; cached afterwards)" in cold.stderr
    assert "[feed] compiled the ITCH 5.0 parser in " in cold.stderr
    # the machine code went to the engine's cache, in a directory named by the sources' hash
    caches = list((cache / "engine" / "numba").iterdir())
    assert len(caches) == 1 and len(caches[0].name) == 16
    assert list(caches[0].rglob("itch.parse-*.nbi")) and list(caches[0].rglob("itch.parse-*.nbc"))
    assert not list(tree.rglob("*.nbi"))  # nothing next to the sources (an install may not be writable)

    got = json.loads(run(sys.executable, "-c", PROBE, uri).stdout)
    assert got["ticks"] > 0 and got["hits"] >= 1 and got["compiled"] == [], got  # loaded, nothing compiled

    again = run(*engine_cmd("convert", uri, "--out", str(tmp_path / "b.ticks")))
    assert "compiling" not in again.stderr  # nothing left to compile
    assert np.array_equal(_ticks(tmp_path / "a.ticks"), _ticks(tmp_path / "b.ticks"))


def _ticks(path):
    from feeds.core.sources import open_source
    return np.concatenate([b.copy() for b in open_source(f"tickfile:{path}").batches()])


def test_an_edited_source_gets_a_cache_of_its_own(tmp_path):
    """numba checks only a cached function's own file, not what it inlines from other modules:
    the engine's cache directory changes with any of its sources."""
    tree = _frozen_tree(tmp_path)
    show = [sys.executable, "-c", "import os, engine; print(os.environ['NUMBA_CACHE_DIR'])"]
    env = _env(tmp_path / "cache", tree)

    def cache_dir():
        r = subprocess.run(show, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
        return r.stdout.strip()

    before = cache_dir()
    assert before.startswith(str(tmp_path / "cache" / "engine" / "numba"))
    assert cache_dir() == before  # stable while nothing changes
    with open(tree / "strategies" / "microstructure.py", "a") as f:  # no NUMBA_CACHE_KEY: its own key
        f.write("\n# edited\n")
    assert cache_dir() == before
    with open(tree / "feeds" / "books" / "depth.py", "a") as f:  # a module the parsers inline
        f.write("\n# edited\n")
    edited = cache_dir()
    assert edited != before
    with open(tree / "replay" / "execsim.py", "a") as f:  # each package that marks itself counts
        f.write("\n# edited\n")
    assert cache_dir() not in (before, edited)


def test_old_caches_are_pruned_but_never_a_recent_one(tmp_path):
    import time

    import engine
    root = tmp_path / "numba"
    made = [root / f"{i:016x}" for i in range(engine.KEEP_NUMBA_CACHES + 3)]

    def written(ago):
        for i, d in enumerate(made):
            (d / "feeds_x").mkdir(parents=True, exist_ok=True)
            t = time.time() - ago - len(made) + i  # made[-1] the newest
            os.utime(d / "feeds_x", (t, t))
            os.utime(d, (t, t))

    written(ago=600)  # ten minutes ago: another version may still be using them
    engine._prune_numba_caches(str(root / "new"))
    assert sorted(root.iterdir()) == made
    written(ago=86_400)
    engine._prune_numba_caches(str(root / "new"))
    assert sorted(root.iterdir()) == made[-engine.KEEP_NUMBA_CACHES:]


def test_a_compile_is_announced_and_quiet_says_nothing():
    from numba import njit

    import feeds  # noqa: F401  (names its modules' components: engine/components.py)
    from engine.compile_notice import shown

    def fresh():
        def twice(x):
            return 2 * x
        twice.__module__ = "feeds.databento.dbn"
        return njit(cache=False)(twice)

    buf = io.StringIO()
    with shown(out=buf, after=0):
        assert fresh()(21) == 42
    assert buf.getvalue().splitlines()[0] == "[feed] compiling the DBN parser (not cached)"
    assert buf.getvalue().splitlines()[1].startswith("[feed] compiled the DBN parser in ")

    buf = io.StringIO()
    with shown(False, out=buf, after=0):
        assert fresh()(21) == 42
    assert buf.getvalue() == ""


def test_quiet_commands_say_nothing_about_compiling(tmp_path):
    """--quiet on a cold cache: the compile happens, nothing is said."""
    uri, tree = _day(tmp_path / "day.itch"), _frozen_tree(tmp_path)
    r = subprocess.run(engine_cmd("convert", uri, "--out", str(tmp_path / "a.ticks"), "--quiet"), cwd=tree,
                       env=_env(tmp_path / "cache", tree), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "cache").rglob("itch.parse-*.nbi"))  # it did compile, into the cache
    assert "compiling" not in r.stderr and "compiled" not in r.stderr


def test_the_default_model_trains_on_one_thread():
    """XGBoost's OpenMP threads spin at their barriers: on cores other work is using, two threads
    ran many times slower than one (models/default.py). The trained booster's own config says
    how many it used."""
    from models.default import DEFAULT, default_rows, train_default

    from tests.conftest import builtin_host
    host = builtin_host()
    X, y, k = default_rows(host, ticks=20_000)
    b, _ = train_default(host, X, y, k)
    assert json.loads(b.save_config())["learner"]["generic_param"]["nthread"] == str(DEFAULT["threads"]) == "1"


_SCAN_CALL = """
import os
from numba.core import dispatcher
from feeds.binance import read as binance_read, scan as S
from feeds.binance.live import MAX_FRAME, Scanner
get = dispatcher.Dispatcher.get_call_template

def typed(self, args, kws):  # the types read calls the scanner with, then out before it compiles it
    if self.py_func is S.scan_packed.py_func:
        print(" ".join(str(a) for a in args), flush=True)
        os._exit(0)
    return get(self, args, kws)
dispatcher.Dispatcher.get_call_template = typed
binance_read.compile_read(MAX_FRAME, Scanner("x", strict=False, quote=True, size_div=1000, depth=1))
os._exit(3)
"""


def test_the_live_read_calls_the_scanner_with_the_file_readers_types(tmp_path):
    """feeds/binance/read.py read calls the Binance scanner with the types binance:FILE does, so a
    cold start compiles the scanner once (numba types a constant argument as a literal: `0, False`
    there compiled all of it a second time, ~70 s). Typed in a fresh process on an empty cache, up to
    that call."""
    r = subprocess.run([sys.executable, "-c", _SCAN_CALL], cwd=ROOT, env=_env(tmp_path / "cache"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("readonly array(uint8, 1d, C) int64 int64 bool ") and "Literal" not in r.stdout, r.stdout


def test_dbn_live_and_dbn_files_share_one_parser_compile():
    """dbn-live parses a writable receive buffer, a file's chunks are read-only bytes: the parser
    gets a read-only view of either, so numba compiles it once for both."""
    from feeds.databento import dbn
    from tests.helpers.data import ESH4
    from feeds.core.sources import open_source
    src = open_source(f"dbn:{ESH4}")
    next(iter(src.batches()))
    src._apply(np.zeros(64, np.uint8)[:0], 0, np.zeros((src.OUT_ROWS, 8), np.int64), 0)
    assert [s[0].mutable for s in dbn.parse.signatures] == [False], dbn.parse.signatures

"""Cold compile: what a user waits for the first time a feed or a strategy runs (and after every
upgrade, which empties the cache), with the engine's compile-time fixes (the inliner's copy,
engine/numba_inline.py; the SSA rebuild, engine/numba_ssa.py; liveness over bitsets,
engine/numba_live_map.py) against numba's own in the same run.

Each cell is a fresh process with an empty numba cache and an empty engine cache
(XDG_CACHE_HOME), timed from its start to the end of its first batch, so the figure is the
compile plus a few milliseconds of work:
  - binance: the Binance scanner at depth 10 (the default) over the first 2,000 lines of the
    real spot capture;
  - binance-live: opening a `binance-live://` source (it compiles the scanner and the one-call
    read, feeds/binance/read.py, before it connects; no connection is made);
  - dbn-live: opening a `dbn-live://` source (the DBN parser and book, compiled before it
    connects; the gateway refuses: no connection);
  - itch: the ITCH 5.0 parser + order book at depth 10 over a small synthetic day;
  - dbn: the DBN MBO parser + L3 book at depth 10 over the first batch of the real CME file;
  - strategy: the built-in strategy's host (data-set loop) over 20k synthetic ticks.
The peer is numba 0.68 as it comes (the engine's compiles without its fixes: engine/jit.py FIXES);
the middle column leaves out only the SSA rebuild and the liveness, so their share shows.
--quick runs itch and dbn only.

Pairs: two fresh processes started at once on one empty cache, the same workload (two feeds of
one venue starting together, two test workers), timed until both are done: with the compile lock
(engine/numba_lock.py: one compiles, the other waits and loads it) against without it (numba's
own behaviour: both compile, sharing the cores). Binance (dbn with --quick).
"""
import gzip
import os
import subprocess
import sys
import tempfile
import time

import _common
from _common import ROOT

DATA = ROOT.parent / "shared" / "data"
SPOT = DATA / "binance" / "spot_btcusdt_20240808.gz"
DBN = DATA / "dbn" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"

# the engine's compiles (engine/jit.py) without engine/numba_ssa.py and engine/numba_live_map.py
NUMBA_SSA = """
from engine import jit, numba_inline
jit.FIXES = (numba_inline,)
"""
# and without engine/numba_inline.py: numba as it comes
STOCK = """
from engine import jit
jit.FIXES = ()
"""
# no cross-process compile lock (engine/numba_lock.py): numba's own behaviour
NO_LOCK = """
from engine import numba_lock
numba_lock.acquire_for = lambda dispatcher: None
"""

FIRST_BATCH = """
from feeds.core.sources import open_source
next(iter(open_source({uri!r}).batches()))
"""

OPEN = """
from feeds.core.sources import open_source
open_source({uri!r})
"""

OPEN_DBN_LIVE = """
import os
from feeds.core.sources import open_source
from feeds.core.uri import FeedError
os.environ["DATABENTO_API_KEY"] = "db-" + "0" * 29
try:
    open_source({uri!r})
except FeedError:
    pass  # (no gateway there: what is timed is the compile before the connection)
"""

STRATEGY = """
from tests.conftest import strategy_rows
strategy_rows("synthetic://?instruments=4&count=20000&seed=3")
"""


def cell(code, undo=""):
    """Seconds for a fresh interpreter to run `code` with empty caches (`undo` first)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"),
                   PYTHONPATH=str(ROOT))
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", undo + code], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        dt = time.perf_counter() - t
    if r.returncode:
        raise SystemExit(f"bench/cold_compile.py: a cell failed:\n{r.stderr[-2000:]}")
    return dt


def pair(code, lock):
    """(wall s, CPU s) until two fresh interpreters started at once on one empty cache have both run
    `code`: wall from the start to the second's end, CPU their user + system time."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = ru.ru_utime + ru.ru_stime
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"),
                   PYTHONPATH=str(ROOT))
        t = time.perf_counter()
        ps = [subprocess.Popen([sys.executable, "-c", ("" if lock else NO_LOCK) + code], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        errs = [p.communicate()[1] for p in ps]
        dt = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    if any(p.returncode for p in ps):
        raise SystemExit(f"bench/cold_compile.py: a pair failed:\n{errs[0][-2000:]}{errs[1][-2000:]}")
    return dt, ru.ru_utime + ru.ru_stime - cpu0


def workloads(tmp, quick):
    from feeds.convert import convert
    itch = os.path.join(tmp, "day.itch")
    convert("synthetic://?instruments=2&count=20000&seed=21&depth=10", itch, progress=False)
    out = {"itch": FIRST_BATCH.format(uri=f"itch:{itch}?depth=10")}
    if DBN.exists():
        out["dbn"] = FIRST_BATCH.format(uri=f"dbn:{DBN}?depth=10")
    if quick:
        return out
    if SPOT.exists():
        cap = os.path.join(tmp, "spot2000.gz")
        with gzip.open(SPOT) as f, gzip.open(cap, "wb") as g:
            for i, line in enumerate(f):
                if i == 2000:
                    break
                g.write(line)
        out["binance"] = FIRST_BATCH.format(uri=f"binance:{cap}?depth=10")
    out["binance-live"] = OPEN.format(uri="binance-live://usdm?symbols=BTCUSDT&ws=ws://127.0.0.1:9/&rest=http://127.0.0.1:9")
    out["dbn-live"] = OPEN_DBN_LIVE.format(uri="dbn-live://GLBX.MDP3?symbols=ESH4&gateway=127.0.0.1:9")
    out["strategy"] = STRATEGY
    return out


def main():
    a = _common.args(__doc__)
    metrics, peers, ratios, rows = {}, {"numba": {}, "numba_ssa": {}}, {}, []
    with tempfile.TemporaryDirectory() as tmp:
        loads = workloads(tmp, a.quick)
        for name, code in loads.items():
            ours, own_ssa, stock = cell(code), cell(code, NUMBA_SSA), cell(code, STOCK)
            key = f"{name.replace('-', '_')}_cold_compile_s"
            metrics[key] = round(ours, 1)
            peers["numba"][key], peers["numba_ssa"][key] = round(stock, 1), round(own_ssa, 1)
            ratios[key.replace("_cold", "_vs_numba_cold")] = _common.ratio(ours, stock, False)
            ratios[key.replace("_cold", "_vs_numba_ssa_cold")] = _common.ratio(ours, own_ssa, False)
            rows.append((name, {"ours s": ours, "numba SSA+live s": own_ssa, "numba 0.68 s": stock}))
            print(f"  {name}: {ours:.1f} s (numba's own SSA rebuild and liveness: {own_ssa:.1f} s; numba as it comes: "
                  f"{stock:.1f} s)", flush=True)
        name = "binance" if "binance" in loads else "dbn"
        if name in loads:
            (lw, lc), (uw, uc) = pair(loads[name], True), pair(loads[name], False)
            metrics.update({f"{name}_pair_cold_compile_wall_s": round(lw, 1), f"{name}_pair_cold_compile_cpu_s": round(lc, 1)})
            peers["no_compile_lock"] = {f"{name}_pair_cold_compile_wall_s": round(uw, 1),
                                        f"{name}_pair_cold_compile_cpu_s": round(uc, 1)}
            ratios[f"{name}_pair_vs_no_compile_lock_wall_s"] = _common.ratio(lw, uw, False)
            ratios[f"{name}_pair_vs_no_compile_lock_cpu_s"] = _common.ratio(lc, uc, False)
            print(f"  {name}, two processes at once: {lw:.1f} s, {lc:.1f} CPU s (both compiling, no lock: "
                  f"{uw:.1f} s, {uc:.1f} CPU s)", flush=True)
    _common.table("cold compile, start to first batch, one process each", ["ours s", "numba SSA+live s", "numba 0.68 s"], rows)
    _common.save("compile", metrics, peers, ratios,
                 {"what": "a fresh process with empty numba and engine caches, start to its first batch"})


if __name__ == "__main__":
    main()

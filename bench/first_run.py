"""First run: what a user waits for the first time each command runs (a fresh install, or after an
upgrade, which starts a new cache), and every time after.

Each case is the real command in a fresh process with its own empty cache directory
(XDG_CACHE_HOME: the engine keeps numba's machine code and the default models under it), run
twice: `cold` is the first run, `warm` the second, the same command with what the first left
in the cache. The commands run from a copy of the sources (as an installed engine has them: an
edit of the working tree meanwhile would name a new cache). The cases:
  - model NAME: each shipped strategy's default model, built in a process of its own
    (models/default.py: generate the synthetic market, featurize, train, compile, verify);
    `numba warm` builds it again with numba's cache warm and the model deleted (what the first
    run of a second strategy pays), `warm` loads the cached model;
  - convert binance / dbn / itch: `engine convert SOURCE --out X.ticks` of the real spot capture
    (94k ticks), the real CME ESH4 file, and a synthetic ITCH day (200k ticks, made beforehand);
  - backtest: `engine backtest DAY.ticks --out DIR` of a synthetic day (300k ticks) with the
    built-in strategy and its default model (cold: the model is built first, as a new user's
    first backtest does);
  - run 10 s: `make run`'s command, `engine run --core C --duration 10` (no HTTP, no zmq), the
    default model built first when cold;
  - `edited` (backtest and run): after `warm`, the same command with `--strategy` a copy of the
    built-in strategy with one comment line added: what a quant waits after each edit of a
    strategy (its host compiled, its default model built; the engine's shared code cached).
Wall seconds, and the CPU seconds (user + system, all threads) beside them: on a busy machine
the CPU figure is the steadier one. --quick: the built-in strategy's model only for the models;
--busy N: with N processes spinning meanwhile; --only PREFIX: some of the cases.
"""
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import _common
from _common import ROOT

DATA = ROOT.parent / "shared" / "data"
SPOT = DATA / "binance" / "spot_btcusdt_20240808.gz"
DBN = DATA / "dbn" / "esh4-glbx-mdp3-20231225.mbo.dbn.zst"
ENGINE = [sys.executable, "-m", "app"]
STRATEGIES = ("microstructure", "depth_imbalance", "touch_imbalance")  # (the first is the built-in one)
PACKAGES = ("app", "engine", "feeds", "models", "replay", "strategies", "fpga")

MODEL = """
import sys
from engine.strategy_load import load
from models.default import default_model_dir
default_model_dir(load(sys.argv[1]))
"""


def copy_tree(tmp):
    tree = os.path.join(tmp, "tree")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, os.path.join(tree, pkg), ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def timed(cmd, cache, tree):
    """(wall s, CPU s, stderr) of one run with `cache` as its XDG cache (and state) home."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}  # the engine's own cache dir
    env.update(XDG_CACHE_HOME=os.path.join(cache, "cache"), XDG_STATE_HOME=os.path.join(cache, "state"),
               PYTHONPATH=tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=os.path.join(cache, "work"), env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"bench/first_run.py: {' '.join(map(str, cmd))} failed:\n{r.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu, r.stderr


def cases(tmp, quick):
    """name -> (command, what it writes in its working directory: removed between the runs)"""
    out = {}
    for s in STRATEGIES[:1] if quick else STRATEGIES:
        out[f"model {s}"] = ([sys.executable, "-c", MODEL, s], [])
    if SPOT.exists():
        out["convert binance"] = (ENGINE + ["convert", f"binance:{SPOT}", "--out", "spot.ticks"], ["spot.ticks"])
    if DBN.exists():
        out["convert dbn"] = (ENGINE + ["convert", f"dbn:{DBN}", "--out", "esh4.ticks"], ["esh4.ticks"])
    out["convert itch"] = (ENGINE + ["convert", f"itch:{tmp}/day.itch", "--out", "itch.ticks"], ["itch.ticks"])
    out["backtest"] = (ENGINE + ["backtest", f"{tmp}/day.ticks", "--out", "bt", "--quiet"], ["bt"])
    core = str(max(os.sched_getaffinity(0)))
    out["run 10 s"] = (ENGINE + ["run", "--core", core, "--duration", "10", "--name", f"first-run-{os.getpid()}",
                                 "--http", "none", "--pub", "none"], [])
    return out


def edited_strategy(cache, tree):
    """A copy of the built-in strategy with a comment added: a new strategy hash, the same code."""
    path = os.path.join(cache, "work", "edited.py")
    with open(os.path.join(tree, "strategies", f"{STRATEGIES[0]}.py")) as f:
        source = f.read()
    with open(path, "w") as f:
        f.write(source + f"\n# edited {time.time_ns()}\n")
    return path


def fresh_cache(tmp):
    cache = tempfile.mkdtemp(dir=tmp)
    os.mkdir(os.path.join(cache, "work"))
    return cache


def prepare(tmp, tree):
    """The synthetic ITCH day and tick file the cases read, made with a cache of their own."""
    cache = fresh_cache(tmp)
    for uri, out in (("synthetic://?instruments=2&count=200000&seed=21&depth=10", "day.itch"),
                     ("synthetic://?instruments=4&count=300000&seed=7", "day.ticks")):
        timed(ENGINE + ["convert", uri, "--out", os.path.join(tmp, out), "--quiet"], cache, tree)
    shutil.rmtree(cache)


def notices(stderr):
    """What the run said it compiled (engine/compile_notice.py)."""
    return [line.split(" in ")[0].split("compiled ", 1)[1] + " " + line.rsplit(" in ", 1)[1]
            for line in stderr.splitlines() if "] compiled " in line]


def options(p):
    p.add_argument("--tree", help="run these sources instead of a copy of the working tree's (e.g. an "
                                  "older commit's: git archive HEAD~3 app engine feeds models replay strategies "
                                  "fpga | tar -x -C DIR)")
    p.add_argument("--only", help="only the cases whose name starts with this (model, convert, backtest, run)")
    p.add_argument("--busy", type=int, default=0, help="N processes spinning on the CPUs meanwhile (other work "
                                                       "on the machine, as a user's often has)")


@contextlib.contextmanager
def busy(n):
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    a = _common.args(__doc__, options)
    metrics, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp, busy(a.busy):
        tree = os.path.abspath(a.tree) if a.tree else copy_tree(tmp)
        prepare(tmp, tree)
        for name, (cmd, outputs) in cases(tmp, a.quick).items():
            if a.only and not name.startswith(a.only):
                continue
            cache = fresh_cache(tmp)
            figures = {}
            figures["cold"] = timed(cmd, cache, tree)
            if name.startswith("model "):
                shutil.rmtree(os.path.join(cache, "cache", "engine", "models"))
                figures["numba warm"] = timed(cmd, cache, tree)
            for f in outputs:
                p = os.path.join(cache, "work", f)
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
            figures["warm"] = timed(cmd, cache, tree)
            if name.startswith(("backtest", "run")):
                for f in outputs:
                    p = os.path.join(cache, "work", f)
                    shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
                figures["edited"] = timed(cmd + ["--strategy", edited_strategy(cache, tree)], cache, tree)
            shutil.rmtree(cache)
            print(f"  {name}: " + ", ".join(f"{k} {w:.1f} s (CPU {c:.1f} s)" for k, (w, c, _) in figures.items()),
                  flush=True)
            for k in ("cold", "edited"):
                said = notices(figures[k][2]) if k in figures else []
                if said:
                    print(f"    {k}, compiled: " + "; ".join(said), flush=True)
            key = name.replace(" ", "_")
            for k, (w, c, _) in figures.items():
                metrics[f"{key}_{k.replace(' ', '_')}_s"] = round(w, 1)
                metrics[f"{key}_{k.replace(' ', '_')}_cpu_s"] = round(c, 1)
            rows.append((name, {k: (w, c) for k, (w, c, _) in figures.items()}))
    print("\nfirst run (cold), every run after (warm) and after an edit of the strategy (edited), one process "
          "each: wall s (CPU s)")
    print(f"  {'':<26}{'cold':>18}{'numba warm':>18}{'warm':>18}{'edited':>18}")
    for name, f in rows:
        cells = "".join(f"{f'{f[k][0]:.1f} ({f[k][1]:.1f})' if k in f else '-':>18}"
                        for k in ("cold", "numba warm", "warm", "edited"))
        print(f"  {name:<26}{cells}")
    _common.save("first_run", metrics, {}, {},
                 {"what": "the real command in a fresh process with an empty cache directory per case; warm: again",
                  "busy_processes": a.busy, "tree": a.tree or "a copy of the working tree"})


if __name__ == "__main__":
    main()

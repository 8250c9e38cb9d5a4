"""Shared benchmark plumbing: --quick, machine description, results JSON, tables."""
import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def args(description, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a shorter run (under a minute)")
    if extra:
        extra(p)
    return p.parse_args()


def machine():
    import numba
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "numba": numba.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def ratio(ours, peer, higher_is_better):
    """How many times better ours is (> 1 means ahead)."""
    if not ours or not peer:
        return None
    return round(ours / peer if higher_is_better else peer / ours, 2)


def save(name, metrics, peers, ratios, notes=None):
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"name": name, "script": f"bench/{Path(sys.argv[0]).name}", "machine": machine(), "metrics": metrics,
           "peers": peers, "ratios": ratios}
    if notes:
        out["notes"] = notes
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print("\nratios (> 1 = ours ahead): " + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    print(f"wrote {path.relative_to(ROOT)}")
    return out


def table(title, cols, rows):
    """rows: list of (label, {col: value})"""
    print(f"\n{title}")
    print(f"  {'':<30}" + "".join(f"{c[-18:]:>19}" for c in cols))
    for label, vals in rows:
        cells = []
        for c in cols:
            v = vals.get(c)
            cells.append(f"{v:>19}" if isinstance(v, str) else
                         f"{v:>19,.0f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>19}")
        print(f"  {label:<30}" + "".join(cells))


def pct(values_ns, prefix="one_way"):
    """Percentile dict (ns) of a numpy array of latencies, keys ending in _ns."""
    import numpy as np
    v = np.asarray(values_ns)
    if len(v) == 0:
        return {}
    q = np.percentile(v, [50, 99, 99.9, 99.99])
    return {f"{prefix}_p50_ns": int(q[0]), f"{prefix}_p99_ns": int(q[1]), f"{prefix}_p999_ns": int(q[2]),
            f"{prefix}_p9999_ns": int(q[3]), f"{prefix}_max_ns": int(v.max())}


def engine_run(core, rate, duration, extra=()):
    """`engine run --core CORE --rate RATE --duration D --json ...`, the whole command a user types
    (default synthetic feed and strategy, no HTTP or zmq): its JSON summary. Exits naming the
    failure if the run fails."""
    import subprocess
    sig = f"/tmp/bench-engine-run-{os.getpid()}.sig"
    cmd = [sys.executable, "-m", "app", "run", "--core", str(core), "--duration", str(duration), "--rate", str(rate),
           "--json", "--name", f"bench-run-{os.getpid()}", "--http", "none", "--pub", "none", "--signals-out", sig,
           *extra]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                       timeout=duration + 120)
    if r.returncode != 0:
        raise SystemExit(f"engine run {' '.join(extra)} failed:\n{r.stderr}")
    os.unlink(sig)
    return json.loads(r.stdout)


def tail(d):
    """A run's tail figures from its JSON summary: the ring stage (every tick), tick to signal
    (scored ticks) and how long the strategy thread waited for its core (ms, from /proc)."""
    ring, t2s, pre = d["latency_ns"]["ring"], d["latency_ns"]["tick_to_signal"], d["preempted"] or {}
    out = {f"ring_{k}_ns": ring[q] for k, q in (("p99", "p99"), ("p999", "p99.9"), ("p9999", "p99.99"), ("max", "max"))}
    out.update({f"tick_to_signal_{k}_ns": t2s[q] for k, q in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"),
                                                               ("p9999", "p99.99"), ("max", "max"))})
    return out | {"preempted_ms": pre.get("wait_ms"), "preemptions": pre.get("count")}

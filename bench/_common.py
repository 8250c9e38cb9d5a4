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
    out = {"name": name, "machine": machine(), "metrics": metrics, "peers": peers, "ratios": ratios}
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
            cells.append(f"{v:>19,.0f}" if isinstance(v, (int, float)) and v is not None else f"{'-':>19}")
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

"""Model back ends at batch 1: flat (branch-free, each SIMD build) vs treelite (TL2cgen) vs XGBoost's
Booster.inplace_predict, on 200x6 and 500x8 models, in one run; then tick-to-signal through the
whole engine with each back end.

Per-row latency is timed from numba around each call through the C ABI function pointer, exactly
as the strategy loop calls it (the clock pair is reported); XGBoost per call from Python. Rows are
held-out synthetic ticks (the training distribution).
"""
import json
import os
import subprocess
import sys
import time

import _common
import numpy as np
from _models import model_dir, test_rows, time_calls

from models import artifact

CORE = max(os.sched_getaffinity(0))


def per_row(d, X, quick):
    res = {}
    man = artifact.read_manifest(d)
    for name in man["validation"]["checked_backends"]:
        pred = artifact.load(d, backend=name)
        reps = 3 if quick else 10
        lat = np.zeros(len(X) * reps, np.int64)
        time_calls(pred.addr, X[:100], 1, lat)  # warm
        time_calls(pred.addr, X, reps, lat)
        res[name] = _common.pct(lat, "model_call")
    import xgboost as xgb
    b = xgb.Booster(model_file=str(d / "model.json"))
    b.set_param({"nthread": 1})
    n = 500 if quick else 3000
    xl = np.zeros(n, np.int64)
    for i in range(20):
        b.inplace_predict(X[i:i + 1], predict_type="margin")
    for i in range(n):
        t0 = time.perf_counter_ns()
        b.inplace_predict(X[i:i + 1], predict_type="margin")
        xl[i] = time.perf_counter_ns() - t0
    res["xgboost"] = _common.pct(xl, "model_call")
    return res


def tick_to_signal(backend, duration):
    name = f"bench-mb-{os.getpid()}"
    cmd = [sys.executable, "-m", "engine.cli", "run", "--core", str(CORE), "--duration", str(duration), "--rate",
           "20000", "--no-rt", "--json", "--backend", backend, "--name", name, "--signals-out", f"/tmp/{name}.sig"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(_common.ROOT)),
                       timeout=duration + 120)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    os.unlink(f"/tmp/{name}.sig")
    d = json.loads(r.stdout)["latency_ns"]
    return {f"tick_to_signal_{k.replace('.', '')}_ns": v for k, v in d["tick_to_signal"].items()} | {
        f"model_{k.replace('.', '')}_ns": v for k, v in d["model"].items() if k in ("p50", "p99")}


def main():
    a = _common.args(__doc__)
    X = test_rows()
    metrics, peers, ratios, rows = {}, {}, {}, []
    for trees, depth in ((200, 6), (500, 8)):
        key = f"m{trees}x{depth}"
        print(f"{key}: building or loading the model ...", file=sys.stderr, flush=True)
        d = model_dir(trees, depth)
        print(f"{key}: timing every back end ...", file=sys.stderr, flush=True)
        res = per_row(d, X, a.quick)
        peers[f"xgboost_{key}"] = res.pop("xgboost")
        metrics[key] = res
        best_flat = min((n for n in res if n.startswith("flat")), key=lambda n: res[n]["model_call_p50_ns"])
        for q in ("p50", "p99", "p999"):
            f = res[best_flat][f"model_call_{q}_ns"]
            ratios[f"flat_vs_treelite_{key}_{q}"] = _common.ratio(f, res["treelite"][f"model_call_{q}_ns"], False)
            ratios[f"flat_vs_xgboost_{key}_{q}"] = _common.ratio(f, peers[f"xgboost_{key}"][f"model_call_{q}_ns"], False)
        rows += [(f"{key} {n}", v) for n, v in res.items()] + [(f"{key} xgboost", peers[f"xgboost_{key}"])]
    _common.table("model call at batch 1 (ns)", ["model_call_p50_ns", "model_call_p99_ns", "model_call_p999_ns",
                                                  "model_call_max_ns"], rows)
    dur = 3 if a.quick else 8
    t2s = {}
    for backend in ("flat", "treelite"):
        print(f"tick to signal with {backend} ...", file=sys.stderr, flush=True)
        t2s[backend] = tick_to_signal(backend, dur)
    metrics["tick_to_signal_20k_per_s"] = t2s
    for q in ("p50", "p99"):
        ratios[f"flat_vs_treelite_tick_to_signal_{q}"] = _common.ratio(
            t2s["flat"][f"tick_to_signal_{q}_ns"], t2s["treelite"][f"tick_to_signal_{q}_ns"], False)
    _common.table(f"tick to signal, default model, 20k ticks/s, pinned ({dur} s each, ns)",
                  ["model_p50_ns", "model_p99_ns", "tick_to_signal_p50_ns", "tick_to_signal_p99_ns",
                   "tick_to_signal_p999_ns"], [(f"engine --backend {b}", v) for b, v in t2s.items()])
    _common.save("model_backends", metrics, peers, ratios,
                 notes="flat ratios use the fastest flat build on this CPU; each timed call includes one "
                       "CLOCK_MONOTONIC pair (~20 ns)")


if __name__ == "__main__":
    main()

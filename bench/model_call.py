"""Model call at batch 1: the compiled library through its function pointer (as the strategy
loop calls it) vs XGBoost's Booster.inplace_predict on one row.

Both score the same held-out rows from the synthetic market with the default model (200 trees,
depth 6). Ours is timed per call from numba with CLOCK_MONOTONIC (the clock pair itself is
measured and reported); XGBoost per call from Python with perf_counter_ns.
"""
import time

import _common  # noqa: F401
import numpy as np
from _models import test_rows, time_calls
from numba import njit

from engine.intrinsics import monotonic_ns
from models import artifact
from models.default import default_model_dir


@njit(nogil=True, cache=True)
def _clock_pair(n, lat):
    for i in range(n):
        t0 = monotonic_ns()
        lat[i] = monotonic_ns() - t0


def main():
    a = _common.args(__doc__)
    d = default_model_dir()
    pred = artifact.load(d, backend="treelite")  # this benchmark is about the TL2cgen library
    X = test_rows()
    reps = 5 if a.quick else 25
    lat = np.zeros(len(X) * reps, np.int64)
    time_calls(pred.addr, X[:10], 1, lat)  # compile
    time_calls(pred.addr, X, reps, lat)
    clk = np.zeros(100_000, np.int64)
    _clock_pair(len(clk), clk)
    ours = {**_common.pct(lat, "model_call"), "calls": int(len(lat)),
            "clock_pair_p50_ns": int(np.median(clk))}

    import xgboost as xgb
    b = xgb.Booster(model_file=str(d / "model.json"))
    b.set_param({"nthread": 1})  # batch 1: a thread pool only adds wake-up cost
    n_x = 1000 if a.quick else 5000
    xl = np.zeros(n_x, np.int64)
    for i in range(50):
        b.inplace_predict(X[i:i + 1], predict_type="margin")
    for i in range(n_x):
        r = X[i % len(X)][None, :]
        t0 = time.perf_counter_ns()
        b.inplace_predict(r, predict_type="margin")
        xl[i] = time.perf_counter_ns() - t0
    peer = {**_common.pct(xl, "model_call"), "calls": n_x}

    _common.table("model call, batch 1, 200 trees depth 6 (ns)",
                  ["model_call_p50_ns", "model_call_p99_ns", "model_call_p999_ns", "model_call_max_ns"],
                  [("treelite (ours, numba->C)", ours), ("xgboost inplace_predict", peer)])
    print(f"  (our figures include one clock pair, p50 {ours['clock_pair_p50_ns']} ns)")
    ratios = {f"treelite_vs_xgboost_{q}": _common.ratio(ours[f"model_call_{q}_ns"], peer[f"model_call_{q}_ns"], False)
              for q in ("p50", "p99", "p999")}
    _common.save("model_call", ours, {"xgboost": peer}, ratios,
                 notes=f"model {pred.model_id}, {pred.manifest['num_trees']} trees; rows: held-out synthetic ticks")


if __name__ == "__main__":
    main()

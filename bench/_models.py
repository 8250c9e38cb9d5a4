"""Benchmark models, built once and cached (the 500x8 TL2cgen build takes minutes)."""
import os

import _common  # noqa: F401
import numpy as np
from numba import njit

from engine.intrinsics import call_predict, call_predict_rows, monotonic_ns

from engine.strategy_build import load_host
from models import artifact, dataset
from models.build import build_artifact, train
from models.default import DEFAULT, cache_root, default_key, default_model_dir
from models.training import source_ticks


def model_dir(trees, depth):
    """The built-in strategy's default model for 200x6; others trained on the synthetic market
    with the built-in strategy and cached."""
    if (trees, depth) == (200, 6):
        return default_model_dir()
    host = load_host()
    d = cache_root() / f"bench-{trees}x{depth}-{default_key(host.strategy)}"
    if d.exists():
        try:
            artifact.verify_files(d, artifact.read_manifest(d))
            return d
        except artifact.ArtifactError:
            pass
    words, k, levels, _ = source_ticks(DEFAULT["source"], DEFAULT["ticks"], host.strategy)
    X, inst, mid, _ = dataset.featurize(host, words, k, levels)
    y = dataset.binary_labels(inst, mid, 20)
    keep = y != dataset.NO_LABEL
    X, y = X[keep], y[keep]
    n = len(X)
    b = train(X[: n * 7 // 10], y[: n * 7 // 10], X[n * 7 // 10: n * 85 // 100], y[n * 7 // 10: n * 85 // 100],
              trees=trees, depth=depth, eta=0.05, feature_names=host.strategy.features, progress_every=100)
    os.makedirs(d.parent, exist_ok=True)
    build_artifact(d, b, X[n * 85 // 100:], feature_names=host.strategy.features, strategy=host.strategy.identity())
    return d


def test_rows(n=20_000, seed=4242):
    """Feature rows of the built-in strategy on the synthetic market (the distribution it trades on)."""
    host = load_host()
    words, k, levels, _ = source_ticks(f"synthetic://?instruments=4&seed={seed}", 3 * n, host.strategy)
    X = dataset.featurize(host, words, k, levels)[0]
    return np.ascontiguousarray(X[:n])


if __name__ == "__main__":
    print(model_dir(500, 8))


@njit(nogil=True, cache=True)
def time_calls(addr, X, reps, lat):
    """Each call through the C ABI function pointer timed from numba, as the strategy loop calls it."""
    row = np.empty(X.shape[1], np.float32)
    out = np.empty(1, np.float32)
    k = 0
    for _ in range(reps):
        for i in range(X.shape[0]):
            row[:] = X[i]
            t0 = monotonic_ns()
            call_predict(addr, row, out)
            lat[k] = monotonic_ns() - t0
            k += 1


@njit(nogil=True, cache=True)
def time_rows(addr, X, k, reps, lat):
    """engine_predict_rows on k rows at a time through the C ABI function pointer, each call timed
    from numba; lat gets each call's ns per row. Returns the calls timed."""
    out = np.empty(k, np.float32)
    j = 0
    for _ in range(reps):
        for i in range(0, X.shape[0] - k + 1, k):
            t0 = monotonic_ns()
            call_predict_rows(addr, X[i:i + k], k, out)
            lat[j] = (monotonic_ns() - t0) // k
            j += 1
    return j

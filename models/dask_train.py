"""`engine train SOURCE... --workers N | --scheduler ADDR`: training past one machine.

Each source's labelled rows are built on a worker by the same strategy host as `engine train`
(models/training.py build_dataset, one source per task: state never leaks across sources, as
there), and stay on the workers. The rows are split by time over the sources in their order (the
same train/validation/test ranges and embargo as one machine: dataset.time_split), the pieces of
each split become dask arrays, and XGBoost trains on them through its Dask interface
(xgboost.dask.train: every worker holds its part of the histogram). The booster comes back whole;
the test rows and each source's drift reference (models/drift.py Reference) come back to
compile, check and write the artifact here, as `engine train` does (models/training.py finish): the
compiled back ends are bit-exact with that booster's XGBoost predictions, the check any artifact
passes. A booster trained on several workers is not the one one machine would train (the
histogram bins are found from merged sketches), but it is the same kind of model, bit-exact when
compiled.
"""
import os

import numpy as np

from .drift import Reference
from .training import build_dataset, log, time_embargo


def rows_one(uri, strategy, params, universe, kw):
    """On a worker: one source's (X float32, y, exchange times, instruments, drift reference), by
    the strategy host (compiled once per worker process)."""
    from engine.strategy_build import loaded_host
    ref = Reference()
    X, y, n_inst, ts = build_dataset(loaded_host(strategy, params, universe), [uri], reference=ref, **kw)
    return X, y, ts, n_inst, ref


def pieces(futs, sizes, lo, hi, col, width, dtype):
    """Rows lo..hi of the sources laid end to end (column `col` of each task's result) as one dask
    array, piece by piece from the workers' results (nothing gathered here)."""
    import dask
    import dask.array as da
    parts, start = [], 0
    for f, n in zip(futs, sizes):
        a, b = max(lo, start), min(hi, start + n)
        if a < b:
            d = dask.delayed(lambda r, i, j, c: np.asarray(r[c][i:j], dtype))(f, a - start, b - start, col)
            parts.append(da.from_delayed(d, (b - a,) + ((width,) if width else ()), dtype=dtype))
        start += n
    return da.concatenate(parts) if parts else None


def run_train_dask(sources, out, *, host, strategy, params, universe, workers=2, scheduler=None, trees=200,
                   depth=6, eta=0.1, horizon=20, unit="ticks", labels="binary", dead_band_bps=0.5, objective=None,
                   early_stopping=20, ticks=400_000, backends=("treelite", "flat"), seed=0, info_extra=None):
    """run_train's work on a Dask cluster (the one at `scheduler`, or a LocalCluster of `workers`
    single-threaded processes); strategy/params/universe: what each worker loads its host from."""
    import time

    import xgboost as xgb
    import xgboost.dask as xgd

    from .cluster import dask_client
    from . import dataset
    from .training import finish
    s = host.strategy
    objective = objective or ("binary:logistic" if labels == "binary" else "reg:squarederror")
    if labels == "ternary" and objective == "binary:logistic":
        raise ValueError("ternary labels (-1, 0, +1) need a regression objective such as reg:squarederror")
    s.check_scale(objective == "binary:logistic")
    from engine.outputs import check_writable
    check_writable(out, "the model artifact", directory=True)
    names, nf = list(s.features), len(s.features)
    kw = dict(ticks=ticks, horizon=horizon, unit=unit, kind=labels, dead_band_bps=dead_band_bps)
    with dask_client(workers, scheduler) as client:
        nw = len(client.scheduler_info()["workers"])
        log(f"[1/4] building the data set from {len(sources)} source(s) on {nw} Dask workers "
            f"({client.scheduler.address}) with strategy {s.describe()}: horizon {horizon} {unit}, {labels} labels")
        t0 = time.perf_counter()
        futs = [client.submit(rows_one, u, strategy, params, universe, kw, key=f"rows-{k}-{os.path.basename(u)}",
                              pure=False) for k, u in enumerate(sources)]
        meta = client.gather([client.submit(lambda r: (len(r[0]), r[3]), f, pure=False) for f in futs])
        sizes = [m[0] for m in meta]
        n, n_inst = sum(sizes), max(m[1] for m in meta)
        build_s = time.perf_counter() - t0
        for u, m in zip(sources, sizes):
            log(f"  {u}: {m:,} labelled rows")
        if unit == "ticks":
            embargo = horizon * n_inst
        else:  # (the exchange times, 8 bytes a row, to find how far the horizon reaches past a boundary)
            ts = np.concatenate(client.gather([client.submit(lambda r: r[2], f, pure=False) for f in futs]))
            embargo = time_embargo(ts, n, int(horizon * 1e6))
        tr, va, te = dataset.time_split(n, embargo=embargo)
        if min(len(tr), len(va), len(te)) < 100:
            raise ValueError(f"only {n} labelled rows: too few to train, validate and test (give more ticks)")
        log(f"[2/4] split by time: train {len(tr):,}, validation {len(va):,}, test {len(te):,} "
            f"(embargo {embargo} rows between them); built in {build_s:.1f} s ({n / build_s:,.0f} rows/s)")

        def rows(idx, col, width, dtype):
            return pieces(futs, sizes, int(idx[0]), int(idx[-1]) + 1, col, width, dtype)
        dtrain = xgd.DaskDMatrix(client, rows(tr, 0, nf, np.float32), rows(tr, 1, 0, np.float32), feature_names=names)
        dvalid = xgd.DaskDMatrix(client, rows(va, 0, nf, np.float32), rows(va, 1, 0, np.float32), feature_names=names)
        prm = {"objective": objective, "max_depth": depth, "eta": eta, "tree_method": "hist", "max_bin": 256,
               "seed": seed, "eval_metric": ["auc", "logloss"] if objective.startswith("binary") else ["rmse"]}
        log(f"[3/4] training XGBoost {objective} on the cluster: up to {trees} trees of depth {depth}, early "
            f"stopping after {early_stopping} rounds without improvement")
        t1 = time.perf_counter()
        res = xgd.train(client, prm, dtrain, num_boost_round=trees, evals=[(dvalid, "valid")],
                        early_stopping_rounds=early_stopping, verbose_eval=False)
        train_s = time.perf_counter() - t1
        b = res["booster"]
        if early_stopping and b.best_iteration + 1 < b.num_boosted_rounds():
            log(f"  early stopping: best validation round {b.best_iteration + 1}")
            b = b[: b.best_iteration + 1]
        log(f"  trained in {train_s:.1f} s")
        X_te, y_te = rows(te, 0, nf, np.float32).compute(), rows(te, 1, 0, np.float32).compute()
        X_ref = Reference.merged(client.gather([client.submit(lambda r: r[4], f, pure=False) for f in futs])).rows()
    b = xgb.Booster(model_file=bytearray(b.save_raw("json")))  # (a plain local booster: nothing of the cluster's)
    info = {"sources": list(sources), "horizon": horizon, "horizon_unit": unit, "labels": labels,
            "dead_band_bps": dead_band_bps if labels == "ternary" else None,
            "rows": {"train": int(len(tr)), "valid": int(len(va)), "test": int(len(te))}, "embargo_rows": embargo,
            "cluster": {"workers": nw, "scheduler": scheduler, "build_seconds": round(build_s, 3),
                        "rows_per_s": round(n / build_s), "train_seconds": round(train_s, 3)},
            **(info_extra or {})}
    return finish(out, b, X_te, y_te, X_ref, objective, s, info, backends)

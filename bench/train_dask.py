"""Training past one machine (models/dask_train.py) against one process (models/training.py), on
10 "days" of synthetic ticks (10 sources, one seed each: what `engine train --recordings` feeds it).

Two figures, each side measured in the same run:
  data set   labelled rows per second built from the 10 sources by the strategy host: one process
             in turn (build_dataset) vs a task per source on a 2-worker Dask LocalCluster (the rows
             stay on the workers; their hosts were loaded before the clock starts, as a cluster that
             trained yesterday has them), rows checked equal in number;
  training   seconds of XGBoost hist on those rows (train split, the same parameters and trees, no
             early stopping): xgboost.train with 2 threads vs xgboost.dask.train on the 2 workers of
             1 thread each.
This machine has 2 cores, so 2 workers is all it can show; a cluster's gain is in the machines it
adds (memory: the rows never meet in one process). The loop alone is not what this times: every
figure is the work `engine train` does for it."""
import time

import _common
import numpy as np

TREES, DEPTH = 100, 6


def main():
    a = _common.args(__doc__.split("\n")[0])
    ticks = 60_000 if a.quick else 300_000
    sources = [f"synthetic://?instruments=4&seed={1000 + d}&count={ticks}" for d in range(10)]
    import xgboost as xgb
    import xgboost.dask as xgd
    from dask.distributed import Client, LocalCluster

    from engine.strategy_build import load_host
    from models import dataset
    from models.dask_train import rows_one
    from models.training import build_dataset
    kw = dict(ticks=ticks, horizon=20, unit="ticks", kind="binary", dead_band_bps=0.5)
    host = load_host()
    build_dataset(host, sources[:1], **{**kw, "ticks": 1000})  # (compiled before the clock)
    t0 = time.perf_counter()
    X, y, n_inst, _ = build_dataset(host, sources, **kw)
    local_build = time.perf_counter() - t0
    tr = dataset.time_split(len(X), embargo=20 * n_inst)[0]
    names = list(host.strategy.features)
    prm = {"objective": "binary:logistic", "max_depth": DEPTH, "eta": 0.1, "tree_method": "hist", "max_bin": 256,
           "seed": 0, "eval_metric": ["logloss"]}
    t0 = time.perf_counter()
    xgb.train({**prm, "nthread": 2}, xgb.DMatrix(X[tr], y[tr], feature_names=names), TREES)
    local_train = time.perf_counter() - t0

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40)
    client = Client(cluster)
    try:
        for w in client.scheduler_info()["workers"]:  # (each worker's host loaded, as after a first task)
            client.submit(rows_one, sources[0].replace(f"count={ticks}", "count=1000"), None, {}, {}, kw,
                          workers=[w], pure=False).result()
        t0 = time.perf_counter()
        futs = [client.submit(rows_one, u, None, {}, {}, kw, pure=False) for u in sources]
        sizes = client.gather([client.submit(lambda r: len(r[0]), f, pure=False) for f in futs])
        dask_build = time.perf_counter() - t0
        assert sum(sizes) == len(X), (sum(sizes), len(X))
        from models.dask_train import pieces
        Xd = pieces(futs, sizes, 0, len(tr), 0, len(names), np.float32)
        yd = pieces(futs, sizes, 0, len(tr), 1, 0, np.float32)
        t0 = time.perf_counter()
        xgd.train(client, prm, xgd.DaskDMatrix(client, Xd, yd, feature_names=names), num_boost_round=TREES)
        dask_train = time.perf_counter() - t0
    finally:
        client.close()
        cluster.close()
    n = len(X)
    _common.table(f"10 sources x {ticks:,} synthetic ticks: {n:,} labelled rows, train split {len(tr):,}",
                  ["rows/s (data set)", "train ms"],
                  [("one process", {"rows/s (data set)": n / local_build, "train ms": local_train * 1000}),
                   ("2-worker Dask cluster", {"rows/s (data set)": n / dask_build,
                                              "train ms": dask_train * 1000})])
    print(f"  data set: {n / dask_build / (n / local_build):.2f}x one process; training ({TREES} trees of depth "
          f"{DEPTH}): {local_train / dask_train:.2f}x one process (> 1 = the cluster faster)")
    metrics = {"rows": n, "train_rows": int(len(tr)), "local_build_rows_per_s": round(n / local_build),
               "dask_build_rows_per_s": round(n / dask_build), "local_train_s": round(local_train, 3),
               "dask_train_s": round(dask_train, 3)}
    ratios = {"dask_vs_local_build": _common.ratio(n / dask_build, n / local_build, True),
              "dask_vs_local_train": _common.ratio(dask_train, local_train, False)}
    _common.save("train_dask", metrics, {}, ratios)


if __name__ == "__main__":
    main()

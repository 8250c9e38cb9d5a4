"""`engine train --workers 2` / `--scheduler ADDR` (models/dask_train.py): the data set built per source
on Dask workers by the same strategy host (the same rows and split as one process), XGBoost trained
through its Dask interface, and an artifact whose compiled back ends are bit-exact with that booster."""
import contextlib
import json

import numpy as np
import pytest

from models import artifact, dataset
from models.training import build_dataset
from tests.conftest import builtin_host
from tests.helpers.feedutil import cli

SOURCES = ["synthetic://?instruments=4&seed=5&count=40000", "synthetic://?instruments=4&seed=6&count=40000"]


@contextlib.contextmanager
def _cluster(how):
    """engine train's cluster flags: a LocalCluster it starts, or one already running (--scheduler)."""
    if how == "workers":
        yield ["--workers", "2"], None
        return
    from dask.distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield ["--scheduler", cluster.scheduler_address], cluster.scheduler_address


@pytest.mark.parametrize("how", ["workers", "scheduler"])
def test_training_on_a_two_worker_cluster(tmp_path, how):
    out = tmp_path / "m"
    with _cluster(how) as (flags, address):
        r = cli("train", *SOURCES, "--out", str(out), "--trees", "15", "--depth", "3", "--backends", "flat",
                *flags, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "on 2 Dask workers" in r.stderr and json.loads(r.stdout)["trees"] >= 1
    man = artifact.read_manifest(out)
    tr = man["training"]
    assert tr["cluster"]["workers"] == 2 and tr["cluster"]["rows_per_s"] > 0 and tr["cluster"]["scheduler"] == address
    # the rows one process builds from the same sources, split the same way
    X, y, n_inst, _ = build_dataset(builtin_host(), SOURCES, ticks=400_000, horizon=20, unit="ticks", kind="binary",
                                    dead_band_bps=0.5)
    a, b, c = dataset.time_split(len(X), embargo=20 * n_inst)
    assert tr["rows"] == {"train": len(a), "valid": len(b), "test": len(c)}
    # compiled: bit-exact with the booster it kept (its model.json through XGBoost, here)
    import xgboost as xgb
    booster = xgb.Booster(model_file=str(out / "model.json"))
    pred = artifact.load(out)
    rows = X[c]
    want = booster.predict(xgb.DMatrix(rows, feature_names=list(man["feature_names"])), output_margin=True)
    assert np.array_equal(pred.predict_margin(rows).view(np.int32), want.astype(np.float32).view(np.int32))
    assert man["drift"]["rows"] > 1000  # (its training rows' sketch came back from the workers)


def test_merge_is_refused_on_a_cluster(tmp_path):
    r = cli("train", *SOURCES, "--merge", "--workers", "2", "--out", str(tmp_path / "m"))
    assert r.returncode == 2 and "not on a Dask cluster" in r.stderr and "Traceback" not in r.stderr, r.stderr

"""engine train / compile / predict as a user runs them, and the labelling and splitting rules."""
import json
import subprocess

import numpy as np
import pytest
import xgboost as xgb

from models import dataset

from .conftest import ROOT, builtin_features, engine_cmd, engine_env

FEATURE_NAMES = builtin_features()


def _engine(*args, timeout=600):
    return subprocess.run(engine_cmd(*args), cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "m"
    r = _engine("train", "synthetic://?instruments=3&seed=5&count=60000", "--out", str(out), "--trees", "40",
                "--depth", "5", "--backends", "flat")
    assert r.returncode == 0, r.stderr
    return out, json.loads(r.stdout), r.stderr


def test_train_prints_test_metrics_and_writes_a_verified_artifact(trained):
    out, res, err = trained
    assert {"auc", "logloss", "accuracy"} <= set(res) and res["auc"] > 0.6
    assert "test split:" in err and "[4/4]" in err
    r = _engine("model", "inspect", str(out), "--verify")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["verified"] and m["training"]["embargo_rows"] > 0
    rows = m["training"]["rows"]
    assert rows["train"] > rows["valid"] > 0 and rows["test"] > 0


def test_predict_through_each_backend_matches_xgboost(trained, tmp_path):
    out, _, _ = trained
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 9)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    np.save(tmp_path / "X.npy", X)
    want = xgb.Booster(model_file=str(out / "model.json")).predict(xgb.DMatrix(X, feature_names=list(FEATURE_NAMES)),
                                                                   output_margin=True)
    for backend in ("auto", "flat-portable", "xgboost"):
        r = _engine("predict", str(out), "--backend", backend, "--input", str(tmp_path / "X.npy"),
                    "--output", str(tmp_path / "y.npy"), "--margin")
        assert r.returncode == 0, r.stderr
        assert np.array_equal(np.load(tmp_path / "y.npy").view(np.int32), want.view(np.int32)), backend
    r = _engine("predict", str(out), "--input", str(tmp_path / "X.npy"), "--output", str(tmp_path / "p.npy"))
    p = np.load(tmp_path / "p.npy")
    assert p.dtype == np.float32 and ((p > 0) & (p < 1)).all()


def test_predict_refuses_bad_rows_and_writes_nothing(trained, tmp_path):
    out, _, _ = trained
    np.save(tmp_path / "bad.npy", np.zeros((5, 4), np.float32))
    r = _engine("predict", str(out), "--input", str(tmp_path / "bad.npy"), "--output", str(tmp_path / "y.npy"))
    assert r.returncode == 2 and "9 columns" in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("y.npy*"))


def test_compile_checks_feature_names_or_builds_generic(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 9)).astype(np.float32)
    names = ["spread_bps", "imbalance", "bogus"] + [f"x{i}" for i in range(6)]
    b = xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, X[:, 0] > 0, feature_names=names), 10)
    b.save_model(str(tmp_path / "m.json"))
    r = _engine("compile", str(tmp_path / "m.json"), "--out", str(tmp_path / "a"), "--backends", "flat")
    assert r.returncode == 2 and "missing ['microprice_bps'" in r.stderr and "'bogus'" in r.stderr
    assert not (tmp_path / "a").exists()
    r = _engine("compile", str(tmp_path / "m.json"), "--out", str(tmp_path / "g"), "--generic", "--backends", "flat")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["generic"]
    r = _engine("run", "--duration", "1", "--model", str(tmp_path / "g"))
    assert r.returncode == 2 and "generic artifact" in r.stderr


def test_compile_refuses_a_file_that_is_not_a_model(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    r = _engine("compile", str(tmp_path / "x.json"), "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and "not an XGBoost model" in r.stderr and "Traceback" not in r.stderr


def test_labels_by_ticks_and_time_and_ternary():
    inst = np.array([0, 1, 0, 1, 0, 0])
    mid = np.array([100.0, 50.0, 101.0, 50.0, 100.5, 100.5])
    ts = np.array([0, 0, 10, 10, 20, 30]) * 1_000_000
    assert list(dataset.binary_labels(inst, mid, 1)) == [1, dataset.NO_LABEL, 0, dataset.NO_LABEL, dataset.NO_LABEL,
                                                          dataset.NO_LABEL]
    # 15 ms ahead: the first tick at least 15 ms later
    assert list(dataset.binary_labels_time(inst, mid, ts, 15_000_000))[:3] == [1, dataset.NO_LABEL, 0]
    t = dataset.ternary_labels(inst, mid, ts, 1, "ticks", dead_band_bps=40.0)
    assert list(t[[0, 2, 4]]) == [1, -1, 0]  # +100 bps up, -49.5 bps down, 0 flat


def test_time_split_has_an_embargo_and_no_overlap():
    tr, va, te = dataset.time_split(1000, embargo=30)
    assert tr[-1] + 30 < va[0] and va[-1] + 30 < te[0] and len(tr) + 30 + len(va) + 30 <= te[0] + 30

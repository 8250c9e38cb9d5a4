"""Compiled models: bit-exact with XGBoost, verified before they are loaded."""
import json
import shutil

import numpy as np
import pytest
import xgboost as xgb
from numba import njit

from engine.intrinsics import call_predict
from engine.strategy_load import load
from models import artifact
from models.build import build_artifact, train

from .conftest import builtin_features, strategy_rows

FEATURE_NAMES = builtin_features()


def _fresh_rows(n_ticks=40_000, seed=777):
    X, inst, mid, _ = strategy_rows(f"synthetic://?instruments=4&seed={seed}&count={n_ticks}")
    return X, inst, mid


def _xgb_margin(model_dir, X):
    b = xgb.Booster(model_file=str(model_dir / "model.json"))
    return b.predict(xgb.DMatrix(X, feature_names=list(FEATURE_NAMES)), output_margin=True)


def test_default_model_margins_equal_xgboost_bit_for_bit(default_model):
    pred = artifact.load(default_model)
    X, _, _ = _fresh_rows()  # held out: a seed the model never saw
    X = X[:20_000].copy()
    rng = np.random.default_rng(1)
    X[rng.random(X.shape) < 0.05] = np.nan  # and missing values everywhere
    got, want = pred.predict_margin(X), _xgb_margin(default_model, X)
    assert got.dtype == np.float32 and want.dtype == np.float32
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    m = pred.manifest
    assert m["num_trees"] == 200 and m["feature_names"] == list(FEATURE_NAMES)
    assert m["training"]["test_auc"] > 0.6  # it learned something from the synthetic market


@njit(cache=True)
def _predict_via_pointer(addr, X, out):
    row = np.empty(X.shape[1], np.float32)
    res = np.empty(1, np.float32)
    for i in range(X.shape[0]):
        row[:] = X[i]
        call_predict(addr, row, res)
        out[i] = res[0]


def test_function_pointer_call_from_numba_matches(default_model):
    pred = artifact.load(default_model)
    X, _, _ = _fresh_rows(10_000, seed=778)
    out = np.empty(len(X), np.float32)
    _predict_via_pointer(pred.addr, X, out)
    assert np.array_equal(out.view(np.int32), _xgb_margin(default_model, X).view(np.int32))


@pytest.fixture
def artifact_copy(default_model, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(default_model, d)
    return d


def test_changed_library_byte_is_refused(artifact_copy):
    lib = artifact_copy / "libpredictor.so"
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0x01
    lib.write_bytes(bytes(data))
    with pytest.raises(artifact.ArtifactError, match="libpredictor.so does not match its manifest hash"):
        artifact.load(artifact_copy)


def test_changed_validation_rows_are_refused(artifact_copy):
    v = artifact_copy / "validation.npz"
    v.write_bytes(v.read_bytes() + b"x")
    with pytest.raises(artifact.ArtifactError, match="validation.npz does not match"):
        artifact.load(artifact_copy)


def test_missing_file_and_other_strategy_are_refused(artifact_copy):
    m = json.loads((artifact_copy / "manifest.json").read_text())
    m["strategy"]["sha256"] = "0" * 64
    (artifact_copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(artifact.ArtifactError, match="trained for strategy 'microstructure' .sha256 000000000000"):
        artifact.load(artifact_copy, strategy=load("microstructure"))
    (artifact_copy / "model.json").unlink()
    with pytest.raises(artifact.ArtifactError, match="missing"):
        artifact.load(artifact_copy)


def test_not_an_artifact(tmp_path):
    with pytest.raises(artifact.ArtifactError, match="not a model artifact"):
        artifact.load(tmp_path)


def test_regression_objective_is_bit_exact_too(tmp_path):
    X, inst, mid = _fresh_rows(30_000, seed=5)
    y = np.roll(X[:, 1], -3) * 2.0 + X[:, 4]  # any real-valued target
    tr, va = np.arange(0, 15_000), np.arange(15_000, 20_000)
    b = train(X[tr], y[tr], X[va], y[va], trees=60, depth=5, objective="reg:squarederror",
              feature_names=FEATURE_NAMES, progress_every=1000)
    build_artifact(tmp_path / "reg", b, X[20_000:], feature_names=FEATURE_NAMES,
                   strategy=load("microstructure").identity())
    pred = artifact.load(tmp_path / "reg")
    Xt = X[20_000:]
    assert np.array_equal(pred.predict_margin(Xt).view(np.int32), _xgb_margin(tmp_path / "reg", Xt).view(np.int32))

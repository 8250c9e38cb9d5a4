"""bench/_hftbacktest_model.py: hftbacktest's side of the backtest bench loads the engine's compiled
model only from bytes whose sha256 matches the artifact's manifest and the hash the engine
verified, and its loop calls it through the engine's call_predict exactly as the engine does.
(Run here in the engine's venv: the loader needs only numpy, numba and llvmlite.)"""
import hashlib
import importlib.util
import json
import shutil

import numpy as np
import pytest
from numba import njit

from tests.conftest import ROOT


def _loader():
    spec = importlib.util.spec_from_file_location("_bench_hftbacktest_model", ROOT / "bench" / "_hftbacktest_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def art(default_model):
    from models import artifact
    pred = artifact.load(str(default_model), backend="flat")
    m = pred.manifest
    lib, rows = m["backends"][pred.backend]["lib"], m["validation"]["rows_file"]
    return pred, lib, m["files"][lib], rows, m["files"][rows]


def test_the_peer_calls_the_same_model_through_its_address(art, default_model):
    pred, lib, lib_sha, rows, rows_sha = art
    M = _loader()
    _lib, addr = M.load(default_model, lib, lib_sha, rows, rows_sha)
    call_predict = M.call_predict

    @njit
    def score_all(addr, X, out):
        one = np.zeros(1, np.float32)
        for i in range(X.shape[0]):
            call_predict(addr, X[i], one)
            out[i] = one[0]

    with np.load(default_model / rows) as z:
        X = np.ascontiguousarray(z["X"], np.float32)
    got = np.empty(len(X), np.float32)
    score_all(addr, X, got)
    assert np.array_equal(got.view(np.int32), pred.predict_margin(X).view(np.int32))


def test_a_library_whose_hash_does_not_match_is_never_loaded(art, default_model, tmp_path):
    _, lib, lib_sha, rows, rows_sha = art
    M = _loader()
    bad = tmp_path / "art"
    shutil.copytree(default_model, bad)
    data = bytearray((bad / lib).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / lib).write_bytes(bytes(data))
    with pytest.raises(SystemExit, match=f"{lib} hashes to .*refusing to load it"):
        M.load(bad, lib, lib_sha, rows, rows_sha)
    # a manifest rewritten to match the changed library is refused too: its hash is not the engine's
    m = json.loads((bad / "manifest.json").read_text())
    m["files"][lib] = hashlib.sha256(bytes(data)).hexdigest()
    (bad / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(SystemExit, match=f"sha256 of {lib} is not the one the engine verified"):
        M.load(bad, lib, lib_sha, rows, rows_sha)

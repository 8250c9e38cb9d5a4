"""Every back end's float32 margin equals XGBoost's bit for bit, across objectives, depths,
tree counts, missing values, split-threshold rows, wide quantisation and many features."""
import json

import numpy as np
import pytest
import xgboost as xgb

from engine.strategy_load import load
from models import artifact, flat
from models.build import build_artifact

from .conftest import builtin_features

FEATURE_NAMES = builtin_features()


def _data(n, nf, seed, nan_frac=0.05):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, nf)).astype(np.float32)
    X[:, 1] = np.round(X[:, 1] * 4) / 4  # a feature with few distinct values: many rows sit on thresholds
    logit = X[:, 0] + 0.7 * X[:, 1] - 0.5 * X[:, 2] * X[:, 3] + rng.normal(scale=0.8, size=n)
    X[rng.random(X.shape) < nan_frac] = np.nan
    return X, logit


def _model(objective, depth, trees, nf=9, max_bin=256, seed=0):
    X, logit = _data(12_000, nf, seed)
    y = (logit > 0).astype(np.float32) if objective == "binary:logistic" else logit.astype(np.float32)
    params = {"objective": objective, "max_depth": depth, "eta": 0.1, "tree_method": "hist", "max_bin": max_bin,
              "nthread": 2, "seed": seed}
    return xgb.train(params, xgb.DMatrix(X, y), trees)


def _check_all_backends(tmp_path, booster, nf, generic, seed=1):
    names = list(FEATURE_NAMES) if not generic else [f"f{i}" for i in range(nf)]
    X, _ = _data(5000, nf, seed + 100, nan_frac=0.1)
    build_artifact(tmp_path / "m", booster, X, feature_names=names, generic=generic, backends=("flat",),
                   strategy=None if generic else load("microstructure").identity())
    man = artifact.read_manifest(tmp_path / "m")
    want = booster.predict(xgb.DMatrix(X), output_margin=True)
    checked = []
    for name in man["validation"]["checked_backends"]:
        pred = artifact.load(tmp_path / "m", backend=name)
        got = pred.predict_margin(X)
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), f"{name} differs from XGBoost"
        # k rows in one call (whole blocks of 8, a tail scored alone, both): the same bits
        assert bool(pred.rows_addr) == name.startswith("flat"), name  # (the others: one row at a time)
        for k in (1, 5, 8, 13, 64):
            got = np.concatenate([pred.predict_rows(X[i:i + k]) for i in range(0, 640, k)])
            assert np.array_equal(got.view(np.int32), want[:len(got)].view(np.int32)), f"{name} rows of {k} differ"
        checked.append(name)
    assert "flat-portable" in checked
    return man, checked


@pytest.mark.parametrize("objective,depth,trees", [  # (each case compiles its kernels with gcc: a few s to a minute)
    ("binary:logistic", 6, 200),
    ("binary:logistic", 8, 120),
    ("reg:squarederror", 5, 80),
    ("reg:squarederror", 7, 60),
    ("binary:logistic", 4, 500),
    ("binary:logistic", 9, 40),
    ("binary:logistic", 10, 30),
])
def test_flat_is_bit_exact(tmp_path, objective, depth, trees):
    man, checked = _check_all_backends(tmp_path, _model(objective, depth, trees), 9, generic=False)
    assert man["flat"]["simd_kernel"]  # byte ranks: the SIMD kernels take every depth up to 10
    cpu = artifact.cpu_flag_set()
    if "avx2" in cpu:
        assert "flat-avx2" in checked  # the SIMD builds and the portable one all agree
    if "avx512vbmi" in cpu:
        assert "flat-avx512" in checked


def test_flat_255_thresholds_stay_byte_ranks_and_exact(tmp_path):
    """255 thresholds on a feature (max_bin=255 gives that here): ranks 0..255 still fit a byte,
    and rank 255 (at or above the top threshold) is not mistaken for a missing value."""
    b = _model("reg:squarederror", 8, 100, nf=9, max_bin=255)
    man, checked = _check_all_backends(tmp_path, b, 9, generic=True)
    assert man["flat"]["max_thresholds_per_feature"] == 255
    assert man["flat"]["quantisation"] == "uint8_t" and man["flat"]["simd_kernel"] is True
    if "avx2" in artifact.cpu_flag_set():
        assert "flat-avx2" in checked


def test_flat_wide_quantisation_and_many_features(tmp_path):
    """> 254 thresholds on a feature (16-bit ranks) and 24 features: the slower paths, still exact."""
    b = _model("reg:squarederror", 8, 100, nf=24, max_bin=1024)
    man, _ = _check_all_backends(tmp_path, b, 24, generic=True)
    assert man["flat"]["quantisation"] == "uint16_t" and man["flat"]["max_thresholds_per_feature"] > 254
    assert man["flat"]["simd_kernel"] is False


def test_depth_over_ten_is_refused(tmp_path):
    b = _model("binary:logistic", 11, 3)
    b.save_model(str(tmp_path / "deep.json"))
    if max(_tree_depths(tmp_path / "deep.json")) <= flat.MAX_DEPTH:
        pytest.skip("XGBoost did not grow a tree past depth 10 on this data")
    with pytest.raises(flat.CompileError, match="depth"):
        flat.compile_flat(tmp_path / "deep.json", tmp_path / "out", 9)


def _depth(left, right, i=0):
    return 0 if left[i] == -1 else 1 + max(_depth(left, right, left[i]), _depth(left, right, right[i]))


def _tree_depths(path):
    trees = json.loads(path.read_text())["learner"]["gradient_booster"]["model"]["trees"]
    return [_depth(t["left_children"], t["right_children"]) for t in trees]


def test_backend_the_cpu_lacks_is_refused_and_auto_falls_back(tmp_path):
    _check_all_backends(tmp_path, _model("binary:logistic", 4, 30), 9, generic=False)
    mpath = tmp_path / "m" / "manifest.json"
    m = json.loads(mpath.read_text())
    for name in ("flat-avx2", "flat-avx512"):
        m["backends"][name]["requires"] = ["avx2", "no_such_cpu_feature"]
    mpath.write_text(json.dumps(m))
    with pytest.raises(artifact.ArtifactError, match="needs CPU features no_such_cpu_feature"):
        artifact.load(tmp_path / "m", backend="flat-avx2")
    assert artifact.load(tmp_path / "m", backend="flat").backend == "flat-portable"
    assert artifact.load(tmp_path / "m", backend="auto").backend == "flat-portable"


def test_changed_flat_library_is_refused(tmp_path):
    _check_all_backends(tmp_path, _model("binary:logistic", 4, 30), 9, generic=False)
    lib = tmp_path / "m" / "libflat_portable.so"
    data = bytearray(lib.read_bytes())
    data[-100] ^= 0xFF
    lib.write_bytes(bytes(data))
    with pytest.raises(artifact.ArtifactError, match="libflat_portable.so does not match"):
        artifact.load(tmp_path / "m", backend="flat-portable")


@pytest.mark.parametrize("build", ["avx512-emu", "avx2"])
@pytest.mark.parametrize("depth,trees", [(6, 300), (8, 100), (10, 30)])  # (enough trees for 255 thresholds)
def test_avx512_kernel_logic_is_exact_without_avx512(tmp_path, depth, trees, build):
    """The AVX-512 kernel, built with plain-C stand-ins for its intrinsics (tests/helpers/avx512_emu),
    gives XGBoost's bits row by row and k rows a call: its logic is checked on any CPU, not only on
    one with AVX-512 VBMI (where test_flat_is_bit_exact runs the real build). 255 thresholds on a
    feature and missing values included. The real AVX2 build on the same rows (its top levels
    compared 32 trees at a time as signed bytes: rank 255 against threshold 254 is the edge)."""
    import ctypes
    import subprocess
    from pathlib import Path

    from models.compile import base_margin_c
    b = _model("reg:squarederror", depth, trees, nf=9, max_bin=255)
    b.save_model(str(tmp_path / "m.json"))
    forest = flat.read_forest(tmp_path / "m.json")
    tab = flat.build_tables(forest)
    assert tab["kmax"] == 255 and flat.simd_ok(tab) and tab["depth"] == depth
    src = tmp_path / "flat.c"
    src.write_text(flat.generate_c(tab, base_margin_c(forest.base_score, forest.objective)))
    emu = Path(__file__).resolve().parent / "helpers" / "avx512_emu"
    lib = tmp_path / "libemu.so"
    if build == "avx2":
        if "avx2" not in artifact.cpu_flag_set():
            pytest.skip("this CPU has no AVX2")
        flags = flat.BUILDS["avx2"][0]
    else:
        flags = ["-O1", "-march=x86-64", "-D__AVX512VBMI__", "-D__AVX512BW__", f"-I{emu}"]
    subprocess.run([flat.CC, *flags, *flat.COMMON_FLAGS, "-o", str(lib), str(src), "-lm"], check=True)
    so = ctypes.CDLL(str(lib))
    X, _ = _data(2000, 9, 7, nan_frac=0.1)
    X[:50] = np.float32(1e30)  # at or past every top threshold: rank 255, not missing
    X[64:192] = np.nan_to_num(X[64:192], nan=0.5)  # two 64-row blocks with no missing value (its fast paths)
    X = np.ascontiguousarray(X)
    want = b.predict(xgb.DMatrix(X), output_margin=True)
    for fn in (so.engine_predict_batch, so.engine_predict_rows):
        got = np.empty(len(X), np.float32)
        fn(ctypes.c_void_p(X.ctypes.data), ctypes.c_int64(len(X)), ctypes.c_void_p(got.ctypes.data))
        assert np.array_equal(got.view(np.int32), want.view(np.int32))

"""The engine's compiled model, loaded inside hftbacktest's virtualenv as the engine loads it
(models/artifact.py; the engine's package cannot be imported there: it pins another numpy).

House rule: native code whose hash does not match is never loaded. The library's bytes are read
once, their sha256 checked against the artifact's manifest and against the hash the caller read
from the manifest it verified (models.artifact.load, signature included when a key is
configured), and those verified bytes are dlopened from a memfd, so the file cannot change
between the check and the load. Then the C ABI and feature count are checked and the stored
validation rows (hash-checked too) must give the manifest's margins bit for bit.

`call_predict` is the engine's own intrinsic (engine/intrinsics.py, loaded by path: it needs
only numba and llvmlite): the loop calls `void engine_predict(const float*, float*)` at an
address passed in as data, exactly as the engine's loops do.
"""
import ctypes
import hashlib
import importlib.util
import io
import json
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _intrinsics():
    spec = importlib.util.spec_from_file_location("_engine_intrinsics", ROOT / "engine" / "intrinsics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


call_predict = _intrinsics().call_predict


def _verified(art_dir, manifest, rel, want):
    if manifest["files"].get(rel) != want:
        raise SystemExit(f"{art_dir}: manifest's sha256 of {rel} is not the one the engine verified; refusing it")
    data = (art_dir / rel).read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise SystemExit(f"{art_dir}: {rel} hashes to {got[:16]}..., manifest says {want[:16]}...; refusing to load it")
    return data


def load(art_dir, lib_rel, lib_sha256, rows_rel, rows_sha256):
    """-> (ctypes library, engine_predict's address). Exits naming the file on any mismatch."""
    art_dir = Path(art_dir).resolve()
    manifest = json.loads((art_dir / "manifest.json").read_bytes())
    data = _verified(art_dir, manifest, lib_rel, lib_sha256)
    rows = _verified(art_dir, manifest, rows_rel, rows_sha256)
    fd = os.memfd_create(f"hftbacktest-peer-{lib_rel}", os.MFD_CLOEXEC)
    os.write(fd, data)
    lib = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
    if lib.engine_abi_version() != 1:
        raise SystemExit(f"{art_dir}/{lib_rel}: C ABI {lib.engine_abi_version()}, expected 1")
    nf = lib.engine_num_feature()
    if nf != len(manifest.get("feature_names", [])):
        raise SystemExit(f"{art_dir}/{lib_rel}: takes {nf} features, manifest names {len(manifest['feature_names'])}")
    with np.load(io.BytesIO(rows)) as z:
        X, want = np.ascontiguousarray(z["X"], np.float32), z["margin"]
    got = np.empty(len(X), np.float32)
    lib.engine_predict_batch.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.engine_predict_batch(X.ctypes.data, len(X), got.ctypes.data)
    bad = int((got.view(np.int32) != want.view(np.int32)).sum())
    if bad:
        raise SystemExit(f"{art_dir}/{lib_rel}: disagrees with the manifest's margins on {bad} of {len(X)} rows")
    return lib, ctypes.cast(lib.engine_predict, ctypes.c_void_p).value

"""The `fpga-sim` back end: the g++ emulation of the HLS kernel behind the engine's C ABI.

Generated on first use for an artifact (cached under $XDG_CACHE_HOME/engine/fpga/, keyed by the
model's hash), its files checked against fpga.json, loaded from verified bytes like every other
back end, then validated: bit for bit against the golden integer model on the validation rows,
and within the proven error bound of XGBoost's margins (not bit-exact with XGBoost: the leaves
are rounded to fixed point, which is the point).

models/ imports nothing from fpga/: importing this module registers the back end with
models/artifact.py (register_backend), so `artifact.load(DIR, backend="fpga-sim")` works in any
process that has imported it.
"""
from pathlib import Path

import numpy as np

from models import artifact
from models.artifact import ArtifactError, Predictor, dlopen_bytes


def cache_dir(model_sha, leaf_bits):
    import engine
    return Path(engine.cache_dir("fpga", f"{model_sha[:16]}-L{leaf_bits}"))


def load(art_dir, manifest, blobs, leaf_bits=16):
    from . import export
    from .fixed import FixedPointError
    model_sha = manifest["files"].get("model.json")
    if not model_sha:
        raise ArtifactError(f"{art_dir}: no model.json in the manifest")
    d = cache_dir(model_sha, leaf_bits)
    try:
        # this host's own cache, generated from the artifact verified (and signature-checked) above
        m = export.read(d, check_signature=False) if (d / "fpga.json").exists() else None
    except FixedPointError:
        m = None  # damaged or stale: regenerate
    if m is None or m["model_sha256"] != model_sha:
        print(f"[engine] generating the fpga-sim back end for {art_dir} (once) ...", flush=True,
              file=__import__("sys").stderr)
        try:
            m = export.generate(art_dir, d, leaf_bits)
        except (FixedPointError, RuntimeError) as e:
            raise ArtifactError(f"{art_dir}: fpga-sim: {e}") from None
    lib_bytes = (d / "libfpga_sim.so").read_bytes()
    import hashlib
    if hashlib.sha256(lib_bytes).hexdigest() != m["files"]["libfpga_sim.so"]:
        raise ArtifactError(f"{d}: libfpga_sim.so does not match fpga.json; refusing to load it")
    lib, fd = dlopen_bytes(lib_bytes, f"{Path(art_dir).name}-fpga-sim")
    import ctypes
    lib.engine_predict_batch.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    lib.engine_predict_batch.restype = None
    nf = lib.engine_num_feature()
    addr = ctypes.cast(lib.engine_predict, ctypes.c_void_p).value
    pred = Predictor(lib, addr, nf, manifest, str(art_dir), "fpga-sim", fd, [])
    # validation: golden bit for bit, XGBoost within the bound, on the artifact's rows
    import io
    with np.load(io.BytesIO(blobs[manifest["validation"]["rows_file"]])) as z:
        X, margin = z["X"], z["margin"]
    fm = export.fixed_model(d, m)
    got = pred.predict_margin(X)
    want = (fm.score_int(X).astype(np.float64) / float(1 << fm.leaf_bits)).astype(np.float32)
    if not np.array_equal(got.view(np.int32), want.view(np.int32)):
        raise ArtifactError(f"{d}: the emulation disagrees with the golden fixed-point model")
    err = float(np.abs(got.astype(np.float64) - margin.astype(np.float64)).max())
    if err > fm.error_bound():
        raise ArtifactError(f"{d}: score error {err:g} exceeds the proven bound {fm.error_bound():g}")
    pred.notes = [f"fixed point: max |score - XGBoost margin| {err:.3g} <= bound {fm.error_bound():.3g}"]
    return pred


artifact.register_backend("fpga-sim", load)

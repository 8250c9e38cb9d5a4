"""`engine fpga generate MODEL --out DIR`: fixed point, HLS C++, its emulation, RTL, checked.

MODEL is an engine artifact directory (its model.json and validation rows are used) or an
XGBoost JSON file. Validation rows are the artifact's plus rows that probe every split value
exactly, one float32 step either side, and as missing; export fails unless XGBoost's pred_leaf
agrees with the fixed-point model on 100% of them. DIR gets fpga.json (a manifest: sha256 of
every file, the fixed-point parameters, the checks) next to model.json, hls/, rtl/, the
emulation library and testbench, and the vectors (rows.f32, golden.i64).
"""
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from .fixed import FixedPointError, check_against_xgboost, load_xgboost_json, make_fixed

FORMAT = 1


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def model_source(src, work_dir):
    """(model.json path, validation rows or None, artifact manifest or None). An artifact is
    verified like every load (its signature when a verify key is configured, every file's
    sha256), and the verified bytes of its model.json are written to work_dir/model.json: every
    later step reads that copy, never the artifact again."""
    import io

    from models.artifact import ArtifactError, read_manifest, verify_files
    from models.signing import verify_key
    p = Path(src)
    dest = Path(work_dir) / "model.json"
    try:
        if p.is_dir():
            m = read_manifest(p)
            blobs = verify_files(p, m)
            if "model.json" not in blobs:
                raise ArtifactError(f"{p}: model.json is not covered by the manifest")
            X = None
            vf = m.get("validation", {}).get("rows_file")
            if vf in blobs:
                with np.load(io.BytesIO(blobs[vf])) as z:
                    X = np.asarray(z["X"], np.float32)
            dest.write_bytes(blobs["model.json"])
            return dest, X, m
        if p.suffix != ".json" or not p.exists():
            raise FixedPointError(f"{src}: give an engine artifact directory or an XGBoost .json model")
        key = verify_key()
        if key is not None:
            raise FixedPointError(f"{src}: a bare XGBoost .json has no signature, and a verify key is configured "
                                  f"({key.describe()}); refusing it. Compile it into a signed artifact (engine "
                                  "compile MODEL.json --out DIR --sign-key PRIVATE_KEY) and generate from that")
    except ArtifactError as e:
        raise FixedPointError(str(e)) from None
    shutil.copyfile(p, dest)
    return dest, None, None


def probe_rows(trees, n_random=2000, seed=0):
    """Rows that sit exactly on, and one float32 step around, every split value, plus missing
    values and random rows inside the split range: where a fixed-point grid would go wrong."""
    rng = np.random.default_rng(seed)
    nf = trees.n_features
    inner = trees.feature >= 0
    lo = np.zeros(nf, np.float32)
    hi = np.ones(nf, np.float32)
    per = []
    for f in range(nf):
        th = np.unique(trees.threshold[inner & (trees.feature == f)])
        if th.size:
            lo[f], hi[f] = th.min(), th.max()
        per.append(np.concatenate([th, np.nextafter(th, np.float32(-np.inf)), np.nextafter(th, np.float32(np.inf))]))
    k = max(len(v) for v in per) if per else 0
    X = np.empty((k + n_random, nf), np.float32)
    for f in range(nf):
        v = per[f]
        X[:k, f] = rng.choice(v, k) if len(v) else 0.0
        span = float(hi[f]) - float(lo[f])
        X[k:, f] = (lo[f] - 0.1 * abs(span) + rng.random(n_random) * 1.2 * (span if span else 1.0)).astype(np.float32)
    miss = rng.random(X.shape) < 0.05
    X[miss] = np.nan
    return X


def _check_strategy(src, art, trees, strategy):
    """The kernel's input row is the strategy's feature row: same count, and an artifact must
    have been trained for that strategy."""
    if art is not None:
        from models.artifact import ArtifactError, check_strategy
        if strategy.universe and not strategy.members:  # (the kernel reads rows: the binding it was trained on)
            strategy.members = tuple((art.get("strategy") or {}).get("universe") or ())
        try:
            check_strategy(src, art, strategy)
        except ArtifactError as e:
            raise FixedPointError(str(e)) from None
    if trees.n_features != len(strategy.features):
        raise FixedPointError(f"{src}: the model takes {trees.n_features} features; strategy {strategy.describe()} "
                              f"fills {len(strategy.features)}")
    return strategy.identity()


def generate(src, out_dir, leaf_bits=16, max_width=None, say=lambda m: None, strategy=None):
    """Write an FPGA directory for `src`; returns its manifest dict. Raises FixedPointError.
    `strategy` (engine/strategy_load.Strategy): check the model is that strategy's."""
    from models import signing

    from . import hls, rtl
    t0 = time.monotonic()
    sign_key = signing.sign_key()  # a bad key fails now, not after the work
    out = Path(out_dir)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        model_json, X_art, art = model_source(src, tmp)
        trees = load_xgboost_json(model_json)
        ident = _check_strategy(src, art, trees, strategy) if strategy is not None else (art or {}).get("strategy")
        fm = make_fixed(trees, leaf_bits, **({"max_width": max_width} if max_width else {}))
        X = probe_rows(trees)
        if X_art is not None:
            X = np.concatenate([X_art, X])
        check = check_against_xgboost(fm, model_json, X)
        if check["leaf_agreement"] < 1.0:
            raise FixedPointError(f"{src}: the fixed-point model reaches XGBoost's leaf on only "
                                  f"{check['leaf_agreement']:.4%} of {len(X)} validation rows (grids narrowed by "
                                  f"--max-width?); refusing to export")
        _, levels = hls.generate(fm, str(tmp), model_name=str(src))
        _, cycles = rtl.generate(fm, str(tmp))
        say(f"compiling the HLS emulation ({fm.n_trees} trees) ...")
        lib, tb = hls.compile_emulation(str(tmp))
        X.tofile(tmp / "rows.f32")
        fm.score_int(X).astype(np.int64).tofile(tmp / "golden.i64")
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        manifest = {
            "format": FORMAT, "source": str(src), "model_sha256": _sha(model_json),
            "artifact_model_id": (art or {}).get("files", {}).get("model.json", "")[:12] or None,
            "n_trees": fm.n_trees, "n_features": trees.n_features, "objective": trees.objective, "strategy": ident,
            "leaf_bits": fm.leaf_bits, "max_width": max_width, "acc_bits": fm.acc_bits, "leaf_width": fm.leaf_width,
            "feature_frac_bits": [int(x) for x in fm.frac], "feature_width": [int(x) for x in fm.width],
            "feature_exact": [bool(x) for x in fm.exact], "base_q": fm.base_q,
            "adder_levels": levels, "rtl_cycles": cycles, "clock_mhz": hls.CLOCK_MHZ,
            "validation": {**check, "rows_file": "rows.f32", "golden_file": "golden.i64"},
            "files": {f: _sha(tmp / f) for f in files}, "created_unix": int(time.time()),
            "seconds": round(time.monotonic() - t0, 1),
        }
        raw = (json.dumps(manifest, indent=2) + "\n").encode()
        (tmp / "fpga.json").write_bytes(raw)
        if sign_key is not None:  # --sign-key / ENGINE_MODEL_SIGN_KEY: fpga.sig
            signing.write_signature(tmp, "fpga.json", raw, sign_key)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def read(out_dir, verify=True, check_signature=True):
    """The manifest of an FPGA directory, every file's hash checked. With a verify key configured
    fpga.json must be signed by it (fpga.sig: `engine fpga generate --sign-key`, or `engine model
    sign DIR`) before anything in the directory is run. check_signature=False: only for the
    fpga-sim back end's own cache, which this host generated from a verified artifact."""
    d = Path(out_dir)
    try:
        raw = (d / "fpga.json").read_bytes()
        m = json.loads(raw)
    except (OSError, ValueError) as e:
        raise FixedPointError(f"{d}: not an FPGA directory from `engine fpga generate` ({e})") from None
    if check_signature:  # over the bytes just parsed, before any file of the directory is used
        from models.artifact import ArtifactError
        from models.signing import check
        try:
            check(d, "fpga.json", raw)
        except ArtifactError as e:
            raise FixedPointError(str(e)) from None
    if m.get("format") != FORMAT:
        raise FixedPointError(f"{d}: FPGA directory format {m.get('format')}, this engine reads {FORMAT}")
    if verify:
        for rel, want in m["files"].items():
            p = d / rel
            if not p.exists() or _sha(p) != want:
                raise FixedPointError(f"{d}: {rel} does not match its hash in fpga.json; regenerate the directory")
    return m


def fixed_model(out_dir, m=None):
    """Rebuild the FixedModel of a generated directory (deterministic from model.json)."""
    m = m or read(out_dir)
    fm = make_fixed(load_xgboost_json(Path(out_dir) / "model.json"), m["leaf_bits"],
                    **({"max_width": m["max_width"]} if m.get("max_width") else {}))
    return fm

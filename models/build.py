"""Train XGBoost and turn a booster into a verified artifact directory."""
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

from . import artifact, compile as tlcompile, flat, xgb_backend


QUIET = threading.Event()  # --quiet (engine train, engine run): progress lines off, warnings kept


def set_quiet(on):
    (QUIET.set if on else QUIET.clear)()


def log(msg):
    if QUIET.is_set() and not msg.startswith("warning"):
        return
    print(f"[model] {msg}", file=sys.stderr, flush=True)


def train(X_train, y_train, X_valid, y_valid, *, trees=200, depth=6, eta=0.1,
          objective="binary:logistic", feature_names=None, seed=0, progress_every=50, early_stopping=None,
          nthread=None):
    """XGBoost hist; with early_stopping, stop after that many rounds without a better validation
    score and keep only the trees up to the best round. nthread: default every core."""
    import xgboost as xgb

    params = {"objective": objective, "max_depth": depth, "eta": eta, "tree_method": "hist",
              "max_bin": 256, "nthread": nthread or os.cpu_count() or 1, "seed": seed,
              # the last metric is the one early stopping watches
              "eval_metric": ["auc", "logloss"] if objective.startswith("binary") else ["rmse"]}
    dtrain = xgb.DMatrix(X_train, y_train, feature_names=list(feature_names) if feature_names else None)
    dvalid = xgb.DMatrix(X_valid, y_valid, feature_names=list(feature_names) if feature_names else None)

    class Progress(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            if (epoch + 1) % progress_every == 0 or epoch + 1 == trees:
                metrics = ", ".join(f"{k} {v[-1]:.4f}" for k, v in evals_log.get("valid", {}).items())
                log(f"  tree {epoch + 1}/{trees}: valid {metrics}")
            return False

    b = xgb.train(params, dtrain, trees, evals=[(dvalid, "valid")], verbose_eval=False, callbacks=[Progress()],
                  early_stopping_rounds=early_stopping)
    if early_stopping and b.best_iteration + 1 < b.num_boosted_rounds():
        log(f"  early stopping: best validation round {b.best_iteration + 1}")
        b = b[: b.best_iteration + 1]
    return b


def _quarters(t0):
    """A progress(done, total) that logs each quarter of TL2cgen's translation units compiled."""
    said = [0]

    def progress(done, total):
        q = 4 * done // total
        if total >= 8 and q > said[0] and done < total:
            said[0] = q
            log(f"  TL2cgen: {done}/{total} translation units compiled in {time.time() - t0:.0f} s")
    return progress


def threshold_rows(booster, X_base, n, rng):
    """Rows with features set exactly at (and one ulp under) the model's split thresholds."""
    d = json.loads(booster.save_raw("json"))
    splits = []
    for t in d["learner"]["gradient_booster"]["model"]["trees"]:
        left = np.asarray(t["left_children"])
        feat = np.asarray(t["split_indices"])[left != -1]
        thr = np.asarray(t["split_conditions"], np.float32)[left != -1]
        splits.extend(zip(feat.tolist(), thr.tolist(), strict=True))
    if not splits:
        return X_base[:0]
    rows = X_base[rng.integers(0, len(X_base), n)].copy()
    for r in rows:
        for _ in range(3):
            f, t = splits[rng.integers(len(splits))]
            t = np.float32(t)
            r[f] = t if rng.random() < 0.5 else np.nextafter(t, np.float32(-np.inf))
    return rows


def validation_rows(booster, X_holdout, rng, n=2000):
    base = X_holdout[rng.permutation(len(X_holdout))[:n]]
    nan_rows = base[: max(1, n // 4)].copy()
    nan_rows[rng.random(nan_rows.shape) < 0.3] = np.nan
    return np.concatenate([base, nan_rows, threshold_rows(booster, base, max(1, n // 4), rng)]).astype(np.float32)


def _compile_backends(tmp, booster, n_features, wanted):
    """The back ends asked for (treelite and/or flat) compiled from tmp/model.json into tmp, and
    XGBoost's own behind the same C ABI: (manifest's `backends`, TL2cgen's or the objective's
    info, the flat build's info or {})."""
    if not wanted or not wanted <= {"treelite", "flat"}:
        raise ValueError(f"back ends to build: treelite and/or flat, got {sorted(wanted)}")
    backends = {}
    p, objective = tlcompile.base_score(tmp / "model.json")
    tlcompile.base_margin_c(p, objective)  # refuses unsupported objectives before any work
    cinfo, finfo = {"objective": objective, "base_score": p}, {}
    if "flat" in wanted:
        t0 = time.time()
        flat_libs, finfo = flat.compile_flat(tmp / "model.json", tmp, n_features)
        log(f"  flat branch-free kernel ({', '.join(flat_libs)}) compiled in {time.time() - t0:.1f} s")
        for name in flat.BUILDS:  # fastest first
            backends[f"flat-{name}"] = {"lib": flat_libs[name], "requires": finfo["requires"][name]}
    if "treelite" in wanted:
        log(f"compiling {booster.num_boosted_rounds()} trees with TL2cgen + gcc (seconds for the default "
            "model, minutes for hundreds of deep trees)")
        t0 = time.time()
        lib, cinfo = tlcompile.compile_treelite(tmp / "model.json", tmp, n_features, _quarters(t0))
        log(f"  compiled in {time.time() - t0:.1f} s")
        backends["treelite"] = {"lib": lib.name, "requires": []}
    # the reference, behind the same C ABI (validation only: never chosen by `auto`)
    backends["xgboost"] = {"lib": xgb_backend.compile_shim(tmp), "requires": [], "model": "model.json"}
    return backends, cinfo, finfo


def _manifest_fields(name, booster, X, *, backends, cinfo, finfo, treelite, generic, feature_names, strategy, info):
    """The manifest's fields but the drift sketch and the back ends checked."""
    return {
        "name": name, "created_unix": int(time.time()), "generic": generic,
        "feature_names": list(feature_names), "strategy": None if generic else strategy,
        "num_trees": booster.num_boosted_rounds(), "objective": cinfo["objective"],
        "base_score": cinfo["base_score"], "versions": artifact.versions(),
        "compiler": {"cc": tlcompile.CC, "cc_version": tlcompile.gcc_version(),
                     "treelite_flags": tlcompile.CFLAGS if treelite else None},
        "flat": {k: finfo[k] for k in ("depth", "quantisation", "simd_kernel", "kernels", "max_thresholds_per_feature",
                                       "flags")} if finfo else None,
        "backends": backends,
        "validation": {"rows_file": "validation.npz", "rows": int(len(X)),
                       "nan_rows": int(np.isnan(X).any(axis=1).sum())},
        "training": info or {},
    }


def _check_bit_exact(tmp, runnable, X, want):
    """The same checks a user's load runs, for every back end this CPU runs: each one's margins
    on the validation rows, bit for bit XGBoost's."""
    for name in runnable:
        pred = artifact.load(tmp, backend=name)
        same = np.array_equal(pred.predict_margin(X).view(np.int32), want.view(np.int32))
        pred.release()
        if not same:
            raise tlcompile.CompileError(f"the {name} back end is not bit-exact with XGBoost")


def build_artifact(out_dir, booster, X_holdout, *, feature_names, generic=False, info=None, seed=0,
                   backends=("treelite", "flat"), strategy=None, reference=None):
    """Compile, check bit-exactness against XGBoost, write the artifact atomically. `strategy`:
    the identity of the strategy whose features it was trained on (Strategy.identity()); the
    engine refuses to run the model with any other strategy. reference: the drift reference rows
    (every row the strategy scores in the training data: models/drift.py Reference), whose feature
    and score distributions the manifest keeps."""
    if strategy is None and not generic:
        raise ValueError("a model artifact names the strategy it was trained for (or is generic)")
    if len(X_holdout) < artifact.MIN_VALIDATION_ROWS:  # every load refuses fewer stored rows (manifest.py says why)
        raise ValueError(f"{len(X_holdout)} held-out rows: the bit-exact check stores rows drawn from them and needs "
                         f"at least {artifact.MIN_VALIDATION_ROWS} (give more data)")
    import xgboost as xgb

    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        booster.save_model(str(tmp / "model.json"))
        wanted = set(backends)
        backends, cinfo, finfo = _compile_backends(tmp, booster, len(feature_names), wanted)
        rng = np.random.default_rng(seed)
        X = validation_rows(booster, X_holdout, rng)
        want = booster.predict(xgb.DMatrix(X, feature_names=booster.feature_names),
                               output_margin=True).astype(np.float32)
        np.savez(tmp / "validation.npz", X=X, margin=want)
        fields = _manifest_fields(out_dir.name, booster, X, backends=backends, cinfo=cinfo, finfo=finfo,
                                  treelite="treelite" in wanted, generic=generic, feature_names=feature_names,
                                  strategy=strategy, info=info)
        if reference is not None and len(reference):
            from .drift import sketch
            ref = np.ascontiguousarray(reference, np.float32)
            margins = booster.predict(xgb.DMatrix(ref, feature_names=booster.feature_names), output_margin=True)
            fields["drift"] = sketch(ref, margins, feature_names)
        cpu = artifact.cpu_flag_set()
        runnable = [n for n, b in backends.items() if set(b["requires"]) <= cpu]
        fields["validation"]["checked_backends"] = runnable
        manifest = artifact.write_manifest(tmp, fields)
        _check_bit_exact(tmp, runnable, X, want)
        log(f"  {', '.join(runnable)}: bit-exact with XGBoost on {len(X)} validation rows "
            f"({fields['validation']['nan_rows']} with missing values, split-threshold rows included)")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
        return manifest
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        from engine.outputs import as_output_error, is_write_error
        if is_write_error(e, str(tmp)):  # a full disk: one line naming the artifact, nothing left
            raise as_output_error(e, out_dir, "the model artifact", inside=str(tmp)) from None
        raise

"""`engine train` and `engine compile`: data sets from sources, XGBoost with early stopping,
test-split metrics, and verified artifacts."""
import json
from pathlib import Path

import numpy as np

from . import dataset
from .build import build_artifact, log, train


def source_ticks(uri, default_ticks, strategy=None):
    """Tick words from a source URI, with the book levels the strategy needs: the simulator
    (default_ticks unless count= says), or any file source read to its end.
    Returns (words, instruments, book levels per side the stream carries, instrument names)."""
    return _read(uri, default_ticks, strategy)[:4]


def input_streams(sources, default_ticks, strategy=None, merge=False):
    """[(what, words, instruments, levels, names, specs)]: each source read to its end, or (merge)
    all of them as one stream in receive-time order, instruments named VENUE:SYMBOL
    (engine/universe.py merge: what `engine run --feed A --feed B` reads)."""
    if not merge or len(sources) < 2:  # (one at a time: a list of days is not held in memory at once)
        for u in sources:
            yield (u, *_read(u, default_ticks, strategy))
        return
    streams = [(u, *_read(u, default_ticks, strategy)) for u in sources]
    from engine.universe import merge as merged, source_labels
    depths = [s[3] for s in streams]
    if strategy is not None and strategy.depth > min(depths):
        k = depths.index(min(depths))
        raise ValueError(f"{sources[k]}: carries {depths[k]} book levels a side and strategy {strategy.path} reads "
                         f"DEPTH {strategy.depth}")
    words, names, specs = merged([(s[1], s[4], s[5]) for s in streams], source_labels(sources))
    yield " + ".join(sources), words, max(1, len(names)), max(depths), names, specs


def _read(uri, default_ticks, strategy):
    from feeds.core.sources import open_source, unless_given
    if strategy is not None:
        uri = unless_given(uri, depth=strategy.source_depth())
    uri = unless_given(uri, count=default_ticks)  # (a synthetic source's length, unless it says)
    src = open_source(uri)
    if src.live:
        raise ValueError(f"{uri}: a live source has no end to train on; record it first")
    for w in getattr(getattr(src, "file", None), "warnings", []):  # an incomplete tick file
        log(f"warning: {w}")
    parts = [b.copy() for b in src.batches()]
    words = np.concatenate(parts) if parts else np.zeros((0, 8), np.int64)
    names = list(src.instruments)
    return words, max(1, len(names)), int(getattr(src, "depth", 0)), names, list(getattr(src, "specs", None) or [])


def labels_for(inst, mid, ts, horizon, unit, kind, dead_band_bps):
    if kind == "binary":
        if unit == "ticks":
            return dataset.binary_labels(inst, mid, horizon)
        return dataset.binary_labels_time(inst, mid, ts, int(horizon * 1e6))
    return dataset.ternary_labels(inst, mid, ts, horizon, unit, dead_band_bps)


def build_dataset(host, sources, *, ticks, horizon, unit, kind, dead_band_bps, merge=False, reference=None):
    """Features and labels per source (state never leaks across sources), concatenated in order;
    merge: the sources as one stream (input_streams); reference (models.drift.Reference): gets every
    row the strategy scores, labelled or not (the drift sketch's rows: what `engine model drift` and
    `engine run --drift` bin)."""
    Xs, ys, ts, n_inst = [], [], [], 1
    for uri, words, k, levels, names, specs in input_streams(sources, ticks, host.strategy, merge):
        X, inst, mid, idx = dataset.featurize(host, words, k, levels, names, specs, uri)
        if reference is not None:
            reference.add(X)
        # time horizons in exchange time; a UNIVERSE strategy's rows in receive time (a member is scored
        # on other members' ticks too, whose exchange clocks interleave out of order)
        t = words[idx, 2] if host.strategy.universe else words[idx, 1]
        y = labels_for(inst, mid, t, horizon, unit, kind, dead_band_bps)
        keep = y != dataset.NO_LABEL
        Xs.append(X[keep])
        ys.append(y[keep])
        ts.append(t[keep])
        n_inst = max(n_inst, k)
        log(f"  {uri}: {len(words):,} ticks -> {len(X):,} scored rows, {int(keep.sum()):,} of them labelled")
    return np.concatenate(Xs), np.concatenate(ys), n_inst, np.concatenate(ts)


def time_embargo(ts, n, horizon_ns, fractions=(0.7, 0.15, 0.15)):
    """Rows to drop before each split boundary so no training (or validation) label looks past
    the boundary: the rows whose exchange time is within the horizon of the boundary row's."""
    e = 0
    a = int(n * fractions[0])
    for b in (a, a + int(n * fractions[1])):
        if 0 < b < n:
            e = max(e, int(np.count_nonzero(ts[:b] > ts[b] - horizon_ns)))
    return e


def metrics(objective, y, pred):
    if objective == "binary:logistic":
        p = np.clip(pred.astype(np.float64), 1e-7, 1 - 1e-7)
        return {"auc": dataset.auc(y, pred), "logloss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))),
                "accuracy": float(((pred > 0.5) == y).mean())}
    err = pred - y
    nz = y != 0
    return {"rmse": float(np.sqrt(np.mean(err ** 2))),
            "ic": float(np.corrcoef(pred, y)[0, 1]) if np.std(pred) > 0 and np.std(y) > 0 else float("nan"),
            "direction_accuracy": float((np.sign(pred[nz]) == np.sign(y[nz])).mean()) if nz.any() else float("nan")}


def run_train(sources, out, *, host, trees=200, depth=6, eta=0.1, horizon=20, unit="ticks", labels="binary",
              dead_band_bps=0.5, objective=None, early_stopping=20, ticks=400_000, backends=("treelite", "flat"),
              seed=0, merge=False, info_extra=None):
    """Train a model for the strategy compiled in `host` (engine/strategy_build.py); merge: the
    sources as one stream (input_streams); info_extra: more for the manifest's `training`."""
    s = host.strategy
    objective = objective or ("binary:logistic" if labels == "binary" else "reg:squarederror")
    if labels == "ternary" and objective == "binary:logistic":
        raise ValueError("ternary labels (-1, 0, +1) need a regression objective such as reg:squarederror")
    s.check_scale(objective == "binary:logistic")
    from engine.outputs import check_writable
    check_writable(out, "the model artifact", directory=True)  # before the work
    names = list(s.features)
    log(f"[1/4] building the data set from {len(sources)} source(s) with strategy {s.describe()}: "
        f"horizon {horizon} {unit}, {labels} labels")
    from .drift import Reference
    ref = Reference()
    X, y, n_inst, ts = build_dataset(host, sources, ticks=ticks, horizon=horizon, unit=unit, kind=labels,
                                     dead_band_bps=dead_band_bps, merge=merge, reference=ref)
    # labels look `horizon` ahead: rows that close to a split boundary would leak across it
    embargo = horizon * n_inst if unit == "ticks" else time_embargo(ts, len(X), int(horizon * 1e6))
    tr, va, te = dataset.time_split(len(X), embargo=embargo)
    if min(len(tr), len(va), len(te)) < 100:
        raise ValueError(f"only {len(X)} labelled rows: too few to train, validate and test (give more ticks)")
    log(f"[2/4] split by time: train {len(tr):,}, validation {len(va):,}, test {len(te):,} "
        f"(embargo {embargo} rows between them)")
    log(f"[3/4] training XGBoost {objective}: up to {trees} trees of depth {depth}, early stopping after "
        f"{early_stopping} rounds without improvement")
    b = train(X[tr], y[tr], X[va], y[va], trees=trees, depth=depth, eta=eta, objective=objective,
              feature_names=names, seed=seed, early_stopping=early_stopping)
    info = {"sources": list(sources), "horizon": horizon, "horizon_unit": unit, "labels": labels,
            "dead_band_bps": dead_band_bps if labels == "ternary" else None,
            "rows": {"train": int(len(tr)), "valid": int(len(va)), "test": int(len(te))}, "embargo_rows": embargo,
            **(info_extra or {})}
    return finish(out, b, X[te], y[te], ref.rows(), objective, s, info, backends)


def finish(out, b, X_test, y_test, X_ref, objective, s, info, backends):
    """A trained booster's test metrics, then its verified artifact (manifest `training`: info;
    X_ref: the drift sketch's rows, models.drift.Reference)."""
    import xgboost as xgb
    names = list(s.features)
    used = b.num_boosted_rounds()
    pred = b.predict(xgb.DMatrix(X_test, feature_names=names))
    m = metrics(objective, y_test.astype(np.float64), pred)
    log("  test split: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()) + f" ({used} trees kept)")
    log("[4/4] compiling and verifying")
    info = {**info, "trees_kept": used, "test_metrics": m}
    return build_artifact(Path(out), b, X_test, feature_names=names, info=info, backends=backends,
                          strategy=s.identity(), reference=X_ref)


def run_compile(model_json, out, *, host=None, generic=False, backends=("treelite", "flat")):
    """Compile an XGBoost model trained elsewhere into an artifact for the strategy in `host`
    (its features by name and order), or --generic (no strategy: predict and benchmarks only)."""
    import xgboost as xgb
    path = Path(model_json)
    try:
        b = xgb.Booster(model_file=str(path))
    except xgb.core.XGBoostError as e:
        raise ValueError(f"{path}: not an XGBoost model: {str(e).splitlines()[0]}") from None
    names = b.feature_names
    nf = b.num_features()
    if generic:
        names = names or [f"f{i}" for i in range(nf)]
        rng = np.random.default_rng(0)
        X = rng.normal(size=(4000, nf)).astype(np.float32)  # plus split-threshold rows, added by the build
    else:
        want = list(host.strategy.features)
        if names != want:
            got = names or [f"(unnamed {i})" for i in range(nf)]
            missing = [n for n in want if n not in got]
            extra = [n for n in got if n not in want]
            detail = []
            if missing:
                detail.append(f"missing {missing}")
            if extra:
                detail.append(f"not in the engine's schema {extra}")
            if not missing and not extra:
                detail.append(f"same names in another order: {got}")
            raise ValueError(f"{path}: feature names do not match strategy {host.strategy.describe()}'s FEATURES "
                             f"{want}: {'; '.join(detail)}. Retrain on the strategy's features, or pass --generic "
                             "(usable for prediction and benchmarks, refused by `engine run`)")
        import json

        from .manifest import describe_model, score_kind
        objective = json.loads(b.save_config())["learner"]["objective"]["name"]
        why = host.strategy.score_mismatch(score_kind({"objective": objective}), describe_model({"objective": objective}))
        if why:  # refused now, not after the compile when a command first loads it
            raise ValueError(f"{path}: {why}")
        if host.strategy.universe:  # (its manifest records the instruments its members were trained on)
            raise ValueError(f"{path}: strategy {host.strategy.describe()} names a UNIVERSE, and a compiled model "
                             "records the instruments its members were bound to when it was trained: train it with "
                             "engine train (--merge SOURCES), which binds them")
        words, k, levels, _ = source_ticks("synthetic://?instruments=4&seed=4242", 60_000, host.strategy)
        X = dataset.featurize(host, words, k, levels)[0]
        if len(X) < 100:  # a strategy that scores little of the synthetic market: random rows instead
            X = np.random.default_rng(0).normal(size=(4000, nf)).astype(np.float32)
    return build_artifact(Path(out), b, X, feature_names=names, generic=generic, backends=backends,
                          info={"compiled_from": str(path.resolve())},
                          strategy=None if generic else host.strategy.identity())


def read_rows(path, num_feature):
    try:
        X = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read a .npy array: {e}") from None
    if X.ndim != 2 or X.shape[1] != num_feature:
        raise ValueError(f"{path}: rows must be a 2-d array with {num_feature} columns, got shape {X.shape}")
    if X.dtype != np.float32:
        if X.dtype.kind not in "fiu":
            raise ValueError(f"{path}: rows must be numbers (float32, NaN = missing), got {X.dtype}")
        X = X.astype(np.float32)
    return np.ascontiguousarray(X)


def predict_file(art_dir, backend, inp, out, margin):
    """Rows through the chosen back end, one C-ABI call per row; written atomically (a temporary
    beside `out`, renamed; removed on any failure, which names `out`)."""
    import io
    import os

    from engine.outputs import atomic_file, check_writable

    from . import artifact
    check_writable(out, "predictions")  # before any work
    m = artifact.read_manifest(art_dir)
    X = read_rows(inp, len(m["feature_names"]))
    pred = artifact.load(art_dir, backend=backend)  # xgboost too: same C ABI
    y = pred.predict_margin(X)
    used = pred.backend
    if not margin and m.get("objective") == "binary:logistic":
        y = (np.float32(1) / (np.float32(1) + np.exp(-y))).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, y)  # (numpy's own writes to a file report a full disk as "N requested and M written")
    with atomic_file(out, "predictions") as tmp:
        with open(tmp, "wb") as f:
            f.write(buf.getbuffer())
            f.flush()
            os.fsync(f.fileno())
    return used, len(y)


def describe(manifest):
    return json.dumps(manifest, indent=2)

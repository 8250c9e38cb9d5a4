"""A strategy's default model: trained on the synthetic market on first use, cached afterwards
(keyed by the strategy's identity, so an edited strategy gets a model of its own)."""
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from engine import private_tree

from . import artifact, dataset
from .build import build_artifact, log, train

# 600k ticks: smaller sets trained worse for every shipped strategy (held-out AUC at 400k 0.002-0.009
# lower, at 300k 0.010-0.016, at 200k 0.014-0.030: bench/default_data.py), for about a second of
# training saved on an idle machine; the time a first run waits is numba's compile and, on a busy
# machine, XGBoost's threads (below), not the rows.
# One thread: XGBoost's OpenMP threads spin at every barrier, so on cores that other work is using
# two threads took 16-74 s for what takes 1.1 s idle (six busy processes on this 2-core VM; one
# thread: 6.5 s busy, 1.8 s idle); and the model is the same on every machine, whatever its cores.
DEFAULT = {"source": "synthetic://?instruments=4&seed=20240808&trade_prob=0.1",
           "ticks": 600_000, "horizon": 20, "trees": 200, "depth": 6, "eta": 0.1, "threads": 1}


def cache_root():
    from engine import cache_dir
    return Path(cache_dir("models"))


def default_key(strategy):
    h = hashlib.sha256(json.dumps(DEFAULT, sort_keys=True).encode())
    h.update(json.dumps(strategy.identity(), sort_keys=True).encode())
    h.update(json.dumps(artifact.versions(), sort_keys=True).encode())
    root = Path(__file__).resolve().parent.parent
    for mod in ("models/compile.py", "models/flat.py", "models/templates/flat.c.tpl", "models/trees.py", "engine/render.py",
                "models/build.py", "models/dataset.py", "models/drift.py", "models/default.py", "feeds/synthetic/market.py",
                "engine/host_template.py"):
        h.update((root / mod).read_bytes())
    return h.hexdigest()[:16]


def default_rows(host, source=None, ticks=None, verbose=False, reference=None):
    """The default model's labelled rows: the strategy's features over `ticks` of the synthetic
    market, labelled by the mid `horizon` of the instrument's scored ticks later; reference
    (models.drift.Reference) gets every scored row. Returns X, y and the number of instruments."""
    from .training import source_ticks
    words, k, levels, _ = source_ticks(source or DEFAULT["source"], ticks or DEFAULT["ticks"], host.strategy)
    if verbose:
        log("[2/4] computing features and labels")
    X, inst, mid, _ = dataset.featurize(host, words, k, levels)
    if reference is not None:
        reference.add(X)
    y = dataset.binary_labels(inst, mid, DEFAULT["horizon"])
    keep = y != dataset.NO_LABEL
    return X[keep], y[keep], k


def train_default(host, X, y, k, verbose=False):
    """Train the default model on rows from default_rows; returns (booster, (train, valid, test))."""
    s = host.strategy
    tr, va, te = dataset.time_split(len(X), embargo=DEFAULT["horizon"] * k)
    if min(len(tr), len(va), len(te)) < 100:
        raise ValueError(f"strategy {s.describe()} scored only {len(X)} labelled rows of the synthetic market: "
                         "too few for a default model; train one with engine train --strategy ...")
    if verbose:
        log(f"[3/4] training XGBoost: {DEFAULT['trees']} trees, depth {DEFAULT['depth']} on {len(tr):,} rows")
    b = train(X[tr], y[tr], X[va], y[va], trees=DEFAULT["trees"], depth=DEFAULT["depth"], eta=DEFAULT["eta"],
              feature_names=list(s.features), progress_every=50 if verbose else DEFAULT["trees"],
              nthread=DEFAULT["threads"])
    return b, (tr, va, te)


def build_default(out_dir, s):
    """Build strategy `s`'s default model into out_dir, saying each step as it starts."""
    from engine.strategy_build import build
    t0 = time.time()
    log(f"building strategy {s.describe()}'s default model into {out_dir} (first run only)")
    host = build(s)  # (compiled here, or loaded from numba's cache)
    log(f"[1/4] generating {DEFAULT['ticks']:,} ticks from {DEFAULT['source']}")
    from .drift import Reference
    ref = Reference()
    X, y, k = default_rows(host, verbose=True, reference=ref)
    b, (tr, va, te) = train_default(host, X, y, k, verbose=True)
    import xgboost as xgb
    names = list(s.features)
    p = b.predict(xgb.DMatrix(X[te], feature_names=names))
    auc = dataset.auc(y[te], p)
    acc = float(((p > 0.5) == y[te]).mean())
    log(f"  test split: AUC {auc:.4f}, accuracy {acc:.4f} on {len(te):,} rows")
    log("[4/4] compiling and verifying")
    info = {"source": DEFAULT["source"], "ticks": DEFAULT["ticks"], "horizon": DEFAULT["horizon"],
            "rows": {"train": int(len(tr)), "valid": int(len(va)), "test": int(len(te))},
            "test_auc": auc, "test_accuracy": acc}
    build_artifact(out_dir, b, X[te], feature_names=names, info=info, strategy=s.identity(), reference=ref.rows())
    log(f"default model ready in {time.time() - t0:.1f} s")


def default_model_dir(strategy=None):
    """The strategy's cached default artifact (default: the built-in strategy with its default
    parameters), building it first when absent or when it fails verification."""
    from engine.strategy_load import StrategyError, load
    strategy = strategy or load()
    if strategy.universe:  # (the synthetic market it is trained on has none of its members)
        raise StrategyError(f"strategy {strategy.describe()} from {strategy.path} names a UNIVERSE, so it has no "
                            "default model (the synthetic market has none of its instruments): train one on its "
                            "inputs (engine train --strategy ... --merge SOURCES --out DIR) and give --model DIR")
    d = cache_root() / f"default-{strategy.name}-{default_key(strategy)}"
    if d.exists():
        try:  # the cache's integrity; its signature (with a verify key configured) is checked at load
            artifact.verify_files(d, artifact.read_manifest(d, check_signature=False))
            private_tree(d)  # (one an older engine built 0644)
            return d
        except artifact.ArtifactError as e:
            bad = d.with_name(d.name + f".corrupt-{int(time.time())}")
            print(f"[model] cached default model failed verification ({e}); moved to {bad}, rebuilding",
                  file=sys.stderr)
            os.rename(d, bad)
    from . import signing
    vkey = signing.verify_key() if signing.sign_key() is None else None
    if vkey is not None:  # fail now, not after training: an unsigned default model would be refused
        raise artifact.SignatureError(f"strategy {strategy.describe()} has no default model here yet, and a verify "
                                      f"key is configured ({vkey.describe()}): a model built here would be "
                                      f"unsigned. Give --model a signed artifact, or set {signing.ENV_SIGN}")
    d.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    build_default(d, strategy)
    private_tree(d)  # (the cache root is 0700 already; its models are this user's only, file by file too)
    return d

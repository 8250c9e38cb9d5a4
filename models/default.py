"""A strategy's default model: trained on the synthetic market on first use, cached afterwards
(keyed by the strategy's identity, so an edited strategy gets a model of its own)."""
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from . import artifact, dataset
from .build import build_artifact, log, train

DEFAULT = {"source": "synthetic://?instruments=4&seed=20240808&trade_prob=0.1",
           "ticks": 600_000, "horizon": 20, "trees": 200, "depth": 6, "eta": 0.1}


def cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "engine" / "models"


def default_key(strategy):
    h = hashlib.sha256(json.dumps(DEFAULT, sort_keys=True).encode())
    h.update(json.dumps(strategy.identity(), sort_keys=True).encode())
    h.update(json.dumps(artifact.versions(), sort_keys=True).encode())
    root = Path(__file__).resolve().parent.parent
    for mod in ("models/compile.py", "models/flat.py", "models/templates/flat.c.tpl", "models/codegen.py",
                "models/build.py", "models/dataset.py", "feeds/synthetic.py", "engine/host_template.py"):
        h.update((root / mod).read_bytes())
    return h.hexdigest()[:16]


def build_default(out_dir, host):
    from .training import source_ticks
    t0 = time.time()
    s = host.strategy
    log(f"building strategy {s.describe()}'s default model into {out_dir} (first run only)")
    log(f"[1/4] generating {DEFAULT['ticks']:,} ticks from {DEFAULT['source']}")
    words, k, levels, _ = source_ticks(DEFAULT["source"], DEFAULT["ticks"], s)
    log("[2/4] computing features and labels")
    X, inst, mid, _ = dataset.featurize(host, words, k, levels)
    y = dataset.binary_labels(inst, mid, DEFAULT["horizon"])
    keep = y != dataset.NO_LABEL
    X, y = X[keep], y[keep]
    tr, va, te = dataset.time_split(len(X), embargo=DEFAULT["horizon"] * k)
    log(f"[3/4] training XGBoost: {DEFAULT['trees']} trees, depth {DEFAULT['depth']} on {len(tr):,} rows")
    if min(len(tr), len(va), len(te)) < 100:
        raise ValueError(f"strategy {s.describe()} scored only {len(X)} labelled rows of the synthetic market: "
                         "too few for a default model; train one with engine train --strategy ...")
    names = list(s.features)
    b = train(X[tr], y[tr], X[va], y[va], trees=DEFAULT["trees"], depth=DEFAULT["depth"], eta=DEFAULT["eta"],
              feature_names=names)
    import xgboost as xgb
    p = b.predict(xgb.DMatrix(X[te], feature_names=names))
    auc = dataset.auc(y[te], p)
    acc = float(((p > 0.5) == y[te]).mean())
    log(f"  test split: AUC {auc:.4f}, accuracy {acc:.4f} on {len(te):,} rows")
    log("[4/4] compiling and verifying")
    info = {"source": DEFAULT["source"], "ticks": DEFAULT["ticks"], "horizon": DEFAULT["horizon"],
            "rows": {"train": int(len(tr)), "valid": int(len(va)), "test": int(len(te))},
            "test_auc": auc, "test_accuracy": acc}
    build_artifact(out_dir, b, X[te], feature_names=names, info=info, strategy=s.identity())
    log(f"default model ready in {time.time() - t0:.1f} s")


def default_model_dir(strategy=None):
    """The strategy's cached default artifact (default: the built-in strategy with its default
    parameters), building it first when absent or when it fails verification."""
    from engine.strategy_build import build
    from engine.strategy_load import load
    strategy = strategy or load()
    d = cache_root() / f"default-{strategy.name}-{default_key(strategy)}"
    if d.exists():
        try:  # the cache's integrity; its signature (with a verify key configured) is checked at load
            artifact.verify_files(d, artifact.read_manifest(d, check_signature=False))
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
    d.parent.mkdir(parents=True, exist_ok=True)
    build_default(d, build(strategy))
    return d

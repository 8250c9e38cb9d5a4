"""The default model: trained on the synthetic market on first use, cached afterwards."""
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from engine import features

from . import artifact, dataset
from .build import build_artifact, log, train
from .schema import schema_hash

DEFAULT = {"source": "synthetic://?instruments=4&seed=20240808&trade_prob=0.1",
           "ticks": 600_000, "horizon": 20, "trees": 200, "depth": 6, "eta": 0.1}


def cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "engine" / "models"


def default_key():
    h = hashlib.sha256(json.dumps(DEFAULT, sort_keys=True).encode())
    h.update(schema_hash().encode())
    h.update(json.dumps(artifact.versions(), sort_keys=True).encode())
    for mod in ("compile.py", "flat.py", "build.py", "dataset.py"):
        h.update((Path(__file__).parent / mod).read_bytes())
    return h.hexdigest()[:16]


def synthetic_ticks(uri, n):
    from feeds.synthetic import Simulator, parse_uri
    p = parse_uri(uri)
    words = np.zeros((n, 8), np.int64)
    Simulator(p).generate(words)
    return words, p.instruments


def build_default(out_dir):
    t0 = time.time()
    log(f"building the default model into {out_dir} (first run only)")
    log(f"[1/4] generating {DEFAULT['ticks']:,} ticks from {DEFAULT['source']}")
    words, k = synthetic_ticks(DEFAULT["source"], DEFAULT["ticks"])
    log("[2/4] computing features and labels")
    X, inst, mid, _ = dataset.featurize(words, k)
    y = dataset.binary_labels(inst, mid, DEFAULT["horizon"])
    keep = y != dataset.NO_LABEL
    X, y = X[keep], y[keep]
    tr, va, te = dataset.time_split(len(X), embargo=DEFAULT["horizon"] * k)
    log(f"[3/4] training XGBoost: {DEFAULT['trees']} trees, depth {DEFAULT['depth']} on {len(tr):,} rows")
    b = train(X[tr], y[tr], X[va], y[va], trees=DEFAULT["trees"], depth=DEFAULT["depth"], eta=DEFAULT["eta"],
              feature_names=features.FEATURE_NAMES)
    import xgboost as xgb
    p = b.predict(xgb.DMatrix(X[te], feature_names=list(features.FEATURE_NAMES)))
    auc = _auc(y[te], p)
    acc = float(((p > 0.5) == y[te]).mean())
    log(f"  test split: AUC {auc:.4f}, accuracy {acc:.4f} on {len(te):,} rows")
    log("[4/4] compiling and verifying")
    info = {"source": DEFAULT["source"], "ticks": DEFAULT["ticks"], "horizon": DEFAULT["horizon"],
            "rows": {"train": int(len(tr)), "valid": int(len(va)), "test": int(len(te))},
            "test_auc": auc, "test_accuracy": acc}
    build_artifact(out_dir, b, X[te], feature_names=features.FEATURE_NAMES, info=info)
    log(f"default model ready in {time.time() - t0:.1f} s")


def _auc(y, p):
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)) if n1 and n0 else float("nan")


def default_model_dir():
    """The cached default artifact, building it first when absent or when it fails verification."""
    d = cache_root() / f"default-{default_key()}"
    if d.exists():
        try:
            artifact.verify_files(d, artifact.read_manifest(d))
            return d
        except artifact.ArtifactError as e:
            bad = d.with_name(d.name + f".corrupt-{int(time.time())}")
            print(f"[model] cached default model failed verification ({e}); moved to {bad}, rebuilding",
                  file=sys.stderr)
            os.rename(d, bad)
    d.parent.mkdir(parents=True, exist_ok=True)
    build_default(d)
    return d

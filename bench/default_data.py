"""How many synthetic ticks the default models need: each shipped strategy's default model
(models/default.py: 200 trees of depth 6, eta 0.1, the same features, labels and time split)
trained on N ticks of the synthetic market, for several market seeds, and scored on a held-out
market it never saw (another seed, 600,000 ticks), against 600,000 (the size before issue 26;
`*` marks the size models/default.py uses now).

The spread across training seeds (sd) is the noise a size is judged against; `split AUC` is the
model's own test split (what the build prints); the seconds are the training alone (XGBoost, this
machine's cores). --quick: the built-in strategy, three sizes, two seeds.
"""
import time

import _common
import numpy as np

from engine.strategy_build import build
from engine.strategy_load import load
from models import dataset
from models.default import DEFAULT, default_rows, train_default

STRATEGIES = ("microstructure", "depth_imbalance", "touch_imbalance")
SIZES = (600_000, 400_000, 300_000, 200_000, 150_000, 100_000, 60_000)
SEEDS = (20240808, 1, 2)
HELD_OUT = (777, 600_000)


def source(seed):
    return DEFAULT["source"].replace("seed=20240808", f"seed={seed}")


def main():
    a = _common.args(__doc__)
    import xgboost as xgb
    strategies, sizes, seeds = ((STRATEGIES[:1], SIZES[::3], SEEDS[:2]) if a.quick else (STRATEGIES, SIZES, SEEDS))
    metrics = {}
    for name in strategies:
        host = build(load(name))
        names = list(host.strategy.features)
        Xh, yh, _ = default_rows(host, source(HELD_OUT[0]), HELD_OUT[1])
        dh = xgb.DMatrix(Xh, feature_names=names)
        print(f"\n{name}: held-out AUC (seed {HELD_OUT[0]}, {len(Xh):,} rows), mean over training seeds {seeds}")
        print(f"  {'ticks':>9} {'rows':>9} {'held-out AUC':>14} {'sd':>7} {'split AUC':>10} {'train s':>8}")
        base = None
        for n in sizes:
            held, split, secs, rows = [], [], [], 0
            for seed in seeds:
                X, y, k = default_rows(host, source(seed), n)
                t = time.perf_counter()
                b, (tr, va, te) = train_default(host, X, y, k)
                secs.append(time.perf_counter() - t)
                held.append(dataset.auc(yh, b.predict(dh)))
                split.append(dataset.auc(y[te], b.predict(xgb.DMatrix(X[te], feature_names=names))))
                rows = len(tr)
            m, sd = float(np.mean(held)), float(np.std(held, ddof=1)) if len(held) > 1 else float("nan")
            base = base or (m, sd)
            mark = "*" if n == DEFAULT["ticks"] else " "
            print(f" {mark}{n:>9,} {rows:>9,} {m:>14.4f} {sd:>7.4f} {np.mean(split):>10.4f} {np.mean(secs):>8.1f}"
                  f"   {m - base[0]:+.4f} vs {sizes[0]:,}", flush=True)
            metrics[f"{name}_{n}_held_out_auc"] = round(m, 4)
            metrics[f"{name}_{n}_held_out_auc_sd"] = round(sd, 4)
            metrics[f"{name}_{n}_train_s"] = round(float(np.mean(secs)), 1)
    _common.save("default_data", metrics, {}, {}, {"held_out": {"seed": HELD_OUT[0], "ticks": HELD_OUT[1]},
                                                   "seeds": list(seeds), "default_ticks": DEFAULT["ticks"]})


if __name__ == "__main__":
    main()

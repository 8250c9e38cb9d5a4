"""Reference walks for the tree tests: the IR (models/trees.py) by XGBoost's rule, the flat
kernel's tables in numpy, and XGBoost's own leaves and margins."""
import numpy as np
import xgboost as xgb


def ir_leaves(forest, X):
    """XGBoost's rule on the IR: x < threshold goes left, a missing x to the default side."""
    X = np.asarray(X, np.float32)
    rows, tix = np.arange(len(X))[:, None], np.arange(forest.n_trees)[None, :]
    node = np.zeros((len(X), forest.n_trees), np.int64)
    for _ in range(max(forest.depths(), default=0)):
        f = forest.feature[tix, node]
        inner = f >= 0
        x = X[rows, np.where(inner, f, 0)]
        left = np.where(np.isnan(x), forest.default_left[tix, node], x < forest.threshold[tix, node])
        node = np.where(inner, np.where(left, forest.left[tix, node], forest.right[tix, node]), node)
    return node


def ir_margin(forest, node):
    """Leaves added in tree order in float32, from the base margin: XGBoost's sum."""
    acc = np.full(len(node), np.float32(forest.base_margin), np.float32)
    for t in range(forest.n_trees):
        acc = acc + forest.leaf[t, node[:, t]]
    return acc


def flat_margin(tab, forest, X):
    """The flat kernel's tables walked in numpy: rank quantisation, perfect trees, float32 sum."""
    X = np.asarray(X, np.float32)
    nf, depth = tab["num_feature"], tab["depth"]
    q = np.zeros((len(X), 2 * nf), np.int64)
    for f in range(nf):
        r = np.searchsorted(tab["grids"][f], np.nan_to_num(X[:, f]), side="right")  # #{t <= x}
        q[:, f] = np.where(np.isnan(X[:, f]), 0, r)                   # missing: compares left
        q[:, nf + f] = np.where(np.isnan(X[:, f]), tab["qmax"], r)    # missing: compares right
    rows = np.arange(len(X))[:, None]
    tix = np.arange(tab["trees"])[None, :]
    i = np.zeros((len(X), tab["trees"]), np.int64)
    for _ in range(depth):
        sel, thr = tab["sel"][tix, i].astype(np.int64), tab["thr"][tix, i].astype(np.int64)
        i = 2 * i + 1 + (q[rows, sel] > thr)
    leaves = tab["leaves"][tix, i - ((1 << depth) - 1)]
    acc = np.full(len(X), np.float32(forest.base_margin), np.float32)
    for t in range(tab["trees"]):
        acc = acc + leaves[:, t]
    return acc


def xgboost_says(model_path, X):
    b = xgb.Booster(model_file=str(model_path))
    b.feature_names = None
    dm = xgb.DMatrix(np.asarray(X, np.float32), missing=np.nan)
    return b.predict(dm, pred_leaf=True).astype(np.int64), b.predict(dm, output_margin=True).astype(np.float32)


def same_bits(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.int32), np.asarray(b, np.float32).view(np.int32))

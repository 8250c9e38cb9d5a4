"""Exact fixed point for a tree ensemble, and its golden integer model (numpy).

Features: each feature f gets its own grid of 2^-F_f, and `x < t` becomes `q < T` with
q = floor(x * 2^F_f) (saturated to [T_min - 1, T_max]) and T = ceil(t * 2^F_f).
- A float32 split value is a dyadic rational: when F_f covers the fractional bits of every
  threshold on f within `max_width` bits, each T = t * 2^F_f is exact and `x < t` <=> `q < T`
  for every x (floor(y) < T <=> y < T for an integer T). The feature is marked exact.
- Otherwise F_f is the finest grid that fits `max_width` bits. `x < t` => `q < T` still holds,
  but an x in [t, T * 2^-F_f) would go left where XGBoost goes right. So export checks leaf
  agreement with XGBoost's pred_leaf on the validation rows and fails unless it is 100%.
Missing values (NaN) take the node's default direction, carried as one bit per feature.

Leaves: round(leaf * 2^L) (rounding, not truncation, which would bias the sum by half an LSB a
tree). Accumulator: leaf bits + ceil(log2 trees) + 1 bits, proven not to overflow. The score
is acc * 2^-L; its distance from XGBoost's float32 margin is at most
trees * 2^-(L+1) (leaf rounding) + base rounding + XGBoost's own float32 summation error.
Categorical splits are refused; so is a feature whose grid would need more than 62 bits.
"""
import math
from dataclasses import dataclass

import numpy as np

from models.trees import Forest, ModelFormatError, read_model

MAX_BITS = 127  # the emulation's native __int128; ap_int<W> under synthesis


class FixedPointError(ValueError):
    """The model cannot be made exact in fixed point: the message says why and where."""


FIXED_OBJECTIVES = ("binary:logistic", "reg:squarederror", "reg:linear")


def load_xgboost_json(path):
    """The model's trees (models/trees.py Forest) for fixed point: binary:logistic or
    reg:squarederror, one output, numerical splits."""
    try:
        trees = read_model(path)
    except ModelFormatError as e:
        raise FixedPointError(str(e)) from None
    if trees.objective not in FIXED_OBJECTIVES:
        raise FixedPointError(f"{path}: objective {trees.objective} is not supported (binary:logistic, "
                              "reg:squarederror)")
    return trees


def frac_bits(t):
    """Fractional bits a float32 needs to be an integer multiple of 2^-bits."""
    t = np.float32(t)
    if t == 0 or not np.isfinite(t):
        return 0
    m, e = math.frexp(float(t))  # t = m * 2^e, 0.5 <= |m| < 1, m has <= 24 significant bits
    mant = int(m * (1 << 24))
    tz = (mant & -mant).bit_length() - 1
    return max(0, 24 - e - tz)


@dataclass
class FixedModel:
    trees: Forest
    frac: np.ndarray          # int [features]: F_f
    qmin: np.ndarray          # int64 [features]: saturation
    qmax: np.ndarray
    width: np.ndarray         # int [features]: bits of a signed q
    T: np.ndarray             # int64 [trees, nodes]: integer thresholds
    leaf_bits: int            # L
    leaf_q: np.ndarray        # int64 [trees, nodes]
    base_q: int
    acc_bits: int
    leaf_width: int
    exact: np.ndarray         # bool [features]: the grid holds every threshold exactly

    @property
    def n_trees(self):
        return self.trees.feature.shape[0]

    def quantize(self, X):
        """float32 rows -> (int64 q [n, features], bool missing [n, features]), exactly as the
        hardware and the emulation do it: floor(x * 2^F), saturated."""
        X = np.asarray(X, np.float32)
        missing = np.isnan(X)
        wide = self.T.dtype == object
        q = np.zeros(X.shape, object if wide else np.int64)
        for f in range(X.shape[1]):
            x = np.where(np.isnan(X[:, f]), 0.0, X[:, f]).astype(np.float64)
            # exact: a float32 times a power of two is a float64, and floor of it an integer
            y = np.floor(np.ldexp(x, int(self.frac[f])))
            lo, hi = self.qmin[f], self.qmax[f]
            if wide:
                q[:, f] = [min(max(int(v), lo), hi) for v in y]
            else:
                q[:, f] = np.clip(y, float(lo), float(hi)).astype(np.int64)
        return q, missing

    def leaves(self, q, missing):
        """Leaf node index per (row, tree): the golden traversal."""
        t = self.trees
        n = q.shape[0]
        node = np.zeros((n, self.n_trees), np.int64)
        rows = np.arange(n)[:, None]
        tix = np.arange(self.n_trees)[None, :]
        for _ in range(t.feature.shape[1]):
            f = t.feature[tix, node]
            inner = f >= 0
            if not inner.any():
                break
            fi = np.where(inner, f, 0)
            qv = q[rows, fi]
            mv = missing[rows, fi]
            go_left = np.where(mv, t.default_left[tix, node], qv < self.T[tix, node])
            nxt = np.where(go_left, t.left[tix, node], t.right[tix, node])
            node = np.where(inner, nxt, node)
        return node

    def score_int(self, X):
        """The golden model: the accumulator value per row (int64), base included."""
        q, m = self.quantize(X)
        node = self.leaves(q, m)
        return self.leaf_q[np.arange(self.n_trees)[None, :], node].sum(axis=1) + self.base_q

    def score(self, X):
        return self.score_int(X).astype(np.float64) / float(1 << self.leaf_bits)

    def error_bound(self):
        """|fixed score - XGBoost float32 margin| <= this, for every input."""
        lv = np.abs(self.trees.leaf[self.trees.feature < 0])
        max_sum = float(np.abs(self.trees.base_margin)) + self.n_trees * float(lv.max() if lv.size else 0.0)
        rounding = (self.n_trees + 1) * 2.0 ** -(self.leaf_bits + 1)
        xgb_float32 = self.n_trees * max_sum * 2.0 ** -24  # each float32 addition: <= half an ulp of the sum
        return rounding + xgb_float32


def make_fixed(trees, leaf_bits=16, max_width=MAX_BITS):
    """Choose the grid per feature, map thresholds and leaves, prove the widths."""
    inner = trees.feature >= 0
    nf = trees.n_features
    frac = np.zeros(nf, np.int64)
    qmin = np.zeros(nf, object)   # Python ints: a grid may be wider than 64 bits
    qmax = np.ones(nf, object)
    width = np.ones(nf, np.int64)
    exact = np.ones(nf, bool)
    T = np.zeros(trees.feature.shape, object)
    for f in range(nf):
        sel = inner & (trees.feature == f)
        ths = trees.threshold[sel]
        if not ths.size:
            continue
        if not np.isfinite(ths).all():
            raise FixedPointError(f"feature {f}: a split value is not finite")
        exact_F = max(frac_bits(t) for t in np.unique(ths))
        int_bits = int(np.ceil(np.abs(ths.astype(np.float64)).max() + 1)).bit_length() + 1  # sign + integer part
        F = min(exact_F, max_width - int_bits)
        name = trees.feature_names[f] if f < len(trees.feature_names) else f"f{f}"
        if F < 0:
            raise FixedPointError(f"feature {f} ({name}): split values up to {np.abs(ths).max():g} do not fit "
                                  f"{max_width} bits even as integers")
        Ts = [math.ceil(math.ldexp(float(t), F)) for t in ths]  # Python ints: exact at any width
        lo, hi = min(Ts) - 1, max(Ts)
        bits = max(abs(lo), abs(hi)).bit_length() + 1
        if bits > min(max_width, MAX_BITS):
            raise FixedPointError(f"feature {f} ({name}): needs {bits} bits at 2^-{F} (max {max_width})")
        frac[f], width[f] = F, bits
        qmin[f], qmax[f] = lo, hi
        exact[f] = F == exact_F
        idx = np.argwhere(sel)
        for (i, j), v in zip(idx, Ts):
            T[i, j] = v
    if not 0 <= leaf_bits <= 40:
        raise FixedPointError(f"leaf bits must be 0..40, got {leaf_bits}")
    scale = float(1 << leaf_bits)
    leaf_q = np.where(inner, 0, np.round(trees.leaf.astype(np.float64) * scale)).astype(np.int64)
    base_q = int(round(trees.base_margin * scale))
    lmax = int(np.abs(leaf_q).max()) if leaf_q.size else 0
    leaf_width = max(lmax.bit_length() + 1, 2)
    n = trees.feature.shape[0]
    acc_bits = leaf_width + math.ceil(math.log2(max(n, 1) + 1)) + 1
    # the proof, checked numerically as well: the largest possible sum fits the accumulator
    worst = n * lmax + abs(base_q)
    if worst >= 2 ** (acc_bits - 1):
        raise FixedPointError(f"accumulator of {acc_bits} bits cannot hold {worst} (internal error)")
    if acc_bits > 63:
        raise FixedPointError(f"the accumulator would need {acc_bits} bits (> 63): use fewer leaf bits "
                              f"(--leaf-bits, now {leaf_bits}) or fewer trees")
    if width.max() <= 63:  # the common case: int64 all the way, fast
        qmin, qmax, T = qmin.astype(np.int64), qmax.astype(np.int64), T.astype(np.int64)
    return FixedModel(trees, frac, qmin, qmax, width, T, leaf_bits, leaf_q, base_q, acc_bits, leaf_width, exact)


def xgboost_leaves(model_path, X):
    """XGBoost's own pred_leaf on X: leaf node ids [n, trees]."""
    import xgboost as xgb
    b = xgb.Booster()
    b.load_model(str(model_path))
    b.feature_names = None  # rows come as plain arrays
    return b.predict(xgb.DMatrix(np.asarray(X, np.float32), missing=np.nan), pred_leaf=True).astype(np.int64)


def xgboost_margin(model_path, X):
    import xgboost as xgb
    b = xgb.Booster()
    b.load_model(str(model_path))
    b.feature_names = None
    return b.predict(xgb.DMatrix(np.asarray(X, np.float32), missing=np.nan), output_margin=True).astype(np.float32)


def check_against_xgboost(fm, model_path, X):
    """Leaf agreement (must be 1.0), score error and its bound, decision agreement."""
    q, m = fm.quantize(X)
    ours = fm.leaves(q, m)
    theirs = xgboost_leaves(model_path, X).reshape(ours.shape)
    agree = float((ours == theirs).all(axis=1).mean()) if len(X) else 1.0
    margin = xgboost_margin(model_path, X).astype(np.float64)
    score = fm.score(X)
    err = float(np.abs(score - margin).max()) if len(X) else 0.0
    thr = 0.0  # decisions: the sign of the margin (probability 0.5)
    decisions = float(((score >= thr) == (margin >= thr)).mean()) if len(X) else 1.0
    return {"rows": int(len(X)), "leaf_agreement": agree, "max_score_error": err,
            "score_error_bound": fm.error_bound(), "decision_agreement": decisions}

"""The tree ensemble, read once from an XGBoost model: what every tree back end builds from
(models/flat.py's branch-free kernel; fpga/fixed.py's fixed point, and through it fpga/hls.py
and fpga/rtl.py).

Read from XGBoost's own serialization, the JSON `Booster.save_model` writes (the schema XGBoost
loads back): it is the whole model with XGBoost's node ids (what `predict(pred_leaf=True)`
reports), its default directions and its float32 split and leaf values, written as the shortest
decimal that reads back to the same float32. Not Treelite (a second reader of the same file) and
not `get_dump`/`trees_to_dataframe` (text for people). Each value is rounded from its decimal
text straight to the nearest float32 as XGBoost's own reader does, not through a double (a
decimal can round to a double that sits exactly halfway between two float32s).

Arrays are [trees, nodes], node n of a tree at column n (XGBoost's id), narrower trees padded
with leaves nobody reaches. XGBoost goes left at a split when x < threshold, and to the
default side when x is missing (NaN).
"""
import ctypes
import json
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

# objective -> how XGBoost turns base_score into the margin it starts every sum from
_LOGIT = ("binary:logistic", "reg:logistic")
_IDENTITY = ("binary:logitraw", "reg:squarederror", "reg:linear", "reg:pseudohubererror", "reg:absoluteerror")


class ModelFormatError(ValueError):
    """The file is not a model the tree back ends take: the message names the file and why."""


@dataclass
class Forest:
    feature: np.ndarray       # int32 [trees, nodes]: split feature, -1 at a leaf
    threshold: np.ndarray     # float32: x < threshold goes left (0 at a leaf)
    left: np.ndarray          # int32: children (-1 at a leaf)
    right: np.ndarray
    default_left: np.ndarray  # bool: where a missing value goes
    leaf: np.ndarray          # float32: leaf value (0 at a split)
    n_features: int
    base_score: float         # as the model states it (a probability for the logistic objectives)
    objective: str
    feature_names: list

    @property
    def n_trees(self):
        return self.feature.shape[0]

    def depths(self):
        """Each tree's depth (splits on its longest path from the root)."""
        out = []
        for t in range(self.n_trees):
            d, level = 0, [0]
            while True:
                inner = [n for n in level if self.feature[t, n] >= 0]
                if not inner:
                    break
                d += 1
                level = [int(c) for n in inner for c in (self.left[t, n], self.right[t, n])]
            out.append(d)
        return out

    @cached_property
    def base_margin(self):
        """The float32 margin XGBoost starts from (glibc's logf, as XGBoost calls it)."""
        p = np.float32(self.base_score)
        if self.objective in _LOGIT:
            logf = ctypes.CDLL(None).logf
            logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
            return float(np.float32(-logf(np.float32(1.0) / p - np.float32(1.0))))
        if self.objective in _IDENTITY:
            return float(p)
        raise ModelFormatError(f"objective {self.objective} has no base margin here "
                               f"({', '.join(_LOGIT + _IDENTITY)})")


def float32_of(texts):
    """Decimal texts -> the nearest float32 to each (ties to even), in one rounding."""
    texts = [v if isinstance(v, str) else repr(v) for v in texts]
    d = np.array(texts, np.float64).reshape(-1)
    f = d.astype(np.float32)
    back = f.astype(np.float64)
    with np.errstate(invalid="ignore"):
        other = np.nextafter(f, np.where(d > back, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
        halfway = (d != back) & np.isfinite(d) & (d == (back + other.astype(np.float64)) / 2)
    for i in np.nonzero(halfway)[0]:  # the double landed on a midpoint: the decimal itself decides
        exact, mid = Fraction(texts[i]), Fraction(float(d[i]))
        if exact != mid:
            f[i] = max(f[i], other[i]) if exact > mid else min(f[i], other[i])
    return f


def read_model(path):
    """The Forest of an XGBoost JSON model with one output and numerical splits."""
    try:
        with open(path) as fh:
            m = json.load(fh, parse_float=str)  # float32 values: rounded once, by float32_of
    except (OSError, ValueError) as e:
        raise ModelFormatError(f"{path}: cannot read an XGBoost JSON model ({e})") from None
    try:
        learner = m["learner"]
        trees = learner["gradient_booster"]["model"]["trees"]
        param = learner["learner_model_param"]
        objective = learner["objective"]["name"]
        nf = int(param["num_feature"])
        raw_base = param["base_score"].strip("[]").split(",")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ModelFormatError(f"{path}: not an XGBoost JSON model") from None
    if int(param.get("num_class", "0")) > 1 or int(param.get("num_target", "1")) > 1:
        raise ModelFormatError(f"{path}: one output only (num_class {param.get('num_class')})")
    if len(raw_base) != 1:
        raise ModelFormatError(f"{path}: multi-target base_score {param['base_score']!r} is not supported")
    width = max((len(t["left_children"]) for t in trees), default=1)
    shape = (len(trees), width)
    F, LC, RC = (np.full(shape, -1, np.int32) for _ in range(3))
    TH, LV = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    DL = np.zeros(shape, bool)
    for i, t in enumerate(trees):
        if any(t.get("split_type", [])) or t.get("categories"):
            raise ModelFormatError(f"{path}: tree {i} has categorical splits; the tree back ends compare "
                                   "numerical splits only")
        if int(t["tree_param"].get("size_leaf_vector", "1")) > 1:
            raise ModelFormatError(f"{path}: vector leaves are not supported")
        lc = np.array(t["left_children"], np.int32)
        n = len(lc)
        is_leaf = lc == -1
        sc = float32_of(t["split_conditions"])  # a split's value, or a leaf's
        LC[i, :n] = lc
        RC[i, :n] = t["right_children"]
        F[i, :n] = np.where(is_leaf, -1, t["split_indices"])
        TH[i, :n] = np.where(is_leaf, 0, sc)
        LV[i, :n] = np.where(is_leaf, sc, 0)
        DL[i, :n] = np.array(t["default_left"], bool)
    return Forest(F, TH, LC, RC, DL, LV, nf, float(raw_base[0]), objective, learner.get("feature_names") or [])

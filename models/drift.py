"""Drift: how far the features and the score a model sees now are from those it was trained on.

At build time (models/build.py) the artifact's manifest gets `drift`: for each feature and for the
score (the raw margin), the training rows' deciles as bin edges and the share of rows in each bin
(BINS bins between the edges, and one for missing values). Later rows are binned the same way,
into fixed count arrays, and compared by the population stability index,

    PSI = sum over bins of (actual - expected) x ln(actual / expected)

(shares floored at FLOOR, so an empty bin counts as rare, not infinitely so). The usual reading:
below 0.1 stable, 0.1-0.25 moved, above 0.25 shifted (ops/alerts.yml fires above 0.25). The
training rows themselves give exactly 0: same rows, same bins. `engine model drift` computes it
offline over a tick file; `engine run --drift` keeps it live (app/drift_monitor.py).
"""
import numpy as np

BINS = 10
FLOOR = 1e-4
MAX_REFERENCE_ROWS = 200_000  # the sketch's rows: evenly spaced over the training rows beyond this


def _edges(x):
    """The deciles of x's finite values (distinct, ascending; float64)."""
    x = x[np.isfinite(x)].astype(np.float64)
    if not len(x):
        return np.zeros(0)
    return np.unique(np.quantile(x, np.arange(1, BINS) / BINS))


def counts(x, edges):
    """How many of x fall in each bin: len(edges) + 1 bins (x <= edges[0], ..., > edges[-1]), then
    one for missing values (NaN)."""
    x = np.asarray(x, np.float64)
    nan = np.isnan(x)
    c = np.bincount(np.searchsorted(edges, x[~nan], side="left"), minlength=len(edges) + 1).astype(np.float64)
    return np.append(c, float(nan.sum()))


def psi(expected, actual):
    """Population stability of `actual` (bin counts) against `expected` (bin shares); NaN with no rows."""
    actual = np.asarray(actual, np.float64)
    total = actual.sum()
    if total <= 0:
        return float("nan")
    a = np.maximum(actual / total, FLOOR)
    e = np.maximum(np.asarray(expected, np.float64), FLOOR)
    return float(np.sum((a - e) * np.log(a / e)))


def sketch(X, margins, feature_names):
    """The manifest's `drift` entry from the training rows X (float32 [n, f]) and the model's margins
    on them."""
    if len(X) > MAX_REFERENCE_ROWS:
        keep = np.linspace(0, len(X) - 1, MAX_REFERENCE_ROWS).astype(np.int64)
        X, margins = X[keep], margins[keep]

    def one(x):
        e = _edges(x)
        c = counts(x, e)
        return {"edges": [float(v) for v in e], "share": [float(v) for v in c / max(c.sum(), 1.0)]}
    return {"bins": BINS, "rows": int(len(X)), "features": {name: one(X[:, k]) for k, name in enumerate(feature_names)},
            "score": one(np.asarray(margins, np.float64))}


class Tracker:
    """Bin counts of rows as they come, against a model's `drift` sketch, in fixed memory; with a
    half-life (rows) the counts decay so PSI follows the recent rows rather than the whole run."""

    def __init__(self, sk, feature_names, half_life=None):
        self.names = list(feature_names)
        self.edges = [np.asarray(sk["features"][n]["edges"], np.float64) for n in self.names]
        self.share = [np.asarray(sk["features"][n]["share"], np.float64) for n in self.names]
        self.score_edges = np.asarray(sk["score"]["edges"], np.float64)
        self.score_share = np.asarray(sk["score"]["share"], np.float64)
        self.c = [np.zeros(len(e) + 2) for e in self.edges]
        self.sc = np.zeros(len(self.score_edges) + 2)
        self.rows = 0
        self.reference_rows = int(sk["rows"])
        self.half_life = half_life

    def add(self, X, margins):
        n = len(X)
        if not n:
            return
        keep = 0.5 ** (n / self.half_life) if self.half_life else 1.0
        for k in range(len(self.names)):
            self.c[k] = self.c[k] * keep + counts(X[:, k], self.edges[k])
        self.sc = self.sc * keep + counts(margins, self.score_edges)
        self.rows += n

    def psi(self):
        """{feature: PSI}, the score's PSI."""
        return {n: psi(self.share[k], self.c[k]) for k, n in enumerate(self.names)}, psi(self.score_share, self.sc)


def check(manifest, what):
    """The manifest's sketch, or ValueError saying the model has none (built before drift sketches)."""
    sk = manifest.get("drift")
    if not sk:
        raise ValueError(f"{what}: this model keeps no training distribution (built before drift sketches): "
                         "train it again (engine train) to compare")
    return sk

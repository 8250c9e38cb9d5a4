"""Drift: how far the features and the score a model sees now are from those of its training data.

At build time (models/build.py) the artifact's manifest gets `drift`: for each feature and for the
score (the raw margin), the reference rows' deciles as bin edges and the share of rows in each bin
(BINS bins between the edges, and one for missing values). The reference rows are every row the
strategy scores in the training sources (Reference), not only the labelled train split the booster
was fit on: those are the rows `engine model drift SOURCE` and `engine run --drift` bin, so the
training data compared with itself gives 0 (same rows, same bins; about 0 past MAX_REFERENCE_ROWS,
where the sketch is of evenly spaced rows). Later rows are binned the same way, into fixed count
arrays, and compared by the population stability index,

    PSI = sum over bins of (actual - expected) x ln(actual / expected)

(shares floored at FLOOR, so an empty bin counts as rare, not infinitely so). The usual reading:
below 0.1 stable, 0.1-0.25 moved, above 0.25 shifted (ops/engine-alerts.yml fires above 0.25).
`engine model drift` computes it offline over a tick source; `engine run --drift` keeps it live
(app/drift_monitor.py).
"""
import numpy as np

BINS = 10
FLOOR = 1e-4
MAX_REFERENCE_ROWS = 200_000  # the sketch's rows: evenly spaced over the reference rows beyond this
POPULATION = "scored"  # the sketch's `population`: every row the strategy scores (Reference)


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
    i = np.searchsorted(edges, x, side="left")
    i[np.isnan(x)] = len(edges) + 1
    return np.bincount(i, minlength=len(edges) + 2).astype(np.float64)


def psi(expected, actual):
    """Population stability of `actual` (bin counts) against `expected` (bin shares); NaN with no rows."""
    actual = np.asarray(actual, np.float64)
    total = actual.sum()
    if total <= 0:
        return float("nan")
    a = np.maximum(actual / total, FLOOR)
    e = np.maximum(np.asarray(expected, np.float64), FLOOR)
    return float(np.sum((a - e) * np.log(a / e)))


class Reference:
    """The rows a model's sketch is made of, as the data set is built source by source: every row
    the strategy scores, in bounded memory. Up to MAX_REFERENCE_ROWS all of them; beyond, every
    stride-th row (the stride doubles whenever the rows kept pass the cap: evenly spaced, between
    half the cap and the cap)."""

    def __init__(self, cap=MAX_REFERENCE_ROWS):
        self.cap, self.stride, self.seen, self.parts, self.kept = cap, 1, 0, [], 0

    def add(self, X):
        while self.kept + self._taken(len(X)) > self.cap:  # (thinned first: a big source is never copied whole)
            self._thin(2)
        first = -self.seen % self.stride  # (rows kept sit at multiples of the stride, counted from the first)
        part = np.array(X[first::self.stride], np.float32)
        self.seen += len(X)
        self.parts.append(part)
        self.kept += len(part)
        while self.kept > self.cap:
            self._thin(2)

    def _taken(self, n):
        """How many of the next n rows the stride keeps."""
        return max(0, -(-(n - -self.seen % self.stride) // self.stride))

    def _thin(self, k):
        self.parts = [self.rows()[::k]] if self.parts else []
        self.stride *= k
        self.kept = sum(len(p) for p in self.parts)

    def rows(self):
        """The rows kept (float32 [n, f]); an empty array before any."""
        return np.concatenate(self.parts) if self.parts else np.zeros((0, 0), np.float32)

    @classmethod
    def merged(cls, refs, cap=MAX_REFERENCE_ROWS):
        """One reference of several built apart (models/dask_train.py: one per source): each thinned
        to the largest stride, so every source is sampled alike."""
        out, refs = cls(cap), [r for r in refs if r.kept]
        s = max([r.stride for r in refs], default=1)
        while sum(-(-r.kept * r.stride // s) for r in refs) > cap:  # (rows each keeps at stride s)
            s *= 2
        out.stride, out.seen = s, sum(r.seen for r in refs)
        out.parts = [r.rows()[::s // r.stride] for r in refs]  # (each thinned from its own first row)
        out.kept = sum(len(p) for p in out.parts)
        return out


def sketch(X, margins, feature_names):
    """The manifest's `drift` entry from the reference rows X (float32 [n, f]: Reference.rows()) and
    the model's margins on them."""
    def one(x):
        e = _edges(x)
        c = counts(x, e)
        return {"edges": [float(v) for v in e], "share": [float(v) for v in c / max(c.sum(), 1.0)]}
    return {"bins": BINS, "rows": int(len(X)), "population": POPULATION,
            "features": {name: one(X[:, k]) for k, name in enumerate(feature_names)},
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

    def bins(self, X, margins):
        """The bin counts of rows X and their margins: one array per feature, then the score's (what
        add_counts takes: several trackers of one sketch bin a batch once)."""
        Xt = np.ascontiguousarray(np.asarray(X).T, np.float64)  # (a feature's values contiguous: binned faster)
        return [counts(Xt[k], self.edges[k]) for k in range(len(self.names))] + [counts(margins, self.score_edges)]

    def add(self, X, margins):
        self.add_counts(self.bins(X, margins), len(X))

    def add_counts(self, cs, n):
        if not n:
            return
        keep = 0.5 ** (n / self.half_life) if self.half_life else 1.0
        for k in range(len(self.names)):
            self.c[k] = self.c[k] * keep + cs[k]
        self.sc = self.sc * keep + cs[-1]
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


def narrow(sk):
    """Why a sketch does not compare like with like (its rows are the labelled train split only,
    not every row the training data scores: what a model built before `population` keeps); None
    when it does."""
    if sk.get("population") == POPULATION:
        return None
    return ("its sketch holds only the labelled rows of its train split, not every row its training data scores, so "
            "even the training data shows drift: train it again (engine train) to compare like with like")

"""The ladder + hash-table L2 book (feeds/books/book_deep.py) against a dict, under Binance-like batches."""
import numpy as np
import pytest

from feeds.books import book_deep as deep
from feeds.books.book import Ladders
from feeds.books.book_deep import Deep


def _grow_for(L, D, b, V, off, k, cleared=False):
    new = int((V[2 * off + 1:2 * (off + k):2] > 0).sum())
    while (r := deep.room(L.arrays(), D.arrays(), b, new, cleared)):
        L.grow(b) if r == 1 else D.grow()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_deep_book_matches_a_dict(seed):
    rng = np.random.default_rng(seed)
    L, D = Ladders(4, pool=64), Deep(4, cap=64)  # tiny: the ladder and the table both grow
    ref = [dict() for _ in range(4)]
    for step in range(4000):
        b = int(rng.integers(4))
        if rng.random() < 0.003:
            deep.clear(L.arrays(), D.arrays(), b)
            ref[b].clear()
            continue
        k = int(rng.integers(0, 60))
        # prices mostly near a drifting mid, some far (as Binance diffs reach thousands deep)
        mid = 10_000 + int(500 * np.sin(step / 300))
        off = rng.integers(0, 40, k) * np.where(rng.random(k) < 0.6, 1, 40)
        px = np.unique(mid - off - 1 if b % 2 == 0 else mid + off + 1)
        px = px[::-1] if b % 2 == 0 else px  # best first (spot; futures asks)
        r = rng.random()
        if r < 0.3:
            px = px[::-1]  # worst first (futures bids): the mirrored split
        elif r < 0.4:
            px = rng.permutation(px)  # unsorted: set one by one
        k = len(px)
        q = np.where(rng.random(k) < 0.35, 0, rng.integers(1, 1000, k))
        V = np.zeros(2 * k + 2, np.int64)
        V[0:2 * k:2], V[1:2 * k:2] = px, q
        _grow_for(L, D, b, V, 0, k)
        deep.set_levels(L.arrays(), D.arrays(), b, V, 0, k)
        for p_, q_ in zip(px.tolist(), q.tolist()):
            if q_:
                ref[b][p_] = q_
            else:
                ref[b].pop(p_, None)
        top_px, top_q, _ = L.side(b)
        table = D.levels(b)
        if table:  # the invariant: the ladder is deep enough and better than the whole table
            assert len(top_px) >= deep.LOW
            assert (min(top_px) > max(table)) if b % 2 == 0 else (max(top_px) < min(table))
        assert len(top_px) <= deep.HIGH
        whole = dict(zip(top_px.tolist(), top_q.tolist())) | table
        assert whole == ref[b], step
        best = sorted(ref[b], reverse=(b % 2 == 0))[:len(top_px)]
        assert top_px.tolist() == best  # the ladder is exactly the best levels, in order
    assert D.count[-1] == sum(len(D.levels(b)) for b in range(4)) > 100
    assert D.count[:4].tolist() == [len(D.levels(b)) for b in range(4)]


def test_a_snapshot_deeper_than_the_ladder_spills_and_refills():
    L, D = Ladders(2), Deep(2)
    n = 1000
    V = np.zeros(2 * n, np.int64)
    V[0::2], V[1::2] = np.arange(n, 0, -1) * 10, 7  # bids 10000 .. 10, best first
    _grow_for(L, D, 0, V, 0, n, True)
    deep.clear(L.arrays(), D.arrays(), 0)
    deep.set_levels(L.arrays(), D.arrays(), 0, V, 0, n)
    assert len(L.side(0)[0]) == deep.TARGET and len(D.levels(0)) == n - deep.TARGET
    # the top 100 levels go: the table's best come up, in order
    V2 = np.zeros(200, np.int64)
    V2[0::2] = np.arange(n, n - 100, -1) * 10
    deep.set_levels(L.arrays(), D.arrays(), 0, V2, 0, 100)
    px = L.side(0)[0]
    assert px[0] == (n - 100) * 10 and (np.diff(px) == -10).all() and len(px) >= deep.LOW
    assert len(px) + len(D.levels(0)) == n - 100


def test_select_best_is_the_sorted_best_below_the_bound():
    """The heap selection (refills, deep views) against sorting, for both sides, every r from
    none to more than there are, bounds that cut anywhere, other sides' levels mixed in."""
    rng = np.random.default_rng(5)
    D = Deep(2, cap=1024)
    sides = [dict(), dict()]
    for p_ in rng.choice(100_000, 700, replace=False).tolist():
        b = int(rng.integers(2))
        deep._set(D.arrays(), b, p_ + 1, p_ % 97 + 1)
        sides[b][p_ + 1] = p_ % 97 + 1
    for b in range(2):
        key = (lambda p_: p_) if b == 0 else (lambda p_: -p_)
        for bound_px in (None, *rng.choice(list(sides[b]), 5).tolist()):
            bound = 2**62 if bound_px is None else key(bound_px)
            below = sorted((p_ for p_ in sides[b] if key(p_) < bound), key=key)  # worst first
            for r in (0, 1, 2, 7, 64, len(below), len(below) + 5):
                px, qty = np.full(r + 3, -7, np.int64), np.full(r + 3, -7, np.int64)
                m = deep.select_best(D.arrays(), b, r, np.int64(bound), px, qty, 1)
                want = below[len(below) - min(r, len(below)):]
                assert m == len(want) and px[1:1 + m].tolist() == want, (b, bound_px, r)
                assert qty[1:1 + m].tolist() == [sides[b][p_] for p_ in want]
                assert px[0] == -7 and (px[1 + m:] == -7).all()  # nothing outside its span

"""The numba order book against a plain-Python model of the same operations."""
import numpy as np
import pytest

from feeds.books import book
from feeds.books.book import Ladders, Orders


def _ref_side(levels, side):
    items = sorted(levels.items(), reverse=(side == book.BID))
    return [p for p, q in items], [q for p, q in items]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ladder_matches_a_dict_under_random_updates(seed):
    rng = np.random.default_rng(seed)
    L = Ladders(4, pool=64)  # tiny pool: growth and compaction both happen
    ref = [dict() for _ in range(4)]
    for _ in range(20_000):
        bk = int(rng.integers(4))
        px = int(rng.integers(1, 200)) * 1000
        if rng.random() < 0.5:
            q = int(rng.integers(0, 50)) if rng.random() < 0.8 else 0
            if q > 0 and not book.has_room(L.arrays(), bk):
                L.grow(bk)
            book.level_set(L.arrays(), bk, px, q)
            if q:
                ref[bk][px] = q
            else:
                ref[bk].pop(px, None)
        else:
            dq = int(rng.integers(-30, 30))
            if not book.has_room(L.arrays(), bk):
                L.grow(bk)
            book.level_add(L.arrays(), bk, px, dq, 0)
            new = ref[bk].get(px, 0) + dq
            if px in ref[bk] or dq > 0:
                if new > 0:
                    ref[bk][px] = new
                else:
                    ref[bk].pop(px, None)
    for bk in range(4):
        px, qty, _ = L.side(bk)
        rp, rq = _ref_side(ref[bk], bk & 1)
        assert list(px) == rp and list(qty) == rq
        bp, bq = book.best(L.arrays(), bk)
        assert (bp, bq) == ((rp[0], rq[0]) if rp else (0, 0))
        assert (np.diff(px) < 0).all() if bk & 1 == book.BID else (np.diff(px) > 0).all()



@pytest.mark.parametrize("seed", [4, 5])
def test_batched_levels_equal_one_by_one(seed):
    """levels_set (one merge per batch) leaves every side exactly as level_set in order does:
    batches sorted best first (as Binance sends them), worst first, unsorted and with repeats."""
    rng = np.random.default_rng(seed)
    A, B = Ladders(2, pool=64), Ladders(2, pool=64)
    for step in range(3000):
        bk = int(rng.integers(2))
        k = int(rng.integers(0, 40))
        px = rng.choice(np.arange(1, 400), size=k, replace=False) * 1000
        order = rng.integers(4)
        if order == 0:  # best first
            px = np.sort(px)[::-1] if bk == book.BID else np.sort(px)
        elif order == 1:
            px = np.sort(px) if bk == book.BID else np.sort(px)[::-1]
        elif order == 2 and k > 1:
            px[-1] = px[0]  # a repeated price: set one by one, the later wins
        q = np.where(rng.random(k) < 0.3, 0, rng.integers(1, 50, k))
        V = np.zeros(2 * (k + 3), np.int64)
        V[6:6 + 2 * k:2], V[7:7 + 2 * k:2] = px, q
        while A.meta[bk, book.M_LEN] + k > A.meta[bk, book.M_CAP]:
            A.grow(bk)
        while B.meta[bk, book.M_LEN] + k > B.meta[bk, book.M_CAP]:
            B.grow(bk)
        for p_, q_ in zip(px, q):
            book.level_set(A.arrays(), bk, int(p_), int(q_))
        book.levels_set(B.arrays(), bk, V, 3, k)
        for side in range(2):
            assert all((a == b).all() for a, b in zip(A.side(side), B.side(side))), (step, side, order)
    assert max(A.meta[:, book.M_LEN]) > 100  # the books grew deep enough for merges to matter

def test_order_table_survives_a_day_of_adds_and_deletes():
    rng = np.random.default_rng(7)
    O = Orders(cap=16)
    live = {}
    for i in range(200_000):
        if live and rng.random() < 0.48:
            key = list(live)[int(rng.integers(len(live)))] if len(live) < 50 else next(iter(live))
            slot = book.order_find(O.arrays(), key)
            assert slot >= 0 and O.vals[slot, book.O_QTY] == live.pop(key)
            book.order_remove(O.arrays(), slot)
        else:
            O.maybe_grow()
            key = int(rng.integers(1, 2**62))
            if key in live:
                continue
            assert book.order_insert(O.arrays(), key, 0, 100, i) >= 0
            live[key] = i
    assert O.count[0] == len(live)
    for key, q in live.items():
        slot = book.order_find(O.arrays(), key)
        assert slot >= 0 and O.vals[slot, book.O_QTY] == q
    assert book.order_find(O.arrays(), 12345) == -1
    # a duplicate insert is refused
    k = next(iter(live))
    assert book.order_insert(O.arrays(), k, 0, 1, 1) == -1

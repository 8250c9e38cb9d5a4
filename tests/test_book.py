"""The numba order book against a plain-Python model of the same operations."""
import numpy as np
import pytest

from feeds import book
from feeds.book import Ladders, Orders


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

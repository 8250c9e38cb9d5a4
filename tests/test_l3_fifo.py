"""Exact FIFO fills (replay/l3.py) on the real CME capture, against an independent model that
keeps every price level as an explicit queue of orders with our order in it."""
import numpy as np
import pytest

from engine.records import KIND_QUOTE, SIGNAL_DTYPE
from engine.tickfile import TickFile
from feeds.convert import convert
from replay import execsim, l3
from tests.helpers.data import ESH4 as REAL


def reference(rec, words, sigs, latency_ns):
    """Our order as an entry in the level's real queue: fills when an order behind it is filled,
    or when a fill happens at a price through ours; every level a plain list in time order."""
    levels = {}     # (side, px) -> list of [oid, size]; "us" marks our order
    orders = {}     # oid -> (side, px)
    fills = []
    pos = 0
    us = None       # [side, px, remaining, signal]
    k = 0
    recv = words[:, 2]
    for j, r in enumerate(rec.tolist()):
        ts, trecv, oid, px, size, action, side_c, inst, _ = r
        while k < len(sigs) and recv[sigs[k][0]] + latency_ns <= ts and recv[sigs[k][0]] < trecv:
            if us is not None:
                levels[(us[0], us[1])].remove(us)
                us = None
            delta = sigs[k][1] - pos
            if delta:
                side = 0 if delta > 0 else 1
                book = [p for (s, p), q in levels.items() if s == side and any(e is not us for e in q)]
                if book:
                    best = max(book) if side == 0 else min(book)
                    us = [side, best, abs(delta), k]
                    levels[(side, best)].append(us)
            k += 1
        side = {66: 0, 65: 1}.get(action and side_c, -1)
        if action == ord("A"):
            levels.setdefault((side, px), []).append([oid, size])
            orders[oid] = (side, px)
        elif action in (ord("C"), ord("M")) and oid in orders:
            q = levels[orders[oid]]
            e = next(x for x in q if x[0] == oid)
            new_sz = e[1] - size if action == ord("C") else size
            new_px = orders[oid][1] if action == ord("C") else px
            if new_sz <= 0:
                q.remove(e)
                del orders[oid]
            elif new_px != orders[oid][1] or new_sz > e[1]:
                q.remove(e)
                orders[oid] = (orders[oid][0], new_px)
                levels.setdefault(orders[oid], []).append([oid, new_sz])
            else:
                e[1] = new_sz
        elif action == ord("F") and oid in orders and us is not None:
            o_side, o_px = orders[oid]
            if o_side == us[0]:
                q = levels[(o_side, o_px)]
                behind = o_px == us[1] and q.index(us) < next(i for i, x in enumerate(q) if x[0] == oid)
                through = o_px < us[1] if us[0] == 0 else o_px > us[1]
                if behind or through:
                    got = us[2] if through else min(size, us[2])
                    fills.append((us[3], got if us[0] == 0 else -got, us[1], j))
                    pos += got if us[0] == 0 else -got
                    us[2] -= got
                    if us[2] == 0:
                        q.remove(us) if us in q else levels[(us[0], us[1])].remove(us)
                        us = None
        elif action == ord("T") and us is not None and side >= 0 and side != us[0]:
            if (px < us[1]) if us[0] == 0 else (px > us[1]):
                fills.append((us[3], us[2] if us[0] == 0 else -us[2], us[1], j))
                pos += us[2] if us[0] == 0 else -us[2]
                levels[(us[0], us[1])].remove(us)
                us = None
    return fills


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    out = tmp_path_factory.mktemp("l3") / "es.ticks"
    convert(f"dbn:{REAL}", str(out), progress=False)
    tf = TickFile(str(out))
    return tf, l3.load(str(REAL), tf.instruments)


@pytest.mark.parametrize("latency_ns", [0, 250_000])
def test_exact_fifo_fills_match_an_explicit_queue_model(capture, latency_ns):
    tf, rec = capture
    words = np.asarray(tf.words)
    quotes = np.nonzero(((words[:, 7] >> 48) & 0xFF) == KIND_QUOTE)[0]
    # a maker that flips between +3 and -3 lots on every 150th quote: it joins both queues often
    picks = quotes[200::150]
    sigs = [(int(t), 3 if i % 2 == 0 else -3) for i, t in enumerate(picks)]
    s = np.zeros(len(sigs), SIGNAL_DTYPE)
    s["tick_seq"] = [t for t, _ in sigs]
    s["position"] = [p for _, p in sigs]
    fills, info = l3.run(rec, words, s, 1, np.array([[50.0, 0, 0, 0]]),
                         execsim.ExecParams(entry_ns=latency_ns, maker=True))
    ref = reference(rec, words, sigs, latency_ns + (execsim.clock_skew(words) if execsim.clocks_comparable(words) else 0))
    got = list(zip(fills["signal"].tolist(), fills["qty"].tolist(), fills["price"].tolist(), fills["tick"].tolist()))
    assert len(ref) > 20, "the scenario must produce fills to compare"
    assert got == ref
    assert (fills["maker"] == 1).all()

"""engine/levelbook.py: the one book kept from level ticks, shared by the strategy host and the
execution simulators, against a plain Python model of the window, random ticks included."""
import ast

import numpy as np
import pytest

from engine import levelbook as LB
from tests.conftest import ROOT


def model_apply(levels, side, px, sz, cap):
    """The window as a list of [px, sz], best first; returns the first index that changed."""
    better = (lambda a, b: a > b) if side == 0 else (lambda a, b: a < b)
    k = 0
    while k < len(levels) and better(levels[k][0], px):
        k += 1
    found = k < len(levels) and levels[k][0] == px
    if sz == 0:
        if not found:
            return LB.NO_LEVEL
        del levels[k]
        return k
    if found:
        if levels[k][1] == sz:
            return LB.NO_LEVEL
        levels[k][1] = sz
        return k
    if k >= cap:
        return LB.NO_LEVEL
    levels.insert(k, [px, sz])
    del levels[cap:]
    return k


@pytest.mark.parametrize("cap,seed", [(1, 1), (4, 2), (10, 3), (32, 4)])
def test_random_level_ticks_keep_the_models_window(cap, seed):
    rng = np.random.default_rng(seed)
    n_inst = 3
    book = np.zeros((n_inst, 2, 2, cap), np.int64)
    counts = np.zeros((n_inst, 2), np.int64)
    model = [[[], []] for _ in range(n_inst)]
    for step in range(4000):
        inst = int(rng.integers(n_inst))
        if rng.random() < 0.01:
            LB.clear(book, counts, inst)
            model[inst] = [[], []]
        else:
            side = int(rng.integers(2))
            px = int(rng.integers(90, 110)) * 1_000_000_000
            sz = int(rng.integers(0, 4))  # size 0 often: levels leave
            got = LB.set_level(book, counts, inst, side, px, sz)
            assert got == model_apply(model[inst][side], side, px, sz, cap), step
        for i in range(n_inst):
            for s in range(2):
                want = np.array(model[i][s], np.int64).reshape(-1, 2)
                n = counts[i, s]
                assert n == len(want)
                assert np.array_equal(book[i, s, LB.PX, :n], want[:, 0])
                assert np.array_equal(book[i, s, LB.SZ, :n], want[:, 1])
                assert not book[i, s, :, n:].any()  # zeros past the last level


def test_the_host_and_the_simulators_apply_level_ticks_through_levelbook():
    """No second book reader: the host template, execsim and l3 call levelbook and define no
    level search, insert or remove of their own."""
    for rel in ("engine/host_template.py", "replay/execsim.py", "replay/l3.py"):
        tree = ast.parse((ROOT / rel).read_text())
        calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert any(c.startswith("levelbook.") for c in calls), rel
        defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not defs & {"find_level", "insert_level", "remove_level", "_set_level"}, rel

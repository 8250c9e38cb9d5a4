"""numba's variable liveness over bitsets (for the engine's own compiles:
engine/jit.py puts it in place for each of them and takes it out after).

numba's `compute_live_map` finds, per block, the variables defined on some path into it, then
those live at its entry, each by repeating set unions over the blocks until nothing grows. The sets
hold variable names; after inlining they hold thousands, and every union copies them: 16 of the
137 s cold compile of a `binance-live://` source (bench/cold_compile.py). Here each name is a bit
of a Python int and the same passes run over ints; the result goes back as numba's sets.

Both iterate the same monotone equations from the same start to a fixed point, and the least one
is unique, so the map is the same set for set (tests/test_numba_live_map.py compares the two on
every call of a compile). Applied only to the function it was written against (its source, by
hash, on numba 0.68); anything else is left alone. numba/parfors imports the function by name
when it is first imported, and keeps numba's own if that was before (parallel=True only: slower,
the same).
"""
import hashlib
import inspect
from collections import defaultdict

import numpy as np

# sha256 of numba 0.68.1's analysis.compute_live_map: the equations this computes
LIVE_MAP_SHA256 = "713c4c094977e93b7ade48a478eb9b94168786ad9b440906b8e95b7fc0487a2a"


def compute_live_map(cfg, blocks, var_use_map, var_def_map):
    """numba.core.analysis.compute_live_map: {block label: the names live at its entry}."""
    index = {}

    def bits(names):
        b = 0
        for n in names:
            i = index.get(n)
            if i is None:
                i = index[n] = len(index)
            b |= 1 << i
        return b

    use = {k: bits(v) for k, v in var_use_map.items()}
    defs = {k: bits(v) for k, v in var_def_map.items()}
    order = cfg.topo_order()
    succ = {k: [b for b, _ in cfg.successors(k)] for k in order}
    pred = {k: [b for b, _ in cfg.predecessors(k)] for k in order}

    reach = defaultdict(int)  # the names defined on some path to a block's entry, or in it
    while True:
        before = dict(reach)
        for k in order:
            reach[k] |= defs[k] | use[k]
            r = reach[k]
            for s in succ[k]:
                reach[s] |= r
        if reach == before:
            break

    live = {k: use[k] for k in blocks.keys()}
    back = order[::-1]
    while True:
        before = dict(live)
        for k in back:
            lv = live[k]
            for p in pred[k]:
                live[p] |= lv & reach[p] & ~defs[p]
        if live == before:
            break

    names = np.empty(len(index), object)
    for n, i in index.items():
        names[i] = n
    nbytes = (len(index) + 7) // 8
    out = {}
    for k, b in live.items():
        on = np.unpackbits(np.frombuffer(b.to_bytes(nbytes, "little"), np.uint8), bitorder="little")
        out[k] = set(names[np.flatnonzero(on)].tolist())
    return out


def source_sha256():
    from numba.core import analysis
    try:
        return hashlib.sha256(inspect.getsource(analysis.compute_live_map).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def patched():
    from numba.core import analysis
    return analysis.compute_live_map is compute_live_map


def patch():
    """Put it in place (engine/jit.py, around a compile of ours); idempotent. Returns whether it is.
    numba's modules that imported the function by name get it too."""
    import numba
    from numba.core import analysis, ir_utils
    if patched():
        return True
    if not numba.__version__.startswith("0.68.") or source_sha256() != LIVE_MAP_SHA256:
        return False
    compute_live_map.__wrapped__ = analysis.compute_live_map
    analysis.compute_live_map = compute_live_map
    ir_utils.compute_live_map = compute_live_map
    return True


def unpatch():
    """numba's own liveness again (the benchmark's and the tests' peer)."""
    from numba.core import analysis, ir_utils
    if patched():
        analysis.compute_live_map = ir_utils.compute_live_map = compute_live_map.__wrapped__

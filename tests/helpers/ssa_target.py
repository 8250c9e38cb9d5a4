"""Functions whose SSA form numba must rebuild and whose liveness it must find (variables assigned
on several paths, loops, inlined callees), for tests/test_numba_ssa.py and test_numba_live_map.py:
their children compile them with the engine's extensions or numba's own and print what they
compiled and what it computes ("ours": the target compiled as the engine's functions are, through
engine/jit.py; "stock": numba as it comes)."""
import hashlib
import sys

import numba
import numpy as np
from numba import njit


X = np.array([5, -9, 3, 14, 0, -4, 7, 22, -13, 6, 1, 8], np.int64)


@njit(inline="always")
def _step(x, i, acc, lo, hi):
    v = x[i]
    if v > hi:
        hi = v
        acc += v * 2
    elif v < lo:
        lo = v
        acc -= v
    else:
        t = v + i
        acc += t if t % 2 == 0 else -t
    return acc, lo, hi


@njit(inline="always")
def _pass(x, k):
    acc, lo, hi = 0, x[0], x[0]
    for i in range(k):
        acc, lo, hi = _step(x, i, acc, lo, hi)
        if acc > 1000:
            acc = acc % 997
    return acc, lo, hi


def target_py(x, k):
    a, lo, hi = _pass(x, k)
    b, lo2, hi2 = _pass(x[::-1], k)
    n = 0
    while a != b and n < 50:
        if a > b:
            a -= hi - lo + 1
        else:
            b -= hi2 - lo2 + 1
        n += 1
    return a, b, n, lo, hi


def main(stock):
    from numba.core import ssa

    from engine import jit
    target = numba.njit(target_py) if stock else jit.njit(target_py)
    seen = [0]
    block_pass = ssa._run_ssa_block_pass

    def counting(states, blk, handler):  # each block numba's own handlers go through
        seen[0] += 1
        return block_pass(states, blk, handler)
    ssa._run_ssa_block_pass = counting
    got = target(X, len(X))
    llvm = "".join(v for _, v in sorted(target.inspect_llvm().items(), key=lambda kv: str(kv[0])))
    print(hashlib.sha256(llvm.encode()).hexdigest(), [int(v) for v in got], seen[0],
          getattr(target, "_engine_compile", False))


def check_live_map():
    """Every live map numba asks for while compiling target: the engine's and numba's own, compared;
    prints how many there were and how many differed."""
    from numba.core import analysis, ir_utils

    from engine.numba_live_map import compute_live_map as ours
    stock = analysis.compute_live_map
    calls, differ = [0], [0]

    def both(cfg, blocks, use, defs):
        a, b = ours(cfg, blocks, use, defs), stock(cfg, blocks, use, defs)
        calls[0] += 1
        differ[0] += a != b
        return b
    analysis.compute_live_map = ir_utils.compute_live_map = both
    numba.njit(target_py)(X, len(X))
    print(calls[0], differ[0])


if __name__ == "__main__":
    if sys.argv[1] == "python":  # (under NUMBA_DISABLE_JIT=1: what the code computes, no compiler)
        print([int(v) for v in njit(target_py)(X, len(X))])
    elif sys.argv[1] == "live-map":
        check_live_map()
    else:
        main(sys.argv[1] == "stock")

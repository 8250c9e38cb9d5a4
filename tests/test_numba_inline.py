"""engine/numba_inline.py: numba's inliner copies a callee's scope once per inlined call, not once
per block, in the engine's own compiles (engine/jit.py), and what it compiles still computes the same."""

import numpy as np
from numba import njit
from numba.core import ir

from engine import numba_inline



@njit(inline="always")
def _branchy(x, k):
    # many blocks, many variables: what the per-block copy made quadratic
    acc = 0
    for i in range(k):
        if x[i] > 3:
            acc += x[i] * 2
        elif x[i] < -3:
            acc -= x[i]
        else:
            t = x[i] + i
            acc += t if t % 2 == 0 else -t
    return acc


@njit(inline="always")
def _nested(x, k):
    return _branchy(x, k) + _branchy(x[::-1], k)


def _python_branchy(x, k):
    acc = 0
    for i in range(k):
        v = int(x[i])
        if v > 3:
            acc += v * 2
        elif v < -3:
            acc -= v
        else:
            t = v + i
            acc += t if t % 2 == 0 else -t
    return acc


def test_an_inlined_callee_shares_one_copied_scope_and_computes_the_same():
    from engine import jit
    assert not numba_inline.patched()  # (numba as it comes, outside the engine's compiles)
    scopes = []
    original = ir.Var.__deepcopy__

    def spy(self, memo):
        out = original(self, memo)
        scopes.append(out.scope)  # kept alive: ids stay distinct
        return out

    ir.Var.__deepcopy__ = spy
    try:
        @jit.njit(inline="never")  # (the engine's: the shared-memo copy for this compile)
        def outer(x, k):
            return _nested(x, k) - _branchy(x, k)

        x = np.arange(-9, 9, dtype=np.int64)
        got = outer(x, len(x))
    finally:
        ir.Var.__deepcopy__ = original
    want = _python_branchy(x, len(x)) + _python_branchy(x[::-1], len(x)) - _python_branchy(x, len(x))
    assert got == want
    # 3 inlined calls in outer, 2 in _nested: each call copies the callee twice (numba keeps an
    # unmutated copy), each copy with one scope; a copy per block would give dozens
    assert 0 < len({id(s) for s in scopes}) <= 2 * 5, len({id(s) for s in scopes})
    assert not numba_inline.patched()  # (taken out again when the compile returned)

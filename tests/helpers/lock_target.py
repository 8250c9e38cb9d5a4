"""A numba function cached on disk, for tests/test_numba_lock.py (its children compile or load it)."""
from engine.jit import njit  # (the engine's: its compiles take the cross-process lock)


@njit(cache=True)
def target(x):
    s = 0.0
    for i in range(10):
        s += x * i
    return s

"""A numba function cached on disk, for tests/test_numba_lock.py (its children compile or load it)."""
from numba import njit


@njit(cache=True)
def target(x):
    s = 0.0
    for i in range(10):
        s += x * i
    return s

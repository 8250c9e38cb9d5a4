"""A tiny explicit-state PRNG (splitmix64) for numba.

The simulator owns its generator state in an array instead of numba's thread-global
np.random, so its output depends only on the seed: not on the thread, nor on who else
draws random numbers in the process.
"""
import math

import numpy as np
from engine.jit import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def new_state(seed):
    return np.array([np.uint64(seed & 0xFFFFFFFFFFFFFFFF)], np.uint64)


@njit(nogil=True, inline="always", cache=True)
def next_u64(rs):
    rs[0] += _GOLDEN
    z = rs[0]
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, inline="always", cache=True)
def uniform(rs):
    """Uniform in [0, 1) with 53 random bits."""
    return float(next_u64(rs) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(nogil=True, inline="always", cache=True)
def exponential(rs, mean):
    return -math.log(1.0 - uniform(rs)) * mean


@njit(nogil=True, inline="always", cache=True)
def normal(rs):
    u1 = 1.0 - uniform(rs)
    u2 = uniform(rs)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

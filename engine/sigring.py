"""The SPSC signal ring: the strategy thread writes, one drainer reads.

The producer never blocks: when the ring is full the signal is counted in the header's
drop counter (exported) and discarded.
"""
import numpy as np
from .jit import njit

from . import shm
from .intrinsics import load_acquire, load_relaxed, store_relaxed, store_release
from .records import SIGNAL_DTYPE, SIGNAL_WORDS

# Producer-private state, an int64[4]: next write seq, cached read cursor, drops.
P_WRITE, P_READ_CACHE, P_DROPS = 0, 1, 2


@njit(nogil=True, inline="always", cache=True)
def push(hdr, data, mask, pstate, words):
    """Append one signal (words: int64[SIGNAL_WORDS]); False (and a counted drop) if full."""
    w = pstate[P_WRITE]
    if w - pstate[P_READ_CACHE] > mask:
        pstate[P_READ_CACHE] = load_acquire(hdr, shm.H_READ)
        if w - pstate[P_READ_CACHE] > mask:
            pstate[P_DROPS] += 1
            store_relaxed(hdr, shm.H_DROPS, pstate[P_DROPS])
            return False
    base = (w & mask) * SIGNAL_WORDS
    for k in range(SIGNAL_WORDS):
        data[base + k] = words[k]
    pstate[P_WRITE] = w + 1
    store_release(hdr, shm.H_WRITE, w + 1)
    return True


@njit(nogil=True, cache=True)
def drain(hdr, data, mask, out):
    """Copy up to len(out) pending signals into out (int64[n, SIGNAL_WORDS]); returns the count."""
    r = load_relaxed(hdr, shm.H_READ)
    w = load_acquire(hdr, shm.H_WRITE)
    n = min(w - r, out.shape[0])
    for i in range(n):
        base = ((r + i) & mask) * SIGNAL_WORDS
        for k in range(SIGNAL_WORDS):
            out[i, k] = data[base + k]
    store_release(hdr, shm.H_READ, r + n)
    return n


class SignalRing:
    def __init__(self, name, capacity=1 << 14, create=True):
        self.path = shm.ring_path(name)
        if create:
            self.mm, self.hdr, self.note = shm.create(self.path, shm.RING_SIGNALS, SIGNAL_DTYPE.itemsize, capacity)
        else:
            self.mm, self.hdr = shm.open_rw(self.path, shm.RING_SIGNALS)
            capacity = int(self.hdr[shm.H_CAPACITY])
        self.data = np.frombuffer(self.mm, np.int64, capacity * SIGNAL_WORDS, shm.HEADER_BYTES)
        self.mask = capacity - 1
        self.pstate = np.zeros(4, np.int64)
        self.pstate[P_WRITE] = int(self.hdr[shm.H_WRITE])
        self.pstate[P_READ_CACHE] = int(self.hdr[shm.H_READ])
        self.pstate[P_DROPS] = int(self.hdr[shm.H_DROPS])

    @property
    def drops(self):
        return int(self.hdr[shm.H_DROPS])

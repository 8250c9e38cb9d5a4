"""Getting the hot path ready off the clock: page in buffers and train the model's caches
from the thread that will run the loop, before it goes real time."""
import numpy as np
from .jit import njit

from .intrinsics import call_predict


@njit(nogil=True, cache=True)
def warm_model(addr, row, out, n):
    """Call the model n times on varied rows: pages in its code and trains branch predictors."""
    acc = 0.0
    for i in range(n):
        for k in range(row.shape[0]):
            row[k] = np.float32(((i * 7919 + k * 104729) % 2001) / 1000.0 - 1.0)
        call_predict(addr, row, out)
        acc += out[0]
    return acc


@njit(nogil=True, cache=True)
def prefault(arr):
    """Touch every page of an int64/float array from the calling (pinned) thread."""
    step = max(1, 4096 // arr.itemsize)
    flat = arr.reshape(-1)
    s = 0.0
    for i in range(0, flat.shape[0], step):
        s += flat[i]
    return s

"""A book kept from level ticks (engine/records.py, KIND_LEVEL): the one reader the strategy host
(engine/host_template.py) and the execution simulators (replay/execsim.py, replay/l3.py) share.

Layout, per instrument and side (0 = bids, 1 = asks):
  book    int64 [instruments, 2, 2, levels]: [inst, side, PX or SZ, level], best level first
          (bids descending, asks ascending), zeros past the last level
  counts  int64 [instruments, >= 2]: column `side` = the levels held (the host keeps them in the
          first two columns of its per-instrument array)
A side holds at most `levels` (the array's width): a new level below a full window is not kept,
and a better one pushes the worst out, as the source's own window does.
"""
from .jit import njit

PX, SZ = 0, 1
NO_LEVEL = 1 << 30  # set_level: no level of the window changed


@njit(nogil=True, inline="always", cache=True)
def find(book, counts, inst, side, px):
    """(where px is or would go on the side, best first; is it there?)"""
    n = counts[inst, side]
    k = 0
    while k < n:
        pk = book[inst, side, PX, k]
        if pk == px or (pk < px if side == 0 else pk > px):
            break
        k += 1
    return k, k < n and book[inst, side, PX, k] == px


@njit(nogil=True, inline="always", cache=True)
def remove(book, counts, inst, side, k):
    """Level k leaves; the ones below move up."""
    n = counts[inst, side]
    for j in range(k, n - 1):
        book[inst, side, PX, j] = book[inst, side, PX, j + 1]
        book[inst, side, SZ, j] = book[inst, side, SZ, j + 1]
    book[inst, side, PX, n - 1] = 0
    book[inst, side, SZ, n - 1] = 0
    counts[inst, side] = n - 1


@njit(nogil=True, inline="always", cache=True)
def insert(book, counts, inst, side, k, px, sz):
    """A new level at k; the worst falls off a full side. False (nothing kept) when k is past it."""
    cap = book.shape[3]
    if k >= cap:
        return False
    n = counts[inst, side]
    if n == cap:
        n -= 1
    for j in range(n, k, -1):
        book[inst, side, PX, j] = book[inst, side, PX, j - 1]
        book[inst, side, SZ, j] = book[inst, side, SZ, j - 1]
    book[inst, side, PX, k] = px
    book[inst, side, SZ, k] = sz
    counts[inst, side] = n + 1
    return True


@njit(nogil=True, inline="always", cache=True)
def set_level(book, counts, inst, side, px, sz):
    """A level tick: the side's level at px becomes sz (0: it leaves). Returns the first level
    index whose content changed, NO_LEVEL when none did."""
    k, found = find(book, counts, inst, side, px)
    if sz == 0:
        if not found:
            return NO_LEVEL
        remove(book, counts, inst, side, k)
        return k
    if found:
        if book[inst, side, SZ, k] == sz:
            return NO_LEVEL
        book[inst, side, SZ, k] = sz
        return k
    return k if insert(book, counts, inst, side, k, px, sz) else NO_LEVEL


@njit(nogil=True, inline="always", cache=True)
def clear(book, counts, inst):
    """A clear tick: the instrument's book is empty on both sides."""
    for side in range(2):
        for k in range(counts[inst, side]):
            book[inst, side, PX, k] = 0
            book[inst, side, SZ, k] = 0
        counts[inst, side] = 0

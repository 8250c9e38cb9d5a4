"""Spins until word 0 of FILE becomes non-zero, written by another process.

usage: python -m tests.helpers.spinner FILE acquire|plain
Prints "ready" once compiled and spinning, "done" when it saw the store.
"""
import mmap
import sys

import numpy as np
from numba import njit

from engine.intrinsics import cpu_pause, load_acquire


@njit(nogil=True)
def spin_acquire(a):
    n = 0
    while load_acquire(a, 0) == 0:
        cpu_pause()
        n += 1
    return n


@njit(nogil=True)
def spin_plain(a):
    n = 0
    while a[0] == 0:
        n += 1
    return n


def main():
    path, mode = sys.argv[1], sys.argv[2]
    fn = spin_acquire if mode == "acquire" else spin_plain
    fn(np.ones(8, np.int64))  # compile before we say we are ready
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 64)
    a = np.frombuffer(mm, np.int64, 8)
    print("ready", flush=True)
    fn(a)
    print("done", flush=True)


if __name__ == "__main__":
    main()

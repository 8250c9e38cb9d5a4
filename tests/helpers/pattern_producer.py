"""Test producer: publishes COUNT records whose every word is derived from their seq,
so a torn read (words from two different records) cannot go unnoticed.

usage: python -m tests.helpers.pattern_producer RING COUNT CAPACITY WAIT_CONSUMERS [PACE_EVERY]
"""
import sys
import time

import numpy as np
from numba import njit

from engine import shm
from engine.tickring import TickRing, publish


@njit(nogil=True, cache=True)
def produce(hdr, data, mask, start, n):
    w = np.zeros(8, np.int64)
    for s in range(start, start + n):
        for k in range(1, 8):
            w[k] = s * 8 + k
        publish(hdr, data, mask, w)


def main():
    name, count, cap, wait = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    pace = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    ring = TickRing(name, cap)
    t0 = time.monotonic()
    while ring.consumers() < wait:
        if time.monotonic() - t0 > 60:
            sys.exit("no consumer")
        time.sleep(0.001)
    ring.set_state(shm.STATE_PRODUCING)
    step = pace or count
    for start in range(0, count, step):
        produce(ring.hdr, ring.data, ring.mask, start, min(step, count - start))
        ring.heartbeat()
        if pace:
            time.sleep(0.001)
    ring.set_state(shm.STATE_FINISHED)
    # stay alive (as the owner) until the consumer says it is done
    while ring.consumers() and time.monotonic() - t0 < 120:
        time.sleep(0.01)


if __name__ == "__main__":
    main()

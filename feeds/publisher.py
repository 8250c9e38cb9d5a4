"""Paced publication of generated ticks into the tick ring (numba)."""
import time

from numba import njit

from engine import shm, tickring
from engine.intrinsics import cpu_pause, monotonic_ns, store_relaxed

SLEEP_THRESHOLD_NS = 20_000    # further ahead than this: return and let the caller sleep
MAX_BEHIND_NS = 10_000_000     # more than 10 ms behind schedule: re-anchor, do not burst


@njit(nogil=True, inline="always", cache=True)
def _publish_one(hdr, data, mask, buf, i, now):
    """Stamp ts_recv with `now`, publish buf[i], beat the heartbeat every 256 ticks; returns i + 1."""
    buf[i, 2] = now
    tickring.publish(hdr, data, mask, buf[i])
    i += 1
    if (i & 255) == 0:
        store_relaxed(hdr, shm.H_HEARTBEAT_NS, now)
    return i


@njit(nogil=True, cache=True)
def publish_paced(hdr, data, mask, buf, i, n, next_due, interval_ns):
    """Publish buf[i:n] at one tick per interval_ns (0 = as fast as possible).

    Stamps ts_recv (word 2) with CLOCK_MONOTONIC just before each publish. Returns
    (next index, next due time); returns early when the next tick is far off so the
    caller can sleep instead of spinning a core.
    """
    while i < n:
        now = monotonic_ns()
        if interval_ns > 0:
            if now < next_due:
                if next_due - now > SLEEP_THRESHOLD_NS:
                    return i, next_due
                cpu_pause()
                continue
            next_due += interval_ns
            if now - next_due > MAX_BEHIND_NS:
                next_due = now
        i = _publish_one(hdr, data, mask, buf, i, now)
    store_relaxed(hdr, shm.H_HEARTBEAT_NS, monotonic_ns())
    return i, next_due


@njit(nogil=True, cache=True)
def publish_due(hdr, data, mask, buf, due, i, n):
    """Publish buf[i:n], tick j not before CLOCK_MONOTONIC due[j]; returns early (the next
    index) when the next tick is far enough off for the caller to sleep. Stamps ts_recv."""
    while i < n:
        now = monotonic_ns()
        if now < due[i]:
            if due[i] - now > SLEEP_THRESHOLD_NS:
                break
            cpu_pause()
            continue
        i = _publish_one(hdr, data, mask, buf, i, now)
    store_relaxed(hdr, shm.H_HEARTBEAT_NS, monotonic_ns())
    return i


def publish_all(ring, buf, n, next_due, interval_ns, stopped=lambda: False):
    """Publish buf[:n] paced at interval_ns (0 = flat out), sleeping between ticks when the next
    one is far enough off (call rt.set_timer_slack first for accurate short sleeps).
    Returns (published, next_due); stops early when stopped() turns true."""
    i = 0
    while i < n and not stopped():
        i, next_due = publish_paced(ring.hdr, ring.data, ring.mask, buf, i, n, next_due, interval_ns)
        if i < n:
            ahead = next_due - time.monotonic_ns() - 5_000
            if ahead > 0:  # in steps of at most 50 ms: publish_paced beats the heartbeat between them
                time.sleep(min(ahead / 1e9, 0.05))
    return i, next_due

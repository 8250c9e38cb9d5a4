"""The feed-handler process: a source -> the tick ring. `engine feed SOURCE`."""
import signal
import sys
import time

import numpy as np

from engine import shm
from engine.tickring import TickRing

from engine.rt import set_timer_slack

from .publisher import publish_all, publish_paced
from .synthetic import Simulator, parse_uri

BATCH = 4096


def open_source(uri):
    if uri.startswith("synthetic:"):
        params = parse_uri(uri)
        return params, Simulator(params)
    raise ValueError(f"unknown source {uri!r}: this engine reads synthetic://?... "
                     "(real-data feeds are not implemented yet)")


def _compile(sim):
    """JIT the generator and publisher on throwaway state (sim's own state is untouched)."""
    import copy
    scratch = np.zeros((4, 8), np.int64)
    copy.deepcopy(sim).generate(scratch)
    hdr = np.zeros(shm.HEADER_WORDS, np.int64)
    publish_paced(hdr, np.zeros(4 * 8, np.int64), 3, scratch, 0, 4, 0, 0)


def run_feed(uri, ring_name, *, rate=None, capacity=1 << 18, wait_consumers=0, wait_timeout=60.0,
             count=None, duration=None, keep=False, quiet=False):
    """Publish ticks from `uri` into ring `ring_name` until the source ends or we are stopped."""
    params, sim = open_source(uri)
    if rate is not None:
        params.rate = rate
    if count is not None:
        params.count = count
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)

    _compile(sim)  # before the ring exists: nobody waits on our JIT
    set_timer_slack(1000)
    ring = TickRing(ring_name, capacity)
    say = (lambda m: None) if quiet else (lambda m: print(f"[feed] {m}", file=sys.stderr, flush=True))
    if ring.note:
        say(ring.note)
    say(f"{params.uri()} -> {ring.path} ({capacity} slots)")
    try:
        t_wait = time.monotonic()
        while ring.consumers() < wait_consumers and not stop["flag"]:
            if time.monotonic() - t_wait > wait_timeout:
                raise TimeoutError(f"no consumer attached to {ring.path} within {wait_timeout:.0f} s")
            ring.heartbeat()
            time.sleep(0.001)
        ring.set_state(shm.STATE_PRODUCING)
        buf = np.zeros((BATCH, 8), np.int64)
        interval = int(1e9 / params.rate) if params.rate > 0 else 0
        deadline = time.monotonic() + duration if duration else None
        next_due = time.monotonic_ns()
        produced = 0
        while not stop["flag"]:
            n = BATCH if not params.count else min(BATCH, params.count - produced)
            if n <= 0:
                break
            sim.generate(buf[:n])
            i, next_due = publish_all(ring, buf, n, next_due, interval, lambda: stop["flag"])
            produced += i
            if deadline and time.monotonic() >= deadline:
                break
        ring.set_state(shm.STATE_FINISHED)
        say(f"published {produced} ticks")
        return produced
    finally:
        if ring.hdr[shm.H_STATE] != shm.STATE_FINISHED:
            ring.set_state(shm.STATE_FINISHED)
        if not keep:
            ring.unlink()

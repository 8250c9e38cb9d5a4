"""`engine record --ring NAME --out FILE.ticks`: a live ring's ticks into a tick file.

A consumer like any other (it never slows the producer: if it falls a ring behind, it records
the gap tick with the exact count it lost). It drains in batches and sleeps briefly when the
ring is empty, so it belongs on a housekeeping core, never the strategy's (`--core`). It stops
on SIGINT/SIGTERM or when the producer marks the end of its stream, and closes the file complete
(index written, flag set); while it runs, readers see every record written so far, and the
instrument table as it grows. A write that fails (a full disk) stops it: the file keeps its whole
records, marked incomplete with the reason, and the command fails naming the file; a killed
recorder leaves a file whose filled blocks readers still check (engine/tickfile.py).
"""
import signal
import sys
import time

import numpy as np
from numba import njit

from engine import realtime, tickring
from engine.outputs import OutputError
from engine.tickfile import TickFileWriter
from engine.tickring import TickConsumer

BATCH = 4096


@njit(nogil=True, cache=True)
def drain(hdr, data, mask, slot_base, buf):
    """Poll up to len(buf) ticks (gap ticks included) into buf; returns how many."""
    n = 0
    while n < buf.shape[0]:
        st = tickring.poll(hdr, data, mask, slot_base, buf[n])
        if st == tickring.POLL_EMPTY:
            break
        n += 1
    return n


def _open(ring, wait):
    from engine.shm import RingError
    deadline = time.monotonic() + wait
    while True:
        try:
            return TickConsumer(ring)
        except RingError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _specs(c, names):
    """The feed's records (engine/instruments.py) of `names`, as its ring's table has them: what
    each instrument is travels from the feed into the file (None when the feed gave names only)."""
    specs = c.specs()
    if specs is None:
        return None
    by_name = {s["symbol"]: s for s in specs}
    from engine.instruments import unknown
    return [by_name.get(n) or unknown(n) for n in names]


def record(ring, out, *, start="now", core=None, duration=None, instruments=(), quiet=False, wait=0.0):
    say = (lambda m: None) if quiet else (lambda m: print(f"[record] {m}", file=sys.stderr, flush=True))
    if core is not None:
        realtime.check_core(core)
        realtime.pin_current_thread(core)
    buf = np.zeros((BATCH, 8), np.int64)
    c = _open(ring, wait)  # a missing ring fails here, before the file exists
    drain(c.hdr, c.data, c.mask, 8, np.zeros((0, 8), np.int64))  # compile before we attach
    stop = {"flag": False}
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.__setitem__("flag", True))
    w = TickFileWriter(out, instruments, source=f"ring:{c.path}", depth=c.depth)
    c.claim(start, backpressure=True)  # a file replay waits for the recorder: nothing lost
    say(f"{c.path} -> {out}")
    deadline = time.monotonic() + duration if duration else None
    names = list(instruments) or c.instruments()
    last_look = time.monotonic()
    error = None
    try:
        w.set_instruments(names, _specs(c, names))  # in the header as soon as known: a killed recorder keeps them
        while not stop["flag"]:
            n = drain(c.hdr, c.data, c.mask, c.slot_base, buf)
            if n:
                w.append(buf[:n])
                if not instruments and (not names or time.monotonic() - last_look > 0.5):  # it may grow
                    names, last_look = c.instruments() or names, time.monotonic()
                    w.set_instruments(names, _specs(c, names))
                continue
            if c.producer_finished() or (deadline and time.monotonic() >= deadline):
                break
            time.sleep(0.0005)
        while True:  # what is already in the ring when we are told to stop is recorded too
            n = drain(c.hdr, c.data, c.mask, c.slot_base, buf)
            if not n:
                break
            w.append(buf[:n])
    except OutputError as e:  # a full disk: the file keeps what it has, marked incomplete
        error = e
    finally:
        try:
            names = list(instruments) or c.instruments() or names
            w.set_instruments(names, _specs(c, names))
            w.close()
        except OutputError as e:
            error = error or e
        finally:
            c.close()
    say(f"recorded {w.n} ticks ({c.gaps} gaps, {c.lost} ticks lost)")
    if error is not None:
        say(f"warning: {out} is incomplete: its writer stopped at record {w.n:,} ({error.reason}); readers "
            "check its filled blocks and report the rest")
        raise error
    return {"ticks": w.n, "gaps": c.gaps, "lost": c.lost, "out": out}

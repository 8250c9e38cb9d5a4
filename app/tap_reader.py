"""A thread off the strategy core that reads, in batches, the ticks the loop read: a consumer of the
tap ring (host_template run_loop_multi, CFG_TAP) with no back-pressure, so the loop never waits for
it and a reader that falls a whole ring behind loses ticks, counted (gaps()). It runs SCHED_IDLE:
what it does decides for no one, and the feed and the control plane on the same cores come first.
Shadow models (app/shadow.py) and the drift monitor (app/drift_monitor.py) are such readers."""
import threading
import time

import numpy as np

from engine import shm
from engine.realtime import set_idle
from engine.tickring import TickConsumer

from .recorder import drain

BATCH = 4096


class TapReader(threading.Thread):
    """Subclasses define _step(): one batch read (poll()) and handled; how many ticks it read."""

    def __init__(self, name, idle_s):
        super().__init__(name=name, daemon=True)
        self.idle_s = idle_s
        self.buf = np.zeros((BATCH, 8), np.int64)
        self.c = None
        self.stop_flag = threading.Event()
        self.error = None

    def claim(self, tap, start="oldest"):
        """Read `tap` (engine.tickring.TickRing) from its oldest tick or from the next one ("now")."""
        self.c = TickConsumer(tap.path.rsplit("/", 1)[-1])
        self.c.claim(start)

    def poll(self):
        """Up to BATCH ticks into self.buf; how many."""
        return drain(self.c.hdr, self.c.data, self.c.mask, self.c.slot_base, self.buf)

    def gaps(self):
        return int(self.c.hdr[self.c.slot_base + shm.C_GAPS])

    def run(self):
        set_idle()
        try:
            while not self.stop_flag.is_set():
                if not self._step():
                    time.sleep(self.idle_s)
        except Exception as e:  # noqa: BLE001 - said in the summary and /status; the live run goes on
            self.error = e

    def stop(self):
        """Stop the thread (the caller then reads what is left, or closes)."""
        self.stop_flag.set()
        if self.is_alive():
            self.join()

"""`engine run --record FILE.ticks`: the ticks in the order the strategy loop read them, so that
`engine backtest FILE.ticks` gives the run's signals bit for bit.

The loop does no I/O: it publishes each tick it takes (after mapping its instrument to the run's
id and numbering it in the merged stream) into a tap ring, one 64-byte publish (host_template
run_loop_multi, CFG_TAP). This thread, on the control plane's cores, drains the tap in batches into
a tick file (engine/tickfile.py) whose instrument table is the run's (app/multi_rings.py: global
ids, VENUE:SYMBOL with several sources, each record naming its source), rewritten as feeds find
instruments. The loop never waits for it: a recorder that falls a whole tap ring behind records
the gap tick with the exact count it lost (and the summary says the recording is then not the
run's). At the end the loop has stopped before the last drain, so the file holds every tick it read.
"""
import threading
import time

import numpy as np

from engine import shm
from engine.outputs import OutputError
from engine.tickfile import TickFileWriter
from engine.tickring import TickConsumer

from .recorder import drain  # (the same batch drain `engine record` uses)

BATCH = 4096
IDLE_S = 0.001          # an empty tap: look again after this
TABLE_EVERY_S = 0.2     # the instrument table is looked at this often (feeds find instruments as they read)


class TapRecorder(threading.Thread):
    def __init__(self, tap, path, table, source, depth):
        super().__init__(name="engine-record", daemon=True)
        self.path, self.table = path, table
        self.c = TickConsumer(tap.path.rsplit("/", 1)[-1])
        self.buf = np.zeros((BATCH, 8), np.int64)
        drain(self.c.hdr, self.c.data, self.c.mask, 8, np.zeros((0, 8), np.int64))  # compiled before the run
        self.c.claim("oldest")  # no back-pressure: the loop never waits for us
        names, specs = table()
        self.w = TickFileWriter(path, names, source=f"engine run: {source}", depth=depth, specs=specs)
        self.stop_flag = threading.Event()
        self.error = None
        self.records = 0

    def _drain(self):
        n = drain(self.c.hdr, self.c.data, self.c.mask, self.c.slot_base, self.buf)
        if n:
            self.w.append(self.buf[:n])
            self.records += n
        return n

    def _names(self):
        names, specs = self.table()
        if names:
            self.w.set_instruments(names, specs)

    def run(self):
        last = time.monotonic()
        try:
            while not self.stop_flag.is_set():
                n = self._drain()
                if time.monotonic() - last >= TABLE_EVERY_S:
                    last = time.monotonic()
                    self._names()
                if not n:
                    time.sleep(IDLE_S)
        except OutputError as e:  # a full disk: the file keeps its whole records, marked incomplete
            self.error = e

    def finish(self, loop_stopped=True):
        """After the loop stopped: every tick it published, the final table, the index (the file
        is complete). A loop that is still running (hung) leaves a file that says what it holds."""
        self.stop_flag.set()
        if self.is_alive():
            self.join()
        try:
            if self.error is None:
                while self._drain():
                    pass
                self._names()
        except OutputError as e:
            self.error = e
        finally:
            self.w.close()
            self.c.close()

    def summary(self):
        """{out, ticks, gaps, lost, error} for the run's summary (gaps: the recorder was lapped)."""
        return {"out": self.path, "ticks": self.records, "gaps": self._line(shm.C_GAPS), "lost": self._line(shm.C_LOST),
                "error": str(self.error) if self.error else None}

    def _line(self, word):
        return int(self.c.hdr[self.c.slot_base + word])  # (our consumer line's counter: kept after close)

"""The run's instruments as the control plane knows them: with several sources the run's table
(global ids, VENUE:SYMBOL: app/multi_rings.py), written beside the rings when it grows; with one, its
feed's (the ring's .instruments file, read again when it changes). They name the zmq topics, the
paper positions in /status and the signal table; each new record gives the risk gate (and the
shadows' gates) its multiplier."""
import os

from engine import shm

from .progress import log


class RunInstruments:
    """x: the plane's inputs (app/daemon.py PlaneInputs)."""

    def __init__(self, x):
        self.x = x
        self.names, self.specs = [], None
        self._mtime = None

    def topic(self, inst):
        if inst < len(self.names):
            return self.names[inst].encode()
        return str(inst).encode()

    def refresh(self):
        x = self.x
        rings = getattr(x.thread, "rings", None)
        if rings is not None and x.sources and len(x.sources) > 1:
            # several sources: the run's table (global ids, VENUE:SYMBOL), written beside the rings when it grows
            names, specs = rings.table(True)
            if names != self.names or specs != self.specs:
                self.names, self.specs = names, specs
                if x.risk_table is not None:
                    x.risk_table(specs)
                from .multi_rings import write_table
                try:
                    write_table(shm.ring_path(f"{x.cfg.name}.instruments"), names, specs)
                except OSError as e:
                    log(f"warning: cannot write the run's instrument table: {e}")
            return
        c = x.thread.consumer
        if c is None:
            return
        try:
            m = os.stat(c.path + ".instruments").st_mtime_ns
        except OSError:  # the feed is gone with its table: the one read at claim or since
            self.names, self.specs = c.instruments(), c.specs()
            return
        if m != self._mtime:
            self._mtime = m
            self.names, self.specs = c.instruments(), c.specs()  # (specs: engine/instruments.py)
            if x.risk_table is not None:
                x.risk_table(self.specs)

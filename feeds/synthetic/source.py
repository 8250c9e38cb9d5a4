"""`synthetic://?...`: the market simulator (feeds/synthetic/market.py) as a source."""
import dataclasses

import numpy as np

from feeds.core import venues
from feeds.synthetic.market import Simulator
from feeds.synthetic.params import SYNTHETIC


class Synthetic:
    """`synthetic://?instruments=N&seed=S&rate=R&count=C...`"""
    live = False
    generated = True  # (its ticks are made here: feeds/process.py)

    def __init__(self, u, v):
        self.params = v
        self.uri = SYNTHETIC.uri(v, full=True)
        self.sim = Simulator(self.params)
        self.instruments = [f"SYN{i:04d}" for i in range(self.params.instruments)]
        self.specs = [venues.synthetic(n) for n in self.instruments]
        self.produced = 0

    def override(self, **given):
        """Set the parameters given (not None) over the URI's (engine feed --rate, --count); its
        uri says what it publishes, overrides included (the log names it)."""
        self.params = dataclasses.replace(self.params, **{k: v for k, v in given.items() if v is not None})
        self.uri = SYNTHETIC.uri(self.params, full=True)

    @property
    def depth(self):
        return self.params.depth

    def resync(self):
        self.sim.resync()

    def stats(self):
        return {"ticks": self.produced}

    def batches(self, batch=32):
        # small batches: generating one (~1 us a tick) stalls publication, and the publisher then
        # catches up in a burst that the loop must fold. Measured flat out (bench/tick_to_signal.py):
        # 256 a batch gave scored ticks p99 50 us, 64 gave 22 us, 32 gives 13-16 us, for ~15% fewer
        # ticks/s (the Python step per batch); 4096 made 4 ms stalls at any --rate
        buf = np.zeros((batch, 8), np.int64)
        while True:
            n = batch if not self.params.count else min(batch, self.params.count - self.produced)
            if n <= 0:
                return
            self.sim.generate(buf[:n])
            self.produced += n
            yield buf[:n]

"""`synthetic://?...`: the market simulator (feeds/synthetic/market.py) as a source."""
import numpy as np

from feeds.core import venues
from feeds.core.uri import FeedError
from feeds.synthetic.market import Simulator, parse_uri


class Synthetic:
    """`synthetic://?instruments=N&seed=S&rate=R&count=C...`"""
    live = False
    generated = True  # (its ticks are made here: feeds/process.py)

    def __init__(self, u, target=None, params=None):
        try:
            self.params = parse_uri(u)
        except ValueError as e:
            raise FeedError(str(e)) from None
        self.uri = self.params.uri()
        self.sim = Simulator(self.params)
        self.instruments = [f"SYN{i:04d}" for i in range(self.params.instruments)]
        self.specs = [venues.synthetic(n) for n in self.instruments]
        self.produced = 0

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

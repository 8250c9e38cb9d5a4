"""A synthetic market: several instruments, a spread, queues at the touch, trades.

Each instrument has a latent order-flow pressure (AR(1)). Pressure tilts trade
direction, which queue gets orders and which gets cancels; a queue that empties moves
the price. So book imbalance, microprice and trade flow carry real (and learnable)
information about the next mid moves, as in real markets, while the mid still walks
randomly. Deterministic under a seed: the same URI yields the same ticks (ts_recv
aside, which the publisher stamps).

URI: synthetic://?instruments=4&rate=100000&seed=1&trade_prob=0.1&gap_us=10
  instruments  number of instruments (1..65535)            default 4
  rate         ticks per second to publish, 0 = as fast as possible  default 100000
  seed         generator seed                              default 1
  trade_prob   fraction of events that are trades (0..1)   default 0.1
  gap_us       mean exchange-time gap between events, us   default 10
  count        stop after this many ticks (0 = never)      default 0
"""
import math
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from numba import njit

from engine.records import KIND_QUOTE, KIND_TRADE, PRICE_SCALE, SIDE_BUY, SIDE_SELL, pack_tick_tail

from . import rng

TICK_SIZE = PRICE_SCALE // 100          # 0.01 in 1e-9 fixed point
EPOCH_START_NS = 1_700_000_000_000_000_000  # simulated exchange clock starts here

# int64 state per instrument
I_BID, I_SPREAD, I_BSZ, I_ASZ = range(4)
# global int64 state: [clock_ns, pending_quote_instrument]
G_CLOCK, G_PENDING = 0, 1


@dataclass
class SyntheticParams:
    instruments: int = 4
    rate: float = 100_000.0
    seed: int = 1
    trade_prob: float = 0.1
    gap_us: float = 10.0
    count: int = 0

    def uri(self):
        return (f"synthetic://?instruments={self.instruments}&rate={self.rate:g}&seed={self.seed}"
                f"&trade_prob={self.trade_prob:g}&gap_us={self.gap_us:g}&count={self.count}")


def parse_uri(uri):
    """Parse a synthetic:// URI; raises ValueError naming the bad part."""
    parts = urlsplit(uri)
    if parts.scheme != "synthetic":
        raise ValueError(f"not a synthetic source: {uri!r}")
    p = SyntheticParams()
    casts = {"instruments": int, "rate": float, "seed": int, "trade_prob": float, "gap_us": float, "count": int}
    for key, val in parse_qsl(parts.query, keep_blank_values=True):
        if key not in casts:
            raise ValueError(f"{uri}: unknown parameter {key!r} (known: {', '.join(casts)})")
        try:
            setattr(p, key, casts[key](val))
        except ValueError:
            raise ValueError(f"{uri}: {key}={val!r} is not a valid {casts[key].__name__}") from None
    if not 1 <= p.instruments <= 65535:
        raise ValueError(f"{uri}: instruments must be 1..65535, got {p.instruments}")
    if p.rate < 0 or not math.isfinite(p.rate):
        raise ValueError(f"{uri}: rate must be >= 0 (0 = as fast as possible), got {p.rate}")
    if not 0.0 <= p.trade_prob <= 1.0:
        raise ValueError(f"{uri}: trade_prob must be in [0, 1], got {p.trade_prob}")
    if p.gap_us <= 0:
        raise ValueError(f"{uri}: gap_us must be > 0, got {p.gap_us}")
    if p.count < 0:
        raise ValueError(f"{uri}: count must be >= 0, got {p.count}")
    return p


class Simulator:
    """Holds the generator state; `generate(out)` fills int64[n, 8] tick words."""

    def __init__(self, params: SyntheticParams):
        self.params = params
        k = params.instruments
        self.ist = np.zeros((k, 4), np.int64)
        self.ist[:, I_BID] = (100 + 25 * np.arange(k)) * 100  # in ticks
        self.ist[:, I_SPREAD] = 1
        self.ist[:, I_BSZ] = 100
        self.ist[:, I_ASZ] = 100
        self.pressure = np.zeros(k, np.float64)
        self.g = np.array([0, -1], np.int64)
        self.rs = rng.new_state(params.seed)
        self.fparams = np.array([params.trade_prob, params.gap_us * 1000.0], np.float64)

    def generate(self, out):
        _generate(self.ist, self.pressure, self.g, self.rs, self.fparams, out)
        return out


@njit(nogil=True, inline="always", cache=True)
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(nogil=True, inline="always", cache=True)
def _emit(ist, inst, ts, kind, price, size, side, w):
    w[0] = 0
    w[1] = ts
    w[2] = ts  # the publisher overwrites ts_recv with its own clock when live
    w[3] = price * TICK_SIZE
    bid = ist[inst, I_BID]
    w[4] = bid * TICK_SIZE
    w[5] = (bid + ist[inst, I_SPREAD]) * TICK_SIZE
    pack_tick_tail(w, size, ist[inst, I_BSZ], ist[inst, I_ASZ], inst, kind, side)


@njit(nogil=True, cache=True)
def _generate(ist, pressure, g, rs, fp, out):
    trade_prob = fp[0]
    mean_gap = fp[1]
    k = ist.shape[0]
    for j in range(out.shape[0]):
        w = out[j]
        pend = g[G_PENDING]
        if pend >= 0:  # the book change a trade caused, as its own quote tick
            g[G_PENDING] = -1
            _emit(ist, pend, EPOCH_START_NS + g[G_CLOCK], KIND_QUOTE, 0, 0, 0, w)
            continue
        g[G_CLOCK] += 1 + np.int64(rng.exponential(rs, mean_gap))
        ts = EPOCH_START_NS + g[G_CLOCK]
        i = np.int64(rng.uniform(rs) * k)
        if i >= k:
            i = k - 1
        p = 0.97 * pressure[i] + 0.25 * rng.normal(rs)
        pressure[i] = p
        pb = _sigmoid(1.5 * p)
        if rng.uniform(rs) < trade_prob:
            buy = rng.uniform(rs) < pb
            size = 1 + np.int64(rng.exponential(rs, 20.0))
            bid = ist[i, I_BID]
            if buy:
                price = bid + ist[i, I_SPREAD]
                if size >= ist[i, I_ASZ]:  # the ask level is taken out: price ticks up
                    size = ist[i, I_ASZ]
                    ist[i, I_BID] = price
                    ist[i, I_BSZ] = 1 + np.int64(rng.exponential(rs, 30.0))
                    ist[i, I_SPREAD] = 1
                    ist[i, I_ASZ] = 20 + np.int64(rng.exponential(rs, 80.0))
                else:
                    ist[i, I_ASZ] -= size
                _emit(ist, i, ts, KIND_TRADE, price, size, SIDE_BUY, w)
            else:
                price = bid
                if size >= ist[i, I_BSZ]:  # the bid level is taken out: price ticks down
                    size = ist[i, I_BSZ]
                    ist[i, I_BID] = bid - 1
                    ist[i, I_ASZ] = 1 + np.int64(rng.exponential(rs, 30.0))
                    ist[i, I_SPREAD] = 1
                    ist[i, I_BSZ] = 20 + np.int64(rng.exponential(rs, 80.0))
                else:
                    ist[i, I_BSZ] -= size
                _emit(ist, i, ts, KIND_TRADE, price, size, SIDE_SELL, w)
            g[G_PENDING] = i
            continue
        amount = 1 + np.int64(rng.exponential(rs, 15.0))
        if rng.uniform(rs) < 0.55:  # an add, on the side pressure favours
            on_bid = rng.uniform(rs) < pb
            if ist[i, I_SPREAD] > 1 and rng.uniform(rs) < 0.4:  # improve inside the spread
                ist[i, I_SPREAD] -= 1
                if on_bid:
                    ist[i, I_BID] += 1
                    ist[i, I_BSZ] = amount
                else:
                    ist[i, I_ASZ] = amount
            elif on_bid:
                ist[i, I_BSZ] += amount
            else:
                ist[i, I_ASZ] += amount
        else:  # a cancel, on the side pressure disfavours
            on_ask = rng.uniform(rs) < pb
            if on_ask:
                ist[i, I_ASZ] -= amount
                if ist[i, I_ASZ] <= 0:  # ask level gone: next level up
                    ist[i, I_SPREAD] += 1
                    ist[i, I_ASZ] = 20 + np.int64(rng.exponential(rs, 80.0))
            else:
                ist[i, I_BSZ] -= amount
                if ist[i, I_BSZ] <= 0:  # bid level gone: next level down
                    ist[i, I_BID] -= 1
                    ist[i, I_SPREAD] += 1
                    ist[i, I_BSZ] = 20 + np.int64(rng.exponential(rs, 80.0))
            if ist[i, I_SPREAD] > 4:  # keep the spread sane: someone quotes inside
                ist[i, I_SPREAD] -= 1
                if rng.uniform(rs) < 0.5:
                    ist[i, I_BID] += 1
                    ist[i, I_BSZ] = amount
                else:
                    ist[i, I_ASZ] = amount
        _emit(ist, i, ts, KIND_QUOTE, 0, 0, 0, w)
    return out.shape[0]

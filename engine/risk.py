"""The risk gate between a strategy's decision and its signal (issue 31's first piece: the gate
and its state; the loops, the signal file and the flags call it next).

One function, `gate`, decides what a target position change may become, for the live loop and
the backtest alike (same inputs, same arrays, same float operations: the same result bit for
bit), with no allocation: its state lives in three arrays made once per run (`new_state`).

Rules, checked in this order on a decision that adds exposure (one that only reduces it, towards
flat on the same side, always passes: a gate must never keep a position on; a limit below the
position held clips it down to the limit when the strategy asks for more):
  killed     the run is killed (RG_KILLED): no new exposure at all
  flip       a reversal (long to short or back) less than `min_flip_ns` after the last one:
             clipped to flat
  position   |target| over `max_position` units: clipped to the limit
  no_price   a notional limit is set but the mid or the instrument's multiplier is unknown (a
             book void after a gap, an instrument without a spec): fail closed, the target stays
  notional   |target| x multiplier x mid over `max_notional`: clipped to what fits
  gross      the run's notional (every instrument's as of its last signal) over `max_gross`:
             clipped to what fits
  rate       more signals than `max_rate` a second (a token bucket of `burst`), per instrument
             and for the run: refused, unless what is left of it reduces exposure (a reduction
             spends a token when there is one, never waits)
In mode MODE_CLIP a cut decision goes out as clipped (unless nothing is left of it); in
MODE_REFUSE any cut refuses it whole. Either way every rule that cut it is counted
(rg[RG_RULES + bit]). Notional is price units (1e-9, engine/records.py) x multiplier x 1e-9.
"""
import numpy as np
from numba import njit

# rules (bit numbers; a decision's cut rules are a mask of 1 << bit)
R_KILLED, R_FLIP, R_POSITION, R_NO_PRICE, R_NOTIONAL, R_GROSS, R_RATE = range(7)
RULES = ("killed", "flip", "position", "no_price", "notional", "gross", "rate")
MODE_OFF, MODE_CLIP, MODE_REFUSE = 0, 1, 2

# rlim float64 [n + 1, RL_WIDTH]: row i an instrument's limits, row n the run's (RL_MAX_NOTIONAL:
# gross notional; RL_RATE/RL_BURST: signals of the whole run). np.inf: no limit.
RL_MAX_POS, RL_MAX_NOTIONAL, RL_MULT, RL_RATE, RL_BURST, RL_MIN_FLIP_NS = range(6)
RL_WIDTH = 6
# rb float64 [n + 1, RB_WIDTH]: token buckets (row n the run's), last reversal, notional held
RB_TOKENS, RB_REFILL_NS, RB_FLIP_NS, RB_NOTIONAL = range(4)
RB_WIDTH = 4
# rg int64 [RG_WIDTH]: killed, then the count of every rule
RG_KILLED, RG_RULES = 0, 1
RG_WIDTH = RG_RULES + len(RULES)


def new_state(n):
    """(rlim, rb, rg) for n instruments: no limits, full buckets, nothing counted."""
    rlim = np.full((n + 1, RL_WIDTH), np.inf)
    rlim[:, RL_MULT] = 0.0
    rlim[:, RL_MIN_FLIP_NS] = 0.0
    rb = np.zeros((n + 1, RB_WIDTH))
    rb[:, RB_REFILL_NS] = -1.0  # (never refilled: the first decision finds a full bucket)
    rb[:, RB_FLIP_NS] = -np.inf
    return rlim, rb, np.zeros(RG_WIDTH, np.int64)


def set_limits(rlim, row, *, max_position=None, max_notional=None, multiplier=None, max_rate=None, burst=None,
               min_flip_ms=None):
    """Row `row`'s limits (an instrument's, or row n: the run's, where max_notional is the gross
    limit); None leaves one as it is. burst defaults to max(1, max_rate): a second's worth."""
    for col, v in ((RL_MAX_POS, max_position), (RL_MAX_NOTIONAL, max_notional), (RL_MULT, multiplier),
                   (RL_RATE, max_rate)):
        if v is not None:
            if not v >= 0:
                raise ValueError(f"a risk limit must be >= 0, got {v}")
            rlim[row, col] = v
    if max_rate is not None and burst is None:
        burst = max(1.0, max_rate)
    if burst is not None:
        rlim[row, RL_BURST] = burst
    if min_flip_ms is not None:
        rlim[row, RL_MIN_FLIP_NS] = min_flip_ms * 1e6


@njit(nogil=True, inline="always", cache=True)
def _sign(x):
    return 1 if x > 0 else (-1 if x < 0 else 0)


@njit(nogil=True, inline="always", cache=True)
def _reduces(prev, new):
    """new is flat, or on prev's side and smaller: exposure only goes down."""
    return new == 0 or (_sign(new) == _sign(prev) and abs(new) < abs(prev))


@njit(nogil=True, inline="always", cache=True)
def _no_more(prev, new):
    """new cut to no more exposure than prev: as it is if it reduces, prev on prev's side, else flat."""
    return new if _reduces(prev, new) else (prev if _sign(new) == _sign(prev) else 0)


@njit(nogil=True, inline="always", cache=True)
def _refill(rlim, rb, row, t):
    """The bucket of `row` filled up to time t (ns); its tokens."""
    burst = rlim[row, RL_BURST]
    if rlim[row, RL_RATE] == np.inf:  # (no limit: inf x 0 would be nan)
        return burst
    if rb[row, RB_REFILL_NS] < 0:
        rb[row, RB_TOKENS] = burst
    elif t > rb[row, RB_REFILL_NS]:
        rb[row, RB_TOKENS] = min(burst, rb[row, RB_TOKENS] + (t - rb[row, RB_REFILL_NS]) * 1e-9 * rlim[row, RL_RATE])
    rb[row, RB_REFILL_NS] = max(rb[row, RB_REFILL_NS], float(t))
    return rb[row, RB_TOKENS]


@njit(nogil=True, inline="always", cache=True)
def _cap(out, limit):
    """out clipped to |out| <= limit (limit >= 0, floored to whole units)."""
    lim = np.int64(limit) if limit < 9.2e18 else np.int64(9_000_000_000_000_000_000)
    if out > lim:
        return lim
    if out < -lim:
        return -lim
    return out


@njit(nogil=True, inline="always", cache=True)
def gate(rlim, rb, rg, inst, prev, want, mid, t, mode):
    """What instrument inst's decision from prev to want may become at time t (ns, the deciding
    tick's receive time), its mid in price units (0: unknown): (target, rules cut). target ==
    prev: nothing goes out (refused, or nothing left). A target that goes out is committed (its
    tokens spent, its reversal time and notional kept)."""
    if mode == MODE_OFF or want == prev:
        return want, 0
    n = rlim.shape[0] - 1
    out = want
    rules = 0
    sp = _sign(prev)
    if not _reduces(prev, want):
        if rg[RG_KILLED]:
            rules |= 1 << R_KILLED
            out = _no_more(prev, out)
        if _sign(out) * sp < 0 and t - rb[inst, RB_FLIP_NS] < rlim[inst, RL_MIN_FLIP_NS]:
            rules |= 1 << R_FLIP
            out = 0
        if abs(out) > rlim[inst, RL_MAX_POS]:
            rules |= 1 << R_POSITION
            out = _cap(out, rlim[inst, RL_MAX_POS])
        unit = rlim[inst, RL_MULT] * mid * 1e-9  # notional of one unit
        limited = rlim[inst, RL_MAX_NOTIONAL] < np.inf or rlim[n, RL_MAX_NOTIONAL] < np.inf
        if limited and out != 0 and not unit > 0:
            rules |= 1 << R_NO_PRICE
            out = _no_more(prev, out)
        if unit > 0:
            if abs(out) * unit > rlim[inst, RL_MAX_NOTIONAL]:
                rules |= 1 << R_NOTIONAL
                out = _cap(out, rlim[inst, RL_MAX_NOTIONAL] / unit)
            room = rlim[n, RL_MAX_NOTIONAL] - (rb[n, RB_NOTIONAL] - rb[inst, RB_NOTIONAL])
            if abs(out) * unit > room:
                rules |= 1 << R_GROSS
                out = _cap(out, max(room, 0.0) / unit)
    if mode == MODE_REFUSE and rules:
        out = prev
    if out != prev and (rlim[inst, RL_RATE] < np.inf or rlim[n, RL_RATE] < np.inf):
        a = _refill(rlim, rb, inst, t)
        b = _refill(rlim, rb, n, t)
        if a >= 1.0 and b >= 1.0:  # (an unlimited row's inf stays inf)
            rb[inst, RB_TOKENS] = a - 1.0
            rb[n, RB_TOKENS] = b - 1.0
        elif not _reduces(prev, out):
            rules |= 1 << R_RATE
            out = prev
        else:  # a reduction goes anyway, spending what is there
            rb[inst, RB_TOKENS] = max(a - 1.0, 0.0)
            rb[n, RB_TOKENS] = max(b - 1.0, 0.0)
    if rules:
        for r in range(RG_WIDTH - RG_RULES):
            if rules & (1 << r):
                rg[RG_RULES + r] += 1
    if out != prev:
        if _sign(out) * sp < 0:
            rb[inst, RB_FLIP_NS] = float(t)
        notional = abs(out) * rlim[inst, RL_MULT] * mid * 1e-9 if mid > 0 else (0.0 if out == 0 else rb[inst, RB_NOTIONAL])
        rb[n, RB_NOTIONAL] += notional - rb[inst, RB_NOTIONAL]
        rb[inst, RB_NOTIONAL] = notional
    return out, rules

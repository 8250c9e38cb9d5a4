"""The risk gate between a strategy's decision and its signal.

One function, `gate`, decides what a target position change may become, for the live loop and
the backtest alike (engine/host_template.py host_decide: same inputs, same arrays, same float
operations: the same result bit for bit), with no allocation: its state lives in three arrays
made once per run (`new_state`), the mode in rg[RG_MODE]. What it did goes into the signal's
flags (`signal_flags`; engine/records.py SIGNAL_FLAG_*) and its `wanted` word; a decision cut to
nothing is recorded too (REFUSED), once per wanted target (`record_refused`), so a strategy that
asks again every tick does not flood the signal file.

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
from .jit import njit

from .risk_limits import LIMITS, PER_INSTRUMENT, Limits, parse_instrument  # noqa: F401  (the limits: named there)
from .records import SIGNAL_FLAG_CLIPPED, SIGNAL_FLAG_KILLED, SIGNAL_FLAG_REFUSED, SIGNAL_RULES_SHIFT

# rules (bit numbers; a decision's cut rules are a mask of 1 << bit)
R_KILLED, R_FLIP, R_POSITION, R_NO_PRICE, R_NOTIONAL, R_GROSS, R_RATE = range(7)
RULES = ("killed", "flip", "position", "no_price", "notional", "gross", "rate")
MODE_OFF, MODE_CLIP, MODE_REFUSE = 0, 1, 2

# rlim float64 [n + 1, RL_WIDTH]: row i an instrument's limits, row n the run's (RL_MAX_NOTIONAL:
# gross notional; RL_RATE/RL_BURST: signals of the whole run). np.inf: no limit. The last three
# are the rate as the gate uses it (set_limits keeps them): ns per signal (0: no limit), the
# burst's slack (burst - 1 signals' worth) and a full bucket's worth, in ns.
RL_MAX_POS, RL_MAX_NOTIONAL, RL_MULT, RL_RATE, RL_BURST, RL_MIN_FLIP_NS, RL_INTERVAL_NS, RL_TAU_NS, RL_EMPTY_NS \
    = range(9)
RL_WIDTH = 9
# rb float64 [n + 1, RB_WIDTH]: the rate's bucket as the time it is full again and the latest
# decision time it saw (row n the run's), last reversal, notional held and the last wanted target
# recorded as refused (NaN: none since the last signal)
RB_TAT, RB_CLOCK, RB_FLIP_NS, RB_NOTIONAL, RB_REFUSED = range(5)
RB_WIDTH = 5
# rg int64 [RG_WIDTH]: killed (0, or the KILL_* reason), then the count of every rule, the mode, then
# the signal records made by what happened to them (engine/signal_counts.py: clipped, refused, killed)
RG_KILLED, RG_RULES = 0, 1
RG_MODE = RG_RULES + len(RULES)
RG_REC_CLIPPED, RG_REC_REFUSED, RG_REC_KILLED = RG_MODE + 1, RG_MODE + 2, RG_MODE + 3
RG_WIDTH = RG_MODE + 4
MODES = {"off": MODE_OFF, "clip": MODE_CLIP, "refuse": MODE_REFUSE}
# why a run was killed (rg[RG_KILLED]; 0: it is not): `engine ctl kill`, --kill-file, a paper loss or
# drawdown limit, a feed stalled or down
KILL_REASONS = ("", "command", "file", "loss", "drawdown", "feed")


@njit(nogil=True, inline="always", cache=True)
def flattened(rb, inst):
    """Instrument inst went flat outside the gate (the kill switch): its notional leaves the run's."""
    n = rb.shape[0] - 1
    rb[n, RB_NOTIONAL] -= rb[inst, RB_NOTIONAL]
    rb[inst, RB_NOTIONAL] = 0.0
    rb[inst, RB_REFUSED] = np.nan


def describe(flags):
    """A signal's risk state from its flags, for people and JSON: ("normal" | "clipped" | "refused",
    then "killed" when the run was, and the rules that cut it), e.g. "clipped: position, gross"."""
    flags = int(flags)
    state = "refused" if flags & SIGNAL_FLAG_REFUSED else "clipped" if flags & SIGNAL_FLAG_CLIPPED else "normal"
    if flags & SIGNAL_FLAG_KILLED:
        state = "killed" if state == "normal" else f"killed, {state}"
    rules = [r for k, r in enumerate(RULES) if (flags >> SIGNAL_RULES_SHIFT) & (1 << k)]
    return state + (": " + ", ".join(rules) if rules else "")


def blocked(rg):
    """{rule: decisions it cut} of a gate's state."""
    return {r: int(rg[RG_RULES + k]) for k, r in enumerate(RULES)}


def kill_reason(code):
    return KILL_REASONS[code] if 0 <= code < len(KILL_REASONS) else f"reason {code}"


def new_state(n, mode=MODE_CLIP):
    """(rlim, rb, rg) for n instruments: no limits, full buckets, nothing counted."""
    rlim = np.full((n + 1, RL_WIDTH), np.inf)
    rlim[:, RL_MULT] = 0.0
    rlim[:, RL_MIN_FLIP_NS] = 0.0
    rlim[:, RL_INTERVAL_NS] = 0.0
    rlim[:, RL_EMPTY_NS] = np.inf
    rb = np.zeros((n + 1, RB_WIDTH))
    rb[:, RB_TAT] = -np.inf  # (full since ever)
    rb[:, RB_CLOCK] = -np.inf
    rb[:, RB_FLIP_NS] = -np.inf
    rb[:, RB_REFUSED] = np.nan
    rg = np.zeros(RG_WIDTH, np.int64)
    rg[RG_MODE] = mode
    return rlim, rb, rg


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
    rate, burst = rlim[row, RL_RATE], rlim[row, RL_BURST]
    if rate == np.inf:
        rlim[row, RL_INTERVAL_NS], rlim[row, RL_TAU_NS], rlim[row, RL_EMPTY_NS] = 0.0, np.inf, np.inf
    else:  # (rate 0: the bucket never refills; a burst of 1 gives one signal, as a bucket of one would)
        interval = 1e9 / rate if rate > 0 else np.inf
        rlim[row, RL_INTERVAL_NS] = interval
        rlim[row, RL_TAU_NS] = (burst - 1.0) * interval if burst > 1.0 and rate > 0 else 0.0
        rlim[row, RL_EMPTY_NS] = burst * interval


# --- the limits of a run: `engine run` / `engine backtest` --risk-* flags, [risk] in the config ---

def configure(rlim, rg, names, specs, limits):
    """Fill a run's limits (new_state's rlim and rg) for its instruments: names, index order, and
    their records (engine/instruments.py; the multiplier prices a position, unknown instruments have
    none: a notional limit refuses them, fail closed). ValueError naming an override's symbol that
    is no instrument of the run."""
    n = rlim.shape[0] - 1
    names = list(names or [])
    if limits.max_gross is not None:  # (a sum of notionals: never across currencies)
        cur = sorted(_currencies(specs))
        if len(cur) > 1:
            raise ValueError(f"--risk-max-gross adds up the instruments' notionals, and this run's are in "
                             f"{', '.join(cur)}: money is never added across currencies (a gross limit per currency "
                             "is one engine per currency; --risk-max-notional limits each instrument in its own)")
    rg[RG_MODE] = MODES[limits.mode]
    for i in range(n):
        spec = specs[i] if specs is not None and i < len(specs) else None
        mult = float(spec["multiplier"]) if spec is not None and spec.get("known", True) else 0.0
        set_limits(rlim, i, multiplier=mult, **{name: getattr(limits, name) for name in PER_INSTRUMENT})
    set_limits(rlim, n, **{lim.run_as: getattr(limits, name) for name, lim in LIMITS if lim.run_as})
    given = {}  # instrument id -> the override that named it
    for sym, d in limits.instruments:
        # (VENUE:SYMBOL as a run with several sources names it, or SYMBOL alone; a venue given to a
        # run whose names carry none matches the symbol)
        hits = [i for i, nm in enumerate(names[:n]) if nm and (nm == sym or nm.rpartition(":")[2] == sym
                                                              or (":" not in nm and sym.rpartition(":")[2] == nm))]
        if not hits:
            known = ", ".join(nm for nm in names[:n] if nm) or "none named yet"
            raise ValueError(f"--risk-instrument {sym}: no instrument of that name in this run (it has: {known})")
        for i in hits:
            if i in given:  # (two overrides of one instrument: which would win is nobody's guess)
                raise ValueError(f"--risk-instrument {sym} and --risk-instrument {given[i]} both name {names[i]}: "
                                 "give its limits once")
            given[i] = sym
            set_limits(rlim, i, **d)


def _currencies(specs):
    return {s["currency"] for s in specs or () if s is not None and s.get("known", True)}


def set_multipliers(rlim, specs):
    """Each instrument's multiplier from its record (engine/instruments.py) where rlim has none yet
    (an instrument a live source named after the run started); unknown instruments stay at none.
    With a gross limit, an instrument in another currency than those priced already stays at none
    (the gross never adds money across currencies: it is refused new exposure, no_price). Returns
    the names of those left unpriced so."""
    n = rlim.shape[0] - 1
    gross = rlim[n, RL_MAX_NOTIONAL] < np.inf
    priced = _currencies([x for k, x in enumerate(specs[:n]) if rlim[k, RL_MULT] != 0.0]) if gross else set()
    out = []
    for i, spec in enumerate(specs[:n]):
        if spec is not None and spec.get("known", True) and rlim[i, RL_MULT] == 0.0:
            if priced and spec["currency"] not in priced:
                out.append(spec["symbol"])
                continue
            rlim[i, RL_MULT] = float(spec["multiplier"])
            if gross:
                priced.add(spec["currency"])
    return out


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
def _cap(out, limit):
    """out clipped to |out| <= limit (limit >= 0, floored to whole units)."""
    lim = np.int64(min(limit, 9.0e18))
    return max(-lim, min(lim, out))


@njit(nogil=True, inline="always", cache=True)
def gate(rlim, rb, rg, inst, prev, want, mid, t, mode):
    """What instrument inst's decision from prev to want may become at time t (ns, the instrument's
    own latest exchange time: engine/host_template.py _gated says why), its mid in price units (0:
    unknown): (target, rules cut). target == prev: nothing goes out (refused, or nothing left). A
    target that goes out is committed (its rate spent, its reversal time and notional kept).

    Mostly selects, not branches (a rule computed, kept where it applies): decisions can go any
    way from one to the next, and a mispredicted branch costs more than the arithmetic
    (bench/risk_gate.py's `random` stream: about half the cost of the same rules as branches)."""
    if want == prev or (mode == MODE_OFF and rg[RG_KILLED] == 0):  # (off: only a kill stops entries)
        return want, 0
    n = rlim.shape[0] - 1
    sp = _sign(prev)
    # the instrument's own clock, which never runs back: t is its own exchange time, and where
    # several venues' ticks interleave (a UNIVERSE) another venue's later tick may carry an earlier
    # one; a limit that binds nothing (min_flip 0) must then cut nothing
    clk = max(float(t), rb[inst, RB_CLOCK])
    rb[inst, RB_CLOCK] = clk
    add = not _reduces(prev, want)  # (a reduction passes every rule but rate)
    k = add & (rg[RG_KILLED] != 0)
    cut = prev if _sign(want) == sp else 0
    out = cut if k else want
    rules = np.int64(k) << R_KILLED
    f = add & (_sign(out) * sp < 0) & (clk - rb[inst, RB_FLIP_NS] < rlim[inst, RL_MIN_FLIP_NS])
    out = 0 if f else out
    rules |= np.int64(f) << R_FLIP
    p = add & (abs(out) > rlim[inst, RL_MAX_POS])
    cut = _cap(out, rlim[inst, RL_MAX_POS])
    out = cut if p else out
    rules |= np.int64(p) << R_POSITION
    unit = rlim[inst, RL_MULT] * mid * 1e-9  # notional of one unit
    priced = unit > 0
    limited = (rlim[inst, RL_MAX_NOTIONAL] < np.inf) | (rlim[n, RL_MAX_NOTIONAL] < np.inf)
    q = add & limited & (out != 0) & (not priced)
    cut = _no_more(prev, out)
    out = cut if q else out
    rules |= np.int64(q) << R_NO_PRICE
    per = unit if priced else 1.0  # (no division by zero: unpriced, the two rules below do not apply)
    # (branches, not selects: a select would put the division on every decision's path, and the
    # run's notional carries it from one decision to the next)
    if add & priced & (abs(out) * unit > rlim[inst, RL_MAX_NOTIONAL]):
        out = _cap(out, rlim[inst, RL_MAX_NOTIONAL] / per)
        rules |= 1 << R_NOTIONAL
    room = rlim[n, RL_MAX_NOTIONAL] - (rb[n, RB_NOTIONAL] - rb[inst, RB_NOTIONAL])
    if add & priced & (abs(out) * unit > room):
        out = _cap(out, max(room, 0.0) / per)
        rules |= 1 << R_GROSS
    out = prev if (mode == MODE_REFUSE) & (rules != 0) else out
    if rlim[inst, RL_INTERVAL_NS] > 0 or rlim[n, RL_INTERVAL_NS] > 0:
        # the rate as a GCRA: a token bucket kept as the time it is full again (one compare and
        # one add; exact in ns, where refilling tokens by elapsed time x rate drifts with rounding)
        ci = clk
        cn = max(float(t), rb[n, RB_CLOCK])
        ti = rb[inst, RB_TAT]
        tn = rb[n, RB_TAT]
        ok = (ti - ci <= rlim[inst, RL_TAU_NS]) & (tn - cn <= rlim[n, RL_TAU_NS])
        r = (out != prev) & (not ok) & (not _reduces(prev, out))  # (a reduction goes anyway)
        out = prev if r else out
        rules |= np.int64(r) << R_RATE
        spend = out != prev  # (a signal's worth, down to an empty bucket at most)
        rb[n, RB_CLOCK] = cn
        x = min(max(ti, ci) + rlim[inst, RL_INTERVAL_NS], ci + rlim[inst, RL_EMPTY_NS])
        rb[inst, RB_TAT] = x if spend else ti
        x = min(max(tn, cn) + rlim[n, RL_INTERVAL_NS], cn + rlim[n, RL_EMPTY_NS])
        rb[n, RB_TAT] = x if spend else tn
    for b in range(len(RULES)):
        rg[RG_RULES + b] += (rules >> b) & 1
    spend = out != prev
    flip = spend & (_sign(out) * sp < 0)
    rb[inst, RB_FLIP_NS] = clk if flip else rb[inst, RB_FLIP_NS]
    held = rb[inst, RB_NOTIONAL]
    notional = abs(out) * rlim[inst, RL_MULT] * mid * 1e-9 if mid > 0 else (0.0 if out == 0 else held)
    notional = notional if spend else held
    rb[n, RB_NOTIONAL] += notional - held
    rb[inst, RB_NOTIONAL] = notional
    return out, rules


@njit(nogil=True, inline="always", cache=True)
def record_refused(rb, inst, want, out, prev, rules):
    """After gate: does a decision that changes nothing (out == prev) still make a record? Only
    one the gate cut (rules), and only the first time since the last signal that the strategy
    wants this target. Any signal that goes out forgets the refused target."""
    if out != prev:
        rb[inst, RB_REFUSED] = np.nan
        return True
    if rules == 0 or rb[inst, RB_REFUSED] == want:
        return False
    rb[inst, RB_REFUSED] = want
    return True


@njit(nogil=True, inline="always", cache=True)
def count_record(rg, flags):
    """A signal record was made with these flags: counted as clipped, refused, killed (one record
    can be killed and refused: engine/signal_counts.py says what each count means)."""
    rg[RG_REC_CLIPPED] += (flags & SIGNAL_FLAG_CLIPPED) != 0
    rg[RG_REC_REFUSED] += (flags & SIGNAL_FLAG_REFUSED) != 0
    rg[RG_REC_KILLED] += (flags & SIGNAL_FLAG_KILLED) != 0


def record_counts(rg):
    """(clipped, refused, killed) records of a gate's state."""
    return int(rg[RG_REC_CLIPPED]), int(rg[RG_REC_REFUSED]), int(rg[RG_REC_KILLED])


@njit(nogil=True, inline="always", cache=True)
def signal_flags(rules, out, prev, killed):
    """A decision's signal flags (engine/records.py SIGNAL_FLAG_*): REFUSED when nothing went
    out, CLIPPED when a cut target did, KILLED while the run is killed; the rules' mask above."""
    f = 0
    if rules:
        f = SIGNAL_FLAG_REFUSED if out == prev else SIGNAL_FLAG_CLIPPED
    if killed:
        f |= SIGNAL_FLAG_KILLED
    return f | (rules << SIGNAL_RULES_SHIFT)

"""The risk gate's cost per decision (engine/risk.py `gate`), the loop alone: a numba loop over
pre-made decisions on 16 instruments (a decision every 50 us of tick time, mids around 100.0),
each through the gate with every rule armed (position, notional, gross, rate per instrument and
for the run, flip; clip mode), against the same loop with the gate off (MODE_OFF: one branch).
Two decision streams: `random` (targets drawn -8..8 at every decision: the branches inside the
gate are unpredictable, the worst case) and `walk` (each instrument's target steps -1/0/+1, mostly
0, as a strategy's do). ns per decision = (gated - off) / decisions; --reps runs of each, in turn
(the VM is noisy): the best of each, and the median of the pairs' differences. Target (issue 31): <= 20 ns a decision. How many decisions each rule cut
is printed too, so the figure is known to go through every rule's path."""
import time

import _common
import numpy as np
from numba import njit

from engine import risk as R

N_INST = 16


@njit(nogil=True, cache=True)
def _run(rlim, rb, rg, inst, want, mid, t, mode, pos):
    moved = 0
    for k in range(want.shape[0]):
        i = inst[k]
        out, rules = R.gate(rlim, rb, rg, i, pos[i], want[k], mid[k], t[k], mode)
        if out != pos[i]:
            pos[i] = out
            moved += 1
    return moved


def _state():
    rlim, rb, rg = R.new_state(N_INST)
    for i in range(N_INST):
        R.set_limits(rlim, i, max_position=5, max_notional=650.0, multiplier=1.0, max_rate=500, min_flip_ms=1)
    R.set_limits(rlim, N_INST, max_notional=6000.0, max_rate=8000)  # (20,000 decisions a second come)
    return rlim, rb, rg


def _stream(kind, n, rng):
    inst = rng.integers(0, N_INST, n)
    if kind == "random":
        want = rng.integers(-8, 9, n).astype(np.int64)
    else:  # each instrument's own walk, seen in the interleaved order
        want = np.zeros(n, np.int64)
        step = rng.choice(np.array([-1, 0, 0, 0, 1]), n)
        for i in range(N_INST):
            at = np.flatnonzero(inst == i)
            want[at] = np.clip(np.cumsum(step[at]), -5, 5)  # (within the position limit: cuts are rare)
    mid = (100 * 10**9 + rng.integers(-10**9, 10**9, n)).astype(np.int64)
    return inst, want, mid, np.cumsum(np.full(n, 50_000, np.int64))


def _once(stream, mode):
    inst, want, mid, t = stream
    rlim, rb, rg = _state()
    pos = np.zeros(N_INST, np.int64)
    _run(rlim, rb, rg, inst[:10], want[:10], mid[:10], t[:10], mode, pos.copy())  # (compiled)
    t0 = time.perf_counter_ns()
    moved = _run(rlim, rb, rg, inst, want, mid, t, mode, pos)
    dt = time.perf_counter_ns() - t0
    return dt / len(want), (moved, {name: int(rg[R.RG_RULES + b]) for b, name in enumerate(R.RULES) if rg[R.RG_RULES + b]})


def _pairs(stream, reps):
    """reps runs of the loop gate off and gate on, in turn: (off ns, on ns) lists, and what the
    gate did."""
    off, on = [], []
    for _ in range(reps):
        off.append(_once(stream, R.MODE_OFF)[0])
        x, outcome = _once(stream, R.MODE_CLIP)
        on.append(x)
    return np.array(off), np.array(on), outcome


def main():
    a = _common.args(__doc__.split("\n")[0], lambda p: p.add_argument("--reps", type=int, default=9))
    n = 200_000 if a.quick else 1_000_000
    rng = np.random.default_rng(1)
    metrics = {"decisions": n}
    for kind in ("random", "walk"):
        off, on, (moved, cut) = _pairs(_stream(kind, n, rng), a.reps)
        best, med = on.min() - off.min(), np.median(on - off)
        print(f"{kind}: {n:,} decisions, {moved:,} moved a position through the gate; cut by rule: {cut}")
        print(f"  loop, gate off {off.min():6.2f} ns   gate on {on.min():6.2f} ns   the gate {best:6.2f} ns a decision"
              f" (best runs; median of {a.reps} pairs {med:.2f})   (target <= 20)")
        metrics.update({f"{kind}_gate_ns_per_decision": round(best, 2), f"{kind}_gate_ns_median": round(med, 2),
                        f"{kind}_loop_off_ns": round(off.min(), 2), f"{kind}_loop_on_ns": round(on.min(), 2),
                        f"{kind}_moved": moved, f"{kind}_cut_by_rule": cut})
    _common.save("risk_gate", metrics, {}, {})


if __name__ == "__main__":
    main()

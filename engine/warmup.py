"""The strategy loop: one numba nogil function does the whole hot path.

Per tick: poll the ring -> update the instrument's features -> fill the float32 row ->
call the model through its function pointer -> decide with hysteresis -> write the
signal -> record five latencies. No Python object, allocation, lock, log line or system
call per tick (clock reads go through the vDSO). Every 1024 iterations it does
housekeeping: control command, lease, heartbeat, counters, model swap, end of stream.

The per-tick steps (features_step, decide_step) are shared with the backtest loop
(replay/backtest.py), so what trades is what was tested.
"""
import math

import numpy as np
from numba import njit

from . import control as C
from . import features, latency, shm, sigring, tickring
from .intrinsics import (call_predict, cpu_pause, f32_bits, load_acquire, load_relaxed, monotonic_ns,
                         store_relaxed)

# cfg: float64 thresholds and flags
CFG_ENTER_LONG, CFG_EXIT_LONG, CFG_ENTER_SHORT, CFG_EXIT_SHORT, CFG_EXIT_ON_EOF, CFG_WARM_EVERY, CFG_SIGMOID = range(7)
CFG_WIDTH = 8
HOUSEKEEP_EVERY = 1024
# While idle, call the model on the last row every this many empty polls (0 = never) and
# discard the result: keeps its code, data and branch history hot for the next tick.
WARM_EVERY_POLLS = 0


def make_cfg(enter_long=0.65, exit_long=0.55, enter_short=0.35, exit_short=0.45, exit_on_eof=False,
             warm_every=WARM_EVERY_POLLS, sigmoid=True):
    """Thresholds apply to the score: a probability (sigmoid of the margin) for logistic models,
    the raw margin for regression models."""
    if not enter_short <= exit_short < exit_long <= enter_long:
        raise ValueError("thresholds must satisfy enter_short <= exit_short < exit_long <= enter_long "
                         f"(got {enter_short}, {exit_short}, {exit_long}, {enter_long})")
    if sigmoid and not (0 < enter_short and enter_long < 1):
        raise ValueError("thresholds must satisfy 0 < enter_short <= exit_short < exit_long <= enter_long < 1 "
                         f"for a probability score (got {enter_short}, {exit_short}, {exit_long}, {enter_long})")
    cfg = np.zeros(CFG_WIDTH, np.float64)
    cfg[:7] = (enter_long, exit_long, enter_short, exit_short, 1.0 if exit_on_eof else 0.0, warm_every,
               1.0 if sigmoid else 0.0)
    return cfg


@njit(nogil=True, inline="always", cache=True)
def decide(pos, score, cfg):
    """Hysteresis: enter beyond the outer thresholds, leave only inside the inner ones."""
    if score >= cfg[CFG_ENTER_LONG]:
        return 1
    if score <= cfg[CFG_ENTER_SHORT]:
        return -1
    if pos == 1 and score < cfg[CFG_EXIT_LONG]:
        return 0
    if pos == -1 and score > cfg[CFG_EXIT_SHORT]:
        return 0
    return pos


@njit(nogil=True, inline="always", cache=True)
def sigmoid32(margin):
    return np.float32(1.0 / (1.0 + math.exp(-np.float64(margin))))


@njit(nogil=True, inline="always", cache=True)
def _publish_counters(ctl, ticks, signals, gaps, lost, scored):
    store_relaxed(ctl, C.L_TICKS, ticks)
    store_relaxed(ctl, C.L_SIGNALS, signals)
    store_relaxed(ctl, C.L_GAPS, gaps)
    store_relaxed(ctl, C.L_LOST, lost)
    store_relaxed(ctl, C.L_SCORED, scored)


@njit(nogil=True, inline="always", cache=True)
def _adopt_model(ctl, gen):
    """If the control plane published a new model generation, adopt it: returns (gen, addr or 0).
    The generation is stored after the address (release), so reading it first (acquire) makes
    the address we read the one that goes with it."""
    g = load_acquire(ctl, C.CTL_MODEL_GEN)
    if g == gen:
        return gen, 0
    addr = load_acquire(ctl, C.CTL_MODEL_ADDR)
    store_relaxed(ctl, C.L_SWAP_NS, monotonic_ns())
    store_relaxed(ctl, C.L_MODEL_GEN, g)
    return g, addr


@njit(nogil=True, inline="always", cache=True)
def features_step(fstate, tick, row):
    """Fold a tick into its instrument's features; returns the instrument when it is warm and
    its row is filled (ready to score), else -1. Live loop and backtest share it."""
    inst = features.update(fstate, tick)
    if inst < 0 or not features.warm(fstate, inst):
        return -1
    features.fill_row(fstate, inst, tick[1], row)
    return inst


@njit(nogil=True, inline="always", cache=True)
def decide_step(fstate, inst, tick, out, pos, cfg, use_sigmoid, sig, signals, gen):
    """Score -> position with hysteresis; when it changes, fill the signal record `sig` (all
    but word 4, the emit time) and return True. Live loop and backtest share it."""
    margin = out[0]
    score = sigmoid32(margin) if use_sigmoid else margin
    prev = pos[inst]
    new = decide(prev, score, cfg)
    if new == prev:
        return False
    pos[inst] = new
    sig[0] = signals
    sig[1] = tick[0]
    sig[2] = tick[1]
    sig[3] = tick[2]
    sig[5] = np.int64((fstate[inst, features.S_BID] + fstate[inst, features.S_ASK]) // 2)
    sig[6] = f32_bits(score) | (f32_bits(margin) << 32)
    sig[7] = inst | ((new & 0xFF) << 16) | ((prev & 0xFF) << 24) | ((gen & 0xFFFFFFFF) << 32)
    return True


@njit(nogil=True, cache=True)
def run_loop(thdr, tdata, tmask, slot_base, shdr, sdata, smask, spstate, ctl, hist,
             fstate, row, out, tick, sig, pos, cfg):
    """Run until CMD_STOP, an expired lease, or (cfg) the end of the stream; returns the exit state."""
    ticks = load_relaxed(ctl, C.L_TICKS)
    signals = load_relaxed(ctl, C.L_SIGNALS)
    gaps = load_relaxed(ctl, C.L_GAPS)
    lost = load_relaxed(ctl, C.L_LOST)
    scored = load_relaxed(ctl, C.L_SCORED)
    gen, model = _adopt_model(ctl, -1)
    exit_on_eof = cfg[CFG_EXIT_ON_EOF] != 0.0
    warm_every = np.int64(cfg[CFG_WARM_EVERY])
    use_sigmoid = cfg[CFG_SIGMOID] != 0.0
    idle = 0
    state = C.LOOP_STOPPED
    store_relaxed(ctl, C.L_STATE, C.LOOP_RUNNING)
    paused = False
    it = 0
    while True:
        it += 1
        if (it & (HOUSEKEEP_EVERY - 1)) == 0:
            now = monotonic_ns()
            store_relaxed(ctl, C.L_HEARTBEAT, now)
            _publish_counters(ctl, ticks, signals, gaps, lost, scored)
            cmd = load_acquire(ctl, C.CTL_CMD)
            if cmd == C.CMD_STOP:
                break
            if cmd == C.CMD_REATTACH:  # the feed's ring was replaced: the thread re-enters on the new one
                state = C.LOOP_REATTACH
                break
            if paused != (cmd == C.CMD_PAUSE):
                paused = cmd == C.CMD_PAUSE
                store_relaxed(ctl, C.L_STATE, C.LOOP_PAUSED if paused else C.LOOP_RUNNING)
            if now > load_relaxed(ctl, C.CTL_LEASE_NS):
                state = C.LOOP_LEASE_EXPIRED  # nobody is watching us: stop spinning
                break
            gen, addr = _adopt_model(ctl, gen)  # hot swap while idle
            if addr:
                model = addr
            if exit_on_eof and load_acquire(thdr, shm.H_STATE) == shm.STATE_FINISHED:
                if load_relaxed(thdr, slot_base + shm.C_CURSOR) >= load_acquire(thdr, shm.H_WRITE):
                    state = C.LOOP_EOF
                    break
        st = tickring.poll(thdr, tdata, tmask, slot_base, tick)
        if st == tickring.POLL_EMPTY:
            idle += 1
            if warm_every > 0 and idle % warm_every == 0:
                call_predict(model, row, out)  # result unused: out is rewritten before it is read
            cpu_pause()
            continue
        idle = 0
        t_deq = monotonic_ns()
        if st == tickring.POLL_GAP:
            gaps += 1
            lost += tick[3]
            features.update(fstate, tick)  # a gap tick resets every instrument's state
            continue
        ticks += 1
        latency.record(hist, latency.ST_RING, t_deq - tick[2])
        inst = features_step(fstate, tick, row)
        if inst < 0 or paused:  # paused: features stay current, nothing is scored or signalled
            continue
        gen, addr = _adopt_model(ctl, gen)  # hot swap between two ticks: the address is data
        if addr:
            model = addr
        t_feat = monotonic_ns()
        call_predict(model, row, out)
        t_model = monotonic_ns()
        scored += 1
        if decide_step(fstate, inst, tick, out, pos, cfg, use_sigmoid, sig, signals, gen):
            sig[4] = monotonic_ns()
            sigring.push(shdr, sdata, smask, spstate, sig)
            signals += 1
        t_emit = monotonic_ns()
        latency.record(hist, latency.ST_FEATURES, t_feat - t_deq)
        latency.record(hist, latency.ST_MODEL, t_model - t_feat)
        latency.record(hist, latency.ST_EMIT, t_emit - t_model)
        latency.record(hist, latency.ST_TOTAL, t_emit - tick[2])
    _publish_counters(ctl, ticks, signals, gaps, lost, scored)
    store_relaxed(ctl, C.L_STATE, state)
    return state


@njit(nogil=True, cache=True)
def warm_model(addr, row, out, n):
    """Call the model n times on varied rows: pages in its code and trains branch predictors."""
    acc = 0.0
    for i in range(n):
        for k in range(row.shape[0]):
            row[k] = np.float32(((i * 7919 + k * 104729) % 2001) / 1000.0 - 1.0)
        call_predict(addr, row, out)
        acc += out[0]
    return acc


@njit(nogil=True, cache=True)
def prefault(arr):
    """Touch every page of an int64/float array from the calling (pinned) thread."""
    step = 4096 // arr.itemsize
    flat = arr.reshape(-1)
    s = 0.0
    for i in range(0, flat.shape[0], step):
        s += flat[i]
    return s

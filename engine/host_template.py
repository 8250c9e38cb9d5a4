"""The strategy host: the per-tick steps and the three loops that run a strategy (live, backtest,
data set). A TEMPLATE, never imported: engine/strategy_build.py writes a copy of everything
below the marker under a header that binds one strategy (on_tick, decide, DEPTH, Params,
make_params), so numba compiles the strategy's functions into these loops, caches the result,
and an edited strategy gets a new file (and so never runs stale code).

What the host keeps per instrument, in three arrays allocated off the hot path
(strategy_build.HostState), the group `ss` (engine/loop_args.py StrategyState):
  fstate  float64 [n, STATE]          the strategy's state columns
  book    int64 [n, 2, 2, levels]     [inst, side (bid, ask), price/size, level]: the window
                                       rebuilt from level ticks, best first, zeros past its end
  ist     int64 [n, IST_WIDTH]        level counts, last touch (for the signal's mid), the dirty
                                       flag (one of the strategy's DEPTH levels changed since its
                                       last quote/book call), the target position
Which ticks reach on_tick is the contract in engine/strategy_api.py.

The loops take their arrays in a few named groups (engine/loop_args.py builds them: the ring(s),
the signal ring, the strategy state, the conflation stash, the universe, the risk gate, the
scratch buffers) and borrow every array in them first (intrinsics.borrow_all): numba would count
the references of a group's arrays wherever a helper takes one (~40 ns a tick); borrowed, there is
nothing to count. What a loop derives from them is built once, at its top, never per tick
(Decider, Live); what it carries from step to step are tuples of scalars (Counts, Waiting, Model),
kept in registers as the scalars they hold.

Per tick in the live loop: poll the ring -> host_step (book, state, row) -> model through its
function pointer -> host_decide -> signal -> five latencies. No Python object, allocation, lock,
log line or system call per tick. Every 1024 iterations: control command, lease, heartbeat,
counters, model swap, end of stream. run_loop_multi is the same loop over several rings (one per
source): files merged in receive-time order, live rings as ticks arrive; ids mapped to the run's.
The two share every step (_housekeep, _on_empty, _on_tick) and differ in how a tick is taken.
"""
# The generated header defines: on_tick, decide, DEPTH, STATE, NFEAT, Params, make_params.
# ==== host body ====
from collections import namedtuple

import numpy as np
from engine.jit import njit

from engine import control as C
from engine import latency, levelbook, shm, sigring, tickring
from engine.loop_args import T_ORIGIN, RiskState, StrategyState, UniverseState
from engine.risk import (RG_KILLED, RG_MODE, RG_REC_CLIPPED, RG_RULES, RULES, count_record, flattened, gate,
                         record_refused, signal_flags)
from engine.intrinsics import (borrow, borrow_all, borrow_ro, call_predict, call_predict_rows, cpu_pause, f32_bits, load_acquire, load_relaxed,
                               monotonic_ns, realtime_ns, sched_yield, sleep_ns, store_relaxed)
from engine.records import (KIND_BOOK, KIND_GAP, KIND_LEVEL, KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_NONE,
                            SIGNAL_FLAG_KILLED, SIGNAL_FLAG_MARK, SIGNAL_FLAGS_KILL_MARK, SIGNAL_FLAGS_PAUSE_MARK,
                            SIGNAL_WORDS,
                            signal_word_folded, signal_word_ids, signal_word_scores, tick_instrument, tick_kind,
                            tick_price, tick_side, tick_size, tick_word7, w_lo32)
from engine.strategy_api import (IST_ASK, IST_BID, IST_TRADE_PX, IST_TRADE_SZ, IST_TS_EVENT, IST_TS_RECV, Book,
                                 sigmoid32)

# cfg: float64 loop settings (Host.loop_cfg fills them)
(CFG_EXIT_ON_EOF, CFG_WARM_EVERY, CFG_SIGMOID, CFG_WAIT, CFG_SPIN_NS, CFG_YIELD_NS, CFG_PARK_MAX_NS, CFG_DUTY,
 CFG_CONFLATE, CFG_CONFLATE_MAX, CFG_CONFLATE_NS) = range(11)
CFG_WIDTH = 13
HOUSEKEEP_EVERY = 1024
# wait strategies (what the live loop does while the ring is empty; engine/waits.py names them)
WAIT_SPIN, WAIT_BACKOFF, WAIT_DUTY = 0, 1, 2
PARK_MIN_NS = 20_000      # backoff: first park; doubles up to CFG_PARK_MAX_NS
DUTY_SLICE_NS = 20_000    # duty: one park when asleep time is owed
# ist columns: market state first (a gap clears them), then the loop's own (kept across gaps)
I_NBID, I_NASK, I_BID, I_ASK, I_DIRTY = range(5)  # I_NBID, I_NASK: levelbook's counts (columns 0, 1)
I_POS = 5      # the target position
I_PEND = 6     # conflation: 1 while the instrument waits in plist to be scored
I_FOLD = 7     # conflation: scoreable ticks folded into its pending row
I_PIDX = 8     # conflation: index of the tick its pending row came from (backtest margins)
# a UNIVERSE strategy's market state of every instrument (strategy_api's member_* read them): its
# last trade, the times of its last tick; cleared by a gap
I_TRADE_PX, I_TRADE_SZ, I_TS_EVENT, I_TS_RECV = IST_TRADE_PX, IST_TRADE_SZ, IST_TS_EVENT, IST_TS_RECV
IST_WIDTH = 14
assert (I_BID, I_ASK, I_TS_RECV) == (IST_BID, IST_ASK, IST_WIDTH - 1), "strategy_api's IST_* name these columns"
# cst: conflation scalars kept across calls
CS_NPEND, CS_FIRST, CS_FOLDS, CS_MARK, CS_CONFLATED, CS_MARKS, CS_T0 = range(7)
CS_READ = 7    # run_loop_multi: ticks taken from all rings (the next one's seq in the merged stream)
CS_BATCHED = 8  # rows flushes scored several in one call (the model's rows function)
CS_PAUSED = 9   # backtest_loop: 1 while a live run's pause is replayed (decide nothing)
CST_WIDTH = 10
CFG_TAP = 11   # run_loop_multi: 1 = publish every tick taken into the tap ring (engine run --record)
CFG_MERGE_WINDOW_NS = 12  # run_loop_multi: how long the oldest ready tick waits for a silent ring (0: never)
# rst: run_loop_multi's counters per ring, int64 [rings, RS_WIDTH] (the control plane reads them)
RS_TICKS, RS_HELD, RS_FEED_GAPS, RS_FEED_LOST, RS_UNMAPPED = range(5)
RS_SINCE = 5   # when the ring's held tick was taken from it (monotonic ns; with a merge window only)
RS_ORDERED = 6  # 1: a file's ring, merged with the other files in receive-time order (_take_next)
RS_WIDTH = 8
POLL_SKIP = 3  # run_loop_multi: a tick of an instrument past its ring's block of ids, skipped
PX, SZ, NO_LEVEL = levelbook.PX, levelbook.SZ, levelbook.NO_LEVEL
# DEPTH 0: every call gets the same empty book (a constant: no per-tick reference counting)
_EMPTY = np.zeros(0, np.int64)

# Built once at a loop's top from its groups (engine/loop_args.py), never per tick:
# what a decision reads and moves: the strategy state, the universe, the risk gate, the strategy's
# parameters (make_params) and whether a score goes through the sigmoid (CFG_SIGMOID)
Decider = namedtuple("Decider", ("ss", "uni", "risk", "params", "use_sigmoid"))
# what a live loop's steps share: the control block, the latency histogram, the signal ring, the
# scratch buffers, the conflation stash, the Decider, the settings (_settings)
Live = namedtuple("Live", ("ctl", "hist", "sring", "scratch", "stash", "dc", "cf"))
Settings = namedtuple("Settings", ("exit_on_eof", "warm_every", "use_sigmoid", "wait", "spin_ns", "yield_ns",
                                   "park_max", "duty", "conflate", "conflate_max", "conflate_ns"))
# Values a live loop carries from step to step (scalars only: nothing to count, nothing in memory):
# the counters it publishes (with Waiting.parks)
Counts = namedtuple("Counts", ("ticks", "signals", "gaps", "lost", "scored"))
# the wait's state: empty polls in a row, when they began, the next park, duty's owed sleep (ns:
# duty x elapsed - slept) and its clock, parks taken
Waiting = namedtuple("Waiting", ("idle", "idle_t0", "park", "owed", "t_last", "parks"))
# the model it scores with: its generation, its address, its rows function (or 0)
Model = namedtuple("Model", ("gen", "addr", "rows"))


@njit(nogil=True, inline="always", cache=True)
def book_apply(book, ist, inst, tick):
    """Apply one level tick to the instrument's window (engine/levelbook.py: its level counts are
    ist's first two columns). Returns the first level index whose content changed, NO_LEVEL when
    none did. The arrays go in borrowed: handed to levelbook as they are, numba would count their
    references on every level tick (~30 ns, bench/strategy_host.py)."""
    side = tick_side(tick)
    if side == SIDE_NONE:  # the source cleared this instrument's book
        levelbook.clear(borrow(book), borrow(ist), inst)
        return 0
    return levelbook.set_level(borrow(book), borrow(ist), inst, 0 if side == SIDE_BUY else 1, tick[3], w_lo32(tick[6]))


@njit(nogil=True, cache=True)
def host_reset(fstate, book, ist, shared):
    """A gap: every instrument's state and book are void, and a universe's shared state (positions
    stay: they are the strategy's targets, not market data)."""
    fstate[:] = 0.0
    book[:] = 0
    shared[:] = 0.0
    for i in range(ist.shape[0]):
        for c in range(I_POS):
            ist[i, c] = 0
        for c in range(I_TRADE_PX, IST_WIDTH):
            ist[i, c] = 0


@njit(nogil=True, inline="always", cache=True)
def host_step(ss, uni, tick, row, params):
    """Fold one tick: returns the instrument when on_tick filled `row` and it should be scored,
    else -1. Shared by the live loops, the backtest loop and data-set building, each calling it with
    these very names (engine/strategy_build.py writes its body in place). With a UNIVERSE
    (UNIVERSE_N members: uni.uids their instruments, uni.umem each instrument's member or -1;
    uni.ubook, uni.uist read-only views of book and ist), every instrument's last trade and tick
    times are kept, and on_tick runs for members' ticks only."""
    fstate, book, ist = ss.fstate, ss.book, ss.ist
    kd = tick_kind(tick)
    if kd == KIND_GAP:
        host_reset(fstate, book, ist, uni.shared)
        return -1
    inst = tick_instrument(tick)
    if inst >= fstate.shape[0]:
        return -1
    if UNIVERSE_N > 0:
        ist[inst, I_TS_EVENT] = tick[1]
        ist[inst, I_TS_RECV] = tick[2]
        if kd == KIND_TRADE:
            ist[inst, I_TRADE_PX] = tick_price(tick)
            ist[inst, I_TRADE_SZ] = tick_size(tick)
    if kd == KIND_LEVEL:
        if DEPTH > 0:
            changed = book_apply(book, ist, inst, tick)
            if changed < DEPTH:
                ist[inst, I_DIRTY] = 1
        return -1
    if kd == KIND_BOOK:
        if DEPTH == 0 or ist[inst, I_DIRTY] == 0:
            return -1
    if kd == KIND_QUOTE or kd == KIND_TRADE or kd == KIND_BOOK:
        ist[inst, I_BID] = tick[4]
        ist[inst, I_ASK] = tick[5]
        if kd != KIND_TRADE:
            ist[inst, I_DIRTY] = 0
    me = uni.umem[inst] if UNIVERSE_N > 0 else -1
    if UNIVERSE_N > 0 and me < 0:  # outside the universe: its book is kept, on_tick is not called
        return -1
    if DEPTH == 0:
        scored = call_on_tick(fstate[inst], Book(_EMPTY, _EMPTY, _EMPTY, _EMPTY), borrow_ro(tick), row, params, inst, me,
                              uni.uids, uni.ubook, uni.uist, uni.shared)
    else:
        scored = call_on_tick(fstate[inst], Book(borrow_ro(book[inst, 0, PX, :DEPTH]), borrow_ro(book[inst, 0, SZ, :DEPTH]),
                                                 borrow_ro(book[inst, 1, PX, :DEPTH]), borrow_ro(book[inst, 1, SZ, :DEPTH])),
                              borrow_ro(tick), row, params, inst, me, uni.uids, uni.ubook, uni.uist, uni.shared)
    return scored


@njit(nogil=True, inline="always", cache=True)
def _sign(x):
    return 1 if x > 0 else (-1 if x < 0 else 0)


@njit(nogil=True, inline="always", cache=True)
def host_decide(dc, inst, tick, margin, sig, seq, gen, folded):
    """Score -> target position (the strategy's decide) -> the risk gate; when the decision makes a
    record (a change, or one the gate refused: risk.record_refused), fill the signal record `sig`
    (all but the emit times, words 4 and 5; folded: ticks folded into the score) and return True."""
    score = sigmoid32(margin) if dc.use_sigmoid else margin
    ist, rb, rg = dc.ss.ist, dc.risk.rb, dc.risk.rg
    prev = ist[inst, I_POS]
    want = np.int64(decide(dc.ss.fstate[inst], score, prev, dc.params))
    if want == prev:
        return False
    new, rules = _gated(ist, inst, prev, want, tick, dc.risk)
    if not record_refused(rb, inst, want, new, prev, rules):
        return False
    ist[inst, I_POS] = new
    flags = signal_flags(rules, new, prev, rg[RG_KILLED])
    count_record(rg, flags)
    _fill_signal(sig, seq, seq, tick, ist, inst, new, prev, score, margin, gen, want,  # (decision: this signal alone)
                 flags, folded)
    return True


@njit(nogil=True, inline="always", cache=True)
def _gated(ist, inst, prev, want, tick, risk):
    """engine/risk.py's gate on a decision, with the mid the signal records, on the instrument's own
    exchange time: the clock a live run and a backtest of its ticks share, so the rate and flip
    rules cut the same decisions in both. A UNIVERSE member may be decided on another member's
    tick, of another venue whose exchange clock is not its own: its own last tick's time then
    (kept for every instrument of a UNIVERSE run). Returns (target, rules that cut it)."""
    bid = ist[inst, I_BID]
    ask = ist[inst, I_ASK]
    t = ist[inst, I_TS_EVENT] if UNIVERSE_N > 0 and ist[inst, I_TS_EVENT] > 0 else tick[1]
    return gate(risk.rlim, risk.rb, risk.rg, inst, prev, want, (bid + ask) // 2 if bid > 0 and ask > 0 else 0, t,
                risk.rg[RG_MODE])


@njit(nogil=True, inline="always", cache=True)
def _fill_signal(sig, seq, decision, tick, ist, inst, new, prev, score, margin, gen, want, flags, folded):
    """A signal record (engine/records.py SIGNAL_DTYPE), all but the emit times (words 4, 5):
    instrument `inst` moved from prev to new (the strategy wanted `want`; flags: the gate's) on
    `tick`, `folded` ticks folded into its score, of decision `decision`."""
    bid = ist[inst, I_BID]
    ask = ist[inst, I_ASK]
    sig[0] = seq
    sig[1] = tick[0]
    sig[2] = tick[1]
    sig[3] = tick[2]
    sig[6] = (bid + ask) // 2 if bid > 0 and ask > 0 else 0
    sig[7] = new
    sig[8] = prev
    sig[9] = signal_word_scores(f32_bits(score), f32_bits(margin))
    sig[10] = signal_word_ids(gen, inst, _sign(new), _sign(prev))
    sig[11] = signal_word_folded(folded, flags)
    sig[12] = decision
    sig[13] = want
    for w in range(14, SIGNAL_WORDS):
        sig[w] = 0


@njit(nogil=True, inline="always", cache=True)
def host_decide_targets(dc, inst, tick, margin, sigs, at, seq, gen, folded):
    """A UNIVERSE strategy's decide over its members' targets (DECIDE_TARGETS): it gets their
    current targets and changes those it moves; each change is a signal, in member order, into
    sigs[at:] (all but the emit times), numbered from seq, all of one decision (word 12: the seq of
    its first). Each leg passes the risk gate on its own (host_decide). Returns how many."""
    score = sigmoid32(margin) if dc.use_sigmoid else margin
    ist, uni, rb, rg = dc.ss.ist, dc.uni, dc.risk.rb, dc.risk.rg
    uids, targets = uni.uids, uni.targets
    for m in range(UNIVERSE_N):
        targets[m] = ist[uids[m], I_POS]
    call_decide_targets(dc.ss.fstate[inst], score, targets, dc.params, uni.umem[inst], uids, uni.ubook, uni.uist,
                        uni.shared)
    k = 0
    for m in range(UNIVERSE_N):
        i = uids[m]
        want, prev = targets[m], ist[i, I_POS]
        if want == prev:
            continue
        new, rules = _gated(ist, i, prev, want, tick, dc.risk)
        if not record_refused(rb, i, want, new, prev, rules):
            continue
        ist[i, I_POS] = new
        flags = signal_flags(rules, new, prev, rg[RG_KILLED])
        count_record(rg, flags)
        _fill_signal(sigs[at + k], seq + k, seq, tick, ist, i, new, prev, score, margin, gen, want, flags, folded)
        k += 1
    return k


@njit(nogil=True, inline="always", cache=True)
def _push(sring, sig):
    """A signal record into the signal ring."""
    sigring.push(sring.shdr, sring.sdata, sring.smask, sring.spstate, sig)


@njit(nogil=True, inline="always", cache=True)
def _emit(sring, sig):
    """A signal record stamped with its emit times (words 4, 5), into the signal ring."""
    sig[4] = monotonic_ns()
    sig[5] = realtime_ns()
    _push(sring, sig)


@njit(nogil=True, cache=True)
def _kill_switch(lv, after, signals, gen):
    """The control plane moved the kill switch (CTL_KILL: a reason, or 0 to resume): adopt it, and
    say so in the signal stream (a kill mark, engine/records.py: `after` is the seq of the first
    tick the loop takes from here) so a backtest replays it at the same place; when killed, every
    instrument with a target goes flat at once (kill_flatten, signals on the loop's last tick).
    Returns the signal count."""
    lv = borrow_all(lv)
    ctl, ist, risk, sig, tick = lv.ctl, lv.dc.ss.ist, lv.dc.risk, lv.scratch.sig, lv.scratch.tick
    code = load_relaxed(ctl, C.CTL_KILL)
    risk.rg[RG_KILLED] = code
    store_relaxed(ctl, C.L_KILLED, code)
    _move_mark(lv.sring, sig, signals, tick, after, code, SIGNAL_FLAGS_KILL_MARK)
    if code == 0:
        return signals
    for i in range(ist.shape[0]):
        if kill_flatten(ist, risk.rb, i, tick, sig, signals, gen):
            count_record(risk.rg, SIGNAL_FLAG_KILLED)
            _emit(lv.sring, sig)
            signals += 1
    return signals


@njit(nogil=True, inline="always", cache=True)
def _move_mark(sring, sig, signals, tick, after, value, flags):
    """A kill or pause mark (engine/records.py) into the signal stream: tick_seq the last tick taken,
    ts_event `after` (the seq of the first tick the loop takes from here), position `value`."""
    for w in range(SIGNAL_WORDS):
        sig[w] = 0
    sig[0] = signals
    sig[1] = tick[0]
    sig[2] = after
    sig[7] = value
    sig[11] = signal_word_folded(0, flags)
    _emit(sring, sig)


@njit(nogil=True, inline="always", cache=True)
def kill_flatten(ist, rb, i, tick, sig, seq, gen):
    """A kill flattens instrument i if it holds a target: its signal into sig (seq; flags KILLED, no
    score: NaN; all but the emit times), True; else False."""
    prev = ist[i, I_POS]
    if prev == 0:
        return False
    ist[i, I_POS] = 0
    flattened(rb, i)
    _fill_signal(sig, seq, seq, tick, ist, i, 0, prev, np.float32(np.nan), np.float32(np.nan), gen, 0,
                 SIGNAL_FLAG_KILLED, 0)
    return True


@njit(nogil=True, cache=True)
def kill_bt(ist, rb, rg, tick, code, sigs, nsig, base):
    """A live run's kill switch move replayed in a backtest (a kill mark: replay/backtest.py
    run_file), as _kill_switch made it: the reason adopted, and when killed every held target
    flattened on `tick` (signals into sigs[nsig:], numbered from base + nsig, acting at the tick's
    receive time as the backtest's decisions do). Returns the new nsig."""
    rg[RG_KILLED] = code
    if code == 0:
        return nsig
    for i in range(ist.shape[0]):
        if kill_flatten(ist, rb, i, tick, sigs[nsig], base + nsig, 1):
            count_record(rg, SIGNAL_FLAG_KILLED)
            sigs[nsig, 4] = tick[2]
            nsig += 1
    return nsig


@njit(nogil=True, inline="always", cache=True)
def _publish_counters(lv, n, parks):
    ctl, cst, rg = lv.ctl, lv.stash.cst, lv.dc.risk.rg
    store_relaxed(ctl, C.L_TICKS, n.ticks)
    store_relaxed(ctl, C.L_SIGNALS, n.signals)
    store_relaxed(ctl, C.L_GAPS, n.gaps)
    store_relaxed(ctl, C.L_LOST, n.lost)
    store_relaxed(ctl, C.L_SCORED, n.scored)
    store_relaxed(ctl, C.L_CONFLATED, cst[CS_CONFLATED])
    store_relaxed(ctl, C.L_MARKS, cst[CS_MARKS])
    store_relaxed(ctl, C.L_PARKS, parks)
    store_relaxed(ctl, C.L_KILLED, rg[RG_KILLED])
    for r in range(len(RULES)):
        store_relaxed(ctl, C.L_RISK_RULES + r, rg[RG_RULES + r])
    for r in range(3):  # (clipped, refused, killed records: engine/signal_counts.py)
        store_relaxed(ctl, C.L_RECORDS + r, rg[RG_REC_CLIPPED + r])


@njit(nogil=True, inline="always", cache=True)
def _counters_at_start(ctl):
    """The counters a loop re-entered (a re-attach) goes on from: ticks, signals, gaps, lost,
    scored, parks."""
    return (load_relaxed(ctl, C.L_TICKS), load_relaxed(ctl, C.L_SIGNALS), load_relaxed(ctl, C.L_GAPS),
            load_relaxed(ctl, C.L_LOST), load_relaxed(ctl, C.L_SCORED), load_relaxed(ctl, C.L_PARKS))


@njit(nogil=True, inline="always", cache=True)
def _settings(cfg):
    """The live loops' Settings from cfg (Host.loop_cfg)."""
    return Settings(cfg[CFG_EXIT_ON_EOF] != 0.0, np.int64(cfg[CFG_WARM_EVERY]), cfg[CFG_SIGMOID] != 0.0,
                    np.int64(cfg[CFG_WAIT]), np.int64(cfg[CFG_SPIN_NS]), np.int64(cfg[CFG_YIELD_NS]),
                    np.int64(cfg[CFG_PARK_MAX_NS]), cfg[CFG_DUTY], cfg[CFG_CONFLATE] != 0.0,
                    np.int64(cfg[CFG_CONFLATE_MAX]), np.int64(cfg[CFG_CONFLATE_NS]))


@njit(nogil=True, inline="always", cache=True)
def _live(sring, ctl, hist, ss, stash, uni, risk, scratch, pvals, cfg):
    """A live loop's Live: its groups, every array borrowed (no reference counts per tick)."""
    sring, ctl, hist, ss, stash, uni, risk, scratch = borrow_all((sring, ctl, hist, ss, stash, uni, risk, scratch))
    cf = _settings(cfg)
    return Live(ctl, hist, sring, scratch, stash, Decider(ss, uni, risk, make_params(pvals), cf.use_sigmoid), cf)


@njit(nogil=True, inline="always", cache=True)
def _commands(ctl, now, paused):
    """The control block's command at a housekeeping step, which beats the heartbeat: (stop the
    loop?, exit state, paused). An expired lease stops it too: nobody is watching us, stop
    spinning; unless we did not run either (a whole-process stop: the control thread gets
    LEASE_GRACE_NS from our resumption to renew it)."""
    prev = load_relaxed(ctl, C.L_HEARTBEAT)
    store_relaxed(ctl, C.L_HEARTBEAT, now)
    if prev > 0 and now - prev > C.LOOP_RESUMED_NS:
        store_relaxed(ctl, C.L_RESUMED_NS, now)
    cmd = load_acquire(ctl, C.CTL_CMD)
    if cmd == C.CMD_STOP:
        return True, C.LOOP_STOPPED, paused
    if cmd == C.CMD_REATTACH:  # the feed's ring was replaced: the thread re-enters on the new one
        return True, C.LOOP_REATTACH, paused
    if paused != (cmd == C.CMD_PAUSE):
        paused = cmd == C.CMD_PAUSE
        store_relaxed(ctl, C.L_STATE, C.LOOP_PAUSED if paused else C.LOOP_RUNNING)
    if now > load_relaxed(ctl, C.CTL_LEASE_NS) and now - load_relaxed(ctl, C.L_RESUMED_NS) > C.LEASE_GRACE_NS:
        return True, C.LOOP_LEASE_EXPIRED, paused
    return False, C.LOOP_STOPPED, paused


@njit(nogil=True, inline="always", cache=True)
def _enter(lv):
    """A live loop's start: the counters it goes on from (a re-attach re-enters it), the model, the
    wait's state; marked running, or paused while `engine ctl pause` stands: then it says so with a
    pause mark (a backtest given the marks pauses there too; a repeated one changes nothing).
    Returns (Counts, Waiting, Model, paused)."""
    ctl, tick = lv.ctl, lv.scratch.tick
    ticks, signals, gaps, lost, scored, parks = _counters_at_start(ctl)
    mdl = _adopt_model(ctl, Model(-1, 0, 0))
    wt = Waiting(0, 0, PARK_MIN_NS, 0.0, monotonic_ns(), parks)
    store_relaxed(ctl, C.L_STATE, C.LOOP_RUNNING)
    paused = load_acquire(ctl, C.CTL_CMD) == C.CMD_PAUSE
    if paused:
        store_relaxed(ctl, C.L_STATE, C.LOOP_PAUSED)
        _move_mark(lv.sring, lv.scratch.sig, signals, tick, tick[0] + 1 if ticks > 0 else 0, 1,
                   SIGNAL_FLAGS_PAUSE_MARK)
    return Counts(ticks, signals, gaps, lost, scored), wt, mdl, paused


@njit(nogil=True, inline="always", cache=True)
def _leave(lv, n, wt, state):
    """A live loop's end: its counters and exit state published; returns the state."""
    _publish_counters(lv, n, wt.parks)
    store_relaxed(lv.ctl, C.L_STATE, state)
    return state


@njit(nogil=True, inline="always", cache=True)
def _adopt_model(ctl, mdl):
    """If the control plane published a new model generation, adopt it: returns the Model to score
    with (a generation with no address keeps the one held). The generation is stored after both
    addresses (release), so reading it first (acquire) makes the addresses we read the ones that go
    with it."""
    g = load_acquire(ctl, C.CTL_MODEL_GEN)
    if g == mdl.gen:
        return mdl
    addr = load_acquire(ctl, C.CTL_MODEL_ADDR)
    rows = load_acquire(ctl, C.CTL_MODEL_ROWS)
    store_relaxed(ctl, C.L_SWAP_NS, monotonic_ns())
    store_relaxed(ctl, C.L_MODEL_GEN, g)
    if addr:
        return Model(g, addr, rows)
    return Model(g, mdl.addr, mdl.rows)


@njit(nogil=True, inline="always", cache=True)
def _stash(ist, stash, inst, row, tick, idx):
    """Conflation: keep `row` as the instrument's pending row (a later one of the same instrument
    replaces it, counted as conflated); the instrument joins plist once."""
    cst, prow, ptick = stash.cst, stash.prow, stash.ptick
    if ist[inst, I_PEND] == 0:
        ist[inst, I_PEND] = 1
        ist[inst, I_FOLD] = 0
        stash.plist[cst[CS_NPEND]] = inst
        cst[CS_NPEND] += 1
    else:
        cst[CS_CONFLATED] += 1
    ist[inst, I_FOLD] += 1
    ist[inst, I_PIDX] = idx
    for f in range(row.shape[0]):
        prow[inst, f] = row[f]
    for k in range(tick.shape[0]):  # (a live loop's: its T_ORIGIN too)
        ptick[inst, k] = tick[k]


@njit(nogil=True, inline="always", cache=True)
def _score_emit(lv, mdl, inst, signals, t0):
    """The live loop's scoring of the tick it took: the model on its row, then _decide_emit.
    Returns the signal count."""
    sc = lv.scratch
    call_predict(mdl.addr, sc.row, sc.out)
    return _decide_emit(lv, sc.out[0], inst, sc.tick, 1, signals, mdl.gen, t0, monotonic_ns())


@njit(nogil=True, inline="always", cache=True)
def _decide_emit(lv, margin, inst, tick, folded, signals, gen, t0, t_model):
    """Decide on a scored row: the signal if the position changed (folded: scoreable ticks behind
    it; with DECIDE_TARGETS, a signal per member it moved, from dsig), and the model (t0 to
    t_model), emit and tick_to_signal latencies. Returns the signal count."""
    dc, sig, hist = lv.dc, lv.scratch.sig, lv.hist
    if DECIDE_TARGETS:
        dsig = dc.uni.dsig
        k = host_decide_targets(dc, inst, tick, margin, dsig, 0, signals, gen, folded)
        for j in range(k):
            _emit(lv.sring, dsig[j])
        signals += k
    elif host_decide(dc, inst, tick, margin, sig, signals, gen, folded):
        _emit(lv.sring, sig)
        signals += 1
    t_emit = monotonic_ns()
    latency.record(hist, latency.ST_MODEL, t_model - t0)
    latency.record(hist, latency.ST_EMIT, t_emit - t_model)
    if tick[T_ORIGIN] > 0:  # (a replay read flat out has no time it reached us: not measured)
        latency.record(hist, latency.ST_TOTAL, t_emit - tick[T_ORIGIN])
    return signals


@njit(nogil=True, inline="always", cache=True)
def _score_rows(mrows, stash, n):
    """A flush's n >= 2 pending rows (plist order) scored in one call of the model's rows function
    (flat back ends: engine_predict_rows, the same bits as one row a call, less per row): fout[:n].
    Returns the clock before and after the call, or (0, 0) when it scored nothing (no rows
    function, or a single row: the caller scores a row a call)."""
    if mrows == 0 or n < 2:
        return 0, 0
    prow, plist, frows = stash.prow, stash.plist, stash.frows
    t0 = monotonic_ns()
    for j in range(n):
        for f in range(prow.shape[1]):  # (element by element: a slice copy compiles numba's shape-error
            frows[j, f] = prow[plist[j], f]  # message, ~2 s of every strategy's first compile)
    call_predict_rows(mrows, frows[:n], n, stash.fout)
    stash.cst[CS_BATCHED] += n
    return t0, monotonic_ns()


@njit(nogil=True, cache=True)
def _housekeep_moves(lv, now, paused, n, mdl):
    """Both loops' housekeeping step: the control block's command (_commands), then what moved.
    A pending conflation window is flushed first, on the last tick taken, when the loop stops (every
    tick taken is decided), pauses or the kill switch moves (both replayed after that tick): so a
    backtest of the ticks read flushes it at the same tick, on the same side of the move (left
    pending, the backtest scored those ticks one by one: signals the run never made). Then, unless
    stopping, a pause mark if `engine ctl pause/resume` moved the loop and the kill switch if it
    moved (idle too: a kill still flattens within a park), each replayed there by a backtest given
    the marks. Returns (stop?, exit state, paused, Counts)."""
    lv = borrow_all(lv)
    ticks, signals, gaps, lost, scored = n
    ctl, tick = lv.ctl, lv.scratch.tick
    was = paused
    stop, state, paused = _commands(ctl, now, paused)
    killing = load_relaxed(ctl, C.CTL_KILL) != lv.dc.risk.rg[RG_KILLED]
    if (stop or killing or paused != was) and lv.stash.cst[CS_NPEND] > 0:
        signals, scored = _flush_live(lv, mdl, signals, scored)
    if not stop:
        after = tick[0] + 1 if ticks > 0 else 0
        if paused != was:
            _move_mark(lv.sring, lv.scratch.sig, signals, tick, after, int(paused), SIGNAL_FLAGS_PAUSE_MARK)
        if killing:
            signals = _kill_switch(lv, after, signals, mdl.gen)
    return stop, state, paused, Counts(ticks, signals, gaps, lost, scored)


@njit(nogil=True, inline="always", cache=True)
def _order_pending(plist, ptick, n):
    """Sort the pending instruments by the seq of their latest tick (insertion sort: n is the few
    instruments that ticked in the window), so a flush emits signals in tick order, as unconflated
    scoring does, and the backtest flushes in the same order."""
    for j in range(1, n):
        inst = plist[j]
        k = j - 1
        while k >= 0 and ptick[plist[k], 0] > ptick[inst, 0]:
            plist[k + 1] = plist[k]
            k -= 1
        plist[k + 1] = inst


@njit(nogil=True, cache=True)
def _flush_live(lv, mdl, signals, scored):
    """Score every pending instrument once, on its latest row, in the order of their latest ticks.
    When the window spans more than its first tick, a mark goes first into the signal stream
    (word 1: the last tick folded before this flush, word 2: the window's first tick, word 11:
    ticks folded, flags SIGNAL_FLAG_MARK) so a backtest can replay the same flush points. Returns
    (signals, scored). A housekeeping step calls it too (_housekeep_moves)."""
    lv = borrow_all(lv)
    stash, ist, sig, last, out = lv.stash, lv.dc.ss.ist, lv.scratch.sig, lv.scratch.tick, lv.scratch.out
    cst, plist, ptick = stash.cst, stash.plist, stash.ptick
    n = cst[CS_NPEND]
    if cst[CS_FIRST] != last[0]:
        for w in range(SIGNAL_WORDS):
            sig[w] = 0
        sig[0] = signals
        sig[1] = last[0]
        sig[2] = cst[CS_FIRST]
        sig[3] = last[2]
        sig[4] = monotonic_ns()
        sig[11] = signal_word_folded(cst[CS_FOLDS], SIGNAL_FLAG_MARK)
        _push(lv.sring, sig)
        cst[CS_MARKS] += 1
    _order_pending(plist, ptick, n)
    t0, t_model = _score_rows(mdl.rows, stash, n)  # several rows ready: one call
    for j in range(n):
        inst = plist[j]
        margin, t_row, t_done = stash.fout[j], t0, t_model
        if not t_model:  # (a row a call: _score_emit's steps, with one _decide_emit below for both ways,
            t_row = monotonic_ns()  # not two: each is the whole decision inlined, compiled per strategy)
            call_predict(mdl.addr, stash.prow[inst], out)
            margin, t_done = out[0], monotonic_ns()
        signals = _decide_emit(lv, margin, inst, ptick[inst], ist[inst, I_FOLD], signals, mdl.gen, t_row, t_done)
        ist[inst, I_PEND] = 0
    cst[CS_NPEND] = 0
    cst[CS_FOLDS] = 0
    return signals, scored + n


@njit(nogil=True, cache=True)
def _idle_wait(cf, wt):
    """One empty poll's wait (WAIT_BACKOFF or WAIT_DUTY; WAIT_SPIN pauses inline): returns the
    updated Waiting. Only called with nothing to read, so a call costs no tick anything."""
    idle, idle_t0, park, owed, t_last, parks = wt
    now = monotonic_ns()
    if cf.wait == WAIT_BACKOFF:
        if idle == 1:
            idle_t0 = now
        if now - idle_t0 < cf.spin_ns:
            cpu_pause()
        elif now - idle_t0 < cf.yield_ns:
            sched_yield()
        else:
            sleep_ns(park)
            parks += 1
            park = min(park * 2, cf.park_max)
        return Waiting(idle, idle_t0, park, owed, t_last, parks)
    owed += cf.duty * (now - t_last)  # WAIT_DUTY: spin, but sleep whenever the owed sleep reaches a slice
    t_last = now
    if owed >= DUTY_SLICE_NS:
        sleep_ns(DUTY_SLICE_NS)
        t_last = monotonic_ns()
        owed -= t_last - now
        parks += 1
    else:
        cpu_pause()
    return Waiting(idle, idle_t0, park, owed, t_last, parks)


@njit(nogil=True, cache=True)
def _duty_owed(duty, now, wt):
    """WAIT_DUTY when the ring is never empty (overloaded): the owed sleep is still taken once it
    passes 50 slices, or the kernel's RT throttling takes it instead. Returns the updated Waiting."""
    idle, idle_t0, park, owed, t_last, parks = wt
    owed += duty * (now - t_last)
    t_last = now
    if owed > 50.0 * DUTY_SLICE_NS:
        sleep_ns(DUTY_SLICE_NS)
        t1 = monotonic_ns()
        owed -= t1 - now
        t_last = t1
        parks += 1
    return Waiting(idle, idle_t0, park, owed, t_last, parks)


@njit(nogil=True, inline="always", cache=True)
def _count_feed_gap(ctl, tick):
    """A gap tick in the stream is a loss before the ring (the feed's, or a recording's): counted
    apart from the ring's own laps, in the control block, only when one comes."""
    if tick_kind(tick) == KIND_GAP:
        store_relaxed(ctl, C.L_FEED_GAPS, load_relaxed(ctl, C.L_FEED_GAPS) + 1)
        store_relaxed(ctl, C.L_FEED_LOST, load_relaxed(ctl, C.L_FEED_LOST) + tick[3])


# ---- the live loops' steps: run_loop and run_loop_multi differ only in how they take a tick ----
# (the ring view and its own tests, `done` and `behind`, are arguments of the steps that need them)


@njit(nogil=True, inline="always", cache=True)
def _housekeep(ring, done, lv, mdl, paused, n, wt):
    """Every HOUSEKEEP_EVERY iterations: the counters published, the control block's moves
    (_housekeep_moves), a model swap while idle; at the end of the stream (cf.exit_on_eof and
    done(ring): every tick of it taken) what is pending is flushed and the loop stops; WAIT_DUTY's
    owed sleep when never idle. Returns (stop?, exit state, paused, Counts, Model, Waiting)."""
    now = monotonic_ns()
    _publish_counters(lv, n, wt.parks)
    stop, state, paused, n = _housekeep_moves(lv, now, paused, n, mdl)
    if stop:
        return True, state, paused, n, mdl, wt
    mdl = _adopt_model(lv.ctl, mdl)  # hot swap while idle
    if lv.cf.exit_on_eof and done(ring):
        if lv.stash.cst[CS_NPEND] > 0:
            signals, scored = _flush_live(lv, mdl, n.signals, n.scored)
            n = Counts(n.ticks, signals, n.gaps, n.lost, scored)
        return True, C.LOOP_EOF, paused, n, mdl, wt
    if lv.cf.wait == WAIT_DUTY:  # never idle (overloaded): still take the owed sleep, or the kernel will
        wt = _duty_owed(lv.cf.duty, now, wt)
    return False, state, paused, n, mdl, wt


@njit(nogil=True, inline="always", cache=True)
def _on_empty(lv, mdl, n, wt, it):
    """An empty poll: caught up, what the backlog left pending is scored; else an idle step (the
    model warmed every cf.warm_every of them, then cf.wait's wait). Returns (Counts, Waiting, it)."""
    if lv.stash.cst[CS_NPEND] > 0:  # caught up: score what the backlog left pending
        signals, scored = _flush_live(lv, mdl, n.signals, n.scored)
        return Counts(n.ticks, signals, n.gaps, n.lost, scored), wt, it
    cf = lv.cf
    wt = Waiting(wt.idle + 1, wt.idle_t0, wt.park, wt.owed, wt.t_last, wt.parks)
    if cf.warm_every > 0 and wt.idle % cf.warm_every == 0:
        call_predict(mdl.addr, lv.scratch.row, lv.scratch.out)  # result unused: out is rewritten before it is read
    if cf.wait == WAIT_SPIN:
        cpu_pause()
    else:
        slept = wt.parks
        wt = _idle_wait(cf, wt)
        if wt.parks != slept:  # it slept: housekeeping next, so a stop is seen within a park, not 1024 of them
            it |= HOUSEKEEP_EVERY - 1
    return n, wt, it


@njit(nogil=True, inline="always", cache=True)
def _on_tick(st, ring, behind, lv, mdl, paused, n, wt):
    """A tick taken (st POLL_TICK; POLL_GAP: the ring was lapped, every book is void): its ring
    latency, the kill switch, the strategy (host_step), then, unless paused, the model and the
    decision, or conflation (cf.conflate): while behind(ring) (its next tick already waiting) the
    row is stashed, and the stash scored when the ring runs dry, after cf.conflate_max ticks or
    cf.conflate_ns after the window began. Returns (Counts, Model, Waiting)."""
    ticks, signals, gaps, lost, scored = n
    wt = Waiting(0, wt.idle_t0, PARK_MIN_NS, wt.owed, wt.t_last, wt.parks)  # (no longer idle)
    t_deq = monotonic_ns()
    ctl, hist, stash, cst, cf, dc = lv.ctl, lv.hist, lv.stash, lv.stash.cst, lv.cf, lv.dc
    ss, uni, params, tick, row = dc.ss, dc.uni, dc.params, lv.scratch.tick, lv.scratch.row
    if st == tickring.POLL_GAP:
        host_reset(ss.fstate, ss.book, ss.ist, uni.shared)  # a gap voids every instrument's state and book
        return Counts(ticks, signals, gaps + 1, lost + tick[3], scored), mdl, wt
    ticks += 1
    if tick[T_ORIGIN] > 0:
        latency.record(hist, latency.ST_RING, t_deq - tick[T_ORIGIN])
    _count_feed_gap(ctl, tick)
    if load_relaxed(ctl, C.CTL_KILL) != dc.risk.rg[RG_KILLED]:  # the kill switch: before this tick moves anything
        signals = _kill_switch(lv, tick[0], signals, mdl.gen)
    inst = host_step(ss, uni, tick, row, params)
    if cf.conflate and cst[CS_NPEND] > 0:
        cst[CS_FOLDS] += 1
    if inst < 0 or paused:  # paused: state stays current, nothing is scored or signalled
        if cst[CS_NPEND] > 0 and (cst[CS_FOLDS] >= cf.conflate_max or t_deq - cst[CS_T0] >= cf.conflate_ns):
            signals, scored = _flush_live(lv, mdl, signals, scored)
        return Counts(ticks, signals, gaps, lost, scored), mdl, wt
    mdl = _adopt_model(ctl, mdl)  # hot swap between two ticks: the address is data
    if cf.conflate and (cst[CS_NPEND] > 0 or behind(ring)):
        if cst[CS_NPEND] == 0:
            cst[CS_FIRST] = tick[0]
            cst[CS_FOLDS] = 1
            cst[CS_T0] = t_deq
        _stash(ss.ist, stash, inst, row, tick, tick[0])  # (a folded tick is not timed:
        # folding speed is what keeps a backlog short, and a clock read is a fifth of it)
        if cst[CS_FOLDS] >= cf.conflate_max or t_deq - cst[CS_T0] >= cf.conflate_ns or not behind(ring):
            signals, scored = _flush_live(lv, mdl, signals, scored)
        return Counts(ticks, signals, gaps, lost, scored), mdl, wt
    t_feat = monotonic_ns()
    signals = _score_emit(lv, mdl, inst, signals, t_feat)
    latency.record(hist, latency.ST_FEATURES, t_feat - t_deq)
    return Counts(ticks, signals, gaps, lost, scored + 1), mdl, wt


# ---- one ring ----


@njit(nogil=True, inline="always", cache=True)
def _file_done(hdr, slot_base):
    """A ring whose feed marked the end of its stream, every tick of it taken."""
    return (load_acquire(hdr, shm.H_STATE) == shm.STATE_FINISHED
            and load_relaxed(hdr, slot_base + shm.C_CURSOR) >= load_acquire(hdr, shm.H_WRITE))


@njit(nogil=True, inline="always", cache=True)
def _ring_done(ring):
    """run_loop's end of the stream (_housekeep's `done`)."""
    return _file_done(ring.thdr, ring.slot_base)


@njit(nogil=True, inline="always", cache=True)
def _ring_waiting(ring):
    """Is the ring's next tick already published? Conflation's "behind" (_on_tick's `behind`)."""
    return tickring.waiting(ring.thdr, ring.tdata, ring.tmask, ring.slot_base)


@njit(nogil=True, cache=True)
def run_loop(ring, sring, ctl, hist, ss, stash, uni, risk, scratch, pvals, cfg):
    """Run until CMD_STOP, an expired lease, or (cfg) the end of the stream; returns the exit state.

    Conflation (cfg CFG_CONFLATE): a scoreable tick is scored at once unless the next tick is
    already waiting in the ring; then its row is stashed and the loop reads on, folding every
    waiting tick into state and books, and scores each stashed instrument once, on its latest
    row, when the ring runs dry, after CFG_CONFLATE_MAX ticks or CFG_CONFLATE_NS after the window
    began (so no scored tick is held long behind a burst). Off, every scoreable tick is scored. With nothing waiting the two are the same code path."""
    ring, lv = borrow_all(ring), _live(sring, ctl, hist, ss, stash, uni, risk, scratch, pvals, cfg)
    tick = lv.scratch.tick
    n, wt, mdl, paused = _enter(lv)
    state, it = C.LOOP_STOPPED, 0
    while True:
        it += 1
        if (it & (HOUSEKEEP_EVERY - 1)) == 0:
            stop, state, paused, n, mdl, wt = _housekeep(ring, _ring_done, lv, mdl, paused, n, wt)
            if stop:
                break
        st = tickring.poll(ring.thdr, ring.tdata, ring.tmask, ring.slot_base, tick)
        if st == tickring.POLL_EMPTY:
            n, wt, it = _on_empty(lv, mdl, n, wt, it)
            continue
        tick[T_ORIGIN] = tickring.origin(ring.thdr, tick[2])  # (a gap tick's is never read)
        n, mdl, wt = _on_tick(st, ring, _ring_waiting, lv, mdl, paused, n, wt)
    return _leave(lv, n, wt, state)


# ---- several rings: one loop reads every source's ring (engine run --feed A --feed B) ----
# compiled only for runs with several rings (or --record). The rings come as tuples of their header
# and data arrays (one compiled loop per ring count); the per-tick cost of the tuple is measured in
# bench/multi_feed.py.


@njit(nogil=True, inline="always", cache=True)
def _take_next(rings, tick, window):
    """Poll every ring that holds no tick yet (heads[k]: the one it holds), then take the next tick
    into `tick`; one whose instrument is at or past its ring's block is taken but not into `tick`,
    which keeps the last tick the run took (POLL_SKIP: a kill mark or a flush then names that one).
    Live rings (arrival order): among those holding a tick, the smallest receive time (ties: the
    first ring), taken before any file's. The merge window: while a live ring is empty and its feed
    has not finished, that tick waits until it has been held `window` ns (a tick the silent ring
    received earlier may still be on its way: a live feed publishes a frame's ticks after parsing
    them); then it goes anyway. window 0: never waits.
    File rings (RS_ORDERED; their ticks keep the data's receive times): merged exactly as
    engine/universe.py _merge merges the files (`engine backtest --merge`): every file's next tick
    must be known, held or announced by its feed while it waits to publish it (tickring.head), and
    the smallest (ties: the first ring) is taken once published. A file whose next tick is not
    known (its feed is reading) holds the files back: a file can wait.
    Returns (ring, POLL_TICK), (ring, POLL_GAP) when a ring was lapped (its gap tick, taken at
    once), (ring, POLL_SKIP), or (-1, POLL_EMPTY)."""
    thdrs, tdatas, tmasks, slot_bases, heads, rst = (rings.thdrs, rings.tdatas, rings.tmasks, rings.slot_bases,
                                                    rings.heads, rings.rst)
    best = -1  # live rings
    best_ts = np.int64(0)
    silent = False
    fbest = -1  # file rings
    fbest_ts = np.int64(0)
    fheld = False
    unknown = False
    for k in range(len(thdrs)):
        ordered = rst[k, RS_ORDERED] != 0
        if rst[k, RS_HELD] == 0:
            st = tickring.poll(thdrs[k], tdatas[k], tmasks[k], slot_bases[k], heads[k])
            if st == tickring.POLL_EMPTY:
                if ordered:
                    known, ts = tickring.head(thdrs[k], tdatas[k], tmasks[k], slot_bases[k])
                    if known:
                        if fbest < 0 or ts < fbest_ts:
                            fbest, fbest_ts, fheld = k, ts, False
                    elif not _file_done(thdrs[k], slot_bases[k]):
                        unknown = True
                elif window > 0 and load_acquire(thdrs[k], shm.H_STATE) != shm.STATE_FINISHED:
                    silent = True
                continue
            if st == tickring.POLL_GAP:
                for w in range(8):
                    tick[w] = heads[k, w]
                return k, st
            rst[k, RS_HELD] = 1
            if window > 0:
                rst[k, RS_SINCE] = monotonic_ns()
        ts = heads[k, 2]
        if ordered:
            if fbest < 0 or ts < fbest_ts:
                fbest, fbest_ts, fheld = k, ts, True
        elif best < 0 or ts < best_ts:
            best = k
            best_ts = ts
    if best >= 0 and silent and monotonic_ns() - rst[best, RS_SINCE] < window:
        best = -1  # (held: as for an empty ring)
    if best < 0:
        if fbest < 0 or not fheld or unknown:
            return -1, tickring.POLL_EMPTY
        best = fbest
    rst[best, RS_HELD] = 0
    if tick_instrument(heads[best]) >= rings.blocks[best]:
        return best, POLL_SKIP
    for w in range(8):
        tick[w] = heads[best, w]
    return best, tickring.POLL_TICK


@njit(nogil=True, inline="always", cache=True)
def _next_tick(rings, cst, tick, tap, window):
    """_take_next, then the tick as the run sees it: its instrument moved to the run's ids (ring k's
    id + offsets[k]; one at or past blocks[k] is counted and skipped: POLL_SKIP), counted for its
    ring, numbered in the merged stream (seq = CS_READ: signals and conflation marks name the
    merged stream's ticks, as a recording of it numbers them) and, with `tap`, published into the
    tap ring (--record). A ring's gap tick (it was lapped) is numbered and tapped too, so a
    backtest of the recording voids its books where the loop did. Returns (ring, status)."""
    k, st = _take_next(rings, tick, window)
    if st == tickring.POLL_EMPTY:
        return k, st
    rst = rings.rst
    if st == POLL_SKIP:
        rst[k, RS_UNMAPPED] += 1
        return k, st
    if st == tickring.POLL_TICK:
        local = tick_instrument(tick)
        tick[7] = tick_word7(w_lo32(tick[7]), local + rings.offsets[k], tick_kind(tick), tick_side(tick))
        tick[T_ORIGIN] = tickring.origin(rings.thdrs[k], tick[2])
        rst[k, RS_TICKS] += 1
        if tick_kind(tick) == KIND_GAP:
            rst[k, RS_FEED_GAPS] += 1
            rst[k, RS_FEED_LOST] += tick[3]
    tick[0] = cst[CS_READ]
    cst[CS_READ] += 1
    if tap:
        tickring.publish(rings.taphdr, rings.tapdata, rings.tapmask, tick)
    return k, st


@njit(nogil=True, inline="always", cache=True)
def _rings_waiting(rings):
    """Is a next tick already there on any ring (held, or published)? Conflation's "behind"."""
    for k in range(len(rings.thdrs)):
        if rings.rst[k, RS_HELD] != 0 or tickring.waiting(rings.thdrs[k], rings.tdatas[k], rings.tmasks[k],
                                                          rings.slot_bases[k]):
            return True
    return False


@njit(nogil=True, cache=True)
def _rings_drained(rings):
    """Every ring's producer marked the end of its stream and every tick of every ring was taken."""
    for k in range(len(rings.thdrs)):
        h = rings.thdrs[k]
        if rings.rst[k, RS_HELD] != 0 or load_acquire(h, shm.H_STATE) != shm.STATE_FINISHED:
            return False
        if load_relaxed(h, rings.slot_bases[k] + shm.C_CURSOR) < load_acquire(h, shm.H_WRITE):
            return False
    return True


@njit(nogil=True, cache=True)
def run_loop_multi(rings, sring, ctl, hist, ss, stash, uni, risk, scratch, pvals, cfg):
    """run_loop over several rings: each step takes the ready tick with the smallest receive time as the
    run sees it, within the merge window (_take_next; _next_tick; CFG_TAP: also into the tap ring, one 64-byte store drained off this core),
    then does run_loop's steps. A ring's lap is counted (its consumer line, gaps/lost) and voids every
    book, as in run_loop. Ends at CMD_STOP, an expired lease, or (cfg) once every ring is drained."""
    rings, lv = borrow_all(rings), _live(sring, ctl, hist, ss, stash, uni, risk, scratch, pvals, cfg)
    tick, cst = lv.scratch.tick, lv.stash.cst
    tap, window = cfg[CFG_TAP] != 0.0, np.int64(cfg[CFG_MERGE_WINDOW_NS])  # (window: _take_next)
    n, wt, mdl, paused = _enter(lv)
    state, it = C.LOOP_STOPPED, 0
    while True:
        it += 1
        if (it & (HOUSEKEEP_EVERY - 1)) == 0:
            stop, state, paused, n, mdl, wt = _housekeep(rings, _rings_drained, lv, mdl, paused, n, wt)
            if stop:
                break
        st = _next_tick(rings, cst, tick, tap, window)[1]  # (T_ORIGIN: from its ring's clock)
        if st == POLL_SKIP:
            continue
        if st == tickring.POLL_EMPTY:
            n, wt, it = _on_empty(lv, mdl, n, wt, it)
            continue
        n, mdl, wt = _on_tick(st, rings, _rings_waiting, lv, mdl, paused, n, wt)
    return _leave(lv, n, wt, state)


@njit(nogil=True, inline="always", cache=True)
def _decide_bt(dc, inst, tick, margin, sigs, nsig, base, folded):
    """The backtest's decision on one score: its signals into sigs[nsig:] acting at the tick's receive
    time (no live clock here); returns the new nsig."""
    if DECIDE_TARGETS:
        k = host_decide_targets(dc, inst, tick, margin, sigs, nsig, base + nsig, 1, folded)
        for j in range(nsig, nsig + k):
            sigs[j, 4] = tick[2]
        return nsig + k
    sig = sigs[nsig]
    if host_decide(dc, inst, tick, margin, sig, base + nsig, 1, folded):
        sig[4] = tick[2]
        return nsig + 1
    return nsig


@njit(nogil=True, cache=True)
def _flush_bt(dc, stash, mdl, out, sigs, nsig, base, margins):
    """The backtest's flush: the same scoring and decisions as _flush_live, signals to sigs."""
    dc, stash = borrow_all((dc, stash))
    ist, cst, plist, ptick = dc.ss.ist, stash.cst, stash.plist, stash.ptick
    n = cst[CS_NPEND]
    _order_pending(plist, ptick, n)
    batched = _score_rows(mdl.rows, stash, n)[1] != 0  # as _flush_live
    for j in range(n):
        inst = plist[j]
        if batched:
            out[0] = stash.fout[j]
        else:
            call_predict(mdl.addr, stash.prow[inst], out)
        margins[ist[inst, I_PIDX]] = out[0]
        nsig = _decide_bt(dc, inst, ptick[inst], out[0], sigs, nsig, base, ist[inst, I_FOLD])
        ist[inst, I_PEND] = 0
    cst[CS_NPEND] = 0
    return nsig, n


@njit(nogil=True, cache=True)
def backtest_loop(words, start, ss, stash, uni, risk, row, out, model, mrows, pvals, cfg, sigs, nsig, base, margins,
                  hist, marks):
    """Run ticks words[start:]; signals go to sigs[nsig:], numbered from base + nsig; the margin of every scored tick to
    margins[i] (NaN elsewhere). Returns (next tick, nsig, scored): stops early when sigs has no
    room for a flush. Deterministic: the clock is read only to measure compute time (hist),
    never to decide.

    marks (int64 [m, 2]: window's first tick seq, flush tick seq; sorted) replays a live run's
    conflation: a scoreable tick inside a window is stashed, and the stash is scored after the
    flush tick, exactly as the live loop did. With no marks every scoreable tick is scored."""
    ss, stash, uni, risk = borrow_all((ss, stash, uni, risk))
    params = make_params(pvals)
    dc, mdl = Decider(ss, uni, risk, params, cfg[CFG_SIGMOID] != 0.0), Model(1, model, mrows)
    ist, cst = ss.ist, stash.cst
    scored = 0
    i = start
    n = words.shape[0]
    nmarks = marks.shape[0]
    room = (ist.shape[0] + 1) * max(1, UNIVERSE_N)  # (a flush: each pending instrument's decision, its legs)
    while i < n:
        if sigs.shape[0] - nsig < room:
            return i, nsig, scored
        tick = words[i]  # a view: the mapped file's own bytes (read-only), as the ring's copy live
        t0 = monotonic_ns()
        inst = host_step(ss, uni, tick, row, params)
        k = cst[CS_MARK]
        while k < nmarks and marks[k, 1] < tick[0]:
            k += 1  # (a mark for ticks this file does not have)
        cst[CS_MARK] = k
        inside = k < nmarks and marks[k, 0] <= tick[0]
        if inst >= 0 and cst[CS_PAUSED] == 0:  # (paused as the live run was: features kept, nothing decided)
            if inside:
                _stash(ist, stash, inst, row, tick, i)
            else:
                call_predict(model, row, out)
                scored += 1
                margins[i] = out[0]
                nsig = _decide_bt(dc, inst, tick, out[0], sigs, nsig, base, 1)
            latency.record(hist, latency.ST_TOTAL, monotonic_ns() - t0)
        if inside and marks[k, 1] == tick[0]:
            nsig, m = _flush_bt(dc, stash, mdl, out, sigs, nsig, base, margins)
            scored += m
            cst[CS_MARK] = k + 1
        i += 1
    return i, nsig, scored


@njit(nogil=True, cache=True)
def featurize_loop(words, fstate, book, ist, uids, umem, ubook, uist, shared, targets, dsig, pvals, X, inst_out,
                   mid_out, idx_out, row):
    """The feature row of every tick the strategy would score (what the live loop would score),
    with its instrument, the mid at that tick (float64, 1e-9 units; NaN when one side is empty)
    and the tick's index. Returns how many rows."""
    ss, uni = borrow_all((StrategyState(fstate, book, ist), UniverseState(uids, umem, ubook, uist, shared, targets, dsig)))
    params = make_params(pvals)
    m = 0
    for t in range(words.shape[0]):
        tick = words[t]
        inst = host_step(ss, uni, tick, row, params)
        if inst >= 0:
            for f in range(row.shape[0]):
                X[m, f] = row[f]
            inst_out[m] = inst
            bid = ist[inst, I_BID]
            ask = ist[inst, I_ASK]
            mid_out[m] = 0.5 * (bid + ask) if bid > 0 and ask > 0 else np.nan
            idx_out[m] = t
            m += 1
    return m


@njit(nogil=True, cache=True)
def probe(fstate, book, ist, uids, umem, ubook, uist, shared, targets, dsig, rlim, rb, rg, tick, row, pvals, out, sig):
    """Compile on_tick and decide with the exact types the loops use (an early, clear error)."""
    ss, uni = StrategyState(fstate, book, ist), UniverseState(uids, umem, ubook, uist, shared, targets, dsig)
    params = make_params(pvals)
    dc = Decider(ss, uni, RiskState(rlim, rb, rg), params, True)
    inst = host_step(ss, uni, tick, row, params)
    if inst >= 0:
        if DECIDE_TARGETS:
            return host_decide_targets(dc, inst, tick, out[0], dsig, 0, 0, 1, 1) > 0
        return host_decide(dc, inst, tick, out[0], sig, 0, 1, 1)
    return False


@njit(nogil=True, cache=True)
def book_levels(book, ist, inst):
    """(bid_px, bid_sz, ask_px, ask_sz) copies of an instrument's window, for tests and tools."""
    nb = ist[inst, I_NBID]
    na = ist[inst, I_NASK]
    return (book[inst, 0, PX, :nb].copy(), book[inst, 0, SZ, :nb].copy(),
            book[inst, 1, PX, :na].copy(), book[inst, 1, SZ, :na].copy())

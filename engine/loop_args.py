"""The host loops' arguments, in named groups built here: callers never count positions.

The loops (engine/host_template.py) take their arrays in a few groups, the NamedTuples below
(GROUPS: the loop parameter each one is), and borrow every array in them at their top
(engine/intrinsics.py borrow_all): a group costs nothing per tick, where numba would otherwise
count the references of its arrays wherever a helper takes one (~40 ns a tick). This module is
their one owner: callers hand over named parts (a ring view, LiveArgs, BacktestArgs), and
run_args, run_multi_args and backtest_args build the groups and put each value at the loop
parameter of its name, read from the loop's own def line. A part with no parameter, or a
parameter with no part, is refused with both names. Built once per run (per call of the loop),
never per tick.
"""
import inspect
from typing import NamedTuple

import numpy as np

from .readonly import read_only

NO_MARKS = np.zeros((0, 2), np.int64)  # backtest_loop: no live conflation to replay
# The live loops' tick buffer (LiveArgs.tick, HostArrays.ptick's rows): the record's 8 words, then
# T_ORIGIN, when the tick reached the loop's side on CLOCK_MONOTONIC (engine/tickring.py origin;
# 0: not known, a replay read flat out), where its ring and tick_to_signal latencies start.
T_ORIGIN = 8
LOOP_TICK_WORDS = 9


def new_tick():
    """A live loop's tick buffer (numba does not check bounds: never a record-sized one)."""
    return np.zeros(LOOP_TICK_WORDS, np.int64)


class TickView(NamedTuple):
    """run_loop: the tick ring as a consumer mapped it (engine.tickring.TickConsumer), replaced
    when a restarted feed makes a new ring."""
    thdr: np.ndarray
    tdata: np.ndarray
    tmask: int
    slot_base: int

    @classmethod
    def of(cls, consumer):
        return cls(consumer.hdr, consumer.data, consumer.mask, consumer.slot_base)


class MultiTickView(NamedTuple):
    """run_loop_multi: several tick rings (app/live.py MultiRings builds it). thdrs, tdatas: tuples
    of each ring's header and data arrays (one compiled loop per ring count); tmasks, slot_bases,
    offsets (ring k's first instrument id in the run), blocks (how many ids ring k may use): int64
    [K]; heads: int64 [K, 8], the tick each ring holds; rst: int64 [K, RS_WIDTH], per-ring counters;
    the tap ring (taphdr, tapdata, tapmask) every tick taken is published into when recording."""
    thdrs: tuple
    tdatas: tuple
    tmasks: np.ndarray
    slot_bases: np.ndarray
    offsets: np.ndarray
    blocks: np.ndarray
    heads: np.ndarray
    rst: np.ndarray
    taphdr: np.ndarray
    tapdata: np.ndarray
    tapmask: int


class SignalView(NamedTuple):
    """run_loop: the signal ring it publishes to (engine.sigring.SignalRing)."""
    shdr: np.ndarray
    sdata: np.ndarray
    smask: int
    spstate: np.ndarray

    @classmethod
    def of(cls, ring):
        return cls(ring.hdr, ring.data, ring.mask, ring.pstate)


class StrategyState(NamedTuple):
    """What the host keeps per instrument (engine/host_template.py's header): the strategy's state
    columns, the book window, the host's own columns."""
    fstate: np.ndarray
    book: np.ndarray
    ist: np.ndarray


class Stash(NamedTuple):
    """Conflation: each pending instrument's latest row and tick (prow, ptick), the pending
    instruments (plist), the conflation scalars (cst), and a flush's rows and scores when it scores
    them in one call (frows, fout)."""
    prow: np.ndarray
    ptick: np.ndarray
    plist: np.ndarray
    cst: np.ndarray
    frows: np.ndarray
    fout: np.ndarray


class UniverseState(NamedTuple):
    """A UNIVERSE's binding (uids: its members' instruments; umem: each instrument's member or -1),
    read-only views of book and ist (ubook, uist: what on_tick's `u` reads), its shared state, and
    a targets decide's scratch (targets; dsig: its signals before they are pushed)."""
    uids: np.ndarray
    umem: np.ndarray
    ubook: np.ndarray
    uist: np.ndarray
    shared: np.ndarray
    targets: np.ndarray
    dsig: np.ndarray


class RiskState(NamedTuple):
    """The risk gate's limits and state (engine/risk.py new_state)."""
    rlim: np.ndarray
    rb: np.ndarray
    rg: np.ndarray


class Scratch(NamedTuple):
    """A live loop's buffers: the model's input and output (row, out), one tick (new_tick) and one
    signal record (sig)."""
    row: np.ndarray
    out: np.ndarray
    tick: np.ndarray
    sig: np.ndarray


class HostArrays(NamedTuple):
    """Both loops: the host's state (engine.strategy_build.HostState), in the loops' groups; each
    field's name is the loop parameter that takes it."""
    ss: StrategyState
    stash: Stash
    uni: UniverseState
    risk: RiskState

    @classmethod
    def of(cls, hs):
        """The groups of a HostState's arrays, each array by its name."""
        return cls(*(g(**{f: getattr(hs, f) for f in g._fields}) for g in cls.__annotations__.values()))


# the loops' parameters that take a group, and the group each takes
GROUPS = {"ring": TickView, "rings": MultiTickView, "sring": SignalView, **HostArrays.__annotations__,
          "scratch": Scratch}


class LiveArgs(NamedTuple):
    """Everything run_loop takes but the tick ring: control block words (ctl) and latency
    histogram (hist), the host's state, scratch (row, out: the model's input and output; tick,
    sig: one tick and one signal record), the strategy's parameter values and the loop settings
    (Host.loop_cfg)."""
    signals: SignalView
    ctl: np.ndarray
    hist: np.ndarray
    state: HostArrays
    row: np.ndarray
    out: np.ndarray
    tick: np.ndarray
    sig: np.ndarray
    pvals: np.ndarray
    cfg: np.ndarray

    def arrays(self):
        """Every array among them (to prefault before the loop starts)."""
        return [v for v in _named(self).values() if isinstance(v, np.ndarray)]


class BacktestArgs(NamedTuple):
    """What backtest_loop takes: ticks words[start:], the host's state, scratch (row, out), the
    model's function pointers (model; mrows, or 0: one row a call), parameter values and settings; signals go to sigs[nsig:], numbered
    from base + nsig; margins and the compute-time histogram (hist); a live run's conflation
    marks (engine.signal_log.read_marks) or none."""
    words: np.ndarray
    state: HostArrays
    row: np.ndarray
    out: np.ndarray
    model: int
    pvals: np.ndarray
    cfg: np.ndarray
    sigs: np.ndarray
    margins: np.ndarray
    hist: np.ndarray
    start: int = 0
    nsig: int = 0
    base: int = 0
    marks: np.ndarray = NO_MARKS
    mrows: int = 0  # the model's rows function (Predictor.rows_addr): a flush of several rows in one call


def run_args(mod, ring: TickView, live: LiveArgs) -> tuple:
    """run_loop's arguments, in its order (mod: the strategy's host module)."""
    return _flat(mod.run_loop, {"ring": ring, **_live_parts(live)})


def run_multi_args(mod, rings: MultiTickView, live: LiveArgs) -> tuple:
    """run_loop_multi's arguments, in its order."""
    return _flat(mod.run_loop_multi, {"rings": rings, **_live_parts(live)})


def _live_parts(live):
    """A live loop's parameters but its ring(s), by name."""
    _check_tick(live)
    return {"sring": live.signals, "ctl": live.ctl, "hist": live.hist, **live.state._asdict(),
            "scratch": Scratch(live.row, live.out, live.tick, live.sig), "pvals": live.pvals, "cfg": live.cfg}


def _check_tick(live):
    tick, ptick = live.tick, getattr(getattr(live.state, "stash", None), "ptick", None)
    if not isinstance(tick, np.ndarray) or not isinstance(ptick, np.ndarray):
        return  # (engine/loop_args' own tests pass names, not arrays)
    if tick.shape != (LOOP_TICK_WORDS,) or ptick.shape[1] < LOOP_TICK_WORDS:
        raise ValueError(f"a live loop's tick buffers hold {LOOP_TICK_WORDS} words (engine/loop_args.py new_tick), "
                         f"got tick {tick.shape} and ptick {ptick.shape}")


def backtest_args(mod, parts: BacktestArgs) -> tuple:
    """backtest_loop's arguments, in its order (mod: the strategy's host module). The ticks always
    read-only, as a mapped file's are: numba compiles a writable array apart, and a shadow's buffer
    (app/shadow.py) compiled the whole loop a second time, in the running engine."""
    if isinstance(parts.words, np.ndarray):
        parts = parts._replace(words=read_only(parts.words))
    given = {k: v for k, v in parts._asdict().items() if k != "state"}
    return _flat(mod.backtest_loop, {**given, **parts.state._asdict()})


def _named(*parts):
    """{name: value} of the parts, nested NamedTuples opened (every array of a LiveArgs)."""
    out = {}
    for part in parts:
        for k, v in part._asdict().items():
            for name, x in (_named(v) if hasattr(v, "_asdict") else {k: v}).items():
                if name in out:
                    raise TypeError(f"loop argument {name!r} given twice")
                out[name] = x
    return out


_PARAMS = {}


def params(loop):
    """The loop's parameter names, in order, from its def (a numba dispatcher's Python function)."""
    fn = getattr(loop, "py_func", loop)
    names = _PARAMS.get(fn)
    if names is None:
        names = _PARAMS[fn] = tuple(inspect.signature(fn).parameters)
    return names


def _flat(loop, given):
    """The values of `given` ({parameter name: value}) in the loop's parameter order."""
    names = params(loop)
    missing = [n for n in names if n not in given]
    extra = [n for n in given if n not in names]
    if missing or extra:
        raise TypeError(f"{getattr(loop, 'py_func', loop).__name__}: " + "; ".join(
            ([f"no part for parameter(s) {', '.join(missing)}"] if missing else [])
            + ([f"no parameter for part(s) {', '.join(extra)}"] if extra else [])) + " (engine/loop_args.py)")
    return tuple(given[n] for n in names)

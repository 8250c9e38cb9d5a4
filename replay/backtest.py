"""`engine backtest`: the strategy's own per-tick steps over mapped tick files, no ring.

The loop below calls the same features_step and decide_step as the live loop
(engine/strategy.py) through the same model function pointer, so a backtest of a file and a
live run over the same file give the same signals: the same tick seqs, scores bit for bit and
sides. It is deterministic: nothing in it depends on time (the per-tick compute time is
measured into a histogram, beside the decisions, never in them).
"""
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from engine import features, latency, strategy
from engine.intrinsics import call_predict, monotonic_ns
from engine.records import SIGNAL_DTYPE
from engine.tickfile import TickFile, TickFileError

SIG_CHUNK = 1 << 16


@njit(nogil=True, cache=True)
def backtest_loop(words, start, fstate, row, out, model, pos, cfg, sigs, nsig, base, margins, hist):
    """Run ticks words[start:]; signals go to sigs[nsig:], numbered from base + nsig; the margin
    of every scored tick to margins[i] (NaN elsewhere). Returns (next tick, nsig, scored): stops
    early when sigs is full."""
    use_sigmoid = cfg[strategy.CFG_SIGMOID] != 0.0
    scored = 0
    i = start
    n = words.shape[0]
    while i < n:
        if nsig == sigs.shape[0]:
            return i, nsig, scored
        tick = words[i]
        t0 = monotonic_ns()
        inst = strategy.features_step(fstate, tick, row)
        if inst >= 0:
            call_predict(model, row, out)
            scored += 1
            margins[i] = out[0]
            sig = sigs[nsig]
            if strategy.decide_step(fstate, inst, tick, out, pos, cfg, use_sigmoid, sig, base + nsig, 1):
                sig[4] = tick[2]  # acts at the tick's receive time (no live clock here)
                nsig += 1
            latency.record(hist, latency.ST_TOTAL, monotonic_ns() - t0)
        i += 1
    return i, nsig, scored


@dataclass
class FileResult:
    path: str
    instruments: list
    ticks: int
    scored: int
    signals: np.ndarray            # SIGNAL_DTYPE
    margins: np.ndarray            # float32 per tick, NaN where not scored
    hist: np.ndarray               # HDR counts (engine/latency.py); tick_to_signal = per-tick compute time
    notes: list = field(default_factory=list)


def instrument_count(tf):
    n = len(tf.instruments)
    if len(tf.words):
        n = max(n, int(((tf.words[:, 7] >> 32) & 0xFFFF).max()) + 1)
    return max(n, 1)


def run_file(src, pred, cfg):
    """Backtest one tick file (a path, or a TickFile already open) with a loaded model
    (models.artifact.load); returns FileResult."""
    if isinstance(src, TickFile):
        tf, path = src, src.path
    else:
        path = src
        try:
            tf = TickFile(path)
        except TickFileError as e:
            raise ValueError(str(e)) from None
    words = tf.words
    fstate = features.new_state(instrument_count(tf))
    row = np.zeros(features.NUM_FEATURES, np.float32)
    out = np.zeros(1, np.float32)
    pos = np.zeros(fstate.shape[0], np.int8)
    margins = np.full(len(words), np.nan, np.float32)
    hist = latency.new_counts()
    chunks = []
    sigs = np.zeros((SIG_CHUNK, 8), np.int64)
    i, total, scored = 0, 0, 0
    while True:
        i, nsig, sc = backtest_loop(words, i, fstate, row, out, pred.addr, pos, cfg, sigs, 0, total, margins, hist)
        scored += sc
        chunks.append(sigs[:nsig].copy())
        total += nsig
        if i >= len(words):
            break
    signals = np.concatenate(chunks).view(SIGNAL_DTYPE).reshape(-1)
    notes = [] if tf.complete else [f"{path}: incomplete (still being written?): read {len(words)} records"]
    res = FileResult(str(path), tf.instruments, len(words), scored, signals, margins, hist, notes)
    return res


def warm_up(pred, cfg):
    """Compile (or load from cache) and run the loop once on a scratch tick, so a timed run times
    the loop and not the JIT."""
    w = np.zeros((1, 8), np.int64)
    w.flags.writeable = False  # mapped files are read-only: numba compiles that type separately
    backtest_loop(w, 0, features.new_state(1), np.zeros(features.NUM_FEATURES, np.float32), np.zeros(1, np.float32),
                  pred.addr, np.zeros(1, np.int8), cfg, np.zeros((1, 8), np.int64), 0, 0,
                  np.zeros(1, np.float32), latency.new_counts())

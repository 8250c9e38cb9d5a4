"""`engine backtest`: the strategy's host loop over mapped tick files, no ring.

backtest_loop (engine/host_template.py) runs the same per-tick steps as the live loop (the
strategy's on_tick and decide, the book from level ticks) through the same model function
pointer, so a backtest of a file and a live run over the same file give the same signals: the
same tick seqs, scores bit for bit and positions. It is deterministic: nothing in it depends on
time (the per-tick compute time is measured into a histogram, beside the decisions, never in
them).
"""
from dataclasses import dataclass, field

import numpy as np

from engine import latency
from engine.loop_args import NO_MARKS, BacktestArgs, backtest_args
from engine.records import SIGNAL_DTYPE, SIGNAL_WORDS, tick_instruments
from engine.tickfile import TickFile, TickFileError

SIG_CHUNK = 1 << 16


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
    risk: dict = field(default_factory=dict)  # decisions each risk rule cut ({rule: count}), as a live run counts them


def instrument_count(tf):
    n = len(tf.instruments)
    if len(tf.words):
        n = max(n, int(tick_instruments(tf.words).max()) + 1)
    return max(n, 1)


def bind(host, tf):
    """A UNIVERSE strategy's members bound to the file's instruments (their ids), else None."""
    from engine.instruments import table
    return host.strategy.bind_universe(tf.instruments, [r["venue"] for r in table(tf.instruments, tf.specs)],
                                       tf.path) if host.strategy.universe else None


def file_depth(tf):
    return int(getattr(tf, "depth", 0) or 0)


PROGRESS_CHUNK = 1 << 20  # ticks per loop call when a progress bar is shown


def run_file(src, pred, host, cfg, marks=None, progress=False, risk=None, kills=None, pauses=None):
    """Backtest one tick file (a path, or a TickFile already open) with a loaded model
    (models.artifact.load) and a compiled strategy host; returns FileResult. marks: a live run's
    conflation marks (engine.signal_log.read_marks) to replay its conflation exactly; kills: its
    kill switch moves (engine.signal_log.read_kills), pauses: its pauses and resumes
    (engine.signal_log.read_pauses), each replayed where the loop made it. progress:
    a bar on stderr (ticks/s, ETA) when it is a terminal. risk: the gate's limits (engine/risk.py
    Limits; None: none), applied as the live loop applies them."""
    if isinstance(src, TickFile):
        tf, path = src, src.path
    else:
        path = src
        try:
            tf = TickFile(path)
        except TickFileError as e:
            raise ValueError(str(e)) from None
    words = tf.words
    hs = host.state(instrument_count(tf), file_depth(tf), bind(host, tf))
    if risk is not None:
        from engine.risk import configure
        configure(hs.rlim, hs.rg, tf.instruments, tf.specs, risk)
    row = host.new_row()
    out = np.zeros(1, np.float32)
    pvals = host.params()
    margins = np.full(len(words), np.nan, np.float32)
    hist = latency.new_counts()
    chunks = []
    legs = max(1, len(host.strategy.universe))  # (a targets decide: up to a signal per member)
    sigs = np.zeros((SIG_CHUNK + (len(hs.ist) + 1) * legs, SIGNAL_WORDS), np.int64)  # room for a whole flush
    marks = NO_MARKS if marks is None else np.ascontiguousarray(marks, np.int64).reshape(-1, 2)
    i, total, scored = 0, 0, 0
    bar = _bar(path, len(words), progress)
    step = PROGRESS_CHUNK if bar is not None else len(words)
    parts = BacktestArgs(words=words, state=hs.loop_arrays(), row=row, out=out, model=pred.addr, pvals=pvals, cfg=cfg,
                         sigs=sigs, margins=margins, hist=hist, marks=marks, mrows=pred.rows_addr)
    kills, at = _places(words, kills, 3)
    pauses, pat = _places(words, pauses, 2)
    k = q = 0
    while True:
        if k < len(kills) and at[k] <= i:  # the kill switch moved before this tick: as the loop did
            ref = words[min(np.searchsorted(words[:, 0], kills[k, 1]), len(words) - 1)] if len(words) else \
                np.zeros(8, np.int64)
            nsig = host.mod.kill_bt(hs.ist, hs.rb, hs.rg, ref, kills[k, 2], sigs, 0, total)
            chunks.append(sigs[:nsig].copy())
            total += nsig
            k += 1
            continue
        if q < len(pauses) and pat[q] <= i:  # paused (or resumed) before this tick
            hs.cst[host.mod.CS_PAUSED] = pauses[q, 1]
            q += 1
            continue
        if i >= len(words):
            break
        stop = min(i + step, at[k] if k < len(kills) else len(words), pat[q] if q < len(pauses) else len(words))
        # (a slice of the mapped file: the loop stops at its end, the bar moves, nothing is copied)
        j, nsig, sc = host.mod.backtest_loop(*backtest_args(host.mod, parts._replace(words=words[:stop], start=i,
                                                                                     base=total)))
        if bar is not None:
            bar.update(j - i)
        i = j
        scored += sc
        chunks.append(sigs[:nsig].copy())
        total += nsig
    if bar is not None:
        bar.close()
    signals = np.concatenate(chunks).view(SIGNAL_DTYPE).reshape(-1)
    notes = list(tf.warnings)  # an incomplete file: how many records no checksum covers
    from engine.risk import blocked
    return FileResult(str(path), tf.instruments, len(words), scored, signals, margins, hist, notes, blocked(hs.rg))


def _places(words, moves, width):
    """(moves int64 [k, width], the index of the tick each came before: column 0 names that tick's seq)
    for run_file's kill switch moves and pauses; the file's ticks must be in seq order (a recording,
    a converted file) for a seq to say where."""
    moves = np.zeros((0, width), np.int64) if moves is None else np.asarray(moves, np.int64).reshape(-1, width)
    if not len(moves):
        return moves, np.zeros(0, np.int64)
    seqs = words[:, 0]
    if len(seqs) > 1 and (np.diff(seqs) < 0).any():
        raise ValueError("the run's kill switch moves and pauses name ticks by seq, and this file's ticks are not in "
                         "seq order: backtest the run's recording (--record)")
    return moves, np.searchsorted(seqs, moves[:, 0])


def _bar(path, n, progress):
    import sys
    if not progress or not sys.stderr.isatty() or n < PROGRESS_CHUNK:
        return None
    from tqdm import tqdm
    import os
    return tqdm(total=n, unit=" ticks", unit_scale=True, desc=os.path.basename(str(path)), file=sys.stderr,
                leave=False, dynamic_ncols=True)


def warm_up(pred, host, cfg):
    """Compile (or load from cache) and run the loop once on a scratch tick, so a timed run times
    the loop and not the JIT."""
    w = np.zeros((1, 8), np.int64)  # (passed read-only, as a mapped file's ticks: backtest_args)
    hs = host.state(1, max(host.strategy.depth, 1))
    rows = 2 * max(1, len(host.strategy.universe))  # (backtest_loop's room for one instrument's flush)
    host.mod.backtest_loop(*backtest_args(host.mod, BacktestArgs(
        words=w, state=hs.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32), model=pred.addr,
        pvals=host.params(), cfg=cfg, sigs=np.zeros((rows, SIGNAL_WORDS), np.int64), margins=np.zeros(1, np.float32),
        hist=latency.new_counts())))

"""A paused run and its backtest: `engine ctl pause` stops decisions (features still fed), each pause
and resume is a mark in the signal file, and `engine backtest REC --conflate-as-recorded RUN.sig` of
the run's recording pauses between the same ticks, so it gives the run's signals (without the
marks it decided through the pause: signals the run never made). A model swapped mid-run is said
by the backtest (it scores with one model). `engine shadow report` counts each kind of mark for what
it is."""
import json

import numpy as np
import pyarrow.parquet as pq

from engine.records import (SIGNAL_FLAG_MARK, SIGNAL_FLAGS_KILL_MARK, SIGNAL_FLAGS_PAUSE_MARK, SIGNAL_WORDS,
                            signal_word_folded)
from engine.signal_log import SignalLog, model_swaps, read_kills, read_marks, read_pauses, read_signals
from tests.conftest import strategy_core
from tests.helpers.feedutil import cli


def test_a_pause_is_replayed_by_the_backtest_of_the_recording(tmp_path, default_model):
    import os
    from tests.helpers.daemon import Daemon, wait_until
    name = f"enginetest-pause-{os.getpid()}"
    rec = tmp_path / "run.ticks"
    d = Daemon(tmp_path, name, "--feed", "synthetic://?instruments=4&seed=5&rate=20000", "--record", str(rec),
               core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        wait_until(lambda: d.status()["counters"]["signals"] > 50, "signals")
        r = cli("ctl", "pause", "--name", name)
        assert r.returncode == 0, r.stderr
        wait_until(lambda: d.status()["loop"]["state"] == "paused", "the loop paused")
        t0 = d.status()["counters"]["ticks"]  # (the counters move at the loop's next steps: the window
        wait_until(lambda: d.status()["counters"]["ticks"] > t0 + 1000, "ticks")  # flushed at the pause counted)
        c = d.status()["counters"]
        wait_until(lambda: d.status()["counters"]["ticks"] > c["ticks"] + 5000, "ticks read while paused")
        assert d.status()["counters"]["signals"] == c["signals"]  # (read, not decided)
        r = cli("ctl", "resume", "--name", name)
        assert r.returncode == 0, r.stderr
        n = d.status()["counters"]["signals"]
        wait_until(lambda: d.status()["counters"]["signals"] > n + 50, "signals after the resume")
        r = cli("ctl", "reload", "--name", name)  # (the same model again: generation 2, the same scores)
        assert r.returncode == 0, r.stderr
        n = d.status()["counters"]["signals"]
        wait_until(lambda: d.status()["counters"]["signals"] > n + 50, "signals after the reload")
    finally:
        d.stop()
    pauses = read_pauses(d.sig_path)
    assert pauses[:, 1].tolist() == [1, 0], pauses
    recs = read_signals(d.sig_path)
    seqs = recs["tick_seq"].astype(np.int64)
    assert not ((seqs >= pauses[0, 0]) & (seqs < pauses[1, 0])).any()  # nothing decided on a tick read while paused
    assert pauses[1, 0] - pauses[0, 0] > 5000
    b = cli("backtest", str(rec), "--out", str(tmp_path / "bt"), "--quiet", "--conflate-as-recorded", str(d.sig_path),
            timeout=600)
    assert b.returncode == 0 and "2 pause moves" in b.stderr, b.stderr
    swaps = model_swaps(d.sig_path)  # the reload: said, since a backtest scores with one model
    assert [g for g, _ in swaps] == [1, 2] and swaps[1][1] > pauses[1, 0], swaps
    assert f"the run swapped models (generation 1 from tick {swaps[0][1]:,}, generation 2 from tick {swaps[1][1]:,})" \
        in b.stderr, b.stderr
    bt = pq.read_table(tmp_path / "bt" / "signals.parquet")
    assert bt.num_rows == len(recs)
    for col in ("seq", "tick_seq", "instrument", "position", "prev_position", "wanted", "flags", "margin"):
        x = bt[col].to_numpy()
        assert np.array_equal(x, recs[col], equal_nan=x.dtype.kind == "f"), col


def _records(*flags):
    """Signal records with these flags (marks or decisions), as the loop pushes them."""
    w = np.zeros((len(flags), SIGNAL_WORDS), np.int64)
    for i, f in enumerate(flags):
        w[i, 0], w[i, 1] = i, 10 * i
        w[i, 11] = signal_word_folded(1, f)
    return w


def test_the_shadow_report_counts_each_kind_of_mark(tmp_path):
    """The live file's conflation windows, kill switch moves and pauses, each counted once as what it
    is (the report once counted marks after they were left out: conflation windows came out as minus
    the kill moves)."""
    live = str(tmp_path / "run.sig")
    recs = _records(0, SIGNAL_FLAG_MARK, 0, SIGNAL_FLAGS_KILL_MARK, SIGNAL_FLAGS_PAUSE_MARK, SIGNAL_FLAG_MARK,
                    SIGNAL_FLAGS_PAUSE_MARK, SIGNAL_FLAG_MARK, 0)
    for path, words in ((live, recs), (str(tmp_path / "run.shadow-x.sig"), recs[recs[:, 11] == recs[0, 11]])):
        log = SignalLog(path)
        log.write(words)
        log.close()
    assert (len(read_marks(live)), len(read_kills(live)), len(read_pauses(live)), len(read_signals(live))) == (3, 1, 2, 3)
    r = cli("shadow", "report", live, "--json")
    assert r.returncode == 0, r.stderr
    lv = json.loads(r.stdout)["live"]
    assert (lv["signals"], lv["conflation_marks"], lv["kill_moves"], lv["pause_moves"]) == (3, 3, 1, 2), lv
    assert json.loads(r.stdout)["shadows"]["x"]["agreement"] == 1.0
    text = cli("shadow", "report", live)
    assert text.returncode == 0 and "conflated (3 windows), was killed (1 moves) or paused (2 moves)" in text.stdout, \
        text.stdout

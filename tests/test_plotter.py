"""The backtest report's plotting process (replay/plotter.py): what it is asked to draw is drawn,
by the child or, when the child dies or cannot start, by the parent; it never outlives its owner."""
import os
import signal
import threading

import numpy as np
import pytest

from engine import latency
from replay import report
from replay.plotter import Plotter


def _loop_series():
    h = latency.new_counts()
    h[latency.ST_TOTAL][100:200] = 5
    return {"hist": h, "scores": np.random.default_rng(1).random(5000).astype(np.float32),
            "thresholds": {"enter_long": 0.7, "exit_long": 0.5}}


def _pngs(d):
    out = {}
    for name in report.LOOP_PLOTS:
        p = os.path.join(d, f"{name}.png")
        with open(p, "rb") as f:
            out[name] = f.read(8)
    return out


def _single_threaded():
    if threading.active_count() != 1:
        pytest.skip(f"{threading.active_count()} threads in the test process: the plotter would not fork")


def test_the_child_draws_what_it_is_asked(tmp_path):
    _single_threaded()
    p = Plotter()
    assert p.pid > 0
    p.draw(report.LOOP_PLOTS, str(tmp_path), _loop_series(), {"probability": True})
    p.finish()
    child = p.pid
    p.close()
    assert all(v.startswith(b"\x89PNG") for v in _pngs(tmp_path).values())
    with pytest.raises(ChildProcessError):
        os.waitpid(child, 0)  # reaped


def test_a_dead_child_s_plots_are_drawn_here(tmp_path):
    _single_threaded()
    p = Plotter()
    os.kill(p.pid, signal.SIGKILL)
    p.draw(report.LOOP_PLOTS, str(tmp_path), _loop_series(), {"probability": False})
    p.finish()
    assert p.pid == -1
    p.close()
    assert all(v.startswith(b"\x89PNG") for v in _pngs(tmp_path).values())


def test_no_fork_from_a_threaded_process_and_the_plots_still_come(tmp_path):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        p = Plotter()
        assert p.pid == -1
        p.draw(report.LOOP_PLOTS, str(tmp_path), _loop_series(), {})
        p.finish()
        p.close()
    finally:
        stop.set()
        t.join()
    assert all(v.startswith(b"\x89PNG") for v in _pngs(tmp_path).values())


def test_the_child_ends_when_its_owner_closes_the_pipe(tmp_path):
    _single_threaded()
    p = Plotter()
    pid = p.pid
    os.close(p.wr)  # what the owner's exit does
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    os.close(p.rd)
    p.pid = -1

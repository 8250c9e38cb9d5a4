"""The backtest report's plotting process (replay/plotter.py): what it is asked to draw is drawn,
by the child or, when the child dies or cannot start, by the parent; it never outlives its owner."""
import multiprocessing
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np

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


def _fresh(case, d):
    """case(d) in a new interpreter: the plotter forks only from a single-threaded process, and a
    test worker holds whatever threads the tests before this one left (a DNS resolver's, a pool's).
    Spawned, not forked; an assertion in it is raised here."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        return ex.submit(case, str(d)).result(timeout=300)


def _the_child_draws(tmp_path):
    assert threading.active_count() == 1
    p = Plotter()
    assert p.pid > 0
    p.draw(report.LOOP_PLOTS, str(tmp_path), _loop_series(), {"probability": True})
    p.finish()
    child = p.pid
    p.close()
    assert all(v.startswith(b"\x89PNG") for v in _pngs(tmp_path).values())
    try:
        os.waitpid(child, 0)
    except ChildProcessError:
        return  # reaped
    raise AssertionError("the child was not reaped")


def test_the_child_draws_what_it_is_asked(tmp_path):
    _fresh(_the_child_draws, tmp_path)


def _a_dead_child_s_plots_are_drawn_here(tmp_path):
    p = Plotter()
    assert p.pid > 0
    os.kill(p.pid, signal.SIGKILL)
    p.draw(report.LOOP_PLOTS, str(tmp_path), _loop_series(), {"probability": False})
    p.finish()
    assert p.pid == -1
    p.close()
    assert all(v.startswith(b"\x89PNG") for v in _pngs(tmp_path).values())


def test_a_dead_child_s_plots_are_drawn_here(tmp_path):
    _fresh(_a_dead_child_s_plots_are_drawn_here, tmp_path)


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


def _the_child_ends_when_its_owner_closes_the_pipe(tmp_path):
    p = Plotter()
    pid = p.pid
    assert pid > 0
    os.close(p.wr)  # what the owner's exit does
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    os.close(p.rd)
    p.pid = -1


def test_the_child_ends_when_its_owner_closes_the_pipe(tmp_path):
    _fresh(_the_child_ends_when_its_owner_closes_the_pipe, tmp_path)

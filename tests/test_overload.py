"""Overload as users meet it, through the CLI: a file replay flat out through a small ring loses
nothing (the file waits for the loop), a conflated live run is reproduced exactly by a backtest
given its marks, and a run that lost ticks says so (and fails with --strict)."""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.signal_log import read_marks, read_records, read_signals
from engine.tickfile import TickFile
from tests.conftest import engine_cmd, spawn, strategy_core
from tests.helpers.data import SPOT
from tests.helpers.feedutil import cli
from tests.test_replay import ticks_file


def _run(tmp_path, *args, timeout=600):
    r = cli("run", "--core", str(strategy_core()), "--name", f"ovl{id(tmp_path) % 10**6}", "--json",
            "--http", "none", "--pub", "none", *args, timeout=timeout)
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


def test_a_real_capture_replayed_flat_out_through_a_small_ring_loses_nothing(tmp_path, default_model):
    src = ticks_file(tmp_path, f"binance:{SPOT}")
    n = len(TickFile(src))
    sig = tmp_path / "s.sig"
    # 1024 slots against a file many times that: without back-pressure the feed laps the loop
    r, res = _run(tmp_path, "--feed", f"tickfile:{src}", "--max", "--ring-capacity", "1024", "--strict",
                  "--signals-out", str(sig))
    assert r.returncode == 0, r.stderr
    assert res["ticks"] == n > 8 * 1024 and res["lost"] == 0 and res["gaps"] == 0, res
    assert res["feed_waits_for_loop"] is True and res["conflate"] is False and res["conflated"] == 0
    assert "warning" not in r.stderr
    # every tick scored as in a backtest of the same file
    bt = tmp_path / "bt"
    b = cli("backtest", str(src), "--out", str(bt), "--quiet", timeout=600)
    assert b.returncode == 0, b.stderr
    want = pq.read_table(bt / "signals.parquet")
    got = read_signals(sig)
    assert len(got) == want.num_rows > 10
    assert list(got["tick_seq"]) == want.column("tick_seq").to_pylist()
    assert np.array_equal(got["margin"].view(np.uint32), want.column("margin").to_numpy().view(np.uint32))


def test_a_conflated_replay_is_reproduced_by_the_backtest_from_its_marks(tmp_path, default_model):
    src = ticks_file(tmp_path, "synthetic://?instruments=6&count=120000&seed=21")
    sig = tmp_path / "live.sig"
    r, res = _run(tmp_path, "--feed", f"tickfile:{src}", "--max", "--conflate", "on", "--ring-capacity", "4096",
                  "--signals-out", str(sig))
    assert r.returncode == 0, r.stderr
    assert res["conflate"] is True and res["lost"] == 0 and res["ticks"] == 120_000
    marks = read_marks(sig)
    assert res["conflation_marks"] == len(marks) > 0 and res["conflated"] > 0, res
    assert "conflation on" in r.stderr
    recs = read_records(sig)
    assert len(recs) == len(marks) + res["signals"]
    bt = tmp_path / "bt"
    b = cli("backtest", str(src), "--out", str(bt), "--quiet", "--json", "--conflate-as-recorded", str(sig),
            timeout=600)
    assert b.returncode == 0, b.stderr
    assert f"replaying {len(marks):,} conflation windows" in b.stderr
    live, want = read_signals(sig), pq.read_table(bt / "signals.parquet")
    assert len(live) == want.num_rows == res["signals"] > 10
    for col in ("tick_seq", "instrument", "position", "prev_position", "mid_px"):
        assert list(live[col]) == want.column(col).to_pylist(), col
    assert np.array_equal(live["score"].view(np.uint32), want.column("score").to_numpy().view(np.uint32))
    # without the marks the backtest scores every tick: not the live run's signals
    b2 = cli("backtest", str(src), "--out", str(tmp_path / "bt2"), "--quiet", timeout=600)
    assert b2.returncode == 0
    assert pq.read_table(tmp_path / "bt2" / "signals.parquet").column("tick_seq").to_pylist() != list(live["tick_seq"])


def test_conflate_as_recorded_needs_one_file_and_a_signal_file(tmp_path, default_model):
    src = ticks_file(tmp_path, "synthetic://?instruments=2&count=2000&seed=3")
    bad = tmp_path / "x.sig"
    bad.write_bytes(b"nope")
    r = cli("backtest", str(src), "--out", str(tmp_path / "o"), "--quiet", "--conflate-as-recorded", str(bad))
    assert r.returncode == 2 and f"--conflate-as-recorded {bad}" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()
    r = cli("backtest", str(src), str(src), "--out", str(tmp_path / "o"), "--conflate-as-recorded", str(bad))
    assert r.returncode == 2 and "one tick file" in r.stderr


def test_a_run_that_lost_ticks_warns_and_strict_fails(tmp_path, default_model):
    # a live feed never waits: stop the engine (a stall, as a long preemption or a swapped-out
    # page would) while its feed publishes 25k ticks into a ring of 1024: the loop is lapped
    err = tmp_path / "err"
    with open(err, "w") as ef:
        p = spawn(engine_cmd("run", "--core", str(strategy_core()), "--name", f"lost{id(tmp_path) % 10**6}", "--json",
                             "--http", "none", "--pub", "none", "--rate", "50000", "--ring-capacity", "1024",
                             "--duration", "3", "--strict"), stdout=subprocess.PIPE, stderr=ef, text=True)
        deadline = time.monotonic() + 120
        while "[engine] running:" not in err.read_text():
            assert p.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGCONT)
        out, _ = p.communicate(timeout=60)
    res = json.loads(out)  # the summary is still printed, then the exit code says it
    stderr = err.read_text()
    assert res["lost"] > 1000 and res["gaps"] > 0, res
    assert p.returncode == 1, stderr
    assert "engine: warning:" in stderr and "ticks lost" in stderr and "--strict" in stderr

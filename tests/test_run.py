"""`engine run` as a user runs it: a real process, feed process, rings, pinned RT thread."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from engine import realtime
from engine.latency import STAGES
from app.live import STRATEGY_THREAD_NAME
from engine.signal_log import read_signals

from .conftest import ROOT, engine_cmd, engine_env, strategy_core

ROOT_USER = os.geteuid() == 0
STAGE_KEYS = {"p50", "p90", "p99", "p99.9", "p99.99", "max", "count"}


def _find_strategy_thread(pid):
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == STRATEGY_THREAD_NAME:
                return int(task.name)
        except OSError:
            continue
    return None


def _wait_line(proc, needle, timeout=120):
    """Read stderr until a line contains needle; a real deadline, never blocks past it.

    Reads raw bytes from the descriptor (select() and a buffered readline() do not mix: two lines
    arriving together would leave the second in Python's buffer, invisible to select())."""
    import os
    import select
    buf = getattr(proc, "_line_buf", "")
    fd = proc.stderr.fileno()
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        while "\n" in buf:
            line, buf = buf.split("\n", 1)
            seen.append(line + "\n")
            if needle in line:
                proc._line_buf = buf
                return seen
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], min(1.0, left))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # EOF: the process is gone
            buf += chunk.decode(errors="replace")
    proc._line_buf = buf
    raise AssertionError(f"never saw {needle!r} within {timeout} s; stderr so far:\n{''.join(seen)}{buf}")


def test_run_json_pinned_fifo(default_model, shm_name, tmp_path):
    core = strategy_core()
    sig_file = tmp_path / "s.sig"
    proc = subprocess.Popen(engine_cmd("run", "--core", str(core), "--duration", "3", "--rate", "5000", "--policy", "fifo",
                                       "--name", shm_name, "--signals-out", str(sig_file), "--json"),
                            cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = "".join(_wait_line(proc, "running:"))
        # the pace it publishes at, --rate applied (not the URI's default)
        assert "[feed] synthetic://?instruments=4&rate=5000&" in before, before
        # check from outside, in /proc, while it runs
        tid = _find_strategy_thread(proc.pid)
        assert tid is not None, "no thread named engine-strategy"
        status = Path(f"/proc/{proc.pid}/task/{tid}/status").read_text()
        allowed = [l.split(":")[1].strip() for l in status.splitlines() if l.startswith("Cpus_allowed_list")][0]
        assert allowed == str(core)
        policy, _ = realtime.thread_sched(proc.pid, tid)
        assert policy == ("SCHED_FIFO" if ROOT_USER else "SCHED_OTHER")
        # the rings exist while it runs, owner-only
        for suffix in ("ticks", "signals", "ctl"):
            assert os.stat(f"/dev/shm/{shm_name}.{suffix}").st_mode & 0o777 == 0o600
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    res = json.loads(out)  # exactly one JSON object on stdout
    assert {"ticks", "signals", "gaps", "drops", "core", "policy", "backend", "latency_ns"} <= set(res)
    assert res["ticks"] > 5000, res
    assert res["signals"] > 0 and res["gaps"] == 0 and res["drops"] == 0
    assert res["core"] == core and res["backend"] in ("flat-avx512", "flat-avx2", "flat-portable", "treelite")
    assert res["policy"] == ("SCHED_FIFO" if ROOT_USER else "SCHED_OTHER")
    assert set(res["latency_ns"]) == set(STAGES)
    for stage in STAGES:
        st = res["latency_ns"][stage]
        assert set(st) == STAGE_KEYS and all(isinstance(v, int) for v in st.values())
        assert 0 < st["p50"] <= st["p90"] <= st["p99"] <= st["p99.9"] <= st["p99.99"] <= st["max"]
    # the signal file holds exactly the signals counted, in order, well-formed
    sigs = read_signals(sig_file)
    assert len(sigs) == res["signals"]
    assert np.array_equal(sigs["seq"], np.arange(len(sigs)))
    assert (np.diff(sigs["tick_seq"].astype(np.int64)) > 0).all()
    assert set(np.unique(sigs["side"])) <= {-1, 0, 1} and (sigs["side"] != sigs["prev_side"]).all()
    assert (sigs["position"] == sigs["side"]).all() and (sigs["prev_position"] == sigs["prev_side"]).all()
    assert (abs(sigs["ts_wall"] - time.time_ns()) < 600e9).all()
    assert ((sigs["score"] >= 0) & (sigs["score"] <= 1)).all() and (sigs["model_gen"] == 1).all()
    assert (sigs["ts_signal"] >= sigs["ts_recv"]).all()
    # hysteresis: a long is entered only at/above the entry threshold
    assert (sigs["score"][sigs["side"] == 1] >= np.float32(0.65)).all()
    assert (sigs["score"][sigs["side"] == -1] <= np.float32(0.35)).all()
    # everything it created in /dev/shm is gone
    assert not list(Path("/dev/shm").glob(shm_name + "*"))


def test_sigterm_stops_within_a_second_with_summary(default_model, shm_name, tmp_path):
    proc = subprocess.Popen(engine_cmd("run", "--core", str(strategy_core()), "--rate", "5000", "--name", shm_name,
                                       "--signals-out", str(tmp_path / "s.sig")),
                            cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(proc, "running:")
        time.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        stopped_in = time.monotonic() - t0
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert stopped_in < 1.0, f"took {stopped_in:.2f} s to stop"
    assert "ticks" in out and "tick_to_signal" in out and "p99.99" in out
    assert not list(Path("/dev/shm").glob(shm_name + "*"))


def test_second_engine_on_the_same_rings_is_refused(default_model, shm_name, tmp_path):
    first = subprocess.Popen(engine_cmd("run", "--rate", "1000", "--name", shm_name, "--signals-out",
                                        str(tmp_path / "a.sig")),
                             cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(first, "running:")
        second = subprocess.run(engine_cmd("run", "--duration", "1", "--name", shm_name, "--signals-out",
                                           str(tmp_path / "b.sig")),
                                cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=120)
        assert second.returncode != 0
        assert f"owned by live process {first.pid}" in second.stderr and "Traceback" not in second.stderr
        assert first.poll() is None  # and the first one was not disturbed
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=10)
    assert first.returncode == 0


@pytest.mark.parametrize("args,needle", [
    (["--core", "4096"], "--core 4096 is not available"),
    (["--feed", "synthetic://?instrumentz=3"], "unknown parameter 'instrumentz'"),
    (["--feed", "itch:/nonexistent"], "/nonexistent: No such file or directory"),
    (["--feed", "nope://x"], "unknown source scheme 'nope'"),
    (["--model", "/nonexistent-model"], "not a model artifact"),
    (["--param", "enter_long=0.4"], "thresholds must satisfy"),
    (["--param", "enter_lng=0.4"], "unknown parameter enter_lng (known: warmup, enter_long"),
    (["--strategy", "/nonexistent.py"], "/nonexistent.py: no such strategy file"),
    (["--ring", "no-such-ring-anywhere"], "no ring at /dev/shm/no-such-ring-anywhere"),
    (["--priority", "0"], "--priority must be 1..99"),
])
def test_bad_input_is_a_clear_error(args, needle, shm_name, default_model):
    r = subprocess.run(engine_cmd("run", "--duration", "1", "--name", shm_name, *args), cwd=ROOT,
                       env=engine_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and needle in r.stderr and "Traceback" not in r.stderr
    assert not list(Path("/dev/shm").glob(shm_name + "*"))


@pytest.mark.skipif(not ROOT_USER or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root and setpriv to run without capabilities")
def test_without_rights_it_says_so_once_and_runs_or_refuses_with_strict(default_model, shm_name, tmp_path):
    # root with an empty capability bounding set: no CAP_SYS_NICE (SCHED_FIFO) nor CAP_IPC_LOCK (mlockall)
    no_caps = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    auto = subprocess.run(no_caps + engine_cmd("run", "--duration", "1", "--name", shm_name, "--json"), cwd=ROOT,
                          env=engine_env(), capture_output=True, text=True, timeout=300)
    assert auto.returncode == 0 and "auto: no permission for SCHED_FIFO" in json.loads(auto.stdout)["policy_reason"]
    args = engine_cmd("run", "--core", str(strategy_core()), "--duration", "1.5", "--rate", "2000", "--policy", "fifo",
                      "--name", shm_name, "--signals-out", str(tmp_path / "s.sig"), "--json")
    r = subprocess.run(no_caps + args, cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=300)
    if "mlockall failed" not in r.stderr and r.returncode == 0 and '"SCHED_FIFO"' in r.stdout:
        pytest.skip("this machine grants SCHED_FIFO and mlockall without capabilities (rlimits)")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["policy"] == "SCHED_OTHER" and res["core"] == strategy_core() and res["ticks"] > 0
    assert r.stderr.count("no permission for SCHED_FIFO") == 1
    assert "mlockall failed" in r.stderr
    strict = subprocess.run(no_caps + args + ["--strict"], cwd=ROOT, env=engine_env(), capture_output=True,
                            text=True, timeout=300)
    assert strict.returncode != 0 and "--strict:" in strict.stderr and "Traceback" not in strict.stderr
    assert not list(Path("/dev/shm").glob(shm_name + "*"))


def test_run_attaches_to_an_existing_feed_ring(default_model, shm_name, tmp_path):
    ring = f"{shm_name}.feed"
    feed = subprocess.Popen(engine_cmd("feed", "synthetic://?instruments=3&seed=4", "--ring", ring, "--rate", "5000"),
                            cwd=ROOT, env=engine_env(), stderr=subprocess.PIPE, text=True)
    try:
        _wait_line(feed, "->")
        r = subprocess.run(engine_cmd("run", "--ring", ring, "--duration", "2", "--name", shm_name, "--json",
                                      "--signals-out", str(tmp_path / "s.sig")),
                           cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["ticks"] > 1000 and res["gaps"] == 0 and res["signals"] > 0
        # the engine neither stopped the feed nor removed its ring, and let go of its consumer line
        assert feed.poll() is None and Path(f"/dev/shm/{ring}").exists()
        info = json.loads(subprocess.run(engine_cmd("ring", "inspect", ring, "--json"), cwd=ROOT, env=engine_env(),
                                         capture_output=True, text=True, timeout=60).stdout)
        assert info["producer_pid"] == feed.pid and info["consumers"] == [] and info["state"] == "producing"
    finally:
        feed.send_signal(signal.SIGTERM)
        feed.wait(timeout=10)
    assert feed.returncode == 0 and not Path(f"/dev/shm/{ring}").exists()


def test_killed_engine_leaves_no_feed_behind_and_the_next_run_replaces_its_files(default_model, shm_name, tmp_path):
    first = subprocess.Popen(engine_cmd("run", "--rate", "2000", "--name", shm_name, "--signals-out",
                                        str(tmp_path / "a.sig")),
                             cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = _wait_line(first, "running:")
    feed_pid = int([l for l in lines if "feed pid" in l][0].split("feed pid ")[1].split(",")[0])
    first.kill()
    first.wait()
    t0 = time.monotonic()
    while Path(f"/proc/{feed_pid}").exists() and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not Path(f"/proc/{feed_pid}").exists(), "the feed outlived its engine"
    r = subprocess.run(engine_cmd("run", "--duration", "1", "--rate", "2000", "--name", shm_name, "--json",
                                  "--signals-out", str(tmp_path / "b.sig")),
                       cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "left by dead process" in r.stderr and json.loads(r.stdout)["ticks"] > 0


def test_first_run_builds_the_default_model_and_stdout_stays_one_json_object(shm_name, tmp_path):
    """A fresh cache: the model is trained, compiled and verified with progress on stderr,
    and nothing the libraries print reaches stdout."""
    r = subprocess.run(engine_cmd("run", "--duration", "1", "--rate", "2000", "--name", shm_name, "--json",
                                  "--signals-out", str(tmp_path / "s.sig")),
                       cwd=ROOT, env=engine_env(XDG_CACHE_HOME=str(tmp_path / "cache")),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "[model] [4/4] compiling and verifying" in r.stderr and "bit-exact with XGBoost" in r.stderr
    assert re.search(r"\[model\]   TL2cgen: \d+/\d+ translation units compiled in \d+ s", r.stderr), r.stderr
    assert json.loads(r.stdout)["ticks"] > 0  # the whole of stdout is one JSON document
    assert list((tmp_path / "cache" / "engine" / "models").glob("default-*/manifest.json"))


@pytest.mark.parametrize("backend", ["treelite", "flat-portable", "xgboost"])
def test_run_with_a_chosen_backend(default_model, shm_name, tmp_path, backend):
    r = subprocess.run(engine_cmd("run", "--duration", "1.5", "--rate", "3000", "--name", shm_name, "--json",
                                  "--backend", backend, "--signals-out", str(tmp_path / "s.sig")),
                       cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["backend"] == backend and res["ticks"] > 0 and res["gaps"] == 0


def test_the_default_policy_is_what_auto_picks_on_this_machine_and_says_why(default_model, shm_name):
    from engine.waits import choose
    core = strategy_core()
    r = subprocess.run(engine_cmd("run", "--core", str(core), "--duration", "1", "--name", shm_name, "--json",
                                  "--http", "none", "--pub", "none"),
                       cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    want = choose("auto", "auto", core=core)
    assert res["policy"] == ("SCHED_FIFO" if want.policy == "fifo" else "SCHED_OTHER")
    assert res["wait"] == want.wait.name and res["policy_reason"] == want.reason
    assert r.stderr.count(f"policy: {want.describe()}; conflation on") == 1
    assert res["conflate"] is True and res["feed_waits_for_loop"] is False

"""Runs that end early end loudly: a strategy that never returns, one that raises, a control thread
that stops renewing the lease: each one prints the summary, exits non-zero and leaves its reason in
the signal file (and the table's metadata). A stop of the whole process (SIGSTOP, a debugger, a VM
pause) is none of them: the run goes on. Signal files and latency logs are the user's alone. And
the odd values of `engine run` that used to run forever or crash are one line.

Every run is a real `engine run` process, with a real strategy file compiled into its loop."""
import ctypes
import json
import os
import signal
import subprocess
import tempfile
import time

import pyarrow.parquet as pq
import pytest

from engine.signal_log import status

from tests.helpers.as_user import can_make_users, shell_as, throwaway_users
from tests.helpers.daemon import Daemon
from tests.helpers import feedutil
from tests.helpers.feedutil import cli
from tests.helpers.strategies import quotes_strategy, trained


def one_line_error(res):
    """Bad input: exit 2, one error line (argparse's "engine run: error:" or "engine: error:"), no traceback."""
    return feedutil.one_line_error(res, ("engine: error: ", "engine run: error: "))

# one strategy file, told by its parameters how to misbehave (the model checks the file, not the params)
MISBEHAVE = quotes_strategy({"hang_after": 0.0, "raise_after": 0.0}, first="""
    if params.hang_after > 0 and state[0] >= params.hang_after:
        while state[1] >= 0.0:  # never returns
            state[1] += 1.0
    if params.raise_after > 0 and state[0] >= params.raise_after:
        raise ValueError("misbehave: raised on purpose")""")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("abnormal"), "misbehave", MISBEHAVE, 200000)


def run_misbehaving(world, name, *extra):
    """`engine run --json` of the misbehaving strategy over the tick file (which waits for the loop)."""
    r = cli("run", "--no-rt", "--json", "--strategy", str(world["strategy"]), "--model", str(world["model"]),
            "--feed", f"tickfile:{world['ticks']}", "--name", name, "--http", "none", "--pub", "none", *extra,
            timeout=600)
    return r, json.loads(r.stdout) if r.stdout.strip() else None


def test_a_strategy_that_never_returns_ends_the_run(world, tmp_path, shm_name):
    sig = tmp_path / "run.sig"
    r, res = run_misbehaving(world, shm_name, "--param", "hang_after=5000", "--stall-exit", "1",
                             "--signals-out", str(sig), "--hlog", "none")
    assert r.returncode == 1, r.stderr
    assert res is not None, r.stderr  # the summary, although the loop never came back
    assert "the strategy loop hung" in res["abnormal"] and "--stall-exit" in res["abnormal"]
    assert res["warnings"][0].startswith("the run ended abnormally: the strategy loop hung")
    # the ticks the feed put in the ring that the loop never read: there, counted, not "lost 0"
    assert res["unread"] > 0 and res["ticks"] < 200_000
    assert f"{res['unread']:,} ticks in the ring were never read" in res["warnings"][0]
    assert r.stderr.rstrip().splitlines()[-1].startswith("engine: error: the strategy loop hung")
    st = status(sig)
    assert st["complete"] and st["abnormal"] == "strategy loop hung"
    assert st["note"] == "the run ended abnormally (strategy loop hung): its signals stop there"
    show = cli("signals", "show", str(sig))
    assert "the run ended abnormally (strategy loop hung)" in show.stdout


def test_a_strategy_that_raises_ends_the_run_with_its_reason(world, tmp_path, shm_name):
    table = tmp_path / "run.parquet"
    r, res = run_misbehaving(world, shm_name, "--param", "raise_after=5000", "--signals-out", str(table),
                             "--hlog", "none")
    assert r.returncode == 1, r.stderr
    want = f"the strategy loop stopped: strategy {world['strategy']} raised ValueError: misbehave: raised on purpose"
    assert res["abnormal"] == want and res["ticks"] > 0
    assert "Traceback" not in r.stderr and f"engine: error: {want}" in r.stderr
    st = status(tmp_path / "run.sig")  # the raw log beside the table
    assert st["complete"] and st["abnormal"] == "raised ValueError"
    assert pq.read_schema(table).metadata[b"engine.abnormal_end"] == want.encode()


def test_a_run_that_ends_as_asked_is_not_abnormal(world, tmp_path, shm_name):
    sig = tmp_path / "run.sig"
    r, res = run_misbehaving(world, shm_name, "--signals-out", str(sig), "--hlog", "none", "--max")
    assert r.returncode == 0, r.stderr
    assert res["abnormal"] is None and res["ticks"] == 200_000 and res["unread"] == 0
    st = status(sig)
    assert st["complete"] and st["abnormal"] is None and st["note"] is None


def _ptrace():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return libc


def _threads(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(t)] = open(f"/proc/{pid}/task/{t}/comm").read().strip()
        except OSError:
            pass
    return out


def _ticks(d):
    return d.status()["counters"]["ticks"]


def _wait_until(fn, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_stop_of_the_whole_process_longer_than_the_lease_is_not_a_hang(tmp_path, shm_name, default_model):
    # SIGSTOP for longer than the 3 s lease and the --stall-exit: both threads were stopped alike
    d = Daemon(tmp_path, shm_name, "--feed", "synthetic://?instruments=4&seed=3&rate=5000", "--stall-exit", "2")
    try:
        d.wait_for("endpoints in ")
        _wait_until(lambda: _ticks(d) > 0, "ticks")
        os.kill(d.proc.pid, signal.SIGSTOP)
        time.sleep(4.0)
        os.kill(d.proc.pid, signal.SIGCONT)
        before = _ticks(d)
        _wait_until(lambda: _ticks(d) > before, "the loop goes on after SIGCONT")
        assert d.status()["loop"]["state"] == "running"
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=60)
    finally:
        out = d.stop()
    assert d.proc.returncode == 0, d.log()
    assert "engine run:" in out and "abnormally" not in out
    log = d.log()
    assert "lease" not in log and "hung" not in log and "has not beaten" not in log, log
    st = status(d.sig_path)
    assert st["complete"] and st["abnormal"] is None


def test_a_control_thread_that_stops_renewing_the_lease_ends_the_run(tmp_path, shm_name, default_model):
    """Every thread but the strategy loop's stopped (ptrace): the loop's own clock runs on, the
    lease runs out, the loop stops itself; once the rest runs again the run ends with its reason."""
    d = Daemon(tmp_path, shm_name, "--feed", "synthetic://?instruments=4&seed=3&rate=5000")
    libc = _ptrace()
    PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17
    seized = []
    try:
        d.wait_for("endpoints in ")
        _wait_until(lambda: _ticks(d) > 0, "ticks")
        others = [t for t, name in _threads(d.proc.pid).items() if name != "engine-strategy"]
        for t in others:
            if libc.ptrace(PTRACE_SEIZE, t, None, None) != 0:
                pytest.skip(f"cannot ptrace the engine's threads here (errno {ctypes.get_errno()})")
            seized.append(t)
            assert libc.ptrace(PTRACE_INTERRUPT, t, None, None) == 0
            os.waitpid(t, 0x40000000)  # __WALL
        time.sleep(4.0)  # > the 3 s lease, the loop running all along
        for t in seized:
            libc.ptrace(PTRACE_DETACH, t, None, None)
        seized = []
        d.proc.wait(timeout=60)  # the run ends by itself
    finally:
        for t in seized:
            libc.ptrace(PTRACE_DETACH, t, None, None)
        out = d.stop()
    assert d.proc.returncode == 1, d.log()
    assert "engine run:" in out and "the run ended abnormally: the strategy loop stopped itself" in out, out
    assert "did not renew its lease" in d.log()
    st = status(d.sig_path)
    assert st["complete"] and st["abnormal"] == "lease expired"


@pytest.mark.skipif(can_make_users() is not None, reason=str(can_make_users()))
def test_signal_files_and_latency_logs_are_the_users_alone(world, shm_name):
    # a directory of the user's own that others may enter (as /tmp): kept as it is; what the engine
    # makes in it is 0700, its files 0600, so another local user reads none of the trading history
    top = tempfile.mkdtemp(prefix="engine-private-")
    try:
        os.chmod(top, 0o755)
        table = os.path.join(top, "made", "by", "engine", "run.parquet")
        hlog = os.path.join(top, "run.hlog")
        r, res = run_misbehaving(world, shm_name, "--signals-out", table, "--hlog", hlog, "--max")
        assert r.returncode == 0, r.stderr
        assert os.stat(top).st_mode & 0o777 == 0o755
        for d in ("made", "made/by", "made/by/engine"):
            assert os.stat(os.path.join(top, d)).st_mode & 0o777 == 0o700, d
        sig = table[:-len(".parquet")] + ".sig"
        for f in (table, sig, hlog):
            assert os.stat(f).st_mode & 0o777 == 0o600, f
        with throwaway_users(1) as (other,):
            for f in (table, sig, hlog):
                with pytest.raises(subprocess.CalledProcessError) as e:
                    shell_as(other, f"cat '{f}' > /dev/null")
                assert "Permission denied" in e.value.stderr
            with pytest.raises(subprocess.CalledProcessError):
                shell_as(other, f"ls '{top}/made'")
    finally:
        subprocess.run(["rm", "-rf", top])


@pytest.mark.parametrize("args, want", [
    (["--duration", "nan"], "--duration: must be a finite number > 0, got nan"),
    (["--duration", "inf"], "--duration: must be a finite number > 0, got inf"),
    (["--duration", "-1"], "--duration: must be a finite number > 0, got -1"),
    (["--stall-exit", "nan"], "--stall-exit: must be a finite number >= 0, got nan"),
    (["--name", ""], "--name '' is empty"),
    (["--name", "a/b"], "--name 'a/b' has a '/'"),
    (["--name", "x" * 201], "is 201 bytes long (at most 200)"),
])
def test_odd_run_values_are_one_line(args, want):
    err = one_line_error(cli("run", "--no-doctor", "--http", "none", "--pub", "none", *args))
    assert want in err, err


def test_config_values_are_checked_as_flags_are(tmp_path):
    for text, want in (("duration = nan\n", "c.toml: duration: must be a finite number > 0, got nan"),
                       ("name = \"\"\n", "--name '' is empty"),
                       ("[loop]\nstall_exit = inf\n", "c.toml: loop.stall_exit: must be a finite number >= 0, got inf")):
        conf = tmp_path / "c.toml"
        conf.write_text(text)
        err = one_line_error(cli("run", "--config", str(conf), "--no-doctor", "--http", "none", "--pub", "none"))
        assert want in err, err


def test_a_deeply_nested_config_is_one_line_naming_the_file(tmp_path):
    for text in ("x = " + "[" * 5000 + "]" * 5000 + "\n", "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n",
                 ".".join(["a"] * 5000) + " = 1\n"):
        conf = tmp_path / "deep.toml"
        conf.write_text(text)
        err = one_line_error(cli("run", "--config", str(conf)))
        assert err.startswith(f"engine: error: {conf}: nested too deeply") and "recursion" not in err, err


def test_the_summary_table_keeps_large_numbers_apart():
    from app.run_summary import COLS, percentile_table
    from engine.latency import STAGES
    big = 123_456_789_012_345
    lat = {s: {**{k: big for k in COLS}, "count": big} for s in STAGES}
    lines = percentile_table(lat).splitlines()
    head = lines[0].split()
    assert head[:2] == ["latency", "(ns)"] and head[2:] == [*COLS, "count"]
    for s, line in zip(STAGES, lines[1:]):
        assert line.split() == [s] + [f"{big:,}"] * (len(COLS) + 1)
    assert len({len(x) for x in lines}) == 1  # the columns line up


def test_an_idle_loop_that_sleeps_sees_a_stop_within_a_park(default_model, shm_name):
    """--wait backoff parks up to 1 ms at a time while the ring is empty; a stop (SIGTERM) must be
    seen at the next park, not after the 1024 iterations of a housekeeping step (~1 s of parks:
    what made a stop take longer than a second). Counted in parks, not timed."""
    import threading

    from engine import control as C
    from engine.strategy_build import load_host
    from engine.waits import Wait
    from models import artifact
    from tests.test_strategy import _setup, _ticks
    host = load_host("microstructure")
    pred = artifact.load(default_model, strategy=host.strategy)
    args, _, ctl, _ = _setup(shm_name, _ticks(100, 1), pred, host, host.loop_cfg(wait=Wait("backoff")))
    result = []
    t = threading.Thread(target=lambda: result.append(host.mod.run_loop(*args)), daemon=True)
    t.start()
    try:
        _wait_until(lambda: ctl[C.L_PARKS] > 3000, "the idle loop parks")  # (past 1024 parks: at the 1 ms park)
        parks = int(ctl[C.L_PARKS])
        ctl[C.CTL_CMD] = C.CMD_STOP
        t.join(30)
    finally:
        ctl[C.CTL_CMD] = C.CMD_STOP
        t.join(30)
    assert result == [C.LOOP_STOPPED]
    assert int(ctl[C.L_PARKS]) - parks <= 2, (parks, int(ctl[C.L_PARKS]))

"""The `reap` fixture (tests/conftest.py): a test that leaves engines running, passing or failing,
or whose engine lost its parent, does not hand them to the next test. A real pytest session runs
tests that leave real `engine run` processes (each with its feed) holding the locks of their
names; the last test of that session starts engines of the same names, and the processes, rings
and locks are gone after it. (Not on a core: a core's lock is the machine's, and another suite's
engine may hold it.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

from engine.locks import lock_dir

from tests.conftest import engine_env

INNER = '''
import json, os, subprocess, time
from pathlib import Path

from tests.conftest import ROOT, engine_cmd, engine_env

NAME, OUT = os.environ["REAP_NAME"], Path(os.environ["REAP_OUT"])


def args(name, tmp_path, *extra):
    return engine_cmd("run", "--name", name, "--no-rt", "--http", "none", "--pub", "none",
                      "--hlog", "none", "--signals-out", str(tmp_path / "s.sig"), *extra)


def stat(pid):
    s = open(f"/proc/{pid}/stat").read()
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[19])  # ppid, start time


def engine(name, tmp_path, orphan=False):
    """An engine left running: (pid, its parent's pid); its processes, with their feed, in OUT/name."""
    err = tmp_path / "err"
    cmd = args(name, tmp_path, "--feed", "synthetic://?instruments=2&rate=2000")
    if orphan:  # started by a shell that exits at once: the engine's parent is then init
        subprocess.run(["sh", "-c", 'exec 2>"$0"; "$@" >/dev/null &', str(err), *cmd], cwd=ROOT, env=engine_env(),
                       check=True)
    else:
        subprocess.Popen(cmd, cwd=ROOT, env=engine_env(), stdout=subprocess.DEVNULL, stderr=open(err, "w"))
    deadline = time.monotonic() + 180
    while "running:" not in (err.read_text() if err.exists() else ""):
        assert time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    feed = int(err.read_text().split("feed pid ")[1].split(",")[0])
    pid = stat(feed)[0]
    (OUT / name).write_text(json.dumps([[p, stat(p)[1]] for p in (pid, feed)]))
    return pid, stat(pid)[0]


def test_leaves_an_engine_running(tmp_path):
    engine(NAME + "-a", tmp_path)


def test_fails_with_an_engine_running(tmp_path):
    engine(NAME + "-b", tmp_path)
    assert False, "a test that fails with its engine running"


def test_leaves_an_orphaned_engine(tmp_path):
    _, parent = engine(NAME + "-c", tmp_path, orphan=True)
    assert parent != os.getpid()  # not a child of this process: found by its tag


def test_the_names_are_free_again(tmp_path):
    for name in ("-a", "-b", "-c"):
        r = subprocess.run(args(NAME + name, tmp_path, "--duration", "0.5", "--json"), cwd=ROOT, env=engine_env(),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "left by dead process" not in r.stderr  # the engine before it had stopped cleanly
'''


def _alive(pid, start):
    try:
        s = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[19]) == start and rest[0] != "Z"


def test_engines_a_test_left_are_ended_and_waited_for(tmp_path, default_model):
    inner, out = tmp_path / "inner", tmp_path / "out"
    inner.mkdir()
    out.mkdir()
    (inner / "conftest.py").write_text("from tests.conftest import *  # the suite's fixtures and hooks\n")
    (inner / "test_leaves.py").write_text(INNER)
    name = f"enginetest-reap-{os.getpid()}"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_leaves.py"], cwd=inner,
                       env=engine_env(REAP_NAME=name, REAP_OUT=str(out)),
                       capture_output=True, text=True, timeout=900)
    summary = r.stdout.strip().splitlines()[-1]
    assert "1 failed, 3 passed" in summary, r.stdout + r.stderr
    assert "a test that fails with its engine running" in r.stdout
    left = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    assert sorted(left) == [f"{name}-a", f"{name}-b", f"{name}-c"]
    for engine_name, procs in left.items():
        # each engine was named as ended by the fixture, and it and its feed are gone
        (pid, _), _ = procs
        assert f"pid {pid} (" in r.stdout, r.stdout
        assert not [p for p, start in procs if _alive(p, start)], (engine_name, procs)
        # it stopped cleanly (SIGTERM): no ring, no lock, no runtime file left behind
        assert not list(Path("/dev/shm").glob(engine_name + ".*"))
        assert not [f for f in os.listdir(lock_dir()) if engine_name in f]
    ended = [ln for ln in r.stdout.splitlines() if "LeftRunningWarning: left running, ended by the reap fixture" in ln]
    assert len(ended) == 3 and all(": SIGTERM" in ln and "SIGKILL" not in ln for ln in ended), r.stdout

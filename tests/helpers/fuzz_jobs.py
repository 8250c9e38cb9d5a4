"""The fuzz processes of tests/test_fuzz.py, started when the session starts (tests/conftest.py)
so they run beside the rest of the suite.

Compiling the parsers bounds-checked is nearly all of the fuzz test's time (a minute or more
for the Binance scanner), and most of the suite leaves a core idle. So the two processes start
at collection, under SCHED_IDLE (they take only CPU time nothing else wants) and off the core
the tests pin their strategy loops to (conftest.strategy_core): they never slow a loop or a
timed step. The test collects their results.

They write into a directory of the session (conftest.session_dir): with pytest-xdist the
controller starts them once, and whichever worker runs the test reads them from there.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

from engine import numba_cache_dir

from tests.conftest import ROOT, engine_env, strategy_core

CASES = int(os.environ.get("FUZZ_CASES", 10_000))
GROUPS = ("binance", "itch,moldudp64,dbn")  # the Binance scanner alone compiles as long as the other three
_jobs = []


def _background():
    from engine.realtime import die_with_parent
    die_with_parent(signal.SIGKILL)  # a session that is killed takes them with it
    others = set(os.sched_getaffinity(0)) - {strategy_core()}
    if others:
        os.sched_setaffinity(0, others)
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def boundscheck_env():
    # NUMBA_BOUNDSCHECK turns every out-of-bounds index into an IndexError (numba normally reads
    # past the buffer silently); its machine code differs, so it gets its own cache directory
    return engine_env(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=numba_cache_dir() + "-boundscheck")


def _files(where, i):
    return [where / f"fuzz{i}.{ext}" for ext in ("out", "err", "rc")]


def _wait(p, rc):
    p.wait()
    tmp = rc.with_suffix(".rc-tmp")
    tmp.write_text(str(p.returncode))
    tmp.rename(rc)  # whole or absent


def start(where):
    """Start the fuzz processes (once per session), writing into the directory `where`."""
    if _jobs:
        return
    where.mkdir(parents=True, exist_ok=True)
    env = boundscheck_env()
    for i, which in enumerate(GROUPS):
        out, err, rc = _files(where, i)
        with open(out, "w") as o, open(err, "w") as e:
            p = subprocess.Popen([sys.executable, "-m", "tests.helpers.fuzz_parsers", which, str(CASES)], cwd=ROOT,
                                 env=env, stdout=o, stderr=e, text=True, preexec_fn=_background)
        t = threading.Thread(target=_wait, args=(p, rc), daemon=True)
        t.start()
        _jobs.append((p, t))


def results(where, timeout=900):
    """{parser: cases run} once every process has ended; AssertionError with its stderr if one failed.
    Starts them here if the session did not (a run of the fuzz test alone under xdist, say)."""
    if not _files(where, 0)[0].exists():
        start(where)
    done = {}
    deadline = time.monotonic() + timeout
    for i in range(len(GROUPS)):
        out, err, rc = _files(where, i)
        while not rc.exists():
            assert time.monotonic() < deadline, f"fuzz group {GROUPS[i]} still running after {timeout} s"
            time.sleep(0.2)
        assert rc.read_text() == "0", err.read_text()[-4000:]
        done.update({r["parser"]: r["cases"] for r in map(json.loads, out.read_text().split("\n")[:-1])})
    return done


def stop():
    """End whatever is still running (a session that did not reach the test)."""
    while _jobs:
        p, t = _jobs.pop()
        if p.poll() is None:
            p.kill()
        t.join()

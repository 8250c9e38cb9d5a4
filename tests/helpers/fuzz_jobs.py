"""The fuzz processes of tests/test_fuzz.py, started when the session starts (tests/conftest.py)
so they run beside the rest of the suite.

Compiling the parsers bounds-checked is nearly all of the fuzz test's time (a minute or more
for the Binance scanner), and most of the suite leaves a core idle. So the two processes start
at collection, under SCHED_IDLE (they take only CPU time nothing else wants) and off the core
the tests pin their strategy loops to (conftest.strategy_core): they never slow a loop or a
timed step. The test collects their results.
"""
import json
import os
import subprocess
import sys
import tempfile

from engine import _numba_cache_dir

from tests.conftest import ROOT, engine_env, strategy_core

CASES = int(os.environ.get("FUZZ_CASES", 10_000))
GROUPS = ("binance", "itch,moldudp64,dbn")  # the Binance scanner alone compiles as long as the other three
_jobs = []


def _background():
    others = set(os.sched_getaffinity(0)) - {strategy_core()}
    if others:
        os.sched_setaffinity(0, others)
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def boundscheck_env():
    # NUMBA_BOUNDSCHECK turns every out-of-bounds index into an IndexError (numba normally reads
    # past the buffer silently); its machine code differs, so it gets its own cache directory
    return engine_env(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=_numba_cache_dir() + "-boundscheck")


def start():
    """Start the fuzz processes (once)."""
    if _jobs:
        return
    env = boundscheck_env()
    for which in GROUPS:
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        p = subprocess.Popen([sys.executable, "-m", "tests.helpers.fuzz_parsers", which, str(CASES)], cwd=ROOT,
                             env=env, stdout=out, stderr=err, text=True, preexec_fn=_background)
        _jobs.append((p, out, err))


def results(timeout=900):
    """{parser: cases run} once every process has ended; AssertionError with its stderr if one failed."""
    start()
    done = {}
    for p, out, err in _jobs:
        p.wait(timeout=timeout)
        out.seek(0)
        err.seek(0)
        assert p.returncode == 0, err.read()[-4000:]
        done.update({r["parser"]: r["cases"] for r in map(json.loads, out.read().split("\n")[:-1])})
    return done


def stop():
    """End whatever is still running (a session that did not reach the test)."""
    while _jobs:
        p, out, err = _jobs.pop()
        if p.poll() is None:
            p.kill()
            p.wait()
        out.close()
        err.close()

"""engine/numba_lock.py: processes that need the same cold cached function compile it once; the
others wait for the lock, say so, and load what the first saved."""
import fcntl
import json
import os
import subprocess
import sys
import time

from tests.conftest import ROOT, engine_env

CHILD = """
import json, sys
from engine.numba_lock import lock_path
from tests.helpers.lock_target import target
if sys.argv[1] == "path":
    print(lock_path(target))
else:
    from engine.compile_notice import shown
    with shown():  # (as the engine's commands run: a wait is said on stderr)
        assert target(2.0) == 90.0
    print(json.dumps({"hits": sum(target.stats.cache_hits.values()), "misses": sum(target.stats.cache_misses.values())}))
"""


def _child(cache, what):
    return subprocess.Popen([sys.executable, "-c", CHILD, what], cwd=ROOT, env=engine_env(NUMBA_CACHE_DIR=str(cache)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_compile_a_cold_function_once(tmp_path):
    out, err = _child(tmp_path, "path").communicate(timeout=120)
    path = out.strip()
    assert path.startswith(str(tmp_path)) and path.endswith(".nbi.lock"), (out, err)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a process compiling it would hold it
        procs = [_child(tmp_path, "run") for _ in range(2)]
        time.sleep(3.0)  # (both long started: a process with no lock compiles this in well under that)
        assert all(p.poll() is None for p in procs), "a process did not wait for the compile lock"
    finally:
        os.close(fd)
    res = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert ("[numba] waiting for another process compiling tests.helpers.lock_target.target (first use; "
                "loaded from the cache when it is done)") in err.splitlines(), err
        res.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted((r["misses"], r["hits"]) for r in res) == [(0, 1), (1, 0)], res  # one compiled, one loaded

"""Fuzz every binary parser with hostile inputs (10k each in the suite; FUZZ_CASES=N for a longer run), under
numba's bounds checking."""
import json
import os
import subprocess
import sys

from engine import _numba_cache_dir

from tests.conftest import ROOT, engine_env

CASES = int(os.environ.get("FUZZ_CASES", 10_000))


def test_parsers_survive_hostile_inputs_without_an_out_of_bounds_read():
    # NUMBA_BOUNDSCHECK turns every out-of-bounds index into an IndexError (numba normally reads
    # past the buffer silently); its machine code differs, so it gets its own cache directory
    env = engine_env(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=_numba_cache_dir() + "-boundscheck")
    res = subprocess.run([sys.executable, "-m", "tests.helpers.fuzz_parsers", "all", str(CASES)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    done = {r["parser"]: r["cases"] for r in map(json.loads, res.stdout.split("\n")[:-1])}
    assert done == {"itch": CASES, "moldudp64": CASES, "dbn": CASES, "binance": CASES}


def test_boundscheck_is_really_on_in_the_fuzz_process():
    """The fuzz test is only worth something if an out-of-bounds read does raise there."""
    code = ("import numpy as np\nfrom feeds.itch import be16\nfrom numba import njit\n"
            "f = njit(lambda a: be16(a, 9))\n"
            "try:\n    f(np.zeros(10, np.uint8))\nexcept IndexError:\n    print('raised')\n")
    env = engine_env(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=_numba_cache_dir() + "-boundscheck")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.stdout.strip() == "raised", res.stderr

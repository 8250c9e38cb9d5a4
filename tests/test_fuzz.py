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
    # (two processes: compiling the parsers bounds-checked is most of the time, and the Binance
    # scanner alone takes as long as the other three)
    env = engine_env(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=_numba_cache_dir() + "-boundscheck")
    procs = [subprocess.Popen([sys.executable, "-m", "tests.helpers.fuzz_parsers", which, str(CASES)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for which in ("binance", "itch,moldudp64,dbn")]
    done = {}
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-4000:]
        done.update({r["parser"]: r["cases"] for r in map(json.loads, out.split("\n")[:-1])})
    assert done == {"itch": CASES, "moldudp64": CASES, "dbn": CASES, "binance": CASES}


def test_boundscheck_is_really_on_in_the_fuzz_process():
    """The fuzz test is only worth something if an out-of-bounds read does raise there."""
    # be16 indexes an array; the Binance scanner reads its input through data_ptr and a word at a
    # time through load_u64 (feeds/nrt.py), which must raise there too
    code = ("import numpy as np\nfrom feeds.itch import be16\nfrom feeds.nrt import data_ptr, load_u64\n"
            "from numba import njit\n"
            "reads = {'be16': njit(lambda a: be16(a, 9)), 'data_ptr': njit(lambda a: data_ptr(a)[10]),\n"
            "         'load_u64': njit(lambda a: load_u64(a, 3)), 'load_u64 <0': njit(lambda a: load_u64(a, -1))}\n"
            "for name, f in reads.items():\n"
            "    try:\n        f(np.zeros(10, np.uint8))\n    except IndexError:\n        print(name, 'raised')\n"
            "print('in bounds', njit(lambda a: load_u64(a, 2))(np.arange(10, dtype=np.uint8)) == 0x0908070605040302)\n")
    env = engine_env(NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=_numba_cache_dir() + "-boundscheck")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.stdout.splitlines() == ["be16 raised", "data_ptr raised", "load_u64 raised", "load_u64 <0 raised",
                                       "in bounds True"], res.stderr

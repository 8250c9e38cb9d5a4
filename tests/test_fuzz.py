"""Fuzz every binary parser with hostile inputs (10k each in the suite; FUZZ_CASES=N for a longer run), under
numba's bounds checking (the processes: tests/helpers/fuzz_jobs.py, started with the session)."""
import subprocess
import sys

from tests.conftest import ROOT, session_dir
from tests.helpers import fuzz_jobs


def test_parsers_survive_hostile_inputs_without_an_out_of_bounds_read():
    done = fuzz_jobs.results(session_dir("fuzz"))
    n = fuzz_jobs.CASES
    assert done == {"itch": n, "moldudp64": n, "dbn": n, "binance": n}


def test_boundscheck_is_really_on_in_the_fuzz_process():
    """The fuzz test is only worth something if an out-of-bounds read does raise there."""
    # be16 indexes an array; the Binance scanner reads its input through data_ptr and a word at a
    # time through load_u64 (feeds/core/borrow.py), which must raise there too
    code = ("import numpy as np\nfrom feeds.nasdaq.itch import be16\nfrom feeds.core.borrow import data_ptr, load_u64\n"
            "from numba import njit\n"
            "reads = {'be16': njit(lambda a: be16(a, 9)), 'data_ptr': njit(lambda a: data_ptr(a)[10]),\n"
            "         'load_u64': njit(lambda a: load_u64(a, 3)), 'load_u64 <0': njit(lambda a: load_u64(a, -1))}\n"
            "for name, f in reads.items():\n"
            "    try:\n        f(np.zeros(10, np.uint8))\n    except IndexError:\n        print(name, 'raised')\n"
            "print('in bounds', njit(lambda a: load_u64(a, 2))(np.arange(10, dtype=np.uint8)) == 0x0908070605040302)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=fuzz_jobs.boundscheck_env(), capture_output=True, text=True, timeout=300)
    assert res.stdout.splitlines() == ["be16 raised", "data_ptr raised", "load_u64 raised", "load_u64 <0 raised",
                                       "in bounds True"], res.stderr

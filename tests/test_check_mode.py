"""`--check`: the strategy compiled with numba's boundscheck, so a write past the end of an array in
user code is caught in testing: one line naming the strategy file and the function, in a backtest
(exit 2) and in a live run (the summary, the reason in the signal file, exit 1). The checked code is
compiled apart: a normal run never loads it, nor the reverse.

Real strategy files, compiled for real by the engine's CLI."""
import json

import pytest

from engine.signal_log import status

from tests.helpers.feedutil import cli
from tests.helpers.strategies import quotes_strategy, trained

# a helper in the strategy file writes row[1] of a one-feature row once the instrument has seen
# `oob_after` quotes (0: never)
OOB = quotes_strategy({"oob_after": 0.0}, head="@njit\ndef put(row, j, v):\n    row[j] = v\n", row="""
    j = 1 if params.oob_after > 0 and state[0] >= params.oob_after else 0
    put(row, j, (b - a) / (b + a) if b + a > 0 else 0.0)""")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("check"), "oob", OOB, 20000)


# thresholds near 0.5: the small model's scores cross them, so there are signals to compare
NEAR = ("--param", "enter_long=0.52", "--param", "exit_long=0.501", "--param", "enter_short=0.48", "--param",
        "exit_short=0.499")


def _backtest(world, out, *extra):
    return cli("backtest", str(world["ticks"]), "--strategy", str(world["strategy"]), "--model", str(world["model"]),
               "--out", str(out), "--quiet", "--json", *NEAR, *extra, timeout=900)


def test_check_catches_an_out_of_bounds_write_in_a_backtest(world, tmp_path):
    r = _backtest(world, tmp_path / "bt", "--param", "oob_after=100", "--check")
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if not x.startswith("[")]
    assert lines == [f"engine: error: {world['strategy']}: on_tick indexed an array out of bounds (caught by "
                     "--check), or raised an exception of its own"], r.stderr
    assert not (tmp_path / "bt").exists()
    # the same strategy in bounds passes the check, with the same result as without it
    a = _backtest(world, tmp_path / "a", "--check")
    b = _backtest(world, tmp_path / "b", "--no-check")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    sa, sb = json.loads(a.stdout), json.loads(b.stdout)
    assert sa["signals"] == sb["signals"] > 0 and sa["ticks"] == sb["ticks"]


def test_check_catches_an_out_of_bounds_write_in_a_live_run(world, tmp_path, shm_name):
    """At the first quote: the loop then often stops before the main thread has seen it start, which
    must still be the run's summary and exit 1 (it was a traceback 1 time in 4)."""
    sig = tmp_path / "run.sig"
    r = cli("run", "--no-rt", "--check", "--json", "--strategy", str(world["strategy"]), "--model",
            str(world["model"]), "--param", "oob_after=1", "--feed", f"tickfile:{world['ticks']}", "--name",
            shm_name, "--http", "none", "--pub", "none", "--hlog", "none", "--signals-out", str(sig), timeout=900)
    assert r.returncode == 1 and r.stdout.strip(), (r.returncode, r.stdout, r.stderr)  # (the summary, then exit 1)
    res = json.loads(r.stdout)
    assert res["abnormal"] == (f"the strategy loop stopped: {world['strategy']}: on_tick indexed an array out of "
                               "bounds (caught by --check), or raised an exception of its own")
    assert "Traceback" not in r.stderr
    assert status(sig)["abnormal"] == "raised IndexError"

"""One strategy file, trained, backtested and run live: train on one real capture, then the
backtest and the live engine over another give identical signals (seq, score bits, positions),
for the shipped strategies and a depth strategy written here."""
import json

import pytest

from tests.conftest import strategy_core
from tests.helpers.data import ESH4 as CME, SPOT, USDM
from tests.helpers import strategies as S
from tests.helpers.feedutil import cli, one_line_error
from tests.test_replay import _parity, ticks_file

# a depth strategy a user might write from the README: 5-level imbalance, no decide
IMB5 = '''
import numpy as np
from numba import njit
FEATURES = ("imb1", "imb3", "imb5", "spread_ticks", "bid_queue_share")
DEPTH = 5
STATE = 1
PARAMS = {"enter_long": 0.6, "exit_long": 0.52, "enter_short": 0.4, "exit_short": 0.48}

@njit
def on_tick(state, book, tick, row, params):
    if book.bid_px[0] <= 0 or book.ask_px[0] <= 0:
        return False
    state[0] += 1.0
    for j, n in enumerate((1, 3, 5)):
        b = 0.0
        a = 0.0
        for k in range(n):
            b += book.bid_sz[k]
            a += book.ask_sz[k]
        row[j] = (b - a) / (b + a) if b + a > 0 else np.nan
    row[3] = (book.ask_px[0] - book.bid_px[0]) / 1e7
    tot = 0.0
    for k in range(5):
        tot += book.bid_sz[k]
    row[4] = book.bid_sz[0] / tot if tot > 0 else np.nan
    return state[0] >= 10
'''


def _train(tmp_path, strategy, source, name="m"):
    out = tmp_path / name
    r = cli("train", source, "--strategy", str(strategy), "--out", str(out), "--trees", "30", "--depth", "4",
            "--backends", "flat", timeout=900)
    assert r.returncode == 0, r.stderr
    return out


# (the built-in strategy: trained on the CME capture below, and live = backtest on this Binance
# capture with its default model in test_replay.py)
@pytest.mark.parametrize("strategy", ["depth_imbalance", "imb5"])
def test_train_on_one_capture_then_backtest_and_live_agree_on_another(tmp_path, strategy):
    if strategy == "imb5":
        strategy = str(S.write(tmp_path, "imb5", IMB5))
    train_file = ticks_file(tmp_path, f"binance:{USDM}", "usdm.ticks")
    model = _train(tmp_path, strategy, f"tickfile:{train_file}")
    test_file = ticks_file(tmp_path, f"binance:{SPOT}", "spot.ticks")
    run, sigs = _parity(tmp_path, test_file, strategy_core(), "--strategy", strategy, "--model", str(model),
                        min_signals=10)
    assert run["strategy"]["sha256"] == json.loads((model / "manifest.json").read_text())["strategy"]["sha256"]
    if strategy == "depth_imbalance":  # its decide sizes positions beyond one unit
        assert max(abs(p) for p in sigs.column("position").to_pylist()) > 1


@pytest.mark.parametrize("strategy", ["microstructure", "depth_imbalance"])
def test_cme_capture_trains_backtests_and_runs_live_identically(tmp_path, strategy):
    f = ticks_file(tmp_path, f"dbn:{CME}", "esh4.ticks")
    model = _train(tmp_path, strategy, f"tickfile:{f}")
    _parity(tmp_path, f, strategy_core(), "--strategy", strategy, "--model", str(model), min_signals=10)


def test_a_model_trained_for_another_strategy_is_refused(tmp_path):
    f = ticks_file(tmp_path, "synthetic://?instruments=2&count=30000&seed=3")
    model = _train(tmp_path, "microstructure", f"tickfile:{f}")
    imb5 = S.write(tmp_path, "imb5", IMB5)
    for cmd in (["backtest", str(f), "--out", str(tmp_path / "bt")],
                ["run", "--feed", f"tickfile:{f}", "--max", "--duration", "5", "--no-doctor", "--http", "none",
                 "--pub", "none", "--name", f"refuse{id(tmp_path) % 10**6}"]):
        err = one_line_error(cli(*cmd, "--strategy", str(imb5), "--model", str(model)))
        assert "trained for strategy 'microstructure'" in err and "'imb5'" in err and "sha256" in err, err
    assert not (tmp_path / "bt").exists()
    # the same file edited (another hash) is another strategy too
    own = _train(tmp_path, imb5, f"tickfile:{f}", "own")
    imb5.write_text(IMB5.replace("state[0] >= 10", "state[0] >= 11"))
    err = one_line_error(cli("backtest", str(f), "--out", str(tmp_path / "bt2"), "--strategy", str(imb5),
                             "--model", str(own)))
    assert "trained for strategy 'imb5'" in err

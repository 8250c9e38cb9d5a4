"""The strategy contract: user files written here from the README alone, compiled into the host,
checked against pure-Python recomputations; broken files, parameters, identity and staleness."""
import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.records import KIND_GAP, KIND_QUOTE, KIND_TRADE, TICK_DTYPE
from engine.strategy_build import build
from engine.strategy_load import StrategyError, load
from feeds.core.sources import open_source

from tests.helpers.data import SPOT as BINANCE
from tests.helpers import strategies as S
from tests.helpers.feedutil import cli, one_line_error



def stream(uri):
    src = open_source(uri)
    parts = [b.copy() for b in src.batches()]
    return np.concatenate(parts), max(1, len(src.instruments)), src.depth


def test_touch_strategy_features_equal_a_python_recomputation(tmp_path):
    host = build(load(str(S.write(tmp_path, "touch", S.TOUCH)), {"alpha": 0.1}))
    words, n, levels = stream("synthetic://?instruments=3&count=20000&seed=5&depth=10")
    gap = np.zeros((1, 8), np.int64)
    gap[0, 3] = 5
    gap[0, 7] = np.int64(KIND_GAP) << 48
    words = np.concatenate([words[:9000], gap, words[9000:]])  # a gap resets every instrument
    X, inst, _, idx = host.featurize(words, n, levels)
    recs = words.view(TICK_DTYPE).reshape(-1)
    st = {}
    want = []
    for t, r in enumerate(recs):
        k, i = int(r["kind"]), int(r["instrument"])
        if k == KIND_GAP:
            st.clear()
            continue
        s = st.setdefault(i, {"mid": None, "ret": 0.0, "trades": 0, "quotes": 0})
        if k == KIND_TRADE:
            s["trades"] += 1
        if k != KIND_QUOTE or r["bid_px"] <= 0 or r["ask_px"] <= 0:
            continue
        mid = 0.5 * (float(r["bid_px"]) + float(r["ask_px"]))
        if s["mid"] is not None:
            s["ret"] += 0.1 * ((mid - s["mid"]) / s["mid"] * 1e4 - s["ret"])
        s["mid"] = mid
        s["quotes"] += 1
        if s["quotes"] >= 3:
            b, a = float(r["bid_sz"]), float(r["ask_sz"])
            want.append((t, i, [s["ret"], (b - a) / (b + a), s["trades"]]))
    assert len(want) > 5000 and list(idx) == [w[0] for w in want] and list(inst) == [w[1] for w in want]
    np.testing.assert_allclose(X, np.array([w[2] for w in want], np.float32), rtol=1e-6, atol=1e-7)


def _check_levels(host, words, n, levels):
    X, inst, _, idx = host.featurize(words, n, levels)
    calls = S.python_host_calls(words, 5)
    assert list(idx) == [c[0] for c in calls] and list(inst) == [c[1] for c in calls]
    want = np.array([S.row_of_book(c[2]) for c in calls], np.float32)
    assert np.array_equal(X, want)
    return X


def test_five_level_strategy_sees_the_python_book_synthetic(tmp_path):
    host = build(load(str(S.write(tmp_path, "levels5", S.LEVELS5))))
    words, n, levels = stream("synthetic://?instruments=2&count=30000&seed=3&depth=10")
    assert levels == 10
    X = _check_levels(host, words, n, levels)
    assert (X[:, 21] > 0).mean() > 0.9  # it does see five levels on both sides, mostly
    kinds = words[:, 7] >> 48 & 0xFF
    assert (kinds == 5).sum() > 1000 and (kinds == 6).sum() > 100  # level and book ticks were there


def test_five_level_strategy_sees_the_python_book_binance(tmp_path):
    host = build(load(str(S.write(tmp_path, "levels5", S.LEVELS5))))
    words, n, levels = stream(f"binance:{BINANCE}?depth=10")
    _check_levels(host, words[:400_000], n, levels)


def test_calls_do_not_depend_on_how_many_levels_the_stream_carries(tmp_path):
    """A DEPTH=5 strategy is called with the same books on a 5-level and a 20-level stream."""
    host = build(load(str(S.write(tmp_path, "levels5", S.LEVELS5))))
    rows = []
    for d in (5, 20):
        words, n, levels = stream(f"synthetic://?instruments=2&count=200000&seed=4&depth={d}")
        X, inst, _, idx = host.featurize(words, n, levels)
        ts = words[idx, 1]
        rows.append((X, inst, ts))
    k = min(len(rows[0][0]), len(rows[1][0])) - 100  # the counted streams end at different events
    assert k > 10000
    for a, b in zip(rows[0], rows[1], strict=True):
        assert np.array_equal(a[:k], b[:k])


def test_a_strategy_deeper_than_the_stream_is_refused(tmp_path):
    host = build(load(str(S.write(tmp_path, "levels5", S.LEVELS5))))
    words, n, levels = stream("synthetic://?instruments=1&count=100&seed=3&depth=3")
    with pytest.raises(StrategyError, match="DEPTH 5 needs book levels.*carries 3"):
        host.featurize(words, n, levels)


def test_sizing_decide_in_the_backtest_loop(tmp_path, default_model):
    """decide's positions, and the signal's old/new position, equal Python's sizing of the same
    scores. (The model here is a generic one over the strategy's two features.)"""
    from engine.records import SIGNAL_DTYPE, SIGNAL_WORDS
    from engine import latency
    from engine.loop_args import BacktestArgs, backtest_args
    host = build(load(str(S.write(tmp_path, "sizing", S.SIZING)), {"cap": 4}))
    pred = _tiny_model(tmp_path, host)
    words, n, levels = stream("synthetic://?instruments=2&count=20000&seed=8&depth=0")
    words[:, 0] = np.arange(len(words))  # seq, as a ring or a tick file numbers them
    X, inst, _, idx = host.featurize(words, n, levels)
    hs = host.state(n, levels)
    sigs = np.zeros((1 << 16, SIGNAL_WORDS), np.int64)
    margins = np.full(len(words), np.nan, np.float32)
    _, nsig, scored = host.mod.backtest_loop(*backtest_args(host.mod, BacktestArgs(
        words=words, state=hs.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32), model=pred.addr,
        pvals=host.params(), cfg=host.loop_cfg(sigmoid=True), sigs=sigs, margins=margins, hist=latency.new_counts())))
    got = sigs[:nsig].view(SIGNAL_DTYPE).reshape(-1)
    m = pred.predict_margin(X)
    pos, want = {}, []
    for j in range(len(X)):
        score = np.float32(1 / (1 + math.exp(-float(m[j]))))
        units = max(-4, min(4, int(round((float(score) - 0.5) * 40))))
        if units != pos.get(inst[j], 0):
            want.append((idx[j], units, pos.get(inst[j], 0)))
            pos[inst[j]] = units
    assert scored == len(X) and len(want) > 20 and max(abs(w[1]) for w in want) == 4
    assert [(int(a), int(b), int(c)) for a, b, c in zip(got["tick_seq"], got["position"], got["prev_position"],
                                                        strict=True)] == want


def _tiny_model(tmp_path, host):
    import xgboost as xgb
    from models import artifact
    from models.build import build_artifact
    words, n, levels = stream("synthetic://?instruments=2&count=30000&seed=2&depth=0")
    X, inst, mid, idx = host.featurize(words, n, levels)
    y = (np.roll(mid, -20) > mid).astype(np.float32)
    b = xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(X, y, feature_names=list(host.strategy.features)), 10)
    build_artifact(tmp_path / "m", b, X[:2000], feature_names=host.strategy.features, strategy=host.strategy.identity(),
                   backends=("flat",))
    return artifact.load(tmp_path / "m", strategy=host.strategy)


# code that does not compile, or returns the wrong type, is explained as a block: test_strategy_errors.py
BROKEN = {
    "syntax": ("FEATURES = (\n", "syntax error"),
    "no_features": ("from numba import njit\nDEPTH = 0\nSTATE = 1\nPARAMS = {}\n@njit\ndef on_tick(s, b, t, r, p):\n    return True\n",
                    "no FEATURES"),
    "no_on_tick": ('FEATURES = ("a",)\nDEPTH = 0\nSTATE = 1\nPARAMS = {}\n', "no on_tick"),
    "not_jitted": ('FEATURES = ("a",)\nDEPTH = 0\nSTATE = 1\nPARAMS = {}\ndef on_tick(s, b, t, r, p):\n    return True\n',
                   "must be compiled with numba"),
    "wrong_signature": ('from numba import njit\nFEATURES = ("a",)\nDEPTH = 0\nSTATE = 1\nPARAMS = {}\n'
                        '@njit\ndef on_tick(s, b, t, r):\n    return True\n', "takes 4 arguments"),
    "bad_depth": ('from numba import njit\nFEATURES = ("a",)\nDEPTH = 99\nSTATE = 1\nPARAMS = {}\n'
                  '@njit\ndef on_tick(s, b, t, r, p):\n    return True\n', "DEPTH must be an integer 0..32"),
    "bad_params": ('from numba import njit\nFEATURES = ("a",)\nDEPTH = 0\nSTATE = 1\nPARAMS = {"x": "high"}\n'
                   '@njit\ndef on_tick(s, b, t, r, p):\n    return True\n', "must be a finite number"),
    "import_error": ("import numpy_does_not_exist\n", "ModuleNotFoundError"),
    "writes_tick": ('from numba import njit\nFEATURES = ("a",)\nDEPTH = 0\nSTATE = 1\nPARAMS = {}\n'
                    '@njit\ndef on_tick(s, b, t, r, p):\n    t[3] = 0\n    return True\n', "writes to `tick`"),
    "writes_book": ('from numba import njit\nFEATURES = ("a",)\nDEPTH = 2\nSTATE = 1\nPARAMS = {}\n'
                    '@njit\ndef on_tick(s, b, t, r, p):\n    b.bid_sz[0] += 1\n    return True\n', "writes to `book`"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_strategy_files_get_one_line_naming_the_file(tmp_path, case):
    src, what = BROKEN[case]
    f = tmp_path / f"{case}.py"
    f.write_text(src)
    out = tmp_path / "x.parquet"
    err = one_line_error(cli("features", "--strategy", str(f), "synthetic://?count=2000&instruments=1", "--out", str(out)))
    assert str(f) in err and what in err, err
    assert not out.exists()


def test_unknown_and_bad_params_are_errors_that_list_the_known_ones(tmp_path):
    f = S.write(tmp_path, "touch", S.TOUCH)
    err = one_line_error(cli("features", "--strategy", str(f), "--param", "alhpa=0.3",
                             "synthetic://?count=2000", "--out", str(tmp_path / "x.csv")))
    assert "unknown parameter alhpa" in err and "alpha, warmup" in err
    err = one_line_error(cli("features", "--strategy", str(f), "--param", "alpha",
                             "synthetic://?count=2000", "--out", str(tmp_path / "x.csv")))
    assert "expected NAME=VALUE" in err
    err = one_line_error(cli("features", "--strategy", "no_such_builtin", "synthetic://?count=2000",
                             "--out", str(tmp_path / "x.csv")))
    assert "no built-in strategy 'no_such_builtin'" in err and "microstructure" in err


def test_features_command_writes_the_rows_training_uses(tmp_path):
    f = S.write(tmp_path, "touch", S.TOUCH)
    uri = "synthetic://?instruments=2&count=15000&seed=6"
    r = cli("features", "--strategy", str(f), "--param", "alpha=0.5", uri, "--out", str(tmp_path / "f.parquet"),
            "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] > 1000
    t = pq.read_table(tmp_path / "f.parquet")
    assert t.column_names == ["seq", "ts_event", "ts_recv", "instrument", "symbol", "ret_ewma_bps",
                              "touch_imbalance", "trades_seen"]
    host = build(load(str(f), {"alpha": 0.5}))
    from models.training import source_ticks
    words, n, levels, names = source_ticks(uri, 0, host.strategy)
    X, inst, _, idx = host.featurize(words, n, levels)
    assert t.column("seq").to_pylist() == list(idx) and set(t.column("symbol").to_pylist()) == {"SYN0000", "SYN0001"}
    assert np.array_equal(t.column("ret_ewma_bps").to_numpy(), X[:, 0])
    r = cli("features", "--strategy", str(f), uri, "--out", str(tmp_path / "f.csv"), "--quiet")
    assert r.returncode == 0 and (tmp_path / "f.csv").read_text().startswith('"seq","ts_event"')


def test_an_edited_strategy_is_never_run_stale(tmp_path):
    """The same path, edited between two commands: the second runs the new code (numba's disk
    cache is keyed by the strategy's hash, not only the file's stamp)."""
    f = S.write(tmp_path, "touch", S.TOUCH)
    uri = "synthetic://?instruments=1&count=5000&seed=1"
    outs = []
    for k, alpha in enumerate(("0.25", "0.75")):
        f.write_text(S.TOUCH.replace('"alpha": 0.25', f'"alpha": {alpha}'))
        r = cli("features", "--strategy", str(f), uri, "--out", str(tmp_path / f"o{k}.parquet"), "--quiet")
        assert r.returncode == 0, r.stderr
        outs.append(pq.read_table(tmp_path / f"o{k}.parquet").column("ret_ewma_bps").to_numpy())
    assert not np.array_equal(outs[0], outs[1])
    host = build(load(str(f)))
    words, n, levels = stream(uri + "&depth=0")
    assert np.array_equal(host.featurize(words, n, levels)[0][:, 0], outs[1])


def test_identity_changes_with_the_source_and_with_helpers(tmp_path):
    f = S.write(tmp_path, "touch", S.TOUCH)
    a = load(str(f))
    f.write_text(S.TOUCH + "\n# a comment\n")
    b = load(str(f))
    assert a.sha256 != b.sha256 and a.features == b.features
    assert a.identity()["features"] == ["ret_ewma_bps", "touch_imbalance", "trades_seen"]
    # a helper module next to the strategy is part of what it compiles with
    (tmp_path / "myhelp.py").write_text("from numba import njit\n@njit\ndef two():\n    return 2.0\n")
    f.write_text(S.TOUCH.replace("import numpy as np", "import numpy as np\nfrom myhelp import two"))
    c = load(str(f))
    (tmp_path / "myhelp.py").write_text("from numba import njit\n@njit\ndef two():\n    return 3.0\n")
    f.write_text(S.TOUCH.replace("import numpy as np", "import numpy as np\nfrom myhelp import two") + " ")
    d = load(str(f))
    assert str(tmp_path / "myhelp.py") in c.sources and c.sha256 != d.sha256

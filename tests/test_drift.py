"""Drift (models/drift.py, app/drift_monitor.py): an artifact keeps the feature and score distributions
of every row the strategy scores in its training data; PSI is 0 on that data through the command a
user types (a real capture's tick file, by path and tickfile: URI) and live, and rises on a shifted
market, offline (`engine model drift`) and live (`engine run --drift`: summary, /status,
Prometheus); a live run bins every row its loop scores; a model that keeps no distribution says so
in one line."""
import json
import os

import numpy as np
import pytest

from models import artifact, dataset, drift
from models.build import build_artifact, train
from tests.conftest import builtin_features, strategy_core, strategy_rows
from tests.helpers.data import SPOT, USDM
from tests.helpers.daemon import Daemon, scrape, wait_until
from tests.helpers.feedutil import cli
from tests.test_hot_swap import second_model  # noqa: F401  (a model built without a training sketch)

NAMES = builtin_features()
SAME = "synthetic://?instruments=4&seed=5&trade_prob=0.1"
SHIFTED = "synthetic://?instruments=4&seed=77&trade_prob=0.8"  # trades 8x as often: flow, volatility move


@pytest.fixture(scope="module")
def sketched(tmp_path_factory):
    """A real model with its training sketch (every row the strategy scores, as engine train keeps), and
    those rows."""
    X_all, inst, mid, _ = strategy_rows(SAME + "&count=100000")
    y = dataset.binary_labels(inst, mid, 10)
    keep = y != dataset.NO_LABEL
    X, y = X_all[keep], y[keep]
    tr, va = len(X) * 6 // 10, len(X) * 8 // 10
    b = train(X[:tr], y[:tr], X[tr:va], y[tr:va], trees=20, depth=3, feature_names=NAMES, progress_every=1000)
    d = tmp_path_factory.mktemp("drift") / "sketched"
    from engine.strategy_load import load
    ref = drift.Reference()
    ref.add(X_all)
    build_artifact(d, b, X[va:], feature_names=NAMES, backends=("flat",), strategy=load("microstructure").identity(),
                   reference=ref.rows())
    return d, X_all


def test_the_reference_keeps_evenly_spaced_rows_past_its_cap():
    rows = np.arange(10_000, dtype=np.float32)[:, None]
    r = drift.Reference(cap=1000)
    for a, b in ((0, 7), (7, 3001), (3001, 3002), (3002, 10_000)):  # (uneven pieces: the spacing carries over)
        r.add(rows[a:b])
    assert r.stride == 16 and np.array_equal(r.rows()[:, 0], np.arange(0, 10_000, 16))
    whole = drift.Reference(cap=20_000)
    whole.add(rows)
    assert np.array_equal(whole.rows(), rows)  # under the cap: every row
    halves = []
    for a in (0, 5000):
        h = drift.Reference(cap=1000)
        h.add(rows[a:a + 5000])
        halves.append(h)
    m = drift.Reference.merged(halves, cap=1000)  # (dask: one per source, each sampled alike)
    assert np.array_equal(m.rows()[:, 0], np.concatenate([np.arange(0, 5000, 16), np.arange(5000, 10_000, 16)]))


def test_psi_is_zero_on_the_training_rows_and_rises_when_the_market_shifts(sketched):
    d, X_train = sketched
    man = artifact.read_manifest(d)
    sk = drift.check(man, str(d))
    assert sk["rows"] == len(X_train) and set(sk["features"]) == set(NAMES) and drift.narrow(sk) is None
    pred = artifact.load(d)
    t = drift.Tracker(sk, NAMES)
    t.add(X_train, pred.predict_margin(X_train))
    feats, score = t.psi()
    assert all(v == 0.0 for v in feats.values()) and score == 0.0, (feats, score)  # same rows, same bins
    Xs = strategy_rows(SHIFTED + "&count=40000")[0]
    s = drift.Tracker(sk, NAMES)
    s.add(Xs, pred.predict_margin(Xs))
    feats, score = s.psi()
    assert max(feats.values()) > 0.25 and feats["since_trade_ms"] > 0.25, feats
    assert feats["imbalance"] < 0.1  # (the book's shape did not move: the index is not noise everywhere)
    # a half-life forgets: the training rows, then the shifted ones, then the training rows again
    h = drift.Tracker(sk, NAMES, half_life=5_000)
    for rows in (X_train, Xs, X_train):
        h.add(rows, pred.predict_margin(rows))
    assert max(h.psi()[0].values()) < 0.05


def test_engine_model_drift_offline(sketched, second_model, tmp_path):  # noqa: F811
    d, _ = sketched
    # the market it was trained on: its every scored row, the sketch's
    same = cli("model", "drift", SAME + "&count=100000", "--model", str(d), "--json", timeout=300)
    assert same.returncode == 0, same.stderr
    s = json.loads(same.stdout)
    assert s["rows"] == s["reference_rows"] > 90_000 and max(s["features"].values()) < 0.05 and s["score"] < 0.05, s
    moved = cli("model", "drift", SHIFTED + "&count=40000", "--model", str(d), timeout=300)
    assert moved.returncode == 0 and "shifted" in moved.stdout and "since_trade_ms" in moved.stdout, moved.stderr
    none = cli("model", "drift", SAME + "&count=4000", "--model", str(second_model), timeout=300)
    assert none.returncode == 2 and "keeps no training distribution" in none.stderr and "Traceback" not in none.stderr


def test_engine_run_drift_live(sketched, tmp_path):
    d, _ = sketched
    name = f"enginetest-drift-{os.getpid()}"
    dm = Daemon(tmp_path, name, "--feed", SHIFTED + "&rate=20000", "--model", str(d), "--drift", core=strategy_core())
    try:
        dm.wait_for("endpoints in ")
        wait_until(lambda: (dm.status()["drift"] or {}).get("rows", 0) > 20_000, "drift rows")
        st = dm.status()["drift"]
        assert st["error"] is None and st["features"]["since_trade_ms"] > 0.25, st
        m = scrape(dm)[0]
        from app.drift_monitor import DRIFT_METRICS
        assert set(DRIFT_METRICS) <= set(m), set(DRIFT_METRICS) - set(m)
        assert m["engine_feature_psi"][(("feature", "since_trade_ms"),)] > 0.25
        r = cli("stats", "--name", name)
        assert r.returncode == 0 and "drift over " in r.stdout and "shifted" in r.stdout, r.stdout
    finally:
        out = dm.stop()
    assert dm.proc.returncode == 0, dm.log()[-3000:]
    assert "drift over " in out and "(shifted)" in out, out
    # the whole run's, kept beside its signal file: every row scored (not the signals' biased few)
    r = cli("model", "drift", str(dm.sig_path), "--json")
    assert r.returncode == 0, r.stderr
    run = json.loads(r.stdout)
    assert run["rows"] >= st["rows"] and run["model_id"] == artifact.read_manifest(d)["files"]["model.json"][:12]
    assert run["features"]["since_trade_ms"] > 0.25 and set(run["features"]) == set(NAMES), run
    same = cli("model", "drift", str(dm.sig_path), "--model", str(d))
    assert same.returncode == 0 and "since_trade_ms" in same.stdout and "shifted" in same.stdout, same.stderr


def test_engine_model_drift_of_a_run_needs_its_record(sketched, second_model, tmp_path):  # noqa: F811
    d, _ = sketched
    sig = tmp_path / "run.sig"
    sig.write_bytes(b"")  # (no run with --drift wrote its record beside it)
    r = cli("model", "drift", str(sig))
    assert r.returncode == 2 and "no drift record beside it" in r.stderr and "Traceback" not in r.stderr, r.stderr
    rec = {"model_id": artifact.read_manifest(d)["files"]["model.json"][:12], "rows": 10, "features": {},
           "score": 0.0, "reference_rows": 1, "gaps": 0}
    (tmp_path / "run.sig.drift.json").write_text(json.dumps(rec))
    r = cli("model", "drift", str(sig), "--model", str(second_model))  # binned against another model's bins
    assert r.returncode == 2 and "measured against model " + rec["model_id"] in r.stderr, r.stderr
    (tmp_path / "run.sig.drift.json").write_text("{")
    r = cli("model", "drift", str(sig))
    assert r.returncode == 2 and "not a drift record" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def trained_on_file(tmp_path_factory):
    """A model `engine train` built from a real capture's tick file (Binance spot BTCUSDT), and that file."""
    d = tmp_path_factory.mktemp("drift-file")
    ticks = d / "spot.ticks"
    r = cli("convert", f"binance:{SPOT}", "--out", str(ticks))
    assert r.returncode == 0, r.stderr
    r = cli("train", f"tickfile:{ticks}", "--out", str(d / "m"), "--trees", "20", "--backends", "flat", timeout=900)
    assert r.returncode == 0, r.stderr
    return ticks, d / "m"


def test_a_models_training_file_gives_no_drift_by_the_command_a_user_types(trained_on_file, tmp_path):
    ticks, m = trained_on_file
    sk = artifact.read_manifest(m)["drift"]
    for source in (str(ticks), f"tickfile:{ticks}"):  # a plain path is a tick file
        r = cli("model", "drift", source, "--model", str(m), "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        # the same rows on both sides: every row the strategy scores (the labelled train split is a fraction)
        assert out["rows"] == out["reference_rows"] == sk["rows"], (out["rows"], sk["rows"])
        assert set(out["features"]) == set(NAMES) and max(out["features"].values()) < 0.05 and out["score"] < 0.05, out
    rows = artifact.read_manifest(m)["training"]["rows"]
    assert sk["rows"] > 2 * sum(rows.values()), (sk["rows"], rows)
    # another market of the same day (the USD-M perpetual): shifted
    usdm = tmp_path / "usdm.ticks"
    assert cli("convert", f"binance:{USDM}", "--out", str(usdm)).returncode == 0
    r = cli("model", "drift", str(usdm), "--model", str(m), "--json")
    assert r.returncode == 0, r.stderr
    assert max(json.loads(r.stdout)["features"].values()) > 0.25, r.stdout
    missing = cli("model", "drift", str(tmp_path / "none.ticks"), "--model", str(m))
    assert missing.returncode == 2 and "none.ticks: no such file" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr


def _run_drift(tmp_path, name, feed, model):
    """`engine run --drift` over `feed` to its end: its JSON summary and its drift record."""
    sig = tmp_path / f"{name}.sig"
    r = cli("run", "--no-rt", "--http", "none", "--pub", "none", "--hlog", "none", "--name",
            f"enginetest-{name}-{os.getpid()}", "--feed", feed, "--model", str(model), "--drift", "--signals-out",
            str(sig), "--json", timeout=900)
    assert r.returncode == 0, r.stderr
    rec = cli("model", "drift", str(sig), "--json")
    assert rec.returncode == 0, rec.stderr
    return json.loads(r.stdout), json.loads(rec.stdout)


def test_a_live_run_bins_every_row_its_loop_scores(trained_on_file, sketched, tmp_path):
    ticks, m = trained_on_file
    # its training file replayed: every tick scored (a file feed waits for the loop), every one binned,
    # against the same rows: no drift
    res, rec = _run_drift(tmp_path, "drift-file", f"tickfile:{ticks}", m)
    assert res["drift"]["rows"] == res["scored"] == rec["rows"] == rec["reference_rows"], (res, rec)
    assert max(rec["features"].values()) < 0.05 and rec["score"] < 0.05, rec
    # a live source written flat out: the loop conflates, and what it folded unscored is binned too
    # (the rows offline drift and the sketch count); fewer ticks than the tap holds: none lapped
    d, _ = sketched
    res, rec = _run_drift(tmp_path, "drift-live", SAME + "&count=150000&rate=0", d)
    assert res["drift"]["rows"] == rec["rows"] == res["scored"] + res["conflated"], res
    assert res["drift"]["gaps"] == res["drift"]["lost"] == 0 and res["ticks"] == 150_000, res["drift"]

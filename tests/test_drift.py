"""Drift (models/drift.py, app/drift_monitor.py): an artifact keeps its training rows' feature and score
distributions; PSI is exactly 0 on those rows and rises on a shifted synthetic market, offline
(`engine model drift`) and live (`engine run --drift`: summary, /status, Prometheus); a model that
keeps no distribution says so in one line."""
import json
import os

import pytest

from models import artifact, dataset, drift
from models.build import build_artifact, train
from tests.conftest import builtin_features, strategy_core, strategy_rows
from tests.helpers.daemon import Daemon, scrape, wait_until
from tests.helpers.feedutil import cli
from tests.test_hot_swap import second_model  # noqa: F401  (a model built without a training sketch)

NAMES = builtin_features()
SAME = "synthetic://?instruments=4&seed=5&trade_prob=0.1"
SHIFTED = "synthetic://?instruments=4&seed=77&trade_prob=0.8"  # trades 8x as often: flow, volatility move


@pytest.fixture(scope="module")
def sketched(tmp_path_factory):
    """A real model with its training sketch, and the rows it was trained on."""
    X, inst, mid, _ = strategy_rows(SAME + "&count=100000")
    y = dataset.binary_labels(inst, mid, 10)
    keep = y != dataset.NO_LABEL
    X, y = X[keep], y[keep]
    tr, va = len(X) * 6 // 10, len(X) * 8 // 10
    b = train(X[:tr], y[:tr], X[tr:va], y[tr:va], trees=20, depth=3, feature_names=NAMES, progress_every=1000)
    d = tmp_path_factory.mktemp("drift") / "sketched"
    from engine.strategy_load import load
    build_artifact(d, b, X[va:], feature_names=NAMES, backends=("flat",), strategy=load("microstructure").identity(),
                   reference=X[:tr])
    return d, X[:tr]


def test_psi_is_zero_on_the_training_rows_and_rises_when_the_market_shifts(sketched):
    d, X_train = sketched
    man = artifact.read_manifest(d)
    sk = drift.check(man, str(d))
    assert sk["rows"] == len(X_train) and set(sk["features"]) == set(NAMES)
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
    # the market it was trained on, to its end (its price walks on: the later rows are not the training rows')
    same = cli("model", "drift", SAME + "&count=100000", "--model", str(d), "--json", timeout=300)
    assert same.returncode == 0, same.stderr
    s = json.loads(same.stdout)
    assert s["rows"] > 90_000 and max(s["features"].values()) < 0.25 and s["score"] < 0.1, s
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

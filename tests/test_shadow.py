"""`engine run --shadow MODEL` (app/shadow.py): candidates scored on the ticks the live loop read,
never published. A shadow's signal file is what `engine backtest` of the run's recording gives with
that model, field for field; the live model as a shadow gives the live file's decisions;
`engine shadow report` compares them (agreement, score correlation, PnL through the backtest's
execution); a shadow that fails to load is refused by name before anything runs."""
import json
import os
import subprocess

import numpy as np
import pyarrow.parquet as pq

from engine.records import SIGNAL_FLAG_MARK
from engine.signal_log import read_signals
from tests.conftest import engine_cmd, engine_env, strategy_core
from tests.helpers.feedutil import cli, one_line_error
from tests.test_hot_swap import second_model  # noqa: F401  (a fixture: another real model)
from tests.test_replay import ticks_file

FIELDS = ("seq", "tick_seq", "instrument", "ts_event", "position", "prev_position", "score", "margin", "decision",
          "wanted", "flags", "folded")


def _decisions(path):
    r = read_signals(path)
    return r[(r["flags"] & SIGNAL_FLAG_MARK) == 0]


def test_shadows_equal_the_backtest_of_the_recording_and_the_report_compares_them(tmp_path, default_model,
                                                                                  second_model):  # noqa: F811
    src = ticks_file(tmp_path, "synthetic://?instruments=4&count=40000&seed=12")
    rec, sig = tmp_path / "rec.ticks", tmp_path / "s.sig"
    r = cli("run", "--no-rt", "--core", str(strategy_core()), "--feed", f"tickfile:{src}", "--max", "--signals-out",
            str(sig), "--record", str(rec), "--shadow", str(second_model), "--shadow", str(default_model), "--json",
            "--name", f"shadow{os.getpid()}", timeout=600)
    assert r.returncode == 0, r.stderr
    shadows = {s["name"]: s for s in json.loads(r.stdout)["shadows"]}
    assert set(shadows) == {"model2", os.path.basename(str(default_model))}, shadows
    for s in shadows.values():
        assert s["error"] is None and s["gaps"] == 0 and s["ticks"] == 40_000, s
        assert s["signals"] == len(read_signals(s["signals_out"])) > 100
        assert os.stat(s["signals_out"]).st_mode & 0o077 == 0  # (the trading history is the owner's alone)
    # the candidate: what a backtest of the recording with it gives, field for field
    cand = shadows["model2"]
    b = cli("backtest", str(rec), "--model", str(second_model), "--out", str(tmp_path / "bt"), "--quiet", "--json",
            timeout=600)
    assert b.returncode == 0, b.stderr
    bt = pq.read_table(tmp_path / "bt" / "signals.parquet")
    ours = _decisions(cand["signals_out"])
    assert len(ours) == bt.num_rows
    for f in FIELDS:
        assert np.array_equal(ours[f], bt[f].to_numpy(), equal_nan=ours[f].dtype.kind == "f"), f
    # the live model as a shadow: the live decisions (a file feed waits for the loop: nothing conflated)
    live, same = _decisions(sig), _decisions(shadows[os.path.basename(str(default_model))]["signals_out"])
    assert len(live) == len(read_signals(sig))
    for f in FIELDS:
        assert np.array_equal(live[f], same[f], equal_nan=live[f].dtype.kind == "f"), f
    # the report: the live model against itself agrees everywhere; the candidate's PnL is its backtest's
    rp = cli("shadow", "report", str(sig), "--ticks", str(rec), "--json", timeout=300)
    assert rp.returncode == 0, rp.stderr
    rep = json.loads(rp.stdout)
    me = rep["shadows"][os.path.basename(str(default_model))]
    assert me["agreement"] == 1.0 and me["score_corr"] == 1.0 and me["pnl"] == rep["live"]["pnl"]
    other = rep["shadows"]["model2"]
    assert other["signals"] == cand["signals"] and other["agreement"] < 1.0 and -1.0 <= other["score_corr"] < 1.0
    assert other["pnl"] == json.loads(b.stdout)["pnl"] and other["fills"] == json.loads(b.stdout)["fills"]
    text = cli("shadow", "report", str(sig), timeout=300)
    assert text.returncode == 0 and "model2" in text.stdout and "agreement" in text.stdout, text.stderr


def test_a_parquet_run_gives_each_shadow_a_table_too(tmp_path, default_model, second_model):  # noqa: F811
    out = tmp_path / "s.parquet"
    r = cli("run", "--no-rt", "--core", str(strategy_core()), "--feed", "synthetic://?instruments=4&count=20000&seed=3",
            "--max", "--signals-out", str(out), "--shadow", str(second_model), "--json",
            "--name", f"shadowpq{os.getpid()}", timeout=600)
    assert r.returncode == 0, r.stderr
    (sh,) = json.loads(r.stdout)["shadows"]
    assert sh["signals_out"] == str(tmp_path / "s.shadow-model2.parquet"), sh
    t = pq.read_table(sh["signals_out"])
    raw = read_signals(tmp_path / "s.shadow-model2.sig")
    assert t.num_rows == len(raw) > 10 and np.array_equal(t["position"].to_numpy(), raw["position"])


def test_a_shadow_that_does_not_load_is_refused_by_name(tmp_path, default_model):
    bad = tmp_path / "notamodel"
    bad.mkdir()
    sig = tmp_path / "s.sig"
    r = cli("run", "--no-rt", "--feed", "synthetic://?instruments=2&count=1000", "--max", "--signals-out", str(sig),
            "--shadow", str(bad), "--name", f"shadowbad{os.getpid()}", timeout=300)
    assert r.returncode != 0 and f"--shadow {bad}:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list(tmp_path.glob("s.shadow-*")) and not sig.exists()
    r = cli("shadow", "report", str(tmp_path / "nothing.sig"))
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_an_empty_shadow_names_no_model_never_the_current_directory(tmp_path, default_model):
    """--shadow '' (and shadow.models = "", ctl shadow add ''): refused in one line, where it read the
    current directory as the candidate's model (here: a real model, which it would have loaded)."""
    from app.shadow import Shadows
    sig = tmp_path / "s.sig"
    args = ("run", "--no-rt", "--feed", "synthetic://?instruments=2&count=1000", "--max", "--signals-out", str(sig),
            "--http", "none", "--pub", "none", "--name", f"shadowempty{os.getpid()}")
    conf = tmp_path / "e.toml"
    conf.write_text('[shadow]\nmodels = ["", "registry:x"]\n')
    for extra in (("--shadow", ""), ("--config", str(conf))):
        r = subprocess.run(engine_cmd(*args, *extra), cwd=default_model, env=engine_env(), capture_output=True,
                           text=True, timeout=300)
        assert "--shadow '': names no model" in one_line_error(r), r.stderr
        assert not sig.exists() and not list(tmp_path.glob("s.shadow-*"))
    loaded = []
    shadows = Shadows(make=None, load=loaded.append)
    assert shadows.add("") == {"ok": False, "error": "--shadow '': names no model (a model directory, or "
                                                     "registry:NAME[@VERSION])"} and not loaded


def test_shadows_added_and_removed_while_the_run_goes(tmp_path, default_model, second_model):  # noqa: F811
    from engine.signal_log import status
    from tests.helpers.daemon import Daemon, wait_until
    name = f"enginetest-shadow-{os.getpid()}"
    d = Daemon(tmp_path, name, "--feed", "synthetic://?instruments=4&seed=3&rate=20000", "--record",
               str(tmp_path / "rec.ticks"), core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        live_id = d.status()["model"]["id"]
        bad = tmp_path / "broken"
        bad.mkdir()
        r = cli("ctl", "shadow", "add", str(bad), "--name", name)
        assert r.returncode == 1 and f"--shadow {bad}:" in r.stderr and "Traceback" not in r.stderr, r.stderr
        st = d.status()
        assert st["shadows"] == [] and st["model"]["id"] == live_id, st  # (nothing touched)
        assert d.proc.poll() is None  # (and the run goes on; /ready is the feed's and the loop's, not this)
        r = cli("ctl", "shadow", "add", str(second_model), "--name", name)
        assert r.returncode == 0 and r.stdout.startswith("shadow model2 added: model "), (r.stdout, r.stderr)
        wait_until(lambda: d.status()["shadows"][0]["signals"] > 5, "the added shadow's signals")
        st = cli("stats", "--name", name)
        assert st.returncode == 0 and "  shadow model2: " in st.stdout, st.stdout
        r = cli("ctl", "shadow", "list", "--name", name, "--json")
        (row,) = json.loads(r.stdout)
        assert row["name"] == "model2" and row["ticks"] > 0 and row["error"] is None, row
        r = cli("ctl", "shadow", "remove", "model2", "--name", name, "--json")
        gone = json.loads(r.stdout)
        assert r.returncode == 0 and gone["ok"] and gone["signals"] >= row["signals"], r.stdout
        path = gone["signals_out"]
        assert status(path)["complete"] and len(read_signals(path)) == gone["signals"]  # (closed whole)
        assert d.status()["shadows"] == []
        r = cli("ctl", "shadow", "remove", "model2", "--name", name)
        assert r.returncode == 1 and "no shadow 'model2' running" in r.stderr, r.stderr
        assert cli("ctl", "shadow", "add", str(second_model), "--name", name).stdout.startswith("shadow model2-2 added")
    finally:
        out = d.stop()
    assert d.proc.returncode == 0, d.log()[-3000:]
    assert "shadow model2-2: " in out and "shadow model2: " in out, out  # (the summary: both, the removed one too)
    assert len(read_signals(path)) == gone["signals"]  # (its file untouched after the removal)

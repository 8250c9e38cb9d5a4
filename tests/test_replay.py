"""Record, replay, backtest, live/backtest parity, and Dask."""
import json
import shutil
import signal
import subprocess
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.tickfile import TickFile

from tests.conftest import ROOT, converted, engine_cmd, engine_env
from tests.helpers.data import ESH4, SPOT, whole_capture
from tests.helpers.feedutil import cli

REAL = {"binance": SPOT, "dbn": ESH4}
REAL.update({f"{k}-whole": whole_capture(p) for k, p in list(REAL.items()) if whole_capture(p)})


def same_table(a, b):
    """Equal column by column (NaN equal to NaN, as in the forward returns past the data's end)."""
    assert a.column_names == b.column_names
    for c in a.column_names:
        x, y = a.column(c).to_numpy(zero_copy_only=False), b.column(c).to_numpy(zero_copy_only=False)
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), c
        else:
            assert list(x) == list(y), c
    return True


def ticks_file(tmp_path, uri, name="t.ticks"):
    """`engine convert URI --out tmp_path/name`: a copy of the session's conversion (conftest.converted)."""
    out = tmp_path / name
    shutil.copyfile(converted(uri), out)
    return out


def popen(*args):
    return subprocess.Popen(engine_cmd(*args), cwd=ROOT, env=engine_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_replay_into_a_ring_and_record_it_back(tmp_path, shm_name):
    src = ticks_file(tmp_path, "synthetic://?instruments=2&count=30000&seed=5")
    rec = tmp_path / "rec.ticks"
    player = popen("replay", str(src), "--ring", shm_name, "--max", "--wait-consumers", "1")
    r = cli("record", "--ring", shm_name, "--out", str(rec), "--from-oldest", "--wait", "60", "--json")
    player.communicate(timeout=60)
    assert r.returncode == 0 and player.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"ticks": 30000, "gaps": 0, "lost": 0, "out": str(rec)}
    a, b = TickFile(src).ticks, TickFile(rec).ticks
    assert TickFile(rec).instruments == ["SYN0000", "SYN0001"]  # published beside the ring by the player
    for f in a.dtype.names:
        if f != "ts_recv":  # the replay stamps its publish time
            assert np.array_equal(a[f], b[f]), f


def test_sigterm_leaves_a_complete_file_readable_while_recording(tmp_path, shm_name):
    src = ticks_file(tmp_path, "synthetic://?instruments=2&count=200000&seed=6&gap_us=50")  # ~10 s of ticks
    rec = tmp_path / "rec.ticks"
    player = popen("replay", str(src), "--ring", shm_name, "--wait-consumers", "1")
    recorder = popen("record", "--ring", shm_name, "--out", str(rec), "--from-oldest", "--wait", "60")
    try:
        deadline = time.monotonic() + 60
        while not (rec.exists() and len(TickFile(rec)) > 1000):
            assert time.monotonic() < deadline and recorder.poll() is None, "nothing recorded"
            time.sleep(0.05)
        live = TickFile(rec)  # while it is being written
        assert not live.complete
        n_live = len(live)
        recorder.send_signal(signal.SIGTERM)
        recorder.communicate(timeout=30)
        assert recorder.returncode == 0
    finally:
        player.send_signal(signal.SIGTERM)
        player.communicate(timeout=30)
    done = TickFile(rec)
    assert done.complete and n_live <= len(done) < 200000
    assert np.array_equal(done.ticks["price"][:n_live], live.ticks["price"])
    assert np.array_equal(done.ticks["price"], TickFile(src).ticks["price"][:len(done)])


def _parity(tmp_path, src, core, *extra, min_signals=50):
    """`engine run --feed tickfile:SRC` and `engine backtest SRC` (with the same extra strategy/model
    options) give the same signals: tick seqs, scores and margins bit for bit, positions."""
    live = tmp_path / "live.parquet"
    r = cli("run", "--no-rt", "--core", str(core), "--feed", f"tickfile:{src}", "--max", "--signals-out", str(live),
            "--name", f"parity{id(tmp_path) % 10**6}", "--json", *extra, timeout=600)
    assert r.returncode == 0, r.stderr
    run = json.loads(r.stdout)
    assert run["lost"] == 0 and run["gaps"] == 0 and run["ticks"] == len(TickFile(src))
    bt = tmp_path / "bt"
    r = cli("backtest", str(src), "--out", str(bt), "--quiet", "--json", *extra, timeout=600)
    assert r.returncode == 0, r.stderr
    a, b = pq.read_table(live), pq.read_table(bt / "signals.parquet")
    assert a.num_rows == b.num_rows > min_signals
    assert a.column("tick_seq").to_pylist() == b.column("tick_seq").to_pylist()
    for col in ("score", "margin"):  # bit for bit
        assert np.array_equal(a.column(col).to_numpy().view(np.uint32), b.column(col).to_numpy().view(np.uint32)), col
    for col in ("position", "prev_position", "side", "prev_side", "instrument", "ts_event", "mid_px", "symbol"):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col
    assert a.schema.metadata[b"engine.symbols"] == b.schema.metadata[b"engine.symbols"] != b"[]"
    from engine.instruments import parse  # what each instrument is went from the file through the ring
    assert parse(json.loads(a.schema.metadata[b"engine.instruments"]))[1] == TickFile(src).specs
    return json.loads(r.stdout), a


def test_live_run_and_backtest_give_the_same_signals_synthetic(tmp_path, default_model):
    from tests.conftest import strategy_core
    src = ticks_file(tmp_path, "synthetic://?instruments=4&count=40000&seed=12")
    _parity(tmp_path, src, strategy_core())


@pytest.mark.parametrize("which", sorted(REAL))
def test_live_run_and_backtest_give_the_same_signals_on_real_data(tmp_path, default_model, which):
    from tests.conftest import strategy_core
    src = ticks_file(tmp_path, f"{which.split('-')[0]}:{REAL[which]}")
    _parity(tmp_path, src, strategy_core())


def test_backtest_is_deterministic_and_reports_everything(tmp_path, default_model):
    src = ticks_file(tmp_path, "synthetic://?instruments=3&count=60000&seed=8")
    outs = []
    for k in range(2):
        r = cli("backtest", str(src), "--out", str(tmp_path / f"bt{k}"), "--fee-bps", "0.5", "--latency-us", "50",
                "--horizons-ms", "1,5,20", "--quiet", "--json", timeout=600)  # the simulated day lasts ~0.6 s
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout))
    for k in ("signals", "pnl", "ic", "hit_rate_5ms", "max_drawdown", "turnover_units", "fees"):
        assert outs[0][k] == outs[1][k], k
    a, b = (pq.read_table(tmp_path / f"bt{k}" / "signals.parquet") for k in range(2))
    assert same_table(a, b)
    names = ["SYN0000", "SYN0001", "SYN0002"]  # the table names its instruments and price scale
    assert json.loads(a.schema.metadata[b"engine.symbols"]) == names
    assert int(a.schema.metadata[b"engine.price_scale"]) == 10**9
    assert a.column("symbol").to_pylist() == [names[i] for i in a.column("instrument").to_pylist()]
    rep = outs[0]
    assert rep["signals"] > 100 and rep["fills"] > 0 and rep["turnover_units"] >= rep["fills"]
    assert 0 <= rep["hit_rate_1ms"] <= 1 and rep["ic"] is not None and rep["max_drawdown"] >= 0
    for f in ("report.md", "report.json", "pnl.png", "drawdown.png", "position.png", "scores.png", "compute_time.png"):
        p = tmp_path / "bt0" / f
        assert p.stat().st_size > 200, f
    assert (tmp_path / "bt0" / "pnl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "bt0" / "report.md").read_text()
    assert "![cumulative PnL](pnl.png)" in md and "hit_rate_5ms" in md
    cols = a.column_names
    for c in ("tick_seq", "instrument", "symbol", "ts_event", "score", "side", "fwd_bps_5ms", "fill_px"):
        assert c in cols, c
    assert str(a.schema.field("score").type) == "float"


def test_fees_and_latency_are_charged(tmp_path, default_model):
    """The same signals, a worse PnL with fees, fills that move with the latency."""
    src = ticks_file(tmp_path, "synthetic://?instruments=2&count=40000&seed=9")
    res = {}
    for name, extra in {"free": [], "fee": ["--fee-bps", "5"], "slow": ["--latency-us", "5000"]}.items():
        r = cli("backtest", str(src), "--out", str(tmp_path / name), "--quiet", "--json", *extra, timeout=600)
        assert r.returncode == 0, r.stderr
        res[name] = json.loads(r.stdout)
    assert res["fee"]["signals"] == res["free"]["signals"]
    assert res["fee"]["fees"] > 0 and res["free"]["fees"] == 0
    assert res["fee"]["pnl"] == pytest.approx(res["free"]["pnl"] - res["fee"]["fees"], rel=1e-9, abs=1e-6)
    fa = pq.read_table(tmp_path / "free" / "signals.parquet").column("fill_ts_event").to_numpy()
    fb = pq.read_table(tmp_path / "slow" / "signals.parquet").column("fill_ts_event").to_numpy()
    filled = (fa > 0) & (fb > 0)
    assert filled.any() and (fb[filled] >= fa[filled]).all() and (fb[filled] > fa[filled]).any()


def test_dask_workers_merge_to_the_same_result_as_one(tmp_path, default_model):
    files = [str(ticks_file(tmp_path, f"synthetic://?instruments=2&count=25000&seed={s}", f"f{s}.ticks"))
             for s in (1, 2, 3)]
    outs = {}
    for w in (1, 2):
        r = cli("backtest", *files, "--out", str(tmp_path / f"w{w}"), "--workers", str(w), "--json",
                "--horizons-ms", "1,5,20", timeout=600)
        assert r.returncode == 0, r.stderr
        outs[w] = json.loads(r.stdout)
        assert r.stderr.count("files:") >= 3  # progress, one line per file
    for k in ("signals", "pnl", "ic", "hit_rate_5ms", "max_drawdown", "turnover_units", "ticks"):
        assert outs[1][k] == outs[2][k] and outs[1][k] is not None, k
    assert outs[2]["workers"] == 2 and outs[1]["ticks"] == 75000
    a = pq.read_table(tmp_path / "w1" / "signals.parquet")
    b = pq.read_table(tmp_path / "w2" / "signals.parquet")
    assert same_table(a, b) and sorted(set(a.column("file").to_pylist())) == [0, 1, 2]


def test_backtest_on_an_existing_dask_scheduler(tmp_path, default_model):
    """--scheduler ADDRESS: the files run on a cluster the command did not start."""
    from dask.distributed import LocalCluster
    files = [str(ticks_file(tmp_path, f"synthetic://?instruments=2&count=15000&seed={s}", f"f{s}.ticks")) for s in (4, 5)]
    one = cli("backtest", *files, "--out", str(tmp_path / "one"), "--json", "--quiet", "--horizons-ms", "1,5,20")
    assert one.returncode == 0, one.stderr
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        r = cli("backtest", *files, "--out", str(tmp_path / "ext"), "--scheduler", cluster.scheduler_address,
                "--json", "--horizons-ms", "1,5,20", timeout=600)
        assert r.returncode == 0, r.stderr
        assert cluster.scheduler_address in r.stderr
    a, b = json.loads(one.stdout), json.loads(r.stdout)
    for k in ("signals", "pnl", "ic", "hit_rate_5ms", "ticks"):
        assert a[k] == b[k], k

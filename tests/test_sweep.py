"""`engine sweep`: a backtest per grid cell, on Dask, cached so a rerun resumes."""
import json
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.conftest import engine_cmd, engine_env


def cli(*args):
    return subprocess.run(engine_cmd(*args), env=engine_env(), capture_output=True, text=True, timeout=900)


def test_a_sweep_matches_single_backtests_and_resumes_from_its_cache(tmp_path, default_model):
    ticks = tmp_path / "s.ticks"
    assert cli("convert", "synthetic://?instruments=2&count=15000&seed=3", "--out", str(ticks)).returncode == 0
    out = tmp_path / "sw"
    r = cli("sweep", str(ticks), "--grid", "enter_long=0.6|0.7,latency_us=0|300", "--out", str(out),
            "--orders", "maker", "--workers", "2", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert (first["cells"], first["computed"], first["cached"]) == (4, 4, 0)
    t = pq.read_table(out / "sweep.parquet").to_pylist()
    assert len(t) == 4 and {(x["enter_long"], x["latency_us"]) for x in t} == {(0.6, 0), (0.6, 300), (0.7, 0), (0.7, 300)}
    assert (out / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    # one cell = the backtest with those settings
    cell = next(x for x in t if x["enter_long"] == 0.7 and x["latency_us"] == 300)
    b = cli("backtest", str(ticks), "--out", str(tmp_path / "bt"), "--param", "enter_long=0.7", "--latency-us", "300",
            "--orders", "maker", "--json", "--quiet")
    assert b.returncode == 0, b.stderr
    one = json.loads(b.stdout)
    for k in ("signals", "fills", "pnl", "fees"):
        assert cell[k] == one[k], k
    assert len({x["pnl"] for x in t}) > 1, "the parameters must change the result"
    # a larger grid: only the new cells run
    r = cli("sweep", str(ticks), "--grid", "enter_long=0.6|0.7|0.8,latency_us=0|300", "--out", str(out),
            "--orders", "maker", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert (again["cells"], again["computed"], again["cached"]) == (6, 2, 4)
    assert [x for x in again["rows"] if x["enter_long"] != 0.8] == first["rows"]


@pytest.mark.parametrize("grid,msg", [("nope=1|2", "unknown parameter 'nope'"), ("enter_long=0.8:0.6:0.1", "hi >= lo"),
                                      ("enter_long", "NAME=VALUES")])
def test_a_bad_grid_is_one_line(tmp_path, grid, msg):
    ticks = tmp_path / "s.ticks"
    assert cli("convert", "synthetic://?count=2000", "--out", str(ticks)).returncode == 0
    r = cli("sweep", str(ticks), "--grid", grid, "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr

"""One clock for a run: `engine run` over several tick files reads their ticks in the order
`engine backtest --merge` does, flat out (--max) and paced (--speed), and a replayed tick keeps the
data's own receive time (wall time only paces it), so everything that reads time gives the
backtest's answer: the signals, the recording, and a risk limit that binds nothing cuts nothing.
On two venues' real captures (tests/data: Binance USD-M leading spot, the shipped lead_lag)."""
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from engine.records import SIGNAL_FLAG_MARK
from engine.signal_log import read_signals
from engine.tickfile import TickFile
from tests.conftest import ROOT, converted
from tests.helpers.feedutil import cli

DATA = ROOT / "tests" / "data" / "binance"
RUN = ("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--json", "--strategy", "lead_lag")
COLUMNS = ("seq", "tick_seq", "instrument", "ts_event", "ts_recv", "mid_px", "position", "prev_position", "margin",
           "flags", "wanted", "decision")


def _ok(r):
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def venues(tmp_path_factory):
    """(usdm ticks, spot ticks, a lead_lag model trained on them, the merged backtest's directory)."""
    d = tmp_path_factory.mktemp("clock")
    usdm = converted(f"binance:{DATA / 'usdm_btcusdt_20240808_45s.gz'}")
    spot = converted(f"binance:{DATA / 'spot_btcusdt_20240808_45s.gz'}")
    model = d / "ll"
    _ok(cli("train", "--strategy", "lead_lag", "--merge", f"tickfile:{usdm}", f"tickfile:{spot}", "--out",
            str(model), "--horizon", "500", "--horizon-unit", "ms", "--trees", "30", timeout=900))
    bt = d / "bt"
    _ok(cli("backtest", "--strategy", "lead_lag", "--model", str(model), "--merge", str(usdm), str(spot), "--out",
            str(bt), "--quiet", "--json", timeout=900))
    return usdm, spot, model, bt


def _run(venues, tmp_path, name, *args, record=True):
    usdm, spot, model, _ = venues
    rec, sig = tmp_path / "rec.ticks", tmp_path / "run.sig"
    r = _ok(cli(*RUN, "--model", str(model), "--feed", f"tickfile:{usdm}", "--feed", f"tickfile:{spot}",
                *(("--record", str(rec)) if record else ()), "--signals-out", str(sig), "--name", name, *args,
                timeout=600))
    return json.loads(r.stdout), rec, sig


def _same_signals(sig, bt_dir):
    live = read_signals(sig)
    live = live[(live["flags"] & SIGNAL_FLAG_MARK) == 0]
    bt = pq.read_table(bt_dir / "signals.parquet")
    assert len(live) == bt.num_rows > 10
    for col in COLUMNS:
        assert np.array_equal(live[col], bt.column(col).to_numpy().astype(live[col].dtype)), col


@pytest.mark.parametrize("pace", [("--max",), ("--speed", "20")], ids=["max", "speed20"])
def test_a_run_over_two_files_is_their_merged_backtest(venues, tmp_path, shm_name, pace):
    """Flat out or paced on the run's one clock, the loop reads the two files in the merged
    backtest's order (its recording is OUT/merged.ticks word for word, the files' receive times
    kept) and makes its signals, bit for bit; the venue switches where the data switches."""
    res, rec, sig = _run(venues, tmp_path, shm_name, *pace)
    merged = TickFile(venues[3] / "merged.ticks").words
    got = TickFile(rec).words
    assert np.array_equal(got, merged)
    inst = got[:, 7] >> 48  # (the run's instrument ids: usdm 0, spot 1)
    assert np.count_nonzero(np.diff(inst)) > 1000  # (interleaved, not one file after the other)
    _same_signals(sig, venues[3])
    assert res["signals"] == len(read_signals(sig)[(read_signals(sig)["flags"] & SIGNAL_FLAG_MARK) == 0])
    lat = res["latency_ns"]
    if pace == ("--max",):  # no pace, no time a tick was due: not measured, and said so
        assert lat["ring"]["count"] == lat["tick_to_signal"]["count"] == 0
    else:  # measured from when each tick was due on the run's clock: positive, and every tick
        assert lat["ring"]["count"] == res["ticks"] and lat["ring"]["p50"] > 0


def test_limits_that_bind_nothing_cut_nothing_across_venues(venues, tmp_path, shm_name):
    """lead_lag decides the spot instrument on the perpetual's ticks too, whose exchange clock runs
    apart from spot's: the flip and rate rules read each instrument's own clock, so limits that
    bind nothing change no signal (and the merged backtest with the same limits agrees)."""
    limits = ("--risk-max-position", "1e9", "--risk-min-flip-ms", "0", "--risk-max-rate", "1e9")
    res, _, sig = _run(venues, tmp_path, shm_name, "--max", *limits)
    assert not any(res["risk"]["blocked"].values()), res["risk"]
    _same_signals(sig, venues[3])
    usdm, spot, model, _ = venues
    rep = json.loads(_ok(cli("backtest", "--strategy", "lead_lag", "--model", str(model), "--merge", str(usdm),
                             str(spot), "--out", str(tmp_path / "bt"), "--quiet", "--json", *limits)).stdout)
    assert not any(rep["risk"]["blocked"].values())


@pytest.mark.parametrize("pace,record", [(("--speed", "20"), False), (("--max", "--conflate", "on"), True)],
                         ids=["speed20-files", "conflated-recording"])
def test_paper_at_any_pace_is_the_backtest_it_names(venues, tmp_path, shm_name, pace, record):
    """A paper run with an order-entry latency, paced (the replay keeps the data's receive times,
    so orders arrive when the backtest's do) or conflating (the loop's own choices): its report is
    the backtest it names in its summary, which is the merged backtest with the same flags, and
    with the run's signal file when the loop conflated. Run as printed, to the last digit."""
    import shlex

    from tests.conftest import engine_cmd
    res, _, sig = _run(venues, tmp_path, shm_name, *pace, "--paper", "--paper-exec", "--latency-us 200",
                       "--paper-out", str(tmp_path / "paper"), record=record)
    p = res["paper"]
    assert p["error"] is None and p["gaps"] == 0 and p["online"]["late_orders"] == 0, p
    cmd = shlex.split(p["backtest"])
    assert cmd[:2] == ["engine", "backtest"] and "--latency-us" in cmd and ("--merge" in cmd) != record, cmd
    assert ("--conflate-as-recorded" in cmd) == (pace[0] == "--max") and (res["conflated"] > 0) == (pace[0] == "--max")
    import subprocess
    b = subprocess.run(engine_cmd(*cmd[1:], "--json", "--quiet"), cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env=__import__("tests.conftest", fromlist=["engine_env"]).engine_env())
    assert b.returncode == 0, b.stderr
    bt = json.loads(b.stdout)
    assert bt["fills"] == p["fills"] > 5 and bt["signals"] == p["signals"]
    assert (bt["pnl"], bt["pnl_gross"], bt["fees"]) == (p["pnl"], p["pnl_gross"], p["fees"]) and bt["currency"] == "USDT"
    assert round(p["online"]["net"], 2) == round(p["pnl"], 2)

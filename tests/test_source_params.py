"""Every source parameter is honoured by every command that takes the source, or refused with one
line (app/source_params.py): `engine record` keeps a synthetic source's rate=, the commands that
read as fast as they can refuse it, and a command's own flag for sources it was not given is
refused before anything is opened or made. --instruments, book_ticker and --quiet mean one thing
each."""
import glob

import numpy as np
import pytest

from engine.tickfile import TickFile

from tests.helpers.data import SPOT as BINANCE
from tests.helpers.feedutil import cli, one_line_error

TS_RECV = 2


def test_record_keeps_a_synthetic_sources_rate(tmp_path):
    """rate=1000 for 2 s: about 2,000 ticks (flat out the simulator makes hundreds of thousands a
    second), each received no earlier than its due time: the k-th tick's ts_recv at least k / rate
    after the first's."""
    rate, duration = 1000, 2
    r = cli("record", f"synthetic://?rate={rate}&seed=3", "--out", str(tmp_path), "--duration", str(duration),
            "--progress", "0.2", "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = glob.glob(str(tmp_path / "*" / "*.ticks"))
    f = TickFile(path)
    n = len(f)
    assert 0 < n < 10 * rate * duration, n
    recv = f.words[:, TS_RECV]
    assert (np.diff(recv) >= 0).all()
    assert recv[-1] - recv[0] >= (n - 2) * 1e9 / rate, (n, (recv[-1] - recv[0]) / 1e9)
    assert f"recorded {n:,} ticks" in r.stderr  # the result, whatever --quiet
    assert "/s) ->" not in r.stderr  # no progress line (one each 0.2 s without --quiet)


# (argv, what the one line must name); none of them opens a source or makes an output
REFUSED = [
    (["convert", "synthetic://?rate=1000&count=10", "--out", "{d}/x.ticks"], ["rate=1000", "engine convert"]),
    (["features", "synthetic://?rate=5", "--out", "{d}/x.csv"], ["rate=5", "engine features"]),
    (["train", "synthetic://?rate=5", "--out", "{d}/m"], ["rate=5", "engine train"]),
    (["moldudp64", "serve", "synthetic://?rate=5&count=3", "--dest", "127.0.0.1:9"],
     ["rate=5", "engine moldudp64 serve"]),
    (["feed", f"binance:{BINANCE}", "--rate", "5", "--ring", "{ring}"], ["--rate", "engine feed", "binance:"]),
    (["feed", "synthetic://?rate=5", "--rate", "7", "--ring", "{ring}"], ["--rate", "rate=5"]),
    (["feed", "synthetic://?count=5", "--count", "7", "--ring", "{ring}"], ["--count", "count=5"]),
    (["feed", "synthetic://", "--speed", "2", "--ring", "{ring}"], ["--speed", "file"]),
    (["feed", "binance-live://spot?symbols=BTCUSDT", "--max", "--ring", "{ring}"], ["--max", "binance-live:"]),
    (["run", "--feed", f"binance:{BINANCE}", "--rate", "5"], ["--rate", "engine run", "binance:"]),
    (["run", "--feed", "synthetic://?instruments=2", "--sim-seed", "3"], ["--sim-seed", "synthetic://?seed=N"]),
    (["run", "--ring", "{ring}", "--sim-instruments", "3"], ["--sim-instruments", "--ring"]),
    (["run", "--speed", "2"], ["--speed", "built-in synthetic feed"]),
    (["run", "--max", "--feed", "binance-live://spot?symbols=BTCUSDT"], ["--max", "binance-live:"]),
    (["features", f"binance:{BINANCE}", "--ticks", "5", "--out", "{d}/x.csv"], ["--ticks", "binance:"]),
    (["model", "drift", "x.ticks", "--ticks", "5"], ["--ticks", "x.ticks"]),
]


@pytest.mark.parametrize("argv, said", REFUSED, ids=[" ".join(a[:2]) + f" {i}" for i, (a, _) in enumerate(REFUSED)])
def test_what_a_command_cannot_honour_is_one_line(argv, said, tmp_path, shm_name):
    argv = [a.format(d=tmp_path, ring=shm_name) for a in argv]
    line = one_line_error(cli(*argv, timeout=120))
    for s in said:
        assert s in line, (s, line)
    assert list(tmp_path.iterdir()) == []


def test_the_same_run_flag_from_the_config_file_is_refused_too(tmp_path):
    conf = tmp_path / "e.toml"
    conf.write_text(f'[feed]\nuri = "binance:{BINANCE}"\nsim_seed = 3\n')
    line = one_line_error(cli("run", "--config", str(conf), timeout=120))
    assert "--sim-seed" in line and "feed.sim_seed" in line


def test_a_pace_of_flat_out_is_what_convert_does(tmp_path):
    r = cli("convert", "synthetic://?rate=0&count=500", "--out", str(tmp_path / "x.ticks"), "--quiet")
    assert r.returncode == 0, r.stderr
    assert len(TickFile(str(tmp_path / "x.ticks"))) == 500


@pytest.mark.parametrize("old, new", [("instruments", "sim_instruments"), ("seed", "sim_seed")])
def test_runs_synthetic_feed_options_are_sim_ones(old, new, tmp_path):
    """--instruments is a file of instrument records and --seed the execution simulator's (engine
    backtest, --paper-exec): engine run's synthetic feed's are --sim-*, and the other names, as flags
    or keys, say so."""
    line = one_line_error(cli("run", f"--{old}", "8"), starts=("engine run: error: ",))
    assert f"--{new.replace('_', '-')} N" in line and "engine backtest" in line and "--paper-exec" in line, line
    conf = tmp_path / "e.toml"
    conf.write_text(f"[feed]\n{old} = 8\n")
    line = one_line_error(cli("run", "--config", str(conf)))
    assert f"'feed.{new}'" in line, line


@pytest.mark.parametrize("uri, said", [
    (f"binance:{BINANCE}?book_ticker=1", "one of quote, check, got"),
    (f"binance:{BINANCE}?book_ticker=off", "binance-live"),
    ("binance-live://spot?symbols=BTCUSDT&book_ticker=1", "one of quote, check, off, got"),
])
def test_book_ticker_takes_one_set_of_values(uri, said, tmp_path):
    line = one_line_error(cli("convert", uri, "--out", str(tmp_path / "x.ticks"), timeout=600))
    assert "book_ticker" in line and said in line, line


# the commands that print progress on stderr: each takes --quiet (no progress lines)
QUIET = [("run",), ("feed",), ("replay",), ("convert",), ("record",), ("features",), ("backtest",), ("sweep",),
         ("moldudp64", "serve"), ("train",)]


def test_every_command_that_prints_progress_takes_quiet():
    from app.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "cmd").choices
    for path in QUIET:
        p = sub[path[0]]
        for word in path[1:]:
            p = next(a for a in p._actions if hasattr(a, "choices") and a.choices and word in a.choices).choices[word]
        assert any("--quiet" in a.option_strings for a in p._actions), path


def test_feed_quiet_prints_no_progress(shm_name):
    r = cli("feed", "synthetic://?count=2000&seed=2", "--max", "--ring", shm_name, "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    r = cli("feed", "synthetic://?count=2000&seed=2", "--max", "--ring", shm_name)
    assert r.returncode == 0 and "[feed] published 2000 ticks" in r.stderr, r.stderr


def test_run_and_train_quiet_print_no_progress(shm_name, tmp_path):
    """engine run --quiet: no [engine]/[feed]/[model] progress line, the summary still printed;
    engine train --quiet: its JSON result and nothing on stderr."""
    r = cli("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--hlog", "none", "--quiet",
            "--feed", "synthetic://?instruments=2&count=3000&seed=2", "--max", "--name", shm_name,
            "--signals-out", str(tmp_path / "q.sig"), timeout=600)
    assert r.returncode == 0, r.stderr
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith(("[engine]", "[feed]", "[model]"))
                and "warning" not in ln], r.stderr
    assert "engine run:" in r.stdout and "ticks 3,000" in r.stdout
    r = cli("train", "synthetic://?instruments=2&count=20000&seed=3&rate=0", "--out", str(tmp_path / "m"),
            "--trees", "5", "--quiet", timeout=900)
    assert r.returncode == 0, r.stderr
    assert "[model]" not in r.stderr and '"artifact"' in r.stdout


def test_a_plain_path_is_a_tick_file_for_every_command(shm_name, tmp_path):
    """README: a SOURCE is "a tick file or source URI": a plain path names a tick file wherever a
    source is taken (it was refused, or read as a URI '/path?depth=0'); a path that is no file is
    one line naming it."""
    from tests.conftest import converted
    f = converted("synthetic://?instruments=2&count=20000&seed=5&rate=0")
    r = cli("train", str(f), "--out", str(tmp_path / "m"), "--trees", "3", "--quiet", timeout=900)
    assert r.returncode == 0, r.stderr
    r = cli("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--quiet", "--feed", str(f), "--max",
            "--name", shm_name, "--signals-out", str(tmp_path / "p.sig"), "--json", timeout=600)
    assert r.returncode == 0 and '"ticks": 20000' in r.stdout, r.stderr
    for cmd in (("train", str(tmp_path / "none.ticks"), "--out", str(tmp_path / "m2")),
                ("features", str(tmp_path / "none.ticks"), "--out", str(tmp_path / "f.parquet"))):
        line = one_line_error(cli(*cmd))
        assert "none.ticks: no such file" in line, line

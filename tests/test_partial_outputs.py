"""Every partial output says so (issue 13, items 7, 8 and 11): real files, real processes.

- A tick file whose writer was killed: every filled block is checked against its running
  checksum (a flipped price or seq is an error naming the file and the records, never a silent
  misread or a shorter read), the unchecked tail is reported in the printed summaries, and the
  instrument table found while writing is in the file.
- A full disk (a real 256 KB tmpfs, filled): `engine run`, `engine backtest` and `engine predict`
  fail with one line naming the file, no traceback, no temporary left, nothing left in /dev/shm;
  the run still prints its summary and its signal file is marked incomplete.
- Output paths are checked before anything starts; --keep-rings keeps every ring; lock files go.
"""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import locks, shm
from engine.records import TICK_DTYPE
from engine.signal_log import status
from engine.tickfile import BLOCK, TickFile, TickFileError

from tests.conftest import ROOT, engine_env
from tests.helpers.feedutil import cli, one_line_error
from tests.helpers.small_fs import small_fs

N_TICKS = 3 * BLOCK + 322  # three blocks and a tail: 12,610 records, as in the issue
RUN = ("--no-doctor", "--http", "none", "--pub", "none", "--hlog", "none")

WRITER = """
import sys, time
import numpy as np
from feeds.core.sources import open_source
from engine.tickfile import TickFileWriter
src = open_source("synthetic://?instruments=2&count=%d&seed=3")
words = np.concatenate([b.copy() for b in src.batches()])
w = TickFileWriter(sys.argv[1], [], source=src.uri)
w.append(words[:5000])
w.set_instruments(src.instruments)  # found while writing, as a recorder finds them
w.append(words[5000:])
print("written", flush=True)
time.sleep(600)
""" % N_TICKS


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A tick file whose writer was SIGKILLed after writing N_TICKS records (never closed)."""
    path = tmp_path_factory.mktemp("killed") / "killed.ticks"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, env=engine_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "written", proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return path


def _damaged(src, dst, record, field, byte=0):
    raw = bytearray(src.read_bytes())
    raw[TickFile(src).header_size + record * 64 + TICK_DTYPE.fields[field][1] + byte] ^= 0x10
    dst.write_bytes(bytes(raw))
    return dst


def test_a_killed_writer_leaves_checked_blocks_an_unchecked_tail_and_its_instruments(killed):
    f = TickFile(killed)
    assert not f.complete and len(f) == N_TICKS and f.checked_records == 3 * BLOCK and f.unchecked == 322
    assert f.instruments == ["SYN0000", "SYN0001"]  # the header rewritten when they were found
    assert len(f.warnings) == 1 and str(killed) in f.warnings[0]
    assert "322 records past the last checked block are unchecked" in f.warnings[0]
    assert "its writer was killed" in f.warnings[0]


def test_backtest_and_replay_print_the_unchecked_tail(killed, tmp_path, shm_name):
    # (fees and latency given: a zero-cost run has warnings of its own)
    r = cli("backtest", str(killed), "--out", str(tmp_path / "bt"), "--quiet", "--fee-bps", "1", "--latency-us", "10")
    assert r.returncode == 0, r.stderr
    warning = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("warning:")]
    assert len(warning) == 1 and str(killed) in warning[0] and "322 records past the last checked block are " \
        "unchecked" in warning[0], r.stdout
    assert json.loads((tmp_path / "bt" / "report.json").read_text())["ticks"] == N_TICKS
    r = cli("replay", str(killed), "--ring", shm_name, "--max")
    assert r.returncode == 0, r.stderr
    tail = r.stderr.splitlines()[-1]  # the summary's last line
    assert tail.startswith("[replay] warning:") and "322 records past the last checked block are unchecked" in tail


def test_a_flipped_price_byte_in_a_checked_block_is_an_error_naming_the_file(killed, tmp_path):
    bad = _damaged(killed, tmp_path / "price.ticks", 5000, "bid_px", 2)
    with pytest.raises(TickFileError, match="corrupted records 4096..8191"):
        TickFile(bad)
    r = cli("backtest", str(bad), "--out", str(tmp_path / "bt"), "--quiet")
    line = one_line_error(r)
    assert str(bad) in line and "corrupted records 4096..8191 (block 1 checksum)" in line
    assert not (tmp_path / "bt").exists() and os.listdir(tmp_path) == ["price.ticks"]


def test_a_flipped_seq_word_is_an_error_never_a_shorter_read(killed, tmp_path, shm_name):
    bad = _damaged(killed, tmp_path / "seq.ticks", 6000, "seq")
    r = cli("replay", str(bad), "--ring", shm_name, "--max")
    line = one_line_error(r)
    assert str(bad) in line and "corrupted records 4096..8191 (block 1 checksum)" in line
    assert not list(Path("/dev/shm").glob(shm_name + "*"))
    # in the unchecked tail: the record does not carry its number, which is an error too
    tail = _damaged(killed, tmp_path / "tail.ticks", 3 * BLOCK + 100, "seq", 1)
    with pytest.raises(TickFileError, match=r"tail.ticks: damaged: record 12,388 \(past the last checked block"):
        TickFile(tail)


# -- a full disk ---------------------------------------------------------------------------------

@pytest.fixture
def full_disk(tmp_path):
    """A 256 KB tmpfs with `leave(n)` to fill it up to n free bytes; skipped where tmpfs cannot
    be mounted (it needs root)."""
    with small_fs(tmp_path / "small", "256k") as leave:
        yield leave


def _only_filler(d):
    assert sorted(os.listdir(d)) == ["filler"], os.listdir(d)  # no temporary, no partial output


def test_run_on_a_full_disk_prints_its_summary_marks_the_signal_file_and_cleans_up(
        full_disk, default_model, shm_name):
    d = full_disk(8 * 1024)
    sig = d / "run.sig"
    r = cli("run", "--duration", "1", "--name", shm_name, "--signals-out", str(sig), *RUN)
    assert r.returncode == 2, (r.stdout, r.stderr)
    errors = [ln for ln in r.stderr.splitlines() if not ln.startswith("[")]
    assert errors == [f"engine: error: cannot write signals to {sig}: No space left on device"], r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout.startswith("engine run:")  # the summary, with the warning
    assert f"warning: signal file {sig} is incomplete: the writer stopped at record" in r.stdout
    assert not list(Path("/dev/shm").glob(shm_name + "*"))  # rings, their instrument table, all gone
    assert not os.path.exists(locks._path("ring", shm.ring_path(f"{shm_name}.ticks")))
    assert sorted(os.listdir(d)) == ["filler", "run.sig"]
    st = status(sig)
    assert st["complete"] is False and st["reason"] == "No space left on device" and st["records"] == st["stopped_at"] > 0
    assert os.path.getsize(sig) == 64 + 128 * st["records"]  # whole records only
    show = cli("signals", "show", str(sig), "--limit", "1")
    assert show.returncode == 0, show.stderr
    assert f"incomplete: the writer stopped at record {st['records']:,} (No space left on device)" in show.stdout


def test_a_tick_writer_on_a_full_disk_leaves_a_file_that_says_where_and_why_it_stopped(full_disk):
    from engine.outputs import OutputError
    from engine.tickfile import TickFileWriter
    from tests.test_tickfile import random_ticks
    d = full_disk(64 * 1024)
    t = random_ticks(2 * BLOCK)
    w = TickFileWriter(d / "x.ticks", ["A"])
    with pytest.raises(OutputError, match=f"cannot write ticks to {d / 'x.ticks'}: No space left on device"):
        for i in range(0, len(t), 500):
            w.append(t[i:i + 500])
    w.set_instruments(["A", "B"])  # still written where it fits: the header's pages are there
    w.close()  # no index, no complete flag
    f = TickFile(d / "x.ticks")
    assert not f.complete and 0 < len(f) < BLOCK and f.instruments == ["A", "B"]
    assert f"its writer stopped at record {len(f):,}: No space left on device" in f.warnings[0]
    assert np.array_equal(f.ticks["price"], t["price"][:len(f)])


def test_backtest_on_a_full_disk_leaves_no_partial_report(full_disk, tmp_path):
    ticks = tmp_path / "t.ticks"
    assert cli("convert", "synthetic://?instruments=2&count=20000&seed=9", "--out", str(ticks), "--quiet").returncode == 0
    d = full_disk(8 * 1024)
    r = cli("backtest", str(ticks), "--out", str(d / "bt"), "--quiet")
    line = one_line_error(r)
    assert line.startswith(f"engine: error: cannot write the backtest report to {d / 'bt'}: No space left on device")
    _only_filler(d)


def test_predict_on_a_full_disk_leaves_no_temporary(full_disk, default_model, tmp_path):
    from models import artifact
    n = len(artifact.read_manifest(default_model)["feature_names"])
    rows = tmp_path / "rows.npy"
    np.save(rows, np.random.default_rng(0).normal(size=(50_000, n)).astype(np.float32))  # 200 KB of results
    d = full_disk(16 * 1024)
    r = cli("predict", str(default_model), "--input", str(rows), "--output", str(d / "p.npy"))
    line = one_line_error(r)
    assert line == f"engine: error: cannot write predictions to {d / 'p.npy'}: No space left on device"
    _only_filler(d)


# -- outputs checked first, rings kept, locks removed ------------------------------------------

@pytest.mark.parametrize("flags, named", [
    (["--token-file", "{tmp}", "--http", "127.0.0.1:59464"], "cannot write the control token to {tmp}: Is a directory"),
    (["--hlog", "/proc/engine-test.hlog"], "cannot write the latency log to /proc/engine-test.hlog"),
])
def test_bad_output_paths_fail_before_anything_starts(flags, named, tmp_path, shm_name):
    flags = [f.format(tmp=tmp_path) for f in flags]
    base = ["--no-doctor", "--pub", "none"] + (["--http", "none"] if "--http" not in flags else []) + \
        (["--hlog", "none"] if "--hlog" not in flags else [])
    r = cli("run", "--duration", "1", "--name", shm_name, "--signals-out", str(tmp_path / "x.sig"), *base, *flags)
    line = one_line_error(r)
    assert named.format(tmp=tmp_path) in line
    assert not (tmp_path / "x.sig").exists() and not list(Path("/dev/shm").glob(shm_name + "*"))


def test_keep_rings_keeps_every_ring_and_a_clean_exit_removes_its_locks(default_model, shm_name, tmp_path):
    sig = tmp_path / "run.sig"
    r = cli("run", "--duration", "1", "--name", shm_name, "--signals-out", str(sig), "--keep-rings", *RUN)
    assert r.returncode == 0, r.stderr
    kept = {p.name for p in Path("/dev/shm").glob(shm_name + ".*")}
    assert {f"{shm_name}.ticks", f"{shm_name}.signals", f"{shm_name}.ctl"} <= kept
    assert not os.path.exists(locks._path("ring", shm.ring_path(f"{shm_name}.ticks")))
    st = status(sig)
    assert st["complete"] is True and st["note"] is None and st["records"] > 0

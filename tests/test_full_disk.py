"""Outputs written onto a file system that fills up (a real 2 MiB tmpfs): one line naming the
file, exit 2, nothing half-written under the final name; a live recording keeps its whole
records, marked incomplete with the reason (readers report it), as README says."""
import os
import subprocess

import pytest

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import ESH4 as DBN
from tests.helpers.small_fs import small_fs as tmpfs



@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs, and fill(free_bytes) to leave that little room on it."""
    d = tmp_path / "fs"
    with tmpfs(d, "2m") as fill:
        yield d, fill


def _run(argv, timeout=600):
    return subprocess.run(argv, cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=timeout)


def _error_line(r, path):
    lines = [x for x in r.stderr.splitlines() if x.startswith("engine: error:")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert str(path) in lines[0] and "No space left on device" in lines[0], lines[0]


@pytest.mark.parametrize("ext", [".parquet", ".csv", ".ticks", ".itch.gz"])
def test_convert_onto_a_full_disk_fails_naming_the_file_and_leaves_nothing(small_fs, ext):
    d, fill = small_fs
    fill(96 * 1024)
    out = d / f"day{ext}"
    r = _run(engine_cmd("convert", f"dbn:{DBN}", "--out", str(out), "--quiet"))
    _error_line(r, out)
    assert sorted(os.listdir(d)) == ["filler"]


def test_record_onto_a_full_disk_keeps_whole_records_marked_incomplete(small_fs, shm_name):
    from engine.tickfile import TickFile
    d, fill = small_fs
    fill(256 * 1024)
    out = d / "live.ticks"
    import numpy as np

    from app.recorder import drain
    drain(np.zeros(512, np.int64), np.zeros(64, np.int64), 7, 8, np.zeros((0, 8), np.int64))  # compiled (cached) now
    rec = subprocess.Popen(engine_cmd("record", "--ring", shm_name, "--out", str(out), "--wait", "120",
                                      "--duration", "120"), cwd=ROOT, env=engine_env(), stderr=subprocess.PIPE,
                           text=True)
    try:
        # the feed makes the ring (the recorder waits for it: --wait) and waits for the recorder
        feed = _run(engine_cmd("feed", "synthetic://?instruments=4&seed=3&count=200000", "--rate", "100000",
                               "--wait-consumers", "1", "--ring", shm_name))
        assert feed.returncode == 0, feed.stderr[-2000:]
        err = rec.communicate(timeout=300)[1]
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    _error_line(subprocess.CompletedProcess(rec.args, rec.returncode, "", err), out)
    assert sorted(os.listdir(d)) == ["filler", "live.ticks"]
    f = TickFile(str(out))
    assert len(f) > 0 and any("incomplete" in w and "No space left on device" in w for w in f.warnings), f.warnings

"""`engine train --recordings DIR --since 7d` (replay/retrain.py): a candidate trained on the recorder's
daily tick files within range but the held-out last day, registered (with its training data's
identity and the gate's figures) only when it beats the incumbent on the held-out day in the same
backtest, promoted when asked; a refused candidate exits 3 and changes nothing in the registry."""
import hashlib
import json
import os
import shutil
import time

import pytest

from models import artifact
from tests.helpers.feedutil import cli
from tests.test_replay import ticks_file

FAST = ("--trees", "20", "--depth", "3", "--backends", "flat")


def _day(k):
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() - k * 86400))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """DIR/synthetic-a/DAY.ticks for the last three days (one of them in two pieces), one too old, and
    today's (still being recorded: never trained on nor held out)."""
    root = tmp_path_factory.mktemp("rec")
    d = root / "synthetic-a"
    d.mkdir()
    for k, seed in ((0, 40), (1, 41), (2, 42), (3, 43), (20, 44)):
        src = ticks_file(root, f"synthetic://?instruments=4&count=60000&seed={seed}", f"s{seed}.ticks")
        shutil.move(src, d / f"{_day(k)}.ticks")
    shutil.copyfile(ticks_file(root, "synthetic://?instruments=4&count=20000&seed=45", "s45.ticks"),
                    d / f"{_day(2)}.1.ticks")
    return root


def _train(recordings, out, reg, *extra):
    r = cli("train", "--recordings", str(recordings), "--since", "7d", "--out", str(out), "--registry", str(reg),
            *FAST, *extra, timeout=900)
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


def test_retrain_gates_registers_and_promotes(recordings, tmp_path):
    reg = tmp_path / "reg"
    r, first = _train(recordings, tmp_path / "c1", reg, "--register", "alpha")
    assert r.returncode == 0, r.stderr
    assert first["gate"]["passed"] and first["gate"]["incumbent"] is None and first["registered"] == "alpha@1"
    d = recordings / "synthetic-a"
    held = [str(d / f"{_day(1)}.ticks")]
    assert first["gate"]["held_out"] == held
    tr = artifact.read_manifest(tmp_path / "c1")["training"]
    assert tr["days"] == [_day(3), _day(2)] and tr["held_out_days"] == [_day(1)]
    names = [f"{_day(3)}.ticks", f"{_day(2)}.ticks", f"{_day(2)}.1.ticks"]  # (not the held-out day, the old one, today)
    assert [os.path.basename(x["file"]) for x in tr["data"]] == names
    for x in tr["data"]:
        assert x["sha256"] == hashlib.sha256(open(x["file"], "rb").read()).hexdigest()
    # a candidate that must beat the incumbent by far more than any PnL here: refused, nothing registered
    r, refused = _train(recordings, tmp_path / "c2", reg, "--register", "alpha", "--gate-margin", "1e9")
    assert r.returncode == 3 and "gate refused the candidate" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert refused["registered"] is None and not refused["gate"]["passed"]
    # the incumbent's figure is the first candidate's, in the same backtest of the same day
    assert refused["gate"]["incumbent"] == first["gate"]["candidate"]
    ls = cli("model", "list", "alpha", "--registry", str(reg))
    assert ls.returncode == 0 and "alpha@1" in ls.stdout and "alpha@2" not in ls.stdout, ls.stdout
    assert (tmp_path / "c2" / "manifest.json").exists()  # (kept for a look)
    # one that passes (any margin below its lead) with --promote: the live version
    r, second = _train(recordings, tmp_path / "c3", reg, "--register", "alpha", "--gate-margin=-1e9", "--promote")
    assert r.returncode == 0 and second["registered"] == "alpha@2" and second["promoted"], r.stderr
    show = json.loads(cli("model", "show", "alpha", "--registry", str(reg)).stdout)
    assert show["version"] == 2 and show["gate"]["passed"] and show["training"]["days"] == [_day(3), _day(2)]
    assert os.path.realpath(reg / "live" / "alpha") == str(reg / "objects" / show["id"])


def test_retrain_refuses_what_it_cannot_do(recordings, tmp_path):
    r = cli("train", "--recordings", str(recordings), "--since", "7x", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--since '7x'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = cli("train", "--recordings", str(recordings), "--since", "1d", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--holdout-days 1 needs at least 2" in r.stderr, r.stderr
    r = cli("train", "synthetic://?count=1000", "--register", "alpha", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--register goes with --recordings" in r.stderr, r.stderr
    r = cli("train", "--recordings", str(tmp_path / "none"), "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "not a directory" in r.stderr, r.stderr
    assert not (tmp_path / "x").exists()

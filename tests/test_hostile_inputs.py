"""Hostile inputs a second local user (or a broken capture) hands the engine: a file planted at a
ring's name, a ring no memory can hold, truncated compressed captures. Each is one line naming
the culprit, exit 2, and nothing left behind."""
import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, converted, engine_cmd, engine_env
from tests.helpers.data import ESH4 as DBN, SPOT
from tests.helpers.as_user import as_user, can_make_users, throwaway_users

NO_USERS = can_make_users()


def _shm_files(name):
    """The files in /dev/shm of the engine `name` (its rings and their temporary names all start
    with it; other tests' engines may be making their own at the same time)."""
    return {f for f in os.listdir("/dev/shm") if f.startswith(name)}


def _ports():
    """--http and --pub on ports free now (the run is refused before it binds them)."""
    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    http, pub = (s.getsockname()[1] for s in socks)
    for s in socks:
        s.close()
    return ["--http", f"127.0.0.1:{http}", "--pub", f"tcp://127.0.0.1:{pub}"]


def _run(argv, timeout=300, **env):
    return subprocess.run(argv, cwd=ROOT, env=engine_env(**env), capture_output=True, text=True, timeout=timeout)


def _one_line(r):
    """The error: one line, no traceback (a cold cache's compile notices may come before it)."""
    err = "\n".join(x for x in r.stderr.strip().splitlines() if not re.match(r"\[\w+\] compil", x))
    assert "Traceback" not in err and err.count("\n") == 0 and err.startswith("engine: error:"), err
    return err


@pytest.mark.skipif(NO_USERS is not None, reason=str(NO_USERS))
def test_another_users_planted_ctl_is_one_line_naming_the_owner_and_leaks_nothing(shm_name, request):
    with throwaway_users(2) as (attacker, victim):
        path = f"/dev/shm/{shm_name}.ctl"
        # the attacker plants the engine's control ring name (0600, theirs: nobody else can touch it)
        plant = f"import os; fd = os.open({path!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600); " \
                "os.write(fd, b'x' * 4096); os.close(fd)"
        subprocess.run(as_user(attacker, "python", plant), cwd=ROOT, env=engine_env(), check=True, timeout=120)
        assert os.stat(path).st_uid == attacker.pw_uid
        home = Path(tempfile.mkdtemp(prefix="engine-victim-"))  # pytest's tmp_path is root's 0700
        request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
        os.chown(home, victim.pw_uid, victim.pw_gid)
        before = _shm_files(shm_name)
        for attempt in range(2):  # a retry leaks no more than the first try
            r = _run(as_user(victim, "engine", "run", "--name", shm_name, "--duration", "1", "--no-doctor", *_ports(),
                             "--signals-out", str(home / f"s{attempt}.bin")),
                     HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), XDG_STATE_HOME=str(home / ".state"), XDG_RUNTIME_DIR="",
                     NUMBA_CACHE_DIR=str(home / ".cache" / "numba"))  # (not root's, inherited from engine's import here)
            assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
            err = _one_line(r)
            assert path in err and f"user {attacker.pw_name} (uid {attacker.pw_uid})" in err, err
        assert _shm_files(shm_name) - before == set(), _shm_files(shm_name) - before
        assert os.stat(path).st_uid == attacker.pw_uid  # and the planted file is untouched


def test_a_ring_capacity_no_memory_holds_is_refused_before_anything_is_made(shm_name, tmp_path):
    before = _shm_files(shm_name)
    r = _run(engine_cmd("run", "--name", shm_name, "--duration", "1", "--no-doctor", "--ring-capacity", str(1 << 40),
                        *_ports(), "--signals-out", str(tmp_path / "s.bin")))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    err = _one_line(r)
    assert "--ring-capacity" in err and f"/dev/shm/{shm_name}" in err, err
    assert _shm_files(shm_name) - before == set(), _shm_files(shm_name) - before


def test_a_ring_that_cannot_fit_leaves_no_temporary_file(shm_name):
    """The library call itself (any producer: feed processes, record, tests): refused, nothing left."""
    from engine import shm
    before = _shm_files(shm_name)
    with pytest.raises(shm.RingError, match="would need"):
        shm.create(shm.ring_path(shm_name), shm.RING_TICKS, 64, 1 << 40)
    assert _shm_files(shm_name) - before == set()


def test_a_failing_init_leaves_no_temporary_file(shm_name):
    """Whatever fails between creating the temporary file and renaming it, the file goes."""
    from engine import shm

    def init(mm):
        raise ValueError("boom")

    before = _shm_files(shm_name)
    with pytest.raises(ValueError, match="boom"):
        shm.create(shm.ring_path(shm_name), shm.RING_TICKS, 64, 1 << 10, init=init)
    assert _shm_files(shm_name) - before == set()


# -- cut-off captures: an error naming the file, never half the ticks passed off as all --


def _cut(src, dst, keep):
    data = src.read_bytes()
    dst.write_bytes(data[:int(len(data) * keep)])
    return dst


def test_every_cut_of_a_real_zstd_capture_is_an_error_naming_it(tmp_path):
    from feeds.core import files
    from feeds.core.uri import FeedError
    data = DBN.read_bytes()
    whole = b"".join(files.chunks(str(DBN)))
    assert len(whole) > len(data)
    p = tmp_path / "cut.dbn.zst"
    for end in [*range(4, len(data), len(data) // 97), len(data) - 1, len(data) - 4, 210, 300]:
        p.write_bytes(data[:end])
        with pytest.raises(FeedError, match=f"{p}: truncated zstd data"):
            b"".join(files.chunks(str(p)))
    # and what a cut must not be confused with: more frames, skippable frames, checksums, RLE blocks
    import zstandard
    z = zstandard.ZstdCompressor
    for body in (z(write_checksum=True).compress(whole[:1000]) + z(write_content_size=False).compress(whole[1000:]),
                 b"\x5a\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"abc" + z().compress(whole)):
        p.write_bytes(body)
        assert b"".join(files.chunks(str(p))) == whole
    p.write_bytes(z().compress(b"\0" * 10**6))
    assert b"".join(files.chunks(str(p))) == b"\0" * 10**6


@pytest.mark.parametrize("src,uri,out", [(DBN, "dbn", "x.ticks"), (DBN, "dbn", "x.parquet"), (SPOT, "binance", "x.parquet")])
def test_converting_a_cut_off_capture_fails_naming_it_and_writes_nothing(tmp_path, src, uri, out):
    cut = _cut(src, tmp_path / ("cut" + "".join(src.suffixes[-3:] if uri == "dbn" else src.suffixes[-1:])), 0.5)
    outdir = tmp_path / "out"
    outdir.mkdir()
    r = _run(engine_cmd("convert", f"{uri}:{cut}", "--out", str(outdir / out), "--quiet"), timeout=900)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    err = _one_line(r)
    assert str(cut) in err and ("truncated zstd" in err or "gzip" in err), err
    assert os.listdir(outdir) == []


def test_a_backtest_with_a_cut_off_l3_file_fails_naming_it(tmp_path):
    ticks = converted(f"dbn:{DBN}")  # (only read)
    cut = _cut(DBN, tmp_path / "cut.mbo.dbn.zst", 0.5)
    r = _run(engine_cmd("backtest", str(ticks), "--out", str(tmp_path / "bt"), "--orders", "maker", "--l3", str(cut),
                        "--quiet"), timeout=900)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    err = _one_line(r)
    assert f"--l3 {cut}: truncated zstd data" in err, err
    assert not (tmp_path / "bt").exists() or os.listdir(tmp_path / "bt") == []

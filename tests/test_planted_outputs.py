"""Outputs that follow no link, and a kill switch only its owner pulls: attacked as a second local
user would (a throwaway user planting links and files where root's engine writes; this machine's
fs.protected_symlinks may be 1, so the planted names sit in a directory of theirs that is not
sticky, and in a sticky world-writable one, where a link at the name is refused by the engine itself).
Every output is refused with one line naming it, and nothing it pointed at changes."""
import os
import stat
import subprocess

import pytest

from tests.conftest import engine_cmd, engine_env
from tests.helpers.as_user import can_make_users, shell_as, throwaway_users
from tests.helpers.feedutil import cli, one_line_error

pytestmark = pytest.mark.skipif(can_make_users() is not None, reason=str(can_make_users()))


@pytest.fixture
def other():
    with throwaway_users(1) as (u,):
        yield u


@pytest.fixture
def tmp_path():
    """A directory the other user can reach (pytest's own are root's 0700), removed after."""
    import shutil
    import tempfile
    from pathlib import Path
    d = Path(tempfile.mkdtemp(prefix="engine-planted-", dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _victim(tmp_path):
    """A root-owned file the planted links point at: it must not change, in content or mode."""
    v = tmp_path / "victim"
    v.write_text("precious\n")
    os.chmod(v, 0o600)
    return v, os.stat(v)


def _unchanged(v, st):
    now = os.stat(v)
    assert v.read_text() == "precious\n" and (now.st_mode, now.st_uid, now.st_size) == (st.st_mode, st.st_uid, st.st_size)


def _sticky_public(tmp_path):
    """A /tmp-like directory: world-writable and sticky (another user's names there stay theirs)."""
    d = tmp_path / "public"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def test_a_link_planted_at_an_output_name_is_refused_and_its_target_untouched(tmp_path, other, shm_name):
    v, st = _victim(tmp_path)
    d = _sticky_public(tmp_path)
    for name in ("x.ticks", "s.sig", "r.ticks", "h.hlog", "dangling.ticks"):
        target = tmp_path / "nowhere" if name.startswith("dangling") else v
        shell_as(other, f"ln -s {target} {d / name}")
    # engine convert (a tick file), engine run (signals, recording, latency log): each refused at start
    line = one_line_error(cli("convert", "synthetic://?count=200&rate=0", "--out", str(d / "x.ticks")))
    assert "x.ticks" in line and "symbolic link" in line, line
    line = one_line_error(cli("convert", "synthetic://?count=200&rate=0", "--out", str(d / "dangling.ticks")))
    assert "symbolic link" in line and not (tmp_path / "nowhere").exists(), line
    for flag, name in (("--signals-out", "s.sig"), ("--record", "r.ticks"), ("--hlog", "h.hlog")):
        args = ["run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--name", shm_name, "--feed",
                "synthetic://?count=500&rate=0", "--max", flag, str(d / name)]
        if flag != "--signals-out":
            args += ["--signals-out", str(tmp_path / f"own{flag}.sig")]
        line = one_line_error(cli(*args, timeout=300))
        assert name in line and "symbolic link" in line, line
    _unchanged(v, st)


def test_another_users_file_at_an_output_name_is_never_written_nor_truncated(tmp_path, other):
    d = _sticky_public(tmp_path)
    shell_as(other, f"echo theirs > {d / 'x.ticks'}; chmod 666 {d / 'x.ticks'}")
    line = one_line_error(cli("convert", "synthetic://?count=200&rate=0", "--out", str(d / "x.ticks")))
    assert "x.ticks" in line and f"uid {other.pw_uid}" in line, line
    assert (d / "x.ticks").read_text() == "theirs\n" and os.stat(d / "x.ticks").st_uid == other.pw_uid


def test_a_directory_another_user_can_change_is_refused_at_start(tmp_path, other):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)  # (not sticky: anyone may rename our file away and put theirs in its place)
    line = one_line_error(cli("convert", "synthetic://?count=200&rate=0", "--out", str(d / "x.ticks")))
    assert "writable by others and not sticky" in line, line
    r = cli("backtest", "--help")
    assert r.returncode == 0


def test_outputs_are_private(tmp_path):
    """Tick files and their report directories are 0600 / 0700: trading history is the user's."""
    out = tmp_path / "x.ticks"
    r = cli("convert", "synthetic://?count=2000&rate=0", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600


def test_only_the_owner_pulls_the_kill_switch(tmp_path, other, shm_name):
    """A kill file in a directory another user can write is refused at start (they could make it, or
    keep it there); in the owner's directory, a file that is not the owner's (or root's) does not
    count; the owner's does."""
    d = _sticky_public(tmp_path)
    r = cli("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--name", shm_name, "--kill-file",
            str(d / "KILL"), "--duration", "1")
    assert "writable by others" in one_line_error(r)
    for bad, says in (("", "give the path"), (str(tmp_path / "none" / "KILL"), "No such file")):
        assert says in one_line_error(cli("run", "--no-rt", "--name", shm_name, "--kill-file", bad, "--duration", "1"))
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    kill = own / "KILL"
    kill.write_text("")
    os.chown(kill, other.pw_uid, other.pw_gid)  # (another user's file there: as if they had made it)
    from app import kill_file
    assert not kill_file.pulled(str(kill))
    os.chown(kill, 0, 0)
    assert kill_file.pulled(str(kill))
    os.chown(kill, other.pw_uid, other.pw_gid)
    proc = subprocess.run(engine_cmd("run", "--no-rt", "--no-doctor", "--http", "none", "--pub", "none", "--name",
                                     shm_name, "--kill-file", str(kill), "--duration", "2", "--json",
                                     "--signals-out", str(tmp_path / "k.sig")),
                          env=engine_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json
    assert json.loads(proc.stdout)["risk"]["killed"] == ""  # (another user's file: no kill)

"""Who reads the signals (app/zauth.py). The engine's public key is no secret (NAME.zmq-key.pub is
0644 and the log prints it), so holding it reads nothing: a subscriber completes the CURVE handshake
only with a client key the engine's owner allows, this user's own subscribers' (engine signals
--follow, the tests) or one listed in --pub-clients FILE. Attacked with real zmq clients on a real
engine: one with the server's key and an unlisted client key gets no signal (refused, said in the
engine's log and to the subscriber), a listed one gets them; a second local user's `engine signals
--follow` is refused until the owner lists its key, then follows."""
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, engine_env
from tests.helpers.as_user import as_user, can_make_users, throwaway_users
from tests.helpers.daemon import Daemon, wait_until
from tests.helpers.feedutil import cli, one_line_error

SYN = "synthetic://?instruments=4&seed=3&rate=20000"


def _subscriber(ctx, d, client):
    """A SUB socket on engine d with its server key and `client` (None: this user's own key), and a
    monitor of its handshakes."""
    import zmq

    from app.zpub import subscriber
    s = subscriber(ctx, d.pub_key(), client)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.setsockopt(zmq.RCVTIMEO, 20_000)
    m = s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    s.connect(d.pub)
    return s, m


def _handshake(mon):
    """The first handshake event of a subscriber: (event, value)."""
    from zmq.utils.monitor import recv_monitor_message
    assert mon.poll(60_000), "no handshake within 60 s"
    ev = recv_monitor_message(mon)
    return ev["event"], ev["value"]


def _signals(sock, n):
    """n signals a subscriber received (each three frames: an instrument, a 128-byte record, a number)."""
    got = [sock.recv_multipart() for _ in range(n)]
    assert all(len(p) == 3 and p[0].startswith(b"SYN") and len(p[1]) == 128 for p in got), got[:2]
    return got


def test_the_server_key_alone_reads_nothing_a_listed_client_key_reads(tmp_path, shm_name, default_model):
    import zmq
    listed, unlisted = zmq.curve_keypair(), zmq.curve_keypair()
    clients = tmp_path / "clients"
    clients.write_text(f"# who reads {shm_name}'s signals\n\n{listed[0].decode()}  the risk desk's consumer\n")
    os.chmod(clients, 0o644)
    d = Daemon(tmp_path, shm_name, "--feed", SYN, "--pub-clients", str(clients))
    ctx = zmq.Context()
    socks = []
    try:
        d.wait_for("endpoints in ")
        assert d.pub_key().decode() in d.log() and os.stat(d.pub_key_file()).st_mode & 0o777 == 0o644
        outsider, mon = _subscriber(ctx, d, unlisted)
        socks += [outsider, mon]
        assert _handshake(mon) == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400)  # (the engine's ZAP handler said no)
        for client in (listed, None):  # the listed key; this user's own (engine signals --follow's)
            s, m = _subscriber(ctx, d, client)
            socks += [s, m]
            assert _handshake(m)[0] == zmq.EVENT_HANDSHAKE_SUCCEEDED
            _signals(s, 20)
        assert outsider.poll(0) == 0  # (signals went out all along: none of them to it)
        d.wait_for(f"zmq subscriber 127.0.0.1 refused: its client key {unlisted[0].decode()} is not allowed")
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
        d.stop()


def test_a_bad_clients_file_is_refused_at_start(tmp_path, shm_name):
    import zmq
    good = zmq.curve_keypair()[0].decode()
    args = ("run", "--no-rt", "--no-doctor", "--http", "none", "--name", shm_name, "--feed",
            "synthetic://?count=500&rate=0", "--max", "--signals-out", str(tmp_path / "s.sig"))
    f = tmp_path / "clients"
    for text, mode, said in ((f"{good}\nnot-a-key\n", 0o644, "line 2: 'not-a-key': not a zmq CURVE public key"),
                             (f"{good}\n", 0o664, "mode 0664: its group can write it"),
                             (f"{good}\n", 0o646, "mode 0646: others can write it")):
        f.write_text(text)
        os.chmod(f, mode)
        line = one_line_error(cli(*args, "--pub-clients", str(f)))
        assert f"--pub-clients {f}" in line and said in line, line
        assert not (tmp_path / "s.sig").exists()
    os.chmod(f, 0o644)
    (tmp_path / "link").symlink_to(f)
    assert "a link is never followed" in one_line_error(cli(*args, "--pub-clients", str(tmp_path / "link")))
    conf = tmp_path / "e.toml"
    conf.write_text(f'[control]\npub_clients = "{tmp_path / "nothere"}"\n')
    assert "No such file" in one_line_error(cli(*args, "--config", str(conf)))


@pytest.mark.skipif(bool(can_make_users()), reason=str(can_make_users()))
def test_another_user_with_the_public_key_reads_nothing_until_the_owner_lists_its_key(tmp_path, shm_name,
                                                                                   default_model, request):
    import zmq
    clients = tmp_path / "clients"
    clients.write_text("# nobody yet\n")
    os.chmod(clients, 0o644)
    d = Daemon(tmp_path, shm_name, "--feed", SYN, "--pub-clients", str(clients))
    ctx = zmq.Context()
    own = mon = follow = None
    with throwaway_users(1) as (other,):
        home = Path(tempfile.mkdtemp(prefix="engine-reader-"))  # (pytest's tmp_path is root's 0700)
        request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
        os.chown(home, other.pw_uid, other.pw_gid)
        out, err = home / "follow.out", home / "follow.err"
        try:
            d.wait_for("endpoints in ")
            # their file of another user's clients: chown'd to them, it is refused like any file they could change
            theirs = tmp_path / "theirs"
            theirs.write_text("")
            os.chown(theirs, other.pw_uid, other.pw_gid)
            line = one_line_error(cli("run", "--pub-clients", str(theirs), "--name", shm_name, "--http", "none"))
            assert f"owned by uid {other.pw_uid}, not this user (uid 0) nor root" in line, line
            # the other user has the public key (it is in the log) and follows with it: refused, and told so
            with open(out, "w") as o, open(err, "w") as e:
                follow = subprocess.Popen(
                    as_user(other, "engine", "signals", "--follow", d.pub, "--server-key", d.pub_key().decode(),
                            "--count", "3"),
                    cwd=ROOT, stdout=o, stderr=e,
                    env=engine_env(HOME=str(home), XDG_STATE_HOME=str(home / ".state"), XDG_RUNTIME_DIR="",
                                   XDG_CACHE_HOME=str(home / ".cache"), NUMBA_CACHE_DIR=str(home / ".cache" / "n")))
            wait_until(lambda: "refused this subscriber: its client key" in err.read_text(),
                       "the other user's follow is refused", timeout=120)
            key = (home / ".state" / "engine" / "zmq-client.key.pub").read_text().strip()
            assert f"its client key {key} ({home}/.state/engine/zmq-client.key.pub) is not one engine" \
                   in err.read_text(), err.read_text()
            d.wait_for(f"refused: its client key {key} is not allowed")
            own, mon = _subscriber(ctx, d, None)
            _signals(own, 20)  # (signals flow, to this user's own subscriber only)
            assert out.read_text() == "" and follow.poll() is None
            # the owner lists the key and restarts the engine: the same follow gets its signals
            own.close(0)
            mon.close(0)
            own = mon = None
            with open(clients, "a") as f:
                f.write(f"{key}  {other.pw_name}'s consumer\n")
            d.stop()
            d = Daemon(tmp_path, shm_name, "--feed", SYN, "--pub-clients", str(clients), http_port=d.http_port,
                       pub_port=d.pub_port)
            d.wait_for("endpoints in ")
            deadline = time.monotonic() + 120
            while follow.poll() is None:
                assert time.monotonic() < deadline, err.read_text()
                time.sleep(0.1)
            assert follow.returncode == 0, err.read_text()
            lines = out.read_text().splitlines()
            assert len(lines) == 3 and all(json.loads(x)["topic"].startswith("SYN") for x in lines), lines
            assert f"following engine 'engine' on {d.pub} again" in err.read_text(), err.read_text()
        finally:
            for s in (own, mon):
                if s is not None:
                    s.close(0)
            ctx.term()
            if follow is not None and follow.poll() is None:
                follow.kill()
                follow.wait()
            d.stop()

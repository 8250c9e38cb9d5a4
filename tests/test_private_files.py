"""A private file a client reads is refused in one line naming it when it is open to others or a
link (app/private_file.py; the runtime file's lines: tests/test_operators.py): here the zmq client
key file `engine signals --follow` reads from the state directory."""
import os
import subprocess

import zmq

from tests.conftest import ROOT, engine_cmd, engine_env


def _follow(state):
    server_key = zmq.curve_keypair()[0].decode()
    r = subprocess.run(engine_cmd("signals", "--follow", "tcp://127.0.0.1:9", "--server-key", server_key,
                                  "--count", "1"),
                       cwd=ROOT, env=engine_env(XDG_STATE_HOME=str(state)), capture_output=True, text=True,
                       timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_client_key_file_open_to_others_or_a_link_is_refused_by_name(tmp_path):
    from app.zauth import own_client_keys
    state = tmp_path / "state"
    key = state / "engine" / "zmq-client.key"
    key.parent.mkdir(parents=True, mode=0o700)
    own_client_keys(str(key.parent))  # made 0600, as on first use
    os.chmod(key, 0o644)
    line = _follow(state)
    assert f"zmq client key file {key} is refused: mode 0644: group or others have access to it; it must be " \
           "this user's, mode 0600: delete it and a new one is made" in line, line
    key.unlink()
    key.symlink_to("/etc/hostname")
    line = _follow(state)
    assert f"zmq client key file {key}: " in line and "(a link is never followed)" in line, line

"""Port squatting and idle connections, attacked as a second local user (issue 27): a process
that binds the engine's zmq port while the engine is down feeds no record to `engine signals
--follow` (CURVE: it cannot prove the engine's key) and is reported; one that binds the HTTP port
never receives the control token (the engine proves itself first, and the token is new at each
start); idle connections from another user cannot keep /metrics from answering."""
import json
import os
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.as_user import as_user, can_make_users, throwaway_users
from tests.helpers.daemon import Daemon, scrape
from tests.helpers.feedutil import cli

SYN = "synthetic://?instruments=4&seed=3&rate=20000"


def readme_consumer():
    """The consumer example the daemon guide shows, as printed."""
    text = (ROOT / "docs/guides/operations/daemon.md").read_text()
    block = text.split("A consumer in Python, with the same checks:\n\n", 1)[1].split("\n\n", 1)[0]
    return textwrap.dedent(block)


def needs_users():
    why = can_make_users()
    if why:
        pytest.skip(why)


def wait_until(fn, what, timeout=120, more=lambda: ""):
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, f"never: {what} {more()}"
        time.sleep(0.05)


ZMQ_SQUATTER = """
import sys, time, zmq
s = zmq.Context().socket(zmq.PUB)
for _ in range(400):  # the engine's port, as soon as it is free
    try:
        s.bind("tcp://127.0.0.1:%d")
        break
    except zmq.ZMQError:
        time.sleep(0.05)
print("bound", flush=True)
n = 0
while True:  # forged records: an instrument of ours, a plausible record, publication numbers going on
    s.send_multipart([b"FORGED0", b"FORGED!!" * 16, n.to_bytes(8, "little")])
    n += 1
    time.sleep(0.005)
"""


def test_a_squatter_on_the_pub_port_feeds_follow_nothing_and_is_reported(tmp_path, shm_name, default_model):
    needs_users()
    d = Daemon(tmp_path, shm_name, "--feed", SYN)
    d.wait_for("endpoints in ")
    out, err = open(tmp_path / "follow.out", "w"), open(tmp_path / "follow.err", "w")
    follow = subprocess.Popen(engine_cmd("signals", "--follow", "--name", shm_name), cwd=ROOT, env=engine_env(),
                              stdout=out, stderr=err)
    (tmp_path / "consumer.py").write_text(readme_consumer())
    c_out, c_err = open(tmp_path / "consumer.out", "w"), open(tmp_path / "consumer.err", "w")
    consumer = subprocess.Popen([sys.executable, str(tmp_path / "consumer.py"), d.pub, str(d.pub_key_file())],
                                cwd=ROOT, env=engine_env(), stdout=c_out, stderr=c_err)
    consumed = lambda: (tmp_path / "consumer.out").read_text().splitlines()  # noqa: E731
    with throwaway_users(1) as (attacker,):
        squat = None
        try:
            lines = lambda: (tmp_path / "follow.out").read_text().splitlines()  # noqa: E731
            wait_until(lambda: len(lines()) >= 20, "follow prints the engine's signals",
                       more=lambda: (tmp_path / "follow.err").read_text())
            wait_until(lambda: len(consumed()) >= 20, "the README's consumer prints the engine's signals",
                       more=lambda: (tmp_path / "consumer.err").read_text())
            d.stop()
            squat = subprocess.Popen(as_user(attacker, "python", ZMQ_SQUATTER % d.pub_port), cwd=ROOT,
                                     env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert squat.stdout.readline() == "bound\n", squat.stderr.read()
            warn = f"warning: a process that is not engine {shm_name!r} is listening on {d.pub}"
            wait_until(lambda: warn in (tmp_path / "follow.err").read_text(), "follow warns about the squatter",
                       more=lambda: (tmp_path / "follow.err").read_text())
            c_warn = f"is listening on {d.pub}: it did not prove the engine's key"
            wait_until(lambda: c_warn in (tmp_path / "consumer.err").read_text(), "the README's consumer warns too",
                       more=lambda: (tmp_path / "consumer.err").read_text())
            time.sleep(2)  # (the squatter keeps publishing: nothing of it may come through)
            squat.kill()
            squat.wait()
            # the engine again, on the same port, same name: its key (kept per name) is followed again
            d = Daemon(tmp_path, shm_name, "--feed", SYN, http_port=d.http_port,
                       pub_port=d.pub_port)
            d.wait_for("endpoints in ")
            n = len(lines())
            wait_until(lambda: len(lines()) >= n + 20, "follow prints the restarted engine's signals",
                       more=lambda: (tmp_path / "follow.err").read_text())
            assert f"following engine {shm_name!r} on {d.pub} again" in (tmp_path / "follow.err").read_text()
            m = len(consumed())
            wait_until(lambda: len(consumed()) >= m + 20, "the README's consumer follows the restarted engine",
                       more=lambda: (tmp_path / "consumer.err").read_text())
        finally:
            if squat is not None and squat.poll() is None:
                squat.kill()
                squat.wait()
            for p in (follow, consumer):
                p.kill()
                p.wait()
            d.stop()
    text = (tmp_path / "follow.out").read_text()
    assert "FORGED" not in text
    assert consumed() and all(x.startswith("SYN") for x in consumed())
    for line in text.splitlines():
        r = json.loads(line)
        assert r["topic"].startswith("SYN") and r["instrument"] < 4, r
    errs = (tmp_path / "follow.err").read_text()
    assert "Traceback" not in errs and "skipped a" not in errs, errs


HTTP_SQUATTER = """
import socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", %d))
ls.listen(16)
print("bound", flush=True)
reply = %r
while True:
    c, _ = ls.accept()
    c.settimeout(2)
    got = b""
    try:
        while b"\\r\\n\\r\\n" not in got:
            b = c.recv(65536)
            if not b:
                break
            got += b
    except OSError:
        pass
    sys.stdout.write(got.hex() + "\\n")  # everything the client sent, for the test to look at
    sys.stdout.flush()
    if reply:
        c.sendall(reply)
    c.close()
"""

REPLIES = {
    "html": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 22\r\n\r\n<html>hello</html>\r\n\r\n",
    "json_list": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n[1,2,3]",
    "json_fake": (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 32\r\n\r\n'
                  b'{"nonce": "ab", "proof": "cd"} \n'),
    "not_http": b"SSH-2.0-OpenSSH_9.6\r\n",
    "nothing": b"",
}


def test_a_squatter_on_the_http_port_never_sees_the_token_and_tokens_change(tmp_path, shm_name, default_model):
    needs_users()
    d = Daemon(tmp_path, shm_name, "--feed", SYN)
    try:
        d.wait_for("endpoints in ")
        token1 = d.token()
        # over TCP, ctl works without the token on the wire (the engine proved itself first)
        r = cli("ctl", "status", "--http", d.http, "--token-file", str(d.token_file))
        assert r.returncode == 0 and r.stdout.startswith(f"engine {shm_name} "), r.stderr
    finally:
        d.proc.kill()  # (killed: its token stays, as a clean exit would not leave it, for a client that still
        d.proc.wait()  # holds it to meet a squatter on the port)
        d.stop()
    assert d.token_file.exists()
    with throwaway_users(1) as (attacker,):
        for kind, reply in REPLIES.items():
            squat = subprocess.Popen(as_user(attacker, "python", HTTP_SQUATTER % (d.http_port, reply)), cwd=ROOT,
                                     env=engine_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                assert squat.stdout.readline() == "bound\n", squat.stderr.read()
                for cmd in (("ctl", "pause"), ("stats",)):
                    r = cli(*cmd, "--http", d.http, "--token-file", str(d.token_file))
                    assert r.returncode != 0 and r.stdout == "", (kind, r.stdout)
                    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, (kind, r.stderr)
                    assert "the token was not sent" in r.stderr, (kind, r.stderr)
                    got = bytes.fromhex(squat.stdout.readline().strip())
                    assert got.startswith(b"GET /auth/challenge?c="), got
                    assert token1.encode() not in got and b"Authorization" not in got, (kind, got)
            finally:
                squat.kill()
                squat.wait()
    # a new token at each start: the old one is worth nothing to the new engine
    d = Daemon(tmp_path, shm_name, "--feed", SYN, http_port=d.http_port)
    try:
        d.wait_for("endpoints in ")
        token2 = d.token()
        assert token2 != token1 and oct(d.token_file.stat().st_mode & 0o777) == "0o600"
        assert d.get("/status", token=token1)[0] == 401
        assert d.get("/status", token=token2)[0] == 200  # (curl with the bearer token: README says the risk)
        # --name: the unix socket in the private runtime directory, no token read at all
        r = cli("ctl", "status", "--name", shm_name, "--token-file", str(tmp_path / "absent"))
        assert r.returncode == 0 and r.stdout.startswith(f"engine {shm_name} "), r.stderr
        from app.runtime_file import find
        rt = find(shm_name)
        st = os.stat(rt["http_unix"])
        assert st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0
        assert os.stat(os.path.dirname(rt["http_unix"])).st_mode & 0o077 == 0
    finally:
        d.stop()


IDLE_ATTACK = """
import socket, sys, time
held = []
for _ in range(%d):
    s = socket.socket()
    s.connect(("127.0.0.1", %d))
    held.append(s)
print("holding", len(held), flush=True)
sys.stdin.read()  # hold them until told
"""


def test_idle_connections_from_another_user_leave_metrics_answering(tmp_path, shm_name, default_model):
    needs_users()
    from app.httpconns import RESERVE_FDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = RESERVE_FDS + 256  # the engine's budget: 256 HTTP connections, 64 per peer
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))  # (inherited by the engine)
    try:
        d = Daemon(tmp_path, shm_name, "--feed", SYN)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with throwaway_users(1) as (attacker,):
        att = None
        try:
            d.wait_for("endpoints in ")
            n = 2 * nofile  # more than the engine has descriptors
            att = subprocess.Popen(as_user(attacker, "python", IDLE_ATTACK % (n, d.http_port)), cwd=ROOT,
                                   env=engine_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            assert att.stdout.readline() == f"holding {n}\n", att.stderr.read()
            for _ in range(5):  # the attacker's connections are all open (or closed by the engine) now
                m, _ = scrape(d)
                assert d.get("/health")[0] == 200
            assert m["engine_http_evicted_connections_total"][()] >= n - 256
            assert "engine_http_refused_connections_total" in m
            fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
            assert fds < nofile, fds
            assert d.status()["name"] == shm_name  # the token-protected side too
            assert "closing the longest idle" in d.log()
        finally:
            if att is not None:
                att.kill()
                att.wait()
            d.stop()


def test_the_unit_gives_the_descriptors_the_caps_assume():
    from app.httpconns import MAX_CONNECTIONS, RESERVE_FDS
    unit = (ROOT / "ops" / "engine.service").read_text()
    n = int(unit.split("\nLimitNOFILE=", 1)[1].split()[0])
    assert n >= RESERVE_FDS + MAX_CONNECTIONS

"""Bad input, from the command line and from the network: one line that names the option or the
file and a non-zero exit, never a traceback; a malformed HTTP request gets a 4xx and costs at
most one log line; a zmq subscriber that stops reading is counted and cut off, never the engine."""
import gzip
import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.daemon import Daemon, wait_until

SYN = "synthetic://?instruments=4&seed=3&rate=50000"
# thresholds that flip the position whenever the score crosses 0.5: thousands of signals a second
FLIP = ("--param", "warmup=1", "--param", "enter_long=0.5001", "--param", "exit_long=0.5",
        "--param", "enter_short=0.4999", "--param", "exit_short=0.49995")


def engine(*args, timeout=60, **kw):
    return subprocess.run(engine_cmd(*args), cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                          timeout=timeout, **kw)


def one_line_error(r, *needles):
    err = r.stderr.strip()
    assert r.returncode != 0, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, r.stderr
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "empty").write_bytes(b"")
    (d / "empty.gz").write_bytes(gzip.compress(b""))
    (d / "binary.toml").write_bytes(bytes(range(128, 256)) * 4)
    (d / "a_dir").mkdir()
    return d


CASES = [  # (args with {d} = the files' directory, what the one line must name)
    (["run", "--pub", "tcp://127.0.0.1:xyz"], ["--pub", "tcp://127.0.0.1:xyz"]),
    (["run", "--pub", "ipc:///nonexistent/dir/s"], ["--pub", "/nonexistent/dir"]),
    (["signals", "--follow", "garbage"], ["--follow", "garbage"]),
    (["train", "synthetic://?count=100", "--out", "{d}/m", "--trees", "0"], ["--trees"]),
    (["train", "synthetic://?count=100", "--out", "{d}/m", "--horizon", "-3"], ["--horizon"]),
    (["predict", "{d}", "--input", "{d}/empty", "--output", "{d}/o.npy"], ["--input", "empty"]),
    (["feed", "synthetic://?count=10", "--count", "-1", "--ring", "enginetest-bad-{pid}"], ["--count"]),
    (["feed", "binance:{d}/empty", "--ring", "enginetest-bad-{pid}", "--max"], ["{d}/empty", "empty"]),
    (["convert", "binance:{d}/empty", "--out", "{d}/e.parquet"], ["{d}/empty", "empty"]),
    (["convert", "binance:{d}/empty.gz", "--out", "{d}/e.csv"], ["{d}/empty.gz", "no messages"]),
    (["moldudp64", "serve", "synthetic://?count=10", "--dest", "127.0.0.1:9", "--session", "S" * 30],
     ["--session", "1-10"]),
    (["run", "--config", "{d}/binary.toml"], ["{d}/binary.toml", "not a TOML file"]),
    (["backtest", "--horizons-ms", "abc", "{d}/empty", "--out", "{d}/bt"], ["--horizons-ms", "'abc'"]),
    (["backtest", "{d}/a_dir", "--out", "{d}/bt"], ["{d}/a_dir", "is a directory"]),
]


@pytest.mark.parametrize("args,needles", CASES, ids=[" ".join(a[:3])[:40] for a, _ in CASES])
def test_a_bad_value_is_one_line_naming_it(files, args, needles):
    fill = {"d": str(files), "pid": os.getpid()}
    r = engine(*[a.format(**fill) for a in args])
    one_line_error(r, *[n.format(**fill) for n in needles])
    assert not (files / "e.parquet").exists() and not (files / "e.csv").exists()
    assert not any(p.name.startswith(f"enginetest-bad-{os.getpid()}") for p in Path("/dev/shm").iterdir())


def test_an_instruments_file_that_is_no_toml_is_one_line_naming_it(files, tmp_path):
    """--instruments reads its TOML as --config does (engine/toml_file.py): binary, too deep,
    missing or broken, one line naming the flag and the file."""
    from replay.costs import InstrumentsError, load_file
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    broken = tmp_path / "broken.toml"
    broken.write_text('["ES*"\nmultiplier = 50\n')
    for path, want in ((files / "binary.toml", "not a TOML file (not UTF-8 text"), (deep, "nested too deeply"),
                       (broken, "not valid TOML"), (tmp_path / "missing.toml", "No such file")):
        with pytest.raises(InstrumentsError) as e:
            load_file(path)
        assert str(e.value).startswith(f"--instruments {path}: {want}") and "\n" not in str(e.value), e.value


def test_output_into_a_closed_pipe_ends_quietly(tmp_path):
    """`engine signals show F | head`: no 'Broken pipe', no traceback; exits as a SIGPIPE'd tool does."""
    from engine.records import SIGNAL_WORDS
    from engine.signal_log import SignalLog
    path = tmp_path / "many.sig"
    log = SignalLog(str(path))
    w = np.zeros((5000, SIGNAL_WORDS), np.int64)  # ~450 KB of table: far more than a pipe holds
    w[:, 0] = np.arange(5000)
    log.write(w)
    log.close()
    for extra in ([], ["--json"]):
        p = subprocess.Popen(engine_cmd("signals", "show", str(path), *extra), cwd=ROOT, env=engine_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout.readline()
        p.stdout.close()  # `head -1` has what it wanted
        _, err = p.communicate(timeout=60)
        assert p.returncode in (0, 141) and err == b"", (p.returncode, err)


def test_a_token_file_others_can_read_is_refused(tmp_path):
    from app.daemon import ensure_token
    tok = tmp_path / "engine.token"
    ensure_token(str(tok))  # made private
    assert tok.stat().st_mode & 0o777 == 0o600
    tok.chmod(0o644)
    with pytest.raises(RuntimeError, match=f"chmod 600 {tok}"):
        ensure_token(str(tok))
    r = engine("ctl", "status", "--http", "127.0.0.1:9", "--token-file", str(tok))  # the client too
    one_line_error(r, str(tok), "chmod 600")
    # the engine refuses it before anything starts (no model load, no feed, no signal file)
    sig = tmp_path / "run.sig"
    t0 = time.monotonic()
    r = engine("run", "--duration", "1", "--token-file", str(tok), "--http", "127.0.0.1:18997", "--signals-out",
               str(sig), "--name", f"enginetest-tok-{os.getpid()}")
    one_line_error(r, str(tok), "chmod 600")
    assert not sig.exists() and time.monotonic() - t0 < 10


def test_the_instrument_table_is_private_whatever_the_umask(tmp_path):
    name = f"enginetest-inst-{os.getpid()}"
    try:
        r = subprocess.run(engine_cmd("feed", "synthetic://?instruments=2&count=50&rate=0", "--ring", name, "--keep"),
                           cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: os.umask(0))
        assert r.returncode == 0, r.stderr
        st = os.stat(f"/dev/shm/{name}.instruments")
        assert st.st_mode & 0o777 == 0o600, oct(st.st_mode)
    finally:
        for p in Path("/dev/shm").glob(name + "*"):
            p.unlink(missing_ok=True)


# -- a running engine ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def daemon(tmp_path_factory, default_model):
    name = f"enginetest-{os.getpid()}-badinput"
    d = Daemon(tmp_path_factory.mktemp("daemon"), name, "--feed", SYN, "--duration", "120", "--wait", "backoff",
               *FLIP)
    try:
        d.wait_for("/metrics /health /ready")
        yield d
    finally:
        d.stop()
        for p in Path("/dev/shm").glob(name + "*"):
            p.unlink(missing_ok=True)


def metric(d, name):
    from prometheus_client.parser import text_string_to_metric_families
    code, body = d.get("/metrics")
    assert code == 200
    for f in text_string_to_metric_families(body.decode()):
        for s in f.samples:
            if s.name in (name, name + "_total"):
                return s.value
    raise KeyError(name)


MALFORMED = [
    b"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n",  # was a 500 and a traceback
    b"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: \xc3\x28\r\n\r\n",
    b"POST /control/pause HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\r\nContent-Length: 0\r\n\r\n",
    b"GARBAGE\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBadHeaderNoColon\r\n\r\n",
    b"POST /control/pause HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /control/pause HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100,  # a TLS hello
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\x00\x01\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n\r\n",  # no Host
    b"GET /%zz HTTP/1.1\r\n\r\n",
    b"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \x80abc\r\n\r\n",
]


def test_malformed_http_requests_get_a_4xx_and_at_most_a_line(daemon):
    host, port = daemon.http.split(":")
    before = daemon.log()
    for req in MALFORMED:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(req)
            status = s.recv(64).split(b"\r\n")[0]
        assert status.split()[1:2] in ([b"400"], [b"401"], [b"404"], [b"413"], [b"431"]), (req[:60], status)
    time.sleep(0.3)
    new = daemon.log()[len(before):]
    http_lines = [line for line in new.splitlines() if "http:" in line]
    assert "Traceback" not in new and 1 <= len(http_lines) <= 2, new  # one line per 10 s, the rest counted
    assert metric(daemon, "engine_http_bad_requests") >= 10
    assert daemon.get("/health")[0] == 200 and daemon.status()["counters"]["ticks"] > 0


def test_an_http_library_error_is_one_line_and_an_error_of_ours_keeps_its_traceback(capsys):
    """aiohttp raises inside itself when a connection closes under a response at stop (a scrape
    flood): that is one line. An error that passed through our code keeps its traceback."""
    import functools

    import aiohttp.web
    from app.daemon import HttpLog
    log = HttpLog()
    # caught and logged as aiohttp's request handler does it, in a frame that is not ours
    ns = {}
    exec(compile("def handler(fn, log):\n    try:\n        fn()\n    except Exception:\n"
                 "        log.exception('Unhandled exception')\n", aiohttp.web.__file__, "exec"), ns)
    ns["handler"](functools.partial(aiohttp.web.Response, body=b"", text="x"), log)  # raised in aiohttp's code
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "http: Unhandled exception in aiohttp: ValueError: body and text are not allowed together" in err
    log._at.clear()  # (not rate-limited away)
    try:
        int("x")  # raised here, in ours
    except ValueError:
        log.exception("Error handling request")
    err = capsys.readouterr().err
    assert "Traceback" in err and "invalid literal for int()" in err and __file__ in err, err


def test_a_deaf_zmq_subscriber_is_counted_and_cut_off_and_a_reader_misses_nothing(daemon):
    import zmq
    ctx = zmq.Context()
    deaf = daemon.subscriber(ctx)  # subscribes, never reads
    deaf.setsockopt(zmq.SUBSCRIBE, b"")
    deaf.setsockopt(zmq.RCVHWM, 1)
    deaf.setsockopt(zmq.RCVBUF, 4096)
    deaf.connect(daemon.pub)
    stop, got, gaps = threading.Event(), [0], []

    def reader():
        s = daemon.subscriber(ctx)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        s.setsockopt(zmq.RCVHWM, 0)  # zmq's I/O thread takes everything, however busy this thread is
        s.setsockopt(zmq.RCVTIMEO, 200)
        s.connect(daemon.pub)
        last = {}
        while not stop.is_set():
            try:
                topic, payload, seq = s.recv_multipart()
            except zmq.Again:
                continue
            seq = struct.unpack("<Q", seq)[0]
            if topic in last and seq != last[topic] + 1:
                gaps.append((topic, last[topic], seq))
            last[topic] = seq
            got[0] += 1
        s.close(0)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while metric(daemon, "engine_zmq_slow_disconnects") < 1:
            assert daemon.proc.poll() is None, daemon.log()
            assert time.monotonic() < deadline, (metric(daemon, "engine_zmq_dropped"), daemon.log()[-2000:])
            time.sleep(0.2)
        n = got[0]
        assert n > 1000
        wait_until(lambda: got[0] > n, "the reader receiving after the cut", timeout=10)  # (it kept receiving)
    finally:
        stop.set()
        t.join()
        deaf.close(0)
        ctx.term()
    assert metric(daemon, "engine_zmq_dropped") > 1000  # the cut-off one's queue, counted
    assert not gaps, gaps[:5]                           # the reader lost nothing
    assert "stopped reading" in daemon.log() and "disconnected" in daemon.log()
    assert daemon.get("/health")[0] == 200 and daemon.status()["zmq"]["slow_disconnects"] >= 1


def test_the_publisher_finds_a_deaf_ipc_subscriber_too(tmp_path):
    """In process, over ipc:// (a unix socket: its unsent queue is measured like TCP's)."""
    import zmq

    from app.zpub import Publisher
    pub = Publisher(f"ipc://{tmp_path}/s.ipc")
    ctx = zmq.Context()
    deaf = ctx.socket(zmq.SUB)
    deaf.setsockopt(zmq.SUBSCRIBE, b"")
    deaf.setsockopt(zmq.RCVHWM, 1)
    deaf.connect(pub.endpoint)
    good = ctx.socket(zmq.SUB)
    good.setsockopt(zmq.SUBSCRIBE, b"")
    good.setsockopt(zmq.RCVHWM, 0)
    good.setsockopt(zmq.RCVTIMEO, 2000)
    good.connect(pub.endpoint)
    time.sleep(0.3)
    seqs = []
    try:
        for i in range(30000):
            pub.send(b"T", b"x" * 128)
            if i % 50 == 0:
                pub.poll()
                time.sleep(0.001)  # ~1 s in all: the deaf one's stalled queue is seen (zpub.STALL_S)
                # the good reader keeps up, whatever the machine's load: it takes everything sent so
                # far before more is sent (a signal lost to it times out here)
                while len(seqs) <= i:
                    seqs.append(struct.unpack("<Q", good.recv_multipart()[2])[0])
        while len(seqs) < 30000:
            seqs.append(struct.unpack("<Q", good.recv_multipart()[2])[0])
        assert pub.disconnected >= 1 and pub.dropped > 1000, (pub.disconnected, pub.dropped)
        assert seqs == list(range(30000))
    finally:
        pub.close()
        deaf.close(0)  # closed here, not by the garbage collector: a context collected with its sockets
        good.close(0)  # open blocks in term() wherever the collection happens (a later test's import)
        ctx.term()
        deaf.close(0)
        good.close(0)
        ctx.term()

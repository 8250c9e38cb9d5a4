"""`engine venue binance|databento` as a user runs it: a real venue process serving a fixture capture,
its URI line given to a real `engine record` process, whose ticks are the capture's once the books
are synced; SIGTERM ends the venue with exit 0; bad input is one line and exit 2."""
import signal
import socket
import subprocess

import numpy as np
import pytest

from engine.records import KIND_GAP
from feeds.databento.venue import DEMO_KEY

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.helpers.data import ESH4, SPOT, USDM
from tests.helpers.feedutil import cli, one_line_error, read_all

FIELDS = ("ts_event", "instrument", "kind", "side", "price", "size", "bid_px", "bid_sz", "ask_px", "ask_sz")
HANG = 120  # guard against a hung process, not a timing assertion


class Venue:
    """`engine venue ARGS` as a process: its URI line, then SIGTERM at the end of the block."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen(engine_cmd("venue", *args), cwd=ROOT, env=env or engine_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.uri = self.proc.stdout.readline().strip()
        self.err = ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, self.err = self.proc.communicate(timeout=HANG)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def record(uri, out, env=None):
    """`engine record URI --out DIR` until the source idles: the ticks of the one file it wrote."""
    res = subprocess.run(engine_cmd("record", uri, "--out", str(out)), cwd=ROOT, env=env or engine_env(),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    files = sorted(out.rglob("*.ticks"))
    assert len(files) == 1, files
    return read_all(f"tickfile:{files[0]}")[0]


def test_binance_venue_serves_a_capture_that_engine_record_syncs_on(tmp_path):
    """usdm flat out: the URI names the capture's market, symbol and depth stream; a client given it
    connects, syncs its book from the venue's REST snapshot and ends with the capture's ticks
    (binance:FILE of the same capture), no gap."""
    with Venue("binance", str(USDM), "--port", "0", "--speed", "0") as v:
        assert v.uri.startswith("binance-live://usdm?symbols=BTCUSDT&update=0ms&ws=ws://127.0.0.1:"), v.uri
        got = record(v.uri + "&idle_s=5", tmp_path / "rec")
        assert v.proc.poll() is None  # still serving, quiet, after the capture's end
    assert v.proc.returncode == 0, v.err
    assert "Traceback" not in v.err and "usdm BTCUSDT" in v.err
    assert len(got) > 1000 and not (got["kind"] == KIND_GAP).any()
    want = read_all(f"binance:{USDM}")[0]
    k = len(got) // 2
    for f in FIELDS:
        assert np.array_equal(got[f][-k:], want[f][-k:]), f


def test_binance_venue_exits_at_the_end_when_asked(tmp_path):
    """--exit-at-end: the venue exits 0 by itself once a client has been sent the whole capture."""
    with Venue("binance", str(SPOT), "--port", "0", "--speed", "0", "--exit-at-end") as v:
        assert v.uri.startswith("binance-live://spot?symbols=BTCUSDT&ws="), v.uri  # (spot's default stream)
        record(v.uri + "&idle_s=5&backoff_s=0.05&backoff_max_s=0.1", tmp_path / "rec")
        assert v.proc.wait(HANG) == 0


def test_databento_venue_serves_a_dbn_file_that_engine_record_reads(tmp_path):
    """The DBN fixture flat out, the demo key (stderr says how to give it): a client given the URI
    and the key records the snapshot (snapshot=1), then exactly dbn:FILE's ticks."""
    env = engine_env()
    env.pop("DATABENTO_API_KEY", None)
    with Venue("databento", str(ESH4), "--port", "0", "--speed", "0", env=env) as v:
        assert v.uri.startswith("dbn-live://GLBX.MDP3?symbols=ESH4&snapshot=1&gateway=127.0.0.1:"), v.uri
        key = v.proc.stderr.readline() + v.proc.stderr.readline()
        assert f"DATABENTO_API_KEY={DEMO_KEY}" in key, key
        got = record(v.uri + "&idle_s=2", tmp_path / "rec", env=engine_env(DATABENTO_API_KEY=DEMO_KEY))
    assert v.proc.returncode == 0, v.err
    want = read_all(f"dbn:{ESH4}")[0]
    n = len(got) - len(want)  # first the snapshot's: the book cleared (empty at the market's start)
    assert 0 < n <= 2 and (got["price"][:n] == 0).all() and len(want) > 1000, got[:n]
    for f in FIELDS:
        assert np.array_equal(got[f][n:], want[f]), f


def test_the_fault_options_reach_the_venue(tmp_path):
    """--drop-after and --http-error 429 as options: the client's recording has one gap (the dropped
    connection), waits out the 429 and goes on after the gap; a dropped Databento session is one
    gap too, and the snapshot rebuilds the book: it ends with the file's ticks."""
    with Venue("binance", str(USDM), "--port", "0", "--speed", "0", "--drop-after", "3000",
               "--http-error", "429", "--retry-after", "1") as v:
        got = record(v.uri + "&idle_s=5&backoff_s=0.05", tmp_path / "bin")
    gaps = np.nonzero(got["kind"] == KIND_GAP)[0]
    assert len(gaps) == 1 and len(got) - gaps[0] > 100  # (flat out, what played during the resync is skipped)
    with Venue("databento", str(ESH4), "--port", "0", "--speed", "0", "--drop-after", "15000") as v:
        got = record(v.uri + "&idle_s=2&backoff_s=0.05", tmp_path / "dbn", env=engine_env(DATABENTO_API_KEY=DEMO_KEY))
    want = read_all(f"dbn:{ESH4}")[0]
    assert (got["kind"] == KIND_GAP).sum() == 1
    for f in FIELDS:
        assert np.array_equal(got[f][-1000:], want[f][-1000:]), f


def test_databento_venue_bad_key_refuses_the_client(tmp_path):
    with Venue("databento", str(ESH4), "--port", "0", "--bad-key") as v:
        res = subprocess.run(engine_cmd("record", v.uri + "&idle_s=2", "--out", str(tmp_path / "rec")), cwd=ROOT,
                             env=engine_env(DATABENTO_API_KEY=DEMO_KEY),
                             capture_output=True, text=True, timeout=HANG)
    assert res.returncode != 0 and "Authentication failed" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("args, says", [
    (("binance", "missing.gz"), "missing.gz"),
    (("binance", str(ESH4)), ESH4.name),  # not a capture
    (("binance", str(USDM), "--market", "spot"), "recorded on usdm"),
    (("binance", str(USDM), "--market", "nyse"), "--market"),
    (("binance", str(USDM), "--speed", "-1"), "--speed"),
    (("databento", "missing.dbn.zst"), "missing.dbn.zst"),
    (("databento", str(USDM)), USDM.name),  # not a DBN file
    (("databento", str(ESH4), "--port", "70000"), "--port"),
], ids=["binance-missing", "binance-not-a-capture", "binance-other-market", "binance-bad-market",
        "binance-bad-speed", "databento-missing", "databento-not-dbn", "databento-bad-port"])
def test_bad_input_is_one_line(args, says):
    res = cli("venue", *args, "--port", "0") if "--port" not in args else cli("venue", *args)
    line = one_line_error(res, starts=("engine: error: ", f"engine venue {args[0]}: error: "))
    assert says in line, line
    assert not res.stdout  # no URI: nothing is served


@pytest.mark.parametrize("kind, path", [("binance", USDM), ("databento", ESH4)])
def test_a_port_in_use_is_one_line(kind, path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        res = cli("venue", kind, str(path), "--port", str(port))
    line = one_line_error(res)
    assert f"--port {port}" in line and "in use" in line, line

"""Lost data and readiness, as operators meet them: real `engine run` processes fed by a real
MoldUDP64 server over loopback. Messages lost to an unanswered re-request show in the run's
summary, `engine stats` and /metrics; a live feed that ends turns /ready false and is started
again; a file feed that dies ends the run; a cold feed compiles before it listens, so the first
packets are not lost; /metrics passes promtool."""
import functools
import json
import os
import re
import shutil
import signal
import subprocess

import pytest

from tests.conftest import ROOT, engine_cmd, engine_env, strategy_core
from tests.helpers import daemon
from tests.helpers.daemon import Daemon, scrape
from tests.helpers.feedutil import cli
from tests.test_moldudp64 import free_port

SYN = "synthetic://?instruments=2&count=9000&seed=3"
DATE = "2023-11-14"  # the day the ITCH writer stamps (serve prints it)


wait_until = functools.partial(daemon.wait_until, timeout=120)


@pytest.fixture(scope="module")
def itch_day(tmp_path_factory):
    """The synthetic day as an ITCH file (the server then sends at once, without compiling)."""
    f = tmp_path_factory.mktemp("itch") / "day.itch"
    r = cli("convert", SYN, "--out", str(f), "--quiet")
    assert r.returncode == 0, r.stderr
    return f


def serve(itch, port, *extra, timeout=120):
    r = subprocess.run(engine_cmd("moldudp64", "serve", f"itch:{itch}", "--dest", f"127.0.0.1:{port}", "--json",
                                  "--linger", "0.3", *extra),
                       cwd=ROOT, env=engine_env(), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def promtool_check(body):
    r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).decode()


def test_an_unanswered_rerequest_is_counted_in_the_summary_stats_and_metrics(tmp_path, shm_name, default_model,
                                                                             itch_day):
    port, dead = free_port(), free_port()  # re-requests go to a port nobody answers on
    uri = f"moldudp64://127.0.0.1:{port}?date={DATE}&start_seq=1&rerequest=127.0.0.1:{dead}&recover_ms=50"
    d = Daemon(tmp_path, shm_name, "--feed", uri, "--crossed-after", "0.001", core=strategy_core())
    try:
        d.wait_for("endpoints in ")
        sent = serve(itch_day, port, "--drop", "3,10")
        lost = sent["messages_dropped"]
        assert sent["packets_dropped"] == 2 and lost > 0
        # the server's End of Session ends the live feed; the run starts it again and re-attaches to
        # its new ring, which the loop counts as one ring gap of unknown size (nothing was lapped)
        st = wait_until(lambda: (lambda s: s if s["losses"]["feed"]["gaps"] == 2 and s["reattached"] == 1 else None)(
            d.status()), "the loop read the feed's two gap ticks and re-attached to the restarted feed")
        assert st["losses"]["feed"] == {"gaps": 2, "lost": lost} and st["losses"]["ring"] == {"gaps": 1, "lost": 0}, st
        f = wait_until(lambda: (lambda s: s if s.get("rerequest_timeouts") == 2 else None)(d.status()["feed_counters"]),
                       "the feed's counters in its ring")
        assert f["gaps"] == 2 and f["lost_messages"] == lost and f["rerequests"] >= 2, f
        assert f["crossed_books"] >= 1, f  # the lost deletes leave the books crossed (--crossed-after 1 ms)
        # /metrics: by kind, and the feed's own
        m, body = scrape(d)
        assert m["engine_gaps_total"][(("kind", "feed"),)] == 2
        assert m["engine_lost_ticks_total"][(("kind", "feed"),)] == lost
        assert m["engine_gaps_total"][(("kind", "ring"),)] == 1 and m["engine_lost_ticks_total"][(("kind", "ring"),)] == 0
        for name, want in (("gaps", 2), ("lost_messages", lost), ("rerequest_timeouts", 2)):
            assert m[f"engine_feed_{name}_total"][()] == want, name
        assert m["engine_feed_crossed_books_total"][()] >= 1 and "engine_feed_crossed_instruments" in m
        if shutil.which("promtool"):  # the feed's counters are lint-clean too
            code, out = promtool_check(body)
            assert code == 0 and not out.strip(), out
        # engine stats
        r = cli("stats", "--name", shm_name)
        assert r.returncode == 0, r.stderr
        assert f"gaps: feed 2 ({lost:,} lost before the ring)" in r.stdout, r.stdout
        assert f"lost_messages={lost:,}" in r.stdout and "rerequest_timeouts=2" in r.stdout, r.stdout
    finally:
        out = d.stop()
    # the summary: by kind, the feed's counters, and the warning line
    assert f"gaps: feed 2 ({lost:,} lost before the ring), ring " in out, out
    assert re.search(rf"feed: .*\bgaps=2 lost_messages={lost:,}", out), out
    assert f"warning: the feed lost data before the ring: 2 gaps, {lost:,} messages" in out, out
    assert "books stayed crossed" in out, out


def _ready(d):
    code, body = d.get("/ready")
    return code == 200, json.loads(body)["not_ready"]


def test_a_live_feed_that_ends_turns_ready_false_and_is_started_again(tmp_path, shm_name, default_model):
    port = free_port()
    # no packet ever comes: the feed ends itself after idle_s, cleanly (exit status 0)
    d = Daemon(tmp_path, shm_name, "--feed", f"moldudp64://127.0.0.1:{port}?date={DATE}&idle_s=1")
    try:
        d.wait_for("endpoints in ")
        why = wait_until(lambda: (lambda r: r[1] if not r[0] else None)(_ready(d)), "/ready false")
        assert any("feed" in w for w in why), why
        wait_until(lambda: "exited with status 0: starting it again in 0.5 s" in d.log(), "a restart")
        # it ends again (nothing comes): the next restart waits twice as long
        wait_until(lambda: "exited with status 0: starting it again in 1 s" in d.log(), "a second restart")
        assert d.status()["feed_restarts"] >= 1
        assert "feed is down (the live feed ended" in d.log()
    finally:
        d.stop()


def test_a_file_feed_that_dies_ends_the_run_with_a_warning(tmp_path, shm_name, default_model):
    # a finite source (count=) that would take minutes: its feed is killed half way
    feed = "synthetic://?instruments=2&count=50000000&rate=20000&seed=3"
    d = Daemon(tmp_path, shm_name, "--feed", feed)
    try:
        d.wait_for("endpoints in ")
        wait_until(lambda: d.status()["counters"]["ticks"] > 0, "ticks")
        os.kill(d.feed_pid(), signal.SIGKILL)
        d.proc.wait(timeout=120)  # the run ends by itself: its source never will
    finally:
        out = d.stop()
    assert "warning: the feed process exited with status -9 before the end of its source" in out, out
    assert "before the end of its source: stopping" in d.log()


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian package prometheus) not installed")
def test_promtool_check_metrics_passes_on_a_running_engine(tmp_path, shm_name, default_model):
    d = Daemon(tmp_path, shm_name, "--feed", "synthetic://?instruments=4&seed=3&rate=20000")
    try:
        d.wait_for("endpoints in ")
        wait_until(lambda: d.status()["counters"]["scored"] > 0, "scored ticks")
        m, body = scrape(d)
        code, out = promtool_check(body)
        assert code == 0 and not out.strip(), out
        assert "engine_tick_to_signal_seconds_bucket" in m and "engine_latency_ns" not in m
    finally:
        d.stop()


def test_a_cold_feed_compiles_before_it_listens_and_loses_no_packet(tmp_path, shm_name):
    """A feed whose numba cache is empty: it compiles its parser before it binds, so a stream sent
    the moment it listens (its ring is there) is received whole: no gap, every message."""
    big = tmp_path / "big.itch"
    r = cli("convert", "synthetic://?instruments=4&count=800000&seed=5", "--out", str(big), "--quiet", timeout=600)
    assert r.returncode == 0, r.stderr
    port = free_port()
    ring = f"{shm_name}.ticks"
    env = engine_env(NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))  # cold: compiles everything
    err = tmp_path / "feed.err"
    with open(err, "w") as ef:
        feed = subprocess.Popen(engine_cmd("feed", f"moldudp64://127.0.0.1:{port}?date={DATE}&start_seq=1&idle_s=60",
                                           "--ring", ring), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=ef)
    try:
        wait_until(lambda: os.path.exists(f"/dev/shm/{ring}") or feed.poll() is not None, "the feed listens",
                   timeout=600)
        assert feed.poll() is None, err.read_text()
        sent = serve(big, port, "--rate", "200000", timeout=600)
        assert feed.wait(timeout=600) == 0, err.read_text()
    finally:
        if feed.poll() is None:
            feed.kill()
    stats = dict(re.findall(r"(\w+)=(\d+)", err.read_text().splitlines()[-1]))
    assert sent["messages"] > 300_000 and sent["packets_dropped"] == 0
    assert "gaps" not in stats and "lost_messages" not in stats, stats  # (the feed prints counters that are not 0)
    assert int(stats["messages"]) == sent["messages"], stats


def test_a_ring_filled_flat_out_is_conflated_and_the_run_says_so(tmp_path, shm_name, default_model):
    """The issue's case: `engine replay --max` into `engine run --ring` scores a sliver of the ticks
    (the ring is a live source to the run: it conflates); the run says so at its end."""
    from tests.test_replay import ticks_file
    src = ticks_file(tmp_path, "synthetic://?instruments=4&count=100000&seed=7")
    ring = f"{shm_name}.rp"
    rp = subprocess.Popen(engine_cmd("replay", str(src), "--ring", ring, "--max", "--wait-consumers", "1"),
                          cwd=ROOT, env=engine_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: os.path.exists(f"/dev/shm/{ring}") or rp.poll() is not None, "the replay's ring")
        r = cli("run", "--ring", ring, "--name", shm_name, "--json", "--no-rt", "--http", "none", "--pub", "none",
                "--hlog", "none", "--signals-out", str(tmp_path / "s.sig"), timeout=600)
    finally:
        rp.kill()
        rp.wait()
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    cf = res["losses"]["conflated"]
    assert res["ticks"] == 100_000 and res["lost"] == 0, res
    assert cf["share"] > cf["warn_above"] == 0.5 and cf["ticks"] + res["scored"] <= res["ticks"], cf
    assert f"engine: warning: conflation folded {cf['share']:.1%} of the scoreable ticks unscored" in r.stderr, \
        r.stderr


def test_packets_that_trickle_in_are_published_as_they_come(itch_day):
    """Packets ~10 ms apart (a quiet market): each one's ticks come out at once, not held until a
    batch fills or the socket has been quiet for its timeout (and the heartbeat with them)."""
    import threading

    from feeds.nasdaq.mold_server import Server
    from feeds.core.sources import open_source
    port = free_port()
    src = open_source(f"moldudp64://127.0.0.1:{port}?date={DATE}&start_seq=1&idle_s=30")
    server = Server(f"itch:{itch_day}", ("127.0.0.1", port), rate=4500, linger=0.3, quiet=True)  # ~100 packets/s
    t = threading.Thread(target=server.run)
    t.start()
    try:
        sizes = [len(b) for b in src.batches()]
    finally:
        t.join()
    assert src.stats()["messages"] == server.messages and server.sent > 50
    assert sum(1 for n in sizes if n) >= server.sent // 4, sizes  # (about one batch a packet)


def test_ring_inspect_shows_the_feeds_own_counters(shm_name):
    """`engine ring inspect` reads the counters the feed wrote into its ring's header."""
    r = cli("feed", "synthetic://?instruments=2&count=5000&seed=3", "--ring", shm_name, "--max", "--keep")
    assert r.returncode == 0, r.stderr
    r = cli("ring", "inspect", shm_name, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["feed_counters"]["ticks"] == 5000
    r = cli("ring", "inspect", shm_name)
    assert "feed_counters: ticks=5,000" in r.stdout

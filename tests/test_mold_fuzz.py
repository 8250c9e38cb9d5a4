"""MoldUDP64 attacked over loopback: real datagrams into a real `engine feed moldudp64://...`
process. Every malformed, foreign, duplicate or out-of-order packet is counted, none ends or
crashes the feed, and a flood from ahead of a gap cannot make it hold unbounded memory."""
import os
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from engine import feed_stats, shm
from feeds.nasdaq.moldudp64 import END_OF_SESSION, HEADER, MAX_HELD, heartbeat, packet

from tests.conftest import ROOT, engine_cmd, engine_env
from tests.test_moldudp64 import free_port

SESSION = b"FUZZSESS01"
MSG = b"\x00\x0cS" + bytes(11)  # an ITCH system event: 12 bytes after its length


class Feed:
    """`engine feed` listening on a fresh port, writing a kept ring whose header has its counters."""

    def __init__(self, ring, query=""):
        self.port = free_port()
        self.path = shm.ring_path(ring)
        uri = f"moldudp64://127.0.0.1:{self.port}?start_seq=1&date=2023-11-14&idle_s=300&session={SESSION.decode()}{query}"
        self.proc = subprocess.Popen(engine_cmd("feed", uri, "--ring", ring, "--keep"), cwd=ROOT, env=engine_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sent = 0
        self._until(lambda: os.path.exists(self.path), "the feed's ring")  # it listens before the ring exists

    def _until(self, cond, what, timeout=300):
        end = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None:
                raise AssertionError(f"the feed ended (exit {self.proc.returncode}) waiting for {what}: "
                                     f"{self.proc.stderr.read()[-3000:]}")
            if time.monotonic() > end:
                raise AssertionError(f"no {what} within {timeout} s")
            time.sleep(0.01)

    def stats(self):
        return feed_stats.read(shm.read_header(self.path))

    def send(self, *datagrams):
        """Send, then wait until the feed has taken every one (packets + bad_packets): nothing is
        lost in a socket buffer, so the counts below are exact."""
        for d in datagrams:
            self.out.sendto(d, ("127.0.0.1", self.port))
        self.sent += len(datagrams)
        self._until(lambda: (lambda s: s.get("packets", 0) + s.get("bad_packets", 0))(self.stats()) >= self.sent,
                    f"{self.sent} datagrams counted")

    def end(self, seq=None):
        """The session's end (or, with no seq, SIGTERM): the feed exits 0; its last counters."""
        if seq is None:
            self.proc.send_signal(signal.SIGTERM)
        else:
            self.out.sendto(heartbeat(SESSION, seq, end=True), ("127.0.0.1", self.port))
            self.sent += 1
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0 and "Traceback" not in err, err[-3000:]
        self.out.close()
        return self.stats()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()


@pytest.fixture
def feed(shm_name):
    made = []

    def make(query=""):
        made.append(Feed(shm_name, query))
        return made[-1]
    yield make
    for f in made:
        f.close()


def test_malformed_foreign_and_out_of_order_packets_are_counted_exactly(feed):
    f = feed()
    good = packet(SESSION, 1, [MSG])
    f.send(good)
    hostile = [b"", b"short", good[:25],                               # no header / the message cut off
               HEADER.pack(SESSION, 2, 3) + b"\x00\x05abc",            # more messages than the payload holds
               HEADER.pack(SESSION, 2, 1) + b"\x00\x40" + MSG,         # a length past the end
               HEADER.pack(SESSION, 2, 1) + b"\x00\x00",               # a zero-length message
               HEADER.pack(SESSION, 2, 0xFFFE) + MSG,                  # a huge count
               HEADER.pack(SESSION, 2, 1) + MSG + bytes(65_000),       # a huge datagram with trailing bytes
               HEADER.pack(SESSION, 1 << 63, 1) + MSG,                 # a sequence no session reaches (wrap)
               packet(SESSION, 10**9, [MSG])]                          # further ahead than max_gap
    foreign = [packet(b"OTHERSESS0", 2, [MSG]), heartbeat(b"OTHERSESS0", 50, end=True)]  # even its end
    f.send(*hostile, *foreign)
    f.send(good, packet(SESSION, 1, [MSG, MSG]))      # a duplicate, then an overlap with one new message
    f.send(packet(SESSION, 10, [MSG]))                # 3..9 never come: a gap of 7
    f.send(packet(SESSION, 4, [MSG]), good)           # backwards: old news
    f.send(heartbeat(SESSION, 11))                    # a heartbeat in sequence
    st = f.end(11)
    assert st["bad_packets"] == len(hostile) + len(foreign) and st["wrong_session"] == len(foreign), st
    assert st["gaps"] == 1 and st["lost_messages"] == 7, st
    assert st["duplicate_messages"] == 1 + 1 + 1 + 1, st
    assert st["packets"] == f.sent - st["bad_packets"] and st["heartbeats"] == 2, st
    assert st["messages"] == 3, st  # seq 1, 2 and 10: each applied once


def test_random_datagrams_never_end_the_feed_and_each_is_counted(feed):
    f = feed()
    rng = np.random.default_rng(27)
    base = [packet(SESSION, 1 + i, [MSG] * 3) for i in range(0, 60, 3)]
    f.send(base[0])
    for _ in range(20):
        batch = []
        for _ in range(100):
            d = bytearray(base[int(rng.integers(len(base)))])
            for _ in range(int(rng.integers(1, 6))):  # flip, cut, grow, or rewrite the header
                k = int(rng.integers(4))
                if k == 0 and d:
                    d[int(rng.integers(len(d)))] = int(rng.integers(256))
                elif k == 1:
                    d = d[:int(rng.integers(len(d) + 1))]
                elif k == 2:
                    d += rng.bytes(int(rng.integers(1, 64)))
                else:
                    d[:20] = HEADER.pack(SESSION, int(rng.integers(0, 1 << 64, dtype=np.uint64)),
                                         int(rng.integers(0, 1 << 16)))[:len(d[:20])]
            batch.append(bytes(d))
        f.send(*batch)
    st = f.end(1)  # (an end of session needs no particular sequence)
    assert st["packets"] + st["bad_packets"] == f.sent, st
    assert st["bad_packets"] > 0 and st["messages"] >= 3, st


def test_a_flood_from_ahead_of_a_gap_is_given_up_not_held(feed):
    """With a re-request server that never answers and a long recover_ms, packets after a gap are
    held; a flood of them is given up at MAX_HELD, not kept until memory runs out."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        f = feed(f"&rerequest=127.0.0.1:{silent.getsockname()[1]}&recover_ms=3600000")
        f.send(packet(SESSION, 1, [MSG]))
        seq = 10  # 2..9 lost: everything from here on waits for them
        for _ in range(MAX_HELD * 2 // 200 + 1):
            f.send(*[packet(SESSION, seq + 2 * i, [MSG]) for i in range(200)])  # every other one: gaps all along
            seq += 400
        st = f.stats()
        assert st["held_overflows"] >= MAX_HELD, st
        assert st["rerequests"] >= 1 and st["rerequest_timeouts"] == 0, st
        st = f.end()  # (an end of session would wait for the held packets' gap: an hour)
        assert st["gaps"] >= st["held_overflows"] and st["lost_messages"] >= 8, st
        assert st["packets"] == f.sent and st["bad_packets"] == 0, st
        assert silent.recv(64)[:10] == SESSION  # it did ask
    finally:
        silent.close()


def test_a_session_option_that_cannot_be_one_is_refused():
    r = subprocess.run(engine_cmd("convert", f"moldudp64://127.0.0.1:{free_port()}?session=TOOLONGSESSION",
                                  "--out", "/nonexistent/x.ticks"), cwd=ROOT, env=engine_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "session" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert END_OF_SESSION == 0xFFFF

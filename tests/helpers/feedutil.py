"""Helpers shared by the feed tests: read a whole source, run the CLI."""
import subprocess
import time

import numpy as np

from engine.records import KIND_BOOK, KIND_LEVEL, TICK_DTYPE
from feeds.core.sources import open_source

from tests.conftest import ROOT, engine_cmd, engine_env


def read_all(uri):
    """(ticks as a TICK_DTYPE array, the source) — every batch copied out."""
    src = open_source(uri)
    parts = [b.copy() for b in src.batches()]
    words = np.concatenate(parts) if parts else np.zeros((0, 8), np.int64)
    return words.view(TICK_DTYPE).reshape(-1), src


def without_depth(a):
    """The ticks a depth-0 source writes: level and book ticks dropped (quotes and trades are the
    same with or without depth)."""
    return a[(a["kind"] != KIND_LEVEL) & (a["kind"] != KIND_BOOK)]


def cli(*args, timeout=300):
    return subprocess.run(engine_cmd(*args), cwd=ROOT, env=engine_env(), capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(res, starts=("engine: error: ",)):
    """The CLI failed the way bad input should: exit 2, one 'engine: error:' line (or another of
    `starts`: argparse's "engine run: error:"), no traceback."""
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("[")]
    assert len(lines) == 1 and lines[0].startswith(starts), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def check_book_consistent(ladders, orders):
    """Every price level's quantity and order count equal the sum over the live orders resting
    there, every quantity is positive, and no order rests on a level that is missing."""
    from collections import defaultdict

    from feeds.books import book
    live = orders.keys != book.EMPTY_KEY
    assert live.sum() == orders.count[0]
    agg = defaultdict(lambda: [0, 0])
    for bk, px, q in orders.vals[live]:
        assert q > 0, "an order with no quantity left is still in the table"
        a = agg[(int(bk), int(px))]
        a[0] += int(q)
        a[1] += 1
    seen = {}
    for bk in np.nonzero(ladders.meta[:, book.M_LEN])[0]:
        px, qty, cnt = ladders.side(int(bk))
        assert (qty > 0).all() and (cnt > 0).all()
        for p, q, c in zip(px.tolist(), qty.tolist(), cnt.tolist()):
            seen[(int(bk), p)] = [q, c]
    assert seen == dict(agg)


def consume_ring(name, proc, timeout=300):
    """Every tick of ring `name` until its feed process exits, and the feed's instrument names."""
    from engine.shm import RingError
    from engine.tickring import POLL_EMPTY, POLL_TICK, TickConsumer, poll
    deadline = time.monotonic() + timeout
    while True:
        try:
            c = TickConsumer(name, start="oldest")
            break
        except RingError:
            assert proc.poll() is None and time.monotonic() < deadline, "the feed never made its ring"
            time.sleep(0.05)
    got, names = [], None
    while time.monotonic() < deadline:
        st = poll(c.hdr, c.data, c.mask, c.slot_base, c.out)
        if st == POLL_TICK:
            got.append(c.out.copy())
            if names is None:  # (published before the ticks that name the instrument)
                names = c.instruments()
        elif st == POLL_EMPTY:
            if proc.poll() is not None:
                break
            time.sleep(0.0005)
        else:
            raise AssertionError("the consumer was lapped")
    return np.array(got).view(TICK_DTYPE).reshape(-1), names

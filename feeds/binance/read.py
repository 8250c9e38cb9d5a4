"""A binance-live socket read in one numba call: websocket frames -> capture lines (ws_client.deframe)
-> scanner (feeds/binance/scan.py: JSON, continuity, book, ticks) -> ring (publisher.publish_live, with its
feed latency and frame-to-tick time) -> crossed-book watch (crossed._scan).

Why one call: at a live feed's pace (a frame every few ms) the core's caches are not ours between
two frames on this VM, and each numba entry then costs ~30 us before it runs (bench/live.py
machine_floor); the read callback made four (deframe, scan, publish, crossed) with Python between
them. Anything other than the common case (the tick buffer full, a book side or table to grow, a
bad line, a control frame) comes back to Python, which finishes the read the two-step way
(feeds/binance/live.py `_fused`), so the outcome is the same ticks either way.
"""
import numpy as np
from numba import types
from engine.jit import njit

from engine.readonly import read_only

from feeds.binance import scan as S
from feeds.binance.layout import R_DONE
from feeds.binance.symbols import needs_snapshot
from feeds.core.borrow import arrays_at
from feeds.books.crossed import scan_crossed as crossed_scan
from feeds.core.publisher import publish_live
from feeds.transport.ws_client import deframe

_A1, _A2 = types.int64[::1], types.int64[:, ::1]
# the publication's arrays as feeds/process.py Put.live_handles gives them: the ring's header and
# data, the feed-latency and frame-to-tick histograms, and CrossedWatch's five arrays
PUBLISH = types.Tuple((_A1, _A1, _A2, _A2, types.int8[::1], _A1, _A1, _A1, _A1))


@njit(nogil=True, cache=True)
def read(b, n, stamp, lines, lines_ro, max_frame, H, top, out, P, mask, offset, limit_ns, nsym):
    """b[:n] (one socket read) deframed into lines (lines_ro: the same memory, read-only: the scanner's
    one compiled input type), scanned into out, and when the scan finished (R_DONE) its ticks
    published and watched. Returns deframe's 8 values, then (pos, ticks, status, published, want):
    the scan's stop in lines, ticks in out, its status (layout.R_*; not R_DONE: out[:ticks]
    is not published and lines[pos:written] not scanned), the ticks published, and whether a symbol
    needs a snapshot (symbols.needs_snapshot)."""
    used, w, frames, st, op, fin, s, ln = deframe(b, n, stamp, lines, max_frame)
    # (np.int64 / np.bool_, not 0 / False: numba types a constant as a literal and compiled the
    # whole scanner a second time for Literal[int](0), Literal[bool](False), 72 s of a cold start
    # here; these are the types binance.Scanner.scan calls it with, so read reuses that compile)
    zero = np.int64(0)
    pos, nt, r = S.scan_packed(lines_ro, zero, w, np.bool_(False), H, top, out, zero)
    pub = 0
    if r == R_DONE and nt > 0:
        hdr, data, fc, f2t, cstate, since, clist, cpos, c = arrays_at(P, 0, PUBLISH)
        ticks = out[:nt]
        pub = publish_live(hdr, data, mask, ticks, fc, f2t, offset)
        if limit_ns > 0:
            crossed_scan(ticks, nt, limit_ns, cstate, since, clist, cpos, c)
    st_ = arrays_at(H, S.STATE_AT, S.STATE_TYPES)
    return used, w, frames, st, op, fin, s, ln, pos, nt, r, pub, needs_snapshot(st_[0], st_[1], nsym)


_SINK = []  # (the sink's arrays and their table: built once, kept for the process's life)


def throwaway_publish():
    """A PUBLISH handle table over a sink (for compiling read and its callers): a one-record ring
    (mask 0), real histograms and a crossed watch, kept alive here. A handle is only an address:
    over arrays freed on return, one publish through it would write freed memory; this one can
    take any number of them."""
    if not _SINK:
        from engine import latency, shm
        from feeds.core.borrow import handles
        from feeds.books.crossed import CrossedWatch
        c = CrossedWatch(0)
        arrays = [np.zeros(shm.HEADER_WORDS, np.int64), np.zeros(8, np.int64), latency.new_counts(),
                  latency.new_counts(), c.state, c.since, c.clist, c.cpos, c.c]
        _SINK.extend((arrays, handles(arrays)))
    return _SINK[1]


def compile_read(max_frame, sc):
    """read() compiled (or loaded from the cache) before the first connection, on throwaway arrays
    and sc, a throwaway binance.Scanner."""
    frame = np.frombuffer(b"\x81\x02{}", np.uint8)
    lines = np.zeros(256, np.uint8)
    read(frame, len(frame), np.frombuffer(b"1 ", np.uint8), lines, read_only(lines), max_frame, sc.table(), sc.top,
         np.zeros((64, 8), np.int64), throwaway_publish(), 0, 0, 0, 0)

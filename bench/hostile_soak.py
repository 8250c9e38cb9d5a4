"""Hostile soak: `engine feed binance-live://usdm?...` against a local venue (the real usdm capture,
feeds/binance/venue/) that alternates every hostile fault for N minutes (default 10),
while a consumer drains the ring. Shows that a hostile or broken venue cannot exhaust the feed:
its memory, descriptors and threads stay flat after the first cycle of faults, and every gap is
counted, in the feed's counters and as gap ticks in the ring.

The cycle (phase_s each, the venue's connections closed at each phase's start so the next one
meets the new fault): endless continuation frames, a stale depth snapshot, 1 MiB pings, an HTML
depth reply, a ping flood that reads no pongs, 429 with Retry-After: 0, a frame trickled a byte at a
time, a depth reply that never ends, connections that die after one frame, a depth reply cut
short, a depth reply that never comes, then calm. After the last cycle the venue is calm until
the book is synced again; then SIGTERM.

Figures (bench/results/hostile_soak.json, written by a run of 10 minutes or more): RSS,
descriptors and threads sampled every second; growth = the last cycle's peak minus the warm-up's
(the first third of the cycles, at least one: every buffer sized at its first use, the allocator's
arenas grown to their working size); per_cycle_peaks shows the trend; the attacks and reconnects,
the gap counts (feed and ring) and whether they agree: every lost connection one gap line (stream_gaps = reconnects = connections - 1), every
gap a gap tick (gaps = resyncs + stream_gaps = the ring's gap ticks), no tick lost to lapping.
"""
import gzip
import threading
import time
from pathlib import Path

from numba import njit

import _common
from _common import ROOT
from engine.records import KIND_BOOK, KIND_GAP, tick_kind
from engine.tickring import POLL_EMPTY, POLL_GAP, poll

USDM = ROOT.parent / "shared" / "data" / "binance" / "usdm_btcusdt_20240808.gz"
CYCLE = [  # (name, ws_fault, rest_fault)
    ("fragments", "fragments", None), ("stale", None, "stale"), ("big_pings", "big_pings", None),
    ("garbage", None, "garbage"), ("ping_flood", "ping_flood", None), ("retry_after_0", None, "retry_after_0"),
    ("trickle", "trickle", None), ("huge", None, "huge"), ("close", "close", None), ("bad_json", None, "bad_json"),
    ("never", None, "never"), ("calm", None, None),
]
SAMPLE_S = 1.0


@njit(nogil=True)
def _drain(hdr, data, mask, slot_base, out, counts):
    """Every tick the ring holds for this consumer: counts [ticks, gap ticks, lapped, book ticks]
    and the seq of the last gap tick (5) and of the last book tick (6)."""
    n = 0
    while True:
        st = poll(hdr, data, mask, slot_base, out)
        if st == POLL_EMPTY:
            return n
        n += 1
        if st == POLL_GAP:
            counts[2] += 1
            continue
        counts[0] += 1
        k = tick_kind(out)
        if k == KIND_GAP:
            counts[1] += 1
            counts[5] = out[0]
        elif k == KIND_BOOK:
            counts[3] += 1
            counts[6] = out[0]


class RingCounter(threading.Thread):
    """A consumer of the feed's ring counting ticks and gap ticks until the producer finishes."""

    def __init__(self, ring, proc):
        super().__init__(daemon=True)
        import numpy as np
        self.ring, self.proc = ring, proc
        self.counts = np.zeros(8, np.int64)
        self.error = None

    def run(self):
        from engine.shm import RingError
        from engine.tickring import TickConsumer
        try:
            while True:
                try:
                    c = TickConsumer(self.ring, start="oldest")
                    break
                except (RingError, FileNotFoundError, ValueError):
                    if self.proc.poll() is not None:
                        return
                    time.sleep(0.05)
            while True:
                done = c.producer_finished()
                if _drain(c.hdr, c.data, c.mask, c.slot_base, c.out, self.counts) == 0:
                    if done:
                        return
                    time.sleep(0.002)
        except Exception as e:  # noqa: BLE001 - reported by the soak
            self.error = repr(e)

    def settled(self, since_seq):
        """A book tick came after the last gap tick, itself after since_seq."""
        return self.counts[6] > max(self.counts[5], since_seq)


def _capture_span_s(capture):
    with gzip.open(capture, "rb") as f:
        first = int(f.readline().split(b" ", 1)[0])
        last = first
        for ln in f:
            last = int(ln.split(b" ", 1)[0])
    return (last - first) / 1e9


def soak(seconds=600.0, phase_s=10.0, quiet=True, capture=USDM):
    """Run the soak for about `seconds` (whole cycles, at least two); its result dict."""
    from feeds.binance.venue import BinanceVenue
    from tests.helpers.feed_proc import FeedProc
    cycles = max(2, round(seconds / (phase_s * len(CYCLE))))
    run_s = cycles * phase_s * len(CYCLE)
    speed = min(2.0, 0.85 * _capture_span_s(capture) / (run_s + 60))  # (the capture lasts the soak)
    say = (lambda m: None) if quiet else (lambda m: print(m, flush=True))
    ring = f"hostilesoak-{id(say) & 0xffffff:x}"
    fb = BinanceVenue(capture, market="usdm", speed=speed, ws_fault_after=50, trickle_s=0.1, hostile_budget=64 << 20)
    fb.start()
    try:
        u = (f"binance-live://usdm?symbols=BTCUSDT&update=0ms&ws={fb.ws_url}&rest={fb.rest_url}"
             f"&silence_s=1&backoff_s=0.05&backoff_max_s=1")
        with FeedProc(u, "--wait-consumers", "1", ring=ring) as f:
            counter = RingCounter(ring, f.proc)
            counter.start()
            # (the cycles start once the feed is up: a cold cache compiles its parser first, which is
            # no part of what the venue does to it)
            f.wait(lambda: fb.connections >= 1 and counter.counts[0] > 0, timeout=900, every=0.2,
                   what="the feed's first connection and ticks (after its compile)")
            rows, attacks = _cycles(fb, f, cycles, phase_s, say)
            fb.ws_fault, fb.rest_fault = None, {}
            calm_at = int(counter.counts[0])
            f.wait(lambda: counter.settled(calm_at), timeout=120, what="the book synced again after the last fault",
                   every=0.2)
            time.sleep(1.0)  # (ticks of the synced book flow: nothing left in flight)
            conns = fb.connections
            rc = f.stop()
            counter.join(30)
            st, stop_s, stderr = f.counters(), f.stop_s, f.stderr
    finally:
        fb.stop()
        for p in Path("/dev/shm").glob(ring + "*"):  # (the feed's ring: nobody reads it after us)
            p.unlink(missing_ok=True)
    return _result(rows, cycles, run_s=run_s, phase_s=phase_s, speed=speed, attacks=attacks, conns=conns, st=st,
                   counter=counter, fb=fb, rc=rc, stop_s=stop_s, stderr=stderr)


def _cycles(fb, f, cycles, phase_s, say):
    """Every fault of CYCLE in turn, `cycles` times, phase_s each: the feed's process sampled every
    SAMPLE_S (rows of rss, descriptors, threads) and the attacks made."""
    rows, attacks = [], 0
    t0 = time.monotonic()
    for cycle in range(cycles):
        for name, ws, rest in CYCLE:
            conns = fb.connections
            fb.ws_fault, fb.rest_fault = ws, ({"depth": rest} if rest else {})
            fb.kick()
            end = time.monotonic() + phase_s
            while time.monotonic() < end:
                s = f.sample()
                if s is None:
                    raise SystemExit(f"the feed exited:\n{f.stderr[-3000:]}")
                rows.append({"t": round(time.monotonic() - t0, 1), "cycle": cycle, "phase": name,
                             "rss_mb": round(s[0], 1), "fds": s[1], "threads": s[2]})
                time.sleep(SAMPLE_S)
            if ws:
                attacks += fb.connections - conns
            elif rest:
                attacks += 1
            say(f"  cycle {cycle + 1}/{cycles} {name:>14}: rss {rows[-1]['rss_mb']:7.1f} MB, fds "
                f"{rows[-1]['fds']:3d}, threads {rows[-1]['threads']:3d}, connections {fb.connections}")
    return rows, attacks


def _result(rows, cycles, *, run_s, phase_s, speed, attacks, conns, st, counter, fb, rc, stop_s, stderr):
    """The soak's figures: growth per resource (the last cycle's peak over the warm-up's), the
    feed's counters and the ring's, and whether every gap was counted."""
    c = counter.counts

    def peaks(key):
        return [max(r[key] for r in rows if r["cycle"] == k) for k in range(cycles)]

    def growth(key):
        p = peaks(key)
        return round(p[-1] - max(p[:max(1, cycles // 3)]), 1)
    res = {
        "seconds": round(run_s), "cycles": cycles, "phase_s": phase_s, "speed": round(speed, 3),
        "rss_growth_mb": growth("rss_mb"), "fd_growth": growth("fds"), "thread_growth": growth("threads"),
        "rss_peak_mb": max(r["rss_mb"] for r in rows),
        "per_cycle_peaks": {k: peaks(k) for k in ("rss_mb", "fds", "threads")},
        "attacks": attacks, "connections": conns, "reconnects": st["reconnects"], "stream_gaps": st["stream_gaps"],
        "gaps": st["gaps"], "resyncs": st["resyncs"], "silences": st["silences"], "rest_errors": st["rest_errors"],
        "rest_banned": st["rest_banned"], "bad_lines": st["bad_lines"], "snapshots": st["snapshots"],
        "ring_ticks": int(c[0]), "ring_gap_ticks": int(c[1]), "ring_lapped": int(c[2]),
        "hostile_bytes_sent": fb.hostile_sent, "attacks_run_to_the_end": fb.hostile_spent,
        "depth_requests": sum(1 for _, p in fb.rest_times if p.endswith("/depth")),
        "exit_code": rc, "stop_s": round(stop_s, 2), "consumer_error": counter.error,
        "samples": rows,
    }
    res["gaps_counted"] = bool(
        rc == 0 and counter.error is None and st["reconnects"] == conns - 1 and st["stream_gaps"] == st["reconnects"]
        and st["gaps"] == st["resyncs"] + st["stream_gaps"] and int(c[1]) == st["gaps"] and int(c[2]) == 0
        and fb.hostile_spent == 0)
    if not res["gaps_counted"]:
        res["stderr_tail"] = stderr[-3000:]
    return res


def main():
    def extra(p):
        p.add_argument("--minutes", type=float, default=10.0)
        p.add_argument("--phase-s", type=float, default=10.0)
    a = _common.args(__doc__, extra)
    minutes = 1.0 if a.quick else a.minutes
    phase_s = 2.0 if a.quick else a.phase_s
    r = soak(minutes * 60, phase_s, quiet=False)
    print(f"\n{r['seconds']} s, {r['cycles']} cycles: rss growth {r['rss_growth_mb']} MB (peak {r['rss_peak_mb']}), "
          f"fds {r['fd_growth']:+d}, threads {r['thread_growth']:+d}; {r['attacks']} attacks, {r['connections']} "
          f"connections, gaps {r['gaps']} (ring {r['ring_gap_ticks']}), every gap counted: {r['gaps_counted']}")
    if minutes >= 10:  # (the figures of record; a shorter run is a check, not them)
        _common.save("hostile_soak", r, {}, {},
                     notes="growth: the last cycle's peak minus the warm-up's (the first third of the cycles)")
    if not r["gaps_counted"]:
        raise SystemExit(f"not every gap counted:\n{r.get('stderr_tail', '')}")


if __name__ == "__main__":
    main()

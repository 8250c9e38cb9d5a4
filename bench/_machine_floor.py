"""The machine's floor under any frame path, measured for bench/live.py: a numba call and the
numba websocket deframer when not run back to back, a C loop's cache lines after sleeping or
spinning, and the stalls the host puts on a spinning core (the C ones only where gcc is)."""
import contextlib
import os
import shutil
import subprocess
import time

import _common  # noqa: F401  (the repository on sys.path)
import numpy as np


def machine_floor(samples=400):
    """What this machine does to a small piece of the frame path when it is not run back to back:
    the numba deframer on one 250-byte frame (~2 us warm), timed back to back and after 1 ms of
    sleep; and the least any frame's path can cost, one call of a numba function that only reads
    one array element (~0.8 us back to back), back to back, after 10 ms asleep and after 10 ms
    busy in Python (no sleep: a spinning feed). On an untuned VM the slow cases are many times the
    first (caches and branch predictors are not ours between two frames at a live feed's pace; the
    busy case shows it is not the wake from idle): the floor under any at-pace figure here.
    {back_to_back, after_1ms, call_back_to_back, call_after_10ms_asleep, call_after_10ms_busy:
    {p50, p99}} in ns."""
    from numba import njit

    from feeds.transport import ws_client
    payload = b'{"stream":"btcusdt@bookTicker","data":{"e":"bookTicker","u":4009002171,"s":"BTCUSDT",' \
              b'"b":"25351.90","B":"31.210","a":"25365.20","A":"40.660","T":1,"E":1}}'
    data = np.frombuffer(bytes([0x81, 126]) + len(payload).to_bytes(2, "big") + payload, np.uint8)
    stamp = np.frombuffer(b"1723075200123456789 ", np.uint8)
    out = np.empty(len(data) + ws_client.LINE_EXTRA * (len(data) // 2 + 1), np.uint8)
    first = njit(lambda a: a[0])

    def busy(s):
        t = time.perf_counter() + s
        while time.perf_counter() < t:
            pass

    def deframe():
        ws_client.deframe(data, len(data), stamp, out, 1 << 20)

    def call():
        first(data)
    deframe(), call()
    res = {}
    for name, fn, gap, wait in (("back_to_back", deframe, 0.0, None), ("after_1ms", deframe, 0.001, time.sleep),
                                ("call_back_to_back", call, 0.0, None),
                                ("call_after_10ms_asleep", call, 0.01, time.sleep),
                                ("call_after_10ms_busy", call, 0.01, busy)):
        ts = []
        for _ in range(samples if gap < 0.01 else samples // 4):
            if gap:
                wait(gap)
            t = time.perf_counter_ns()
            fn()
            ts.append(time.perf_counter_ns() - t)
        res[name] = {"p50": int(np.percentile(ts, 50)), "p99": int(np.percentile(ts, 99))}
    return res


CACHE_LINES_C = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
static int cmp(const void* a, const void* b) { uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) {  /* samples, gap us, cache lines, busy (0/1) */
  int n = atoi(argv[1]), busy = atoi(argv[4]); long gap = atol(argv[2]); size_t lines = atol(argv[3]);
  uint32_t* next = malloc(lines * 64), * perm = malloc(lines * 4); uint64_t* d = malloc(n * 8);
  for (size_t i = 0; i < lines; ++i) perm[i] = i;
  srand(1);
  for (size_t i = lines - 1; i > 0; --i) { size_t j = rand() % (i + 1); uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
  for (size_t i = 0; i < lines; ++i) next[perm[i] * 16] = perm[(i + 1) % lines];  /* one random cycle */
  volatile uint32_t sink;
  for (int i = 0; i < n; ++i) {
    if (busy) { uint64_t e = now() + gap * 1000; while (now() < e) {} }
    else { struct timespec ts = {0, gap * 1000}; nanosleep(&ts, 0); }
    uint64_t t0 = now(); uint32_t q = 0;
    for (size_t k = 0; k < lines; ++k) q = next[q * 16];
    sink = q; d[i] = now() - t0;
  }
  qsort(d, n, 8, cmp);
  printf("%lu %lu\n", (unsigned long)d[n / 2], (unsigned long)d[n * 99 / 100]);
  return 0;
}
"""


@contextlib.contextmanager
def c_program(source):
    """The path of `source` compiled (gcc -O2) in a directory that lives as long as the block, or
    None when no C compiler is here."""
    import tempfile
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        yield None
        return
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "prog.c"), os.path.join(d, "prog")
        with open(src, "w") as f:
            f.write(source)
        subprocess.run([cc, "-O2", src, "-o", exe], check=True)
        yield exe


def cache_floor(lines=300, samples=400):
    """The floor under any design, Python or not: a C loop that reads `lines` random cache lines
    (a dependent chain, so nothing overlaps: roughly what a frame's path touches), timed right after
    5 ms of spinning, 1 ms asleep and 5 ms asleep. {busy_5ms, asleep_1ms, asleep_5ms: {p50, p99}}
    in ns, or {} without gcc."""
    with c_program(CACHE_LINES_C) as exe:
        if exe is None:
            return {}
        out = {}
        for name, gap_us, busy in (("busy_5ms", 5000, 1), ("asleep_1ms", 1000, 0), ("asleep_5ms", 5000, 0)):
            r = subprocess.run([exe, str(samples), str(gap_us), str(lines), str(busy)], check=True,
                               capture_output=True, text=True)
            p50, p99 = (int(x) for x in r.stdout.split())
            out[name] = {"p50": p50, "p99": p99}
        return out


STALLS_C = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static uint64_t now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
int main(int argc, char** argv) {  /* seconds: read the clock back to back; count the gaps */
  uint64_t t0 = now(), end = t0 + (uint64_t)(atof(argv[1]) * 1e9), prev = t0, n10 = 0, n50 = 0, lost = 0;
  for (;;) {
    uint64_t t = now(), d = t - prev;
    prev = t;
    if (t > end) break;
    if (d >= 10000) { ++n10; lost += d; if (d >= 50000) ++n50; }
  }
  printf("%lu %lu %lu\n", (unsigned long)n10, (unsigned long)n50, (unsigned long)lost);
  return 0;
}
"""


def stall_floor(seconds=5.0):
    """What the host takes from a spinning core: a C loop reading the clock back to back for
    `seconds`, counting the gaps of 10 us and more (the core given to something else) and 50 us and
    more. Any frame path, native or not, that such a gap lands in pays it.
    {stalls_10us_per_s, stalls_50us_per_s, lost_pct}, or {} without gcc."""
    with c_program(STALLS_C) as exe:
        if exe is None:
            return {}
        r = subprocess.run([exe, str(seconds)], check=True, capture_output=True, text=True)
    n10, n50, lost = (int(x) for x in r.stdout.split())
    return {"stalls_10us_per_s": round(n10 / seconds), "stalls_50us_per_s": round(n50 / seconds),
            "lost_pct": round(100 * lost / (seconds * 1e9), 2)}

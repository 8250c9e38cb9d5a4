"""--isolate: what other work on the strategy core costs the tail, and what moving it off buys.

`engine run --core C --rate 50000 --duration D --json` (the whole command a user types, the
default synthetic feed and strategy) alternately without and with --isolate, N times each, on
this machine as it is (no isolcpus). Per run: the ring stage's tail (feed publish to dequeue,
every tick), tick to signal (scored ticks), and how long the strategy thread waited for its core
while other work ran there (/proc schedstat). Reported: the median over the runs of each figure,
and the worst run's. The peer is the same engine without --isolate. --quick: 3 runs of 4 s.
"""
import os
import statistics
import sys

import _common

CORE = max(os.sched_getaffinity(0))
KEYS = ("ring_p99_ns", "ring_p999_ns", "ring_p9999_ns", "ring_max_ns", "tick_to_signal_p99_ns",
        "tick_to_signal_p999_ns", "tick_to_signal_p9999_ns", "preempted_ms", "preemptions")


def main():
    a = _common.args(__doc__)
    n, dur = (3, 4) if a.quick else (7, 8)
    runs = {False: [], True: []}
    for i in range(n):
        for iso in (False, True):
            r = _common.tail(_common.engine_run(CORE, 50000, dur, ["--isolate"] if iso else []))
            runs[iso].append(r)
            print(f"  run {i + 1}/{n} {'--isolate' if iso else 'as is    '}: ring p99.9 {r['ring_p999_ns'] / 1e3:,.1f} us, "
                  f"max {r['ring_max_ns'] / 1e3:,.0f} us; tick to signal p99.9 {r['tick_to_signal_p999_ns'] / 1e3:,.1f} us; "
                  f"waited {r['preempted_ms']} ms for the core", file=sys.stderr, flush=True)

    def summary(rs):
        out = {f"median_{k}": statistics.median(r[k] for r in rs) for k in KEYS}
        out.update({f"worst_{k}": max(r[k] for r in rs) for k in KEYS})
        return out
    metrics = {"isolate": summary(runs[True]), "runs": n, "seconds_per_run": dur, "rate": 50000}
    peers = {"not_isolated": summary(runs[False])}
    ratios = {f"isolate_vs_not_isolated_median_{k}": _common.ratio(metrics["isolate"][f"median_{k}"],
                                                                   peers["not_isolated"][f"median_{k}"], False)
              for k in ("ring_p999_ns", "ring_p9999_ns", "tick_to_signal_p999_ns", "preempted_ms")}
    rows = [(f"{label} {stat}", {k: v[f"{stat}_{k}"] for k in KEYS})
            for label, v in (("as is", peers["not_isolated"]), ("--isolate", metrics["isolate"]))
            for stat in ("median", "worst")]
    _common.table(f"engine run --rate 50000, {n} runs of {dur} s each way, core {CORE} (ns; ms waited)",
                  ["ring_p99_ns", "ring_p999_ns", "ring_max_ns", "tick_to_signal_p999_ns", "preempted_ms"], rows)
    _common.save("isolate", metrics, peers, ratios)


if __name__ == "__main__":
    main()

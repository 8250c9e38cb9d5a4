"""Soak: the highest tick rate this machine holds for 60 s with no gap and no dropped signal, and
the percentile table at that rate.

Each probe is a real `engine run` (feed process, ring, pinned loop, control plane) at a given
synthetic rate for PROBE_S seconds; rates double until a probe shows a gap, a lost tick, a
dropped signal or a feed that cannot keep the rate (published < 97% of rate x time), then halve
the step back toward the last good rate. The best rate found is run again for the full soak.
SCHED_FIFO is used only where RT throttling is off (otherwise --no-rt: see ops/tuning.md).
"""
import json
import os
import subprocess
import sys

import _common  # noqa: F401

from _common import ROOT


def run(rate, seconds, core, rt):
    cmd = [sys.executable, "-m", "app", "run", "--core", str(core), "--rate", f"{rate:g}", "--duration",
           f"{seconds:g}", "--json", "--http", "none", "--pub", "none", "--hlog", "none", "--no-doctor",
           "--name", f"soak{os.getpid()}", "--signals-out", "/dev/null"] + ([] if rt else ["--no-rt"])
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 300)
    if r.returncode:
        raise SystemExit(f"engine run failed at {rate:g}/s: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def clean(res, rate, seconds):
    return (res["gaps"] == 0 and res["lost"] == 0 and res["drops"] == 0
            and res["ticks"] >= 0.97 * rate * res["elapsed_s"])


def main():
    a = _common.args(__doc__)
    probe_s, soak_s = (4, 15) if a.quick else (10, 60)
    core = sorted(os.sched_getaffinity(0))[-1]
    rt = open("/proc/sys/kernel/sched_rt_runtime_us").read().strip() == "-1"
    good, rate, probes = 0, 25_000, []
    while rate <= 4_000_000:
        res = run(rate, probe_s, core, rt)
        ok = clean(res, rate, probe_s)
        probes.append({"rate": rate, "ok": ok, "ticks": res["ticks"], "gaps": res["gaps"], "drops": res["drops"]})
        print(f"  probe {rate:>10,.0f}/s for {probe_s} s: {'clean' if ok else 'NOT clean'} "
              f"(ticks {res['ticks']:,}, gaps {res['gaps']}, lost {res['lost']}, drops {res['drops']})", flush=True)
        if not ok:
            break
        good, rate = rate, rate * 2
    step = (rate - good) / 2
    while good and step >= good * 0.1:  # refine between the last clean and the first failing rate
        r = good + step
        res = run(r, probe_s, core, rt)
        ok = clean(res, r, probe_s)
        print(f"  probe {r:>10,.0f}/s for {probe_s} s: {'clean' if ok else 'NOT clean'}", flush=True)
        probes.append({"rate": r, "ok": ok, "ticks": res["ticks"], "gaps": res["gaps"], "drops": res["drops"]})
        if ok:
            good = r
        step /= 2
    held = None
    while good >= 1000:  # the soak itself; back off 10% if it does not hold for the whole time
        res = run(good, soak_s, core, rt)
        if clean(res, good, soak_s):
            held = res
            break
        print(f"  soak at {good:,.0f}/s was not clean; backing off", flush=True)
        good *= 0.9
    if held is None:
        raise SystemExit("no rate held cleanly")
    lat = held["latency_ns"]["tick_to_signal"]
    metrics = {"soak_rate_ticks_per_s": round(good), "soak_seconds": soak_s, "ticks": held["ticks"],
               "gaps": held["gaps"], "signal_drops": held["drops"], "policy": held["policy"],
               **{f"tick_to_signal_{k.replace('.', '')}_ns": v for k, v in lat.items() if k != "count"}}
    for stage, v in held["latency_ns"].items():
        metrics[f"{stage}_p99_ns"] = v["p99"]
    print(f"\nheld {good:,.0f} ticks/s for {soak_s} s on core {core} ({held['policy']}): no gap, no drop")
    from app.run_summary import percentile_table
    print(percentile_table(held["latency_ns"]))
    _common.save("soak", metrics, {}, {}, {"probes": probes, "rt_throttling_off": rt})


if __name__ == "__main__":
    main()

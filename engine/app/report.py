"""The end-of-run summary: a table for people, one JSON object for programs."""
import json

from engine.latency import STAGES

COLS = ("p50", "p90", "p99", "p99.9", "p99.99", "max")


def as_json(res):
    elapsed_s = res.run_seconds
    return {
        "ticks": res.counters["ticks"], "signals": res.counters["signals"], "gaps": res.counters["gaps"],
        "drops": res.drops, "core": res.core, "policy": res.policy, "backend": res.backend,
        "latency_ns": {s: {c: res.latency[s][c] for c in COLS} for s in STAGES},
        # extras beyond the required keys
        "lost": res.counters["lost"], "scored": res.counters["scored"], "elapsed_s": round(elapsed_s, 3),
        "signals_file": res.signals_path, "model": res.model_dir, "model_swaps": res.swaps,
        "strategy": res.strategy, "wait": res.wait, "policy_reason": res.choice,
        "conflate": res.conflate, "conflated": res.counters["conflated"], "conflation_marks": res.counters["marks"],
        "parks": res.counters["parks"], "feed_waits_for_loop": res.backpressure,
        "preempted": res.preempted, "isolation": res.isolation,
        "warnings": warnings(res), "error": getattr(res, "error", None),
    }


def table(res):
    elapsed_s = res.run_seconds
    c = res.counters
    rate = c["ticks"] / elapsed_s if elapsed_s > 0 else 0.0
    lines = [
        f"engine run: {elapsed_s:.1f} s, core {res.core if res.core is not None else 'unpinned'} "
        f"{res.policy} + {res.wait} wait, backend {res.backend}, strategy {res.strategy['name']} "
        f"(sha256 {res.strategy['sha256'][:12]})",
        f"  ticks {c['ticks']:,} ({rate:,.0f}/s)   scored {c['scored']:,}   "
        + (f"conflated {c['conflated']:,}   " if res.conflate else "") + f"signals {c['signals']:,}   "
        f"gaps {c['gaps']:,} (ticks lost {c['lost']:,})   drops {res.drops:,}",
        percentile_table(res.latency)]
    for sw in res.swaps:
        lines.append(f"  model swap: generation {sw['generation']} ({sw['backend']}) adopted "
                     f"{sw['adopted_after_us']:.1f} us after publication" if sw.get("ok") else
                     f"  model swap failed: {sw.get('error', 'not adopted')}")
    lines.append(f"  signals -> {res.signals_path}")
    if res.preempted is not None and res.core is not None:
        lines.append("  " + preemption_line(res))
    lines += [f"  note: {n}" for n in res.notes if "RT throttling" in n]
    lines += [f"  warning: {w}" for w in warnings(res)]
    return "\n".join(lines)


SHARED_CORE_PCT = 0.1  # waits above this share of the run: say that other work shares the core, and what to do


def preemption_line(res):
    """How often and how long other work held the strategy core: the usual cause of a tail in
    milliseconds on an untuned machine."""
    p = res.preempted
    pct = 100 * p["wait_ms"] / 1e3 / res.run_seconds if res.run_seconds > 0 else 0.0
    line = (f"core {res.core}: the strategy thread waited {p['wait_ms']:,.1f} ms ({pct:.2f}% of the run) in "
            f"{p['count']:,} preemptions for its core")
    if pct >= SHARED_CORE_PCT:
        line += (": other tasks run there (engine run --isolate moves them off while it runs; "
                 f"`engine doctor --core {res.core}` lists them)" if res.isolation is None else
                 ": tasks --isolate cannot move (per-CPU kernel work) or interrupts")
    return line


def warnings(res):
    """What a run lost or dropped, in words (printed in the summary; --strict makes them fatal)."""
    c, out = res.counters, []
    if c["lost"]:
        out.append(f"{c['lost']:,} ticks lost in {c['gaps']:,} gaps: the loop was lapped by its feed "
                   "(a live feed faster than the loop; file feeds wait for it)")
    if res.drops:
        out.append(f"{res.drops:,} signals dropped: the signal ring was full (the drainer fell behind)")
    out += list(getattr(res, "warnings", []))  # incomplete inputs and outputs
    return out


def percentile_table(lat):
    """The per-stage percentile table (ns) of a latency summary."""
    lines = [f"  {'latency (ns)':<16}" + "".join(f"{k:>13}" for k in COLS) + f"{'count':>13}"]
    for s in STAGES:
        st = lat[s]
        lines.append(f"  {s:<16}" + "".join(f"{st[k]:>13,}" for k in COLS) + f"{st['count']:>13,}")
    return "\n".join(lines)


def dumps(obj):
    return json.dumps(obj, sort_keys=False)

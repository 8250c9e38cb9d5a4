"""The end-of-run summary: a table for people, one JSON object for programs."""
import json

from .latency import STAGES

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
        "strategy": res.strategy,
    }


def table(res):
    elapsed_s = res.run_seconds
    c = res.counters
    rate = c["ticks"] / elapsed_s if elapsed_s > 0 else 0.0
    lines = [
        f"engine run: {elapsed_s:.1f} s, core {res.core if res.core is not None else 'unpinned'} "
        f"{res.policy}, backend {res.backend}, strategy {res.strategy['name']} "
        f"(sha256 {res.strategy['sha256'][:12]})",
        f"  ticks {c['ticks']:,} ({rate:,.0f}/s)   scored {c['scored']:,}   signals {c['signals']:,}   "
        f"gaps {c['gaps']:,} (ticks lost {c['lost']:,})   drops {res.drops:,}",
        percentile_table(res.latency)]
    for sw in res.swaps:
        lines.append(f"  model swap: generation {sw['generation']} ({sw['backend']}) adopted "
                     f"{sw['adopted_after_us']:.1f} us after publication" if sw.get("ok") else
                     f"  model swap failed: {sw.get('error', 'not adopted')}")
    lines.append(f"  signals -> {res.signals_path}")
    lines += [f"  note: {n}" for n in res.notes if "RT throttling" in n]
    return "\n".join(lines)


def percentile_table(lat):
    """The per-stage percentile table (ns) of a latency summary."""
    lines = [f"  {'latency (ns)':<16}" + "".join(f"{k:>13}" for k in COLS) + f"{'count':>13}"]
    for s in STAGES:
        st = lat[s]
        lines.append(f"  {s:<16}" + "".join(f"{st[k]:>13,}" for k in COLS) + f"{st['count']:>13,}")
    return "\n".join(lines)


def dumps(obj):
    return json.dumps(obj, sort_keys=False)

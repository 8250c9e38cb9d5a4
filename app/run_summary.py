"""The end-of-run summary: a table for people, one JSON object for programs.

Losses by kind (losses(): the summary, --json and /status say the same): `feed`, gap ticks in
the stream (the feed lost messages of its source: a venue sequence gap it could not recover);
`ring`, the loop was lapped by its feed; `conflated`, scoreable ticks folded unscored when the
loop fell behind; `crossed_books`, books the feed saw crossed for longer than its limit. Every
one of them, and a failed feed process, ends the summary with a warning line."""
import json

from engine import signal_counts
from engine.latency import STAGES

COLS = ("p50", "p90", "p99", "p99.9", "p99.99", "max")


def losses(c, feed, conflate_warn):
    """Every loss by kind, from the loop's counters `c` and the feed's own `feed`."""
    scoreable = c["scored"] + c["conflated"]
    return {"feed": {"gaps": c["feed_gaps"], "lost": c["feed_lost"]},
            "ring": {"gaps": c["gaps"], "lost": c["lost"]},
            "conflated": {"ticks": c["conflated"], "share": round(c["conflated"] / scoreable, 4) if scoreable else 0.0,
                          "warn_above": conflate_warn},
            "crossed_books": int(feed.get("crossed_books", 0))}


def _losses(res):
    return losses(res.counters, res.feed_counters, res.conflate_warn)


def as_json(res):
    elapsed_s = res.run_seconds
    c = res.counters
    return {
        # gaps and lost: every kind added up (losses: by kind; lost is ticks for the ring, the source's
        # messages for the feed)
        "ticks": c["ticks"], "signals": c["signals"], "signal_counts": c["signal_counts"],
        "gaps": c["gaps"] + c["feed_gaps"],
        "drops": res.drops, "core": res.core, "policy": res.policy, "backend": res.backend,
        # (a stage that timed nothing has no figures: None, not 0; a file read flat out has no ring time)
        "latency_ns": {s: {**{c: res.latency[s][c] if res.latency[s]["count"] else None for c in COLS},
                           "count": res.latency[s]["count"]} for s in STAGES},
        # extras beyond the required keys
        "lost": c["lost"] + c["feed_lost"], "losses": _losses(res), "feed_counters": res.feed_counters,
        "scored": c["scored"], "elapsed_s": round(elapsed_s, 3),
        "signals_file": res.signals_path, "model": res.model_dir, "model_swaps": res.swaps,
        "strategy": res.strategy, "wait": res.wait, "policy_reason": res.choice,
        "conflate": res.conflate, "conflated": res.counters["conflated"], "conflation_marks": res.counters["marks"],
        "parks": res.counters["parks"], "feed_waits_for_loop": res.backpressure,
        "preempted": res.preempted, "isolation": res.isolation,
        "warnings": warnings(res), "error": getattr(res, "error", None),
        # why the run ended early (None: as asked), and the ticks in the ring it never read
        "abnormal": getattr(res, "abnormal", None), "unread": getattr(res, "unread", 0),
        # several sources (or --record): each one's feed and counters, by label; the recording
        "sources": getattr(res, "sources", None), "record": getattr(res, "record", None),
        # the risk gate: what each rule cut, and why the run was killed ("": it was not)
        "risk": risk_state(c),
        "paper": getattr(res, "paper", None),
        "shadows": getattr(res, "shadows", None),  # --shadow: each one's figures (app/shadow.py), None without
        "drift": getattr(res, "drift", None),  # --drift: PSI per feature and of the score (app/drift_monitor.py)  # --paper: its figures (app/paper.py), None without
    }


def risk_state(c):
    from engine.risk import kill_reason
    return {"blocked": c["risk_blocked"], "killed": kill_reason(c["killed"]),
            "kills": {r: n for r, n in c.get("kills", {}).items() if n}}


def table(res):
    elapsed_s = res.run_seconds
    c = res.counters
    rate = c["ticks"] / elapsed_s if elapsed_s > 0 else 0.0
    lines = [
        f"engine run: {elapsed_s:.1f} s, core {res.core if res.core is not None else 'unpinned'} "
        f"{res.policy} + {res.wait} wait, backend {res.backend}, strategy {res.strategy['name']} "
        f"(sha256 {res.strategy['sha256'][:12]})",
        f"  ticks {c['ticks']:,} ({rate:,.0f}/s)   scored {c['scored']:,}   "
        + (f"conflated {c['conflated']:,} ({_losses(res)['conflated']['share']:.1%})   " if res.conflate else "")
        + f"{signal_counts.line(c['signal_counts'])}   drops {res.drops:,}",
        "  " + gaps_line(c)]
    if any(res.feed_counters.values()):
        lines.append("  " + feed_line(res.feed_counters))
    for label, s in (getattr(res, "sources", None) or {}).items():
        lines.append("  " + source_line(label, s))
    rec = getattr(res, "record", None)
    if rec is not None:
        lines.append(f"  recorded {rec['ticks']:,} ticks -> {rec['out']} (`engine backtest {rec['out']}` replays "
                     "them as the loop read them)")
    blocked = {r: n for r, n in c["risk_blocked"].items() if n}
    kills = risk_state(c)["kills"]  # (a run killed and resumed is no longer killed at its end: still said)
    if blocked or c["killed"] or kills:
        lines.append("  risk: " + (f"KILLED ({risk_state(c)['killed']})   " if c["killed"] else "")
                     + "cut " + (", ".join(f"{r} {n:,}" for r, n in blocked.items()) or "nothing")
                     + (f"; kills: {', '.join(f'{r} {n:,}' for r, n in kills.items())}" if kills else ""))
    pp = getattr(res, "paper", None)
    if pp is not None:
        from app.paper_status import summary_line  # (money per currency, never one sum)
        lines.append(summary_line(pp))
    dr = getattr(res, "drift", None)
    if dr is not None:
        lines.append("  " + drift_line(dr))
    for sh in getattr(res, "shadows", None) or []:
        lines.append(f"  shadow {sh['name']}: {sh['signals']:,} signals on {sh['ticks']:,} ticks (model "
                     f"{sh['model_id']}) -> {sh['signals_out']}")
    lines.append(percentile_table(res.latency))
    if c["ticks"] and not res.latency["ring"]["count"]:
        lines.append("  ring, tick_to_signal: not measured: files read flat out (--max) keep their own receive "
                     "times and had no time to be due at; --speed N measures them against the replay's pace")
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


def gaps_line(c):
    """Gaps by where the data was lost (the summary, `engine stats`)."""
    return (f"gaps: feed {c['feed_gaps']:,} ({c['feed_lost']:,} lost before the ring), "
            f"ring {c['gaps']:,} ({c['lost']:,} ticks lost)")


def source_line(label, s):
    """One source of a run with several: what the loop read from it and what it lost."""
    c = s["counters"]
    return (f"source {label} ({s['uri'] or s['ring']}): {s['feed']}, ticks {c['ticks']:,}, gaps ring {c['gaps']:,} "
            f"({c['lost']:,} lost) feed {c['feed_gaps']:,} ({c['feed_lost']:,} lost)"
            + (f", {c['unmapped']:,} unmapped" if c["unmapped"] else "")
            + (f", restarted {s['feed_restarts']}" if s["feed_restarts"] else "")
            + f", ids {s['instruments']['first_id']}+")


def feed_line(feed):
    """The feed's own counters that are not zero (engine/feed_stats.py)."""
    return "feed: " + " ".join(f"{k}={v:,}" for k, v in feed.items() if v)


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


def drift_line(d):
    """--drift's figures in one line: the score's PSI and the features' worst."""
    if not d["features"]:
        return f"drift: none measured ({d['error'] or 'no rows yet'})"
    worst = max(d["features"], key=lambda k: d["features"][k])
    state = lambda v: "shifted" if v > 0.25 else "moved" if v > 0.1 else "stable"  # noqa: E731
    return (f"drift over {d['rows']:,} rows (PSI; > 0.25 shifted): score {d['score']:.4f} ({state(d['score'])}), "
            f"worst feature {worst} {d['features'][worst]:.4f} ({state(d['features'][worst])})")


def warnings(res):
    """What a run lost or dropped, in words (printed in the summary; --strict makes them fatal)."""
    c, out, lo = res.counters, [], _losses(res)
    if getattr(res, "abnormal", None):
        out.append(f"the run ended abnormally: {res.abnormal}; {res.unread:,} ticks in the ring were never read")
    if c["feed_gaps"]:
        out.append(f"the feed lost data before the ring: {c['feed_gaps']:,} gaps, {c['feed_lost']:,} messages of its "
                   "source never arrived (sequence gaps it could not recover: no re-request server, or one that "
                   "did not answer in time; or gaps recorded in the tick file)")
    if c["lost"]:
        out.append(f"{c['lost']:,} ticks lost in {c['gaps']:,} gaps: the loop was lapped by its feed "
                   "(a live feed faster than the loop; file feeds wait for it)")
    if res.drops:
        out.append(f"{res.drops:,} signals dropped: the signal ring was full (the drainer fell behind)")
    cf = lo["conflated"]
    if cf["share"] > res.conflate_warn:
        out.append(f"conflation folded {cf['share']:.1%} of the scoreable ticks unscored ({cf['ticks']:,}; "
                   f"{c['scored']:,} scored), above --conflate-warn {res.conflate_warn:g}: the loop could not keep "
                   "up with its feed (a ring written flat out, e.g. by `engine replay --max`, is a live source to "
                   "it; `--feed tickfile:FILE` waits for the loop and scores every tick, as a backtest does)")
    if lo["crossed_books"]:
        out.append(f"{lo['crossed_books']:,} books stayed crossed (best bid at or above best ask) for longer than "
                   f"{res.crossed_after:g} s: lost messages leave orders in a book (the feed's crossed_books)")
    out += list(getattr(res, "warnings", []))  # incomplete inputs and outputs, a feed process that failed
    return out


def percentile_table(lat):
    """The per-stage percentile table (ns) of a latency summary: each column as wide as its widest
    cell, two spaces apart, so large numbers never run together."""
    head = ("latency (ns)", *COLS, "count")
    rows = [(s, *(f"{lat[s][k]:,}" if lat[s]["count"] or k == "count" else "-" for k in (*COLS, "count")))
            for s in STAGES]
    w = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    return "\n".join("  " + r[0].ljust(w[0]) + "".join(f"  {v:>{w[i + 1]}}" for i, v in enumerate(r[1:]))
                     for r in (head, *rows))


def dumps(obj):
    return json.dumps(obj, sort_keys=False)

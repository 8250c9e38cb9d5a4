"""Tick to signal: the engine end to end, per scheduling policy and wait strategy, vs the pipeline
a Python developer writes first; and the overload row.

Ours: `engine run --json` (feed process -> ring -> pinned loop -> signal ring), the whole command a
user types, at 1k, 10k and 100k ticks/s, in five configurations measured in the same run:
  auto        no flags: what `--policy auto` picks on this machine (the line it prints says why)
  fifo        --policy fifo: SCHED_FIFO + busy-spin (what a tuned box runs; on a VM with kernel RT
              throttling on, the thread is parked 50 ms every second)
  other       --policy other: pinned SCHED_OTHER + busy-spin
  fifo+duty   --policy fifo --wait duty: SCHED_FIFO, spinning but sleeping just enough never to be
              throttled
  backoff     --wait backoff: spin, yield, then park (a few % of a core when idle)
  auto+isolate, fifo+isolate   the same with --isolate: every other task, IRQ and unbound kernel
              work moved off the strategy core while the engine runs (engine/isolation.py)
Besides tick to signal (scored ticks), each row has the ring stage's tail (feed publish to dequeue,
every tick: a folded tick's wait shows there, not in tick to signal) and how long the strategy
thread waited for its core while other work ran there (preempted_ms, from /proc).
Overload: the synthetic feed flat out (--rate 0), with conflation (the default for live feeds) and
with --no-conflate: ticks/s, lost ticks, conflated ticks and the scored ticks' latency.
Peer: a producer thread puts the same synthetic ticks into a queue.Queue at the same rate; a
consumer thread computes the same features in Python and calls Booster.inplace_predict per tick.
Latency is receive (enqueue / ring publish) to decision, per scored tick. When the naive consumer
cannot keep up its queue grows; we stop at the same duration and report the backlog.
The engine runs the built-in strategy as a strategy file (strategies/microstructure.py) through the
strategy host; what that costs against the v1 loop with the features built in is measured in the
same run, the loop alone (bench/strategy_host.py's comparison, printed last).
"""
import math
import os
import queue
import sys
import threading
import time

import _common
import numpy as np

from engine.records import KIND_QUOTE, KIND_TRADE, SIDE_BUY, SIDE_SELL
from engine.realtime import set_timer_slack
from engine.strategy_load import load
from models.default import default_model_dir
from models.training import source_ticks

_BUILT_IN = load("microstructure")
F = _BUILT_IN.module  # the built-in strategy's constants, for the Python peer
WARMUP_QUOTES = int(_BUILT_IN.values["warmup"])

CORE = max(os.sched_getaffinity(0))


CONFIGS = {"auto": [], "fifo": ["--policy", "fifo"], "other": ["--policy", "other"],
           "fifo+duty": ["--policy", "fifo", "--wait", "duty"], "backoff": ["--wait", "backoff"],
           "auto+isolate": ["--isolate"], "fifo+isolate": ["--policy", "fifo", "--isolate"]}


def run_engine(rate, duration, extra):
    d = _common.engine_run(CORE, rate, duration, extra)
    return {"ticks_per_s": round(d["ticks"] / d["elapsed_s"]), "scored_per_s": round(d["scored"] / d["elapsed_s"]),
            **_common.tail(d),
            "model_p50_ns": d["latency_ns"]["model"]["p50"], "gaps": d["gaps"], "lost_ticks": d["lost"],
            "conflated": d["conflated"], "policy": d["policy"], "wait": d["wait"], "why": d["policy_reason"]}


class PyFeatures:
    """The same nine features, the way one writes them first: Python, a dict per instrument."""

    def __init__(self):
        self.s = {}

    def update(self, w):
        inst = int(w[7] >> 32) & 0xFFFF
        kind = int(w[7] >> 48) & 0xFF
        s = self.s.setdefault(inst, {"n": 0, "mid": 0.0, "rf": 0.0, "rm": 0.0, "rs": 0.0, "var": 0.0,
                                     "fn": 0.0, "fd": 0.0, "trades": 0, "last": 0})
        if kind == KIND_QUOTE:
            bid, ask = float(w[4]), float(w[5])
            mid = 0.5 * (bid + ask)
            if s["n"] > 0:
                r = (mid - s["mid"]) / s["mid"] * 1e4
                s["rf"] += F.A_FAST * (r - s["rf"])
                s["rm"] += F.A_MID * (r - s["rm"])
                s["rs"] += F.A_SLOW * (r - s["rs"])
                s["var"] += F.A_VOL * (r * r - s["var"])
            s.update(n=s["n"] + 1, mid=mid, bid=bid, ask=ask, bsz=float(int(w[6]) >> 32), asz=float(int(w[7]) & 0xFFFFFFFF))
        elif kind == KIND_TRADE:
            size = float(int(w[6]) & 0xFFFFFFFF)
            side = int(w[7] >> 56) & 0xFF
            signed = size if side == SIDE_BUY else -size if side == SIDE_SELL else 0.0
            s["fn"] += F.A_FLOW * (signed - s["fn"])
            s["fd"] += F.A_FLOW * (size - s["fd"])
            s["trades"] += 1
            s["last"] = int(w[1])
        else:
            return None
        if s["n"] < WARMUP_QUOTES:
            return None
        tot = s["bsz"] + s["asz"]
        mid = s["mid"]
        return np.array([[(s["ask"] - s["bid"]) / mid * 1e4, (s["bsz"] - s["asz"]) / tot,
                          ((s["bid"] * s["asz"] + s["ask"] * s["bsz"]) / tot - mid) / mid * 1e4,
                          s["rf"], s["rm"], s["rs"], math.sqrt(s["var"]),
                          s["fn"] / s["fd"] if s["fd"] > 0 else np.nan,
                          (int(w[1]) - s["last"]) * 1e-6 if s["trades"] else np.nan]], np.float32)


def run_naive(words, rate, duration, booster):
    q = queue.Queue()
    lat = []
    stop = threading.Event()
    interval = 1e9 / rate

    def producer():
        set_timer_slack(1000)
        t0 = time.monotonic_ns()
        for i in range(len(words)):
            if stop.is_set():
                break
            ahead = t0 + i * interval - time.monotonic_ns()
            if ahead > 0:
                time.sleep(ahead / 1e9)
            q.put((words[i], time.monotonic_ns()))

    def consumer():
        feats = PyFeatures()
        pos = {}
        while not stop.is_set():
            try:
                w, t_in = q.get(timeout=0.1)
            except queue.Empty:
                continue
            row = feats.update(w)
            if row is None:
                continue
            m = float(booster.inplace_predict(row, predict_type="margin")[0])
            score = 1.0 / (1.0 + math.exp(-m))
            inst = int(w[7] >> 32) & 0xFFFF
            prev = pos.get(inst, 0)
            new = 1 if score >= 0.65 else -1 if score <= 0.35 else (0 if (prev == 1 and score < 0.55) or (prev == -1 and score > 0.45) else prev)
            if new != prev:
                pos[inst] = new  # a real pipeline would publish here
            lat.append(time.monotonic_ns() - t_in)

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    time.sleep(duration)
    stop.set()
    for t in threads:
        t.join()
    v = np.array(lat)
    r = {"ticks_per_s": round(len(v) / duration), "backlog_at_stop": q.qsize(), **_common.pct(v, "tick_to_signal")}
    return r


def main():
    a = _common.args(__doc__)
    dur = 2 if a.quick else 8
    d = default_model_dir()
    import xgboost as xgb
    booster = xgb.Booster(model_file=str(d / "model.json"))
    booster.set_param({"nthread": 1})
    words = source_ticks("synthetic://?instruments=4&seed=1&depth=0", 1_000_000)[0]
    rates = {"1k": 1_000, "10k": 10_000, "100k": 100_000}
    metrics, peers, ratios = {}, {}, {}
    rows = []
    for label, rate in rates.items():
        for name, extra in CONFIGS.items():
            key = f"{name}_at_{label}"
            print(f"engine {name} at {label} ...", file=sys.stderr, flush=True)
            metrics[key] = run_engine(rate, dur, extra)
            rows.append((f"engine {name} {label}", metrics[key]))
        print(f"naive Python pipeline at {label} ...", file=sys.stderr, flush=True)
        peers[f"naive_at_{label}"] = run_naive(words, rate, dur, booster)
        rows.append((f"naive Python {label}", peers[f"naive_at_{label}"]))
        for name in CONFIGS:
            for q in ("p50", "p99"):
                ratios[f"engine_{name}_vs_naive_at_{label}_{q}"] = _common.ratio(
                    metrics[f"{name}_at_{label}"][f"tick_to_signal_{q}_ns"],
                    peers[f"naive_at_{label}"][f"tick_to_signal_{q}_ns"], False)
    for name, extra in (("overload_conflated", []), ("overload_no_conflate", ["--no-conflate"])):
        print(f"engine flat out ({name}) ...", file=sys.stderr, flush=True)
        metrics[name] = run_engine(0, dur, extra)
        rows.append((f"engine flat out, {'conflated' if extra == [] else 'every tick'}", metrics[name]))
    print(f"\nauto picked: {metrics['auto_at_1k']['policy']} + {metrics['auto_at_1k']['wait']} "
          f"({metrics['auto_at_1k']['why']})")
    _common.table(f"tick to signal, ns ({dur} s per run; engine strategy core {CORE})",
                  ["ticks_per_s", "tick_to_signal_p50_ns", "tick_to_signal_p99_ns", "tick_to_signal_p999_ns",
                   "tick_to_signal_max_ns", "ring_p999_ns", "ring_max_ns", "preempted_ms", "backlog_at_stop",
                   "lost_ticks", "conflated"],
                  rows)
    import strategy_host
    print("\nthe loop alone: v1 (features built in) vs the strategy host, same run ...", file=sys.stderr, flush=True)
    host_cmp = strategy_host.compare(reps=5 if a.quick else 15, n=300_000 if a.quick else 1_000_000)
    metrics["loop_alone"] = host_cmp["metrics"]
    peers["v1_loop"] = host_cmp["peers"]["v1_loop"]
    ratios.update(host_cmp["ratios"])
    _common.save("tick_to_signal", metrics, peers, ratios,
                 notes="fifo rows suffer kernel RT throttling on an untuned VM (50 ms parked per second); "
                       "auto avoids it; see ops/tuning.md")


if __name__ == "__main__":
    main()

"""Strategy host: what running the strategy as user code costs, against the v1 loop it replaced.

The loop alone, in memory (no ring, no paced feed, no live clock): best of --reps, the variants
interleaved so the machine's noise hits them alike.
  1. data-set loop (features only): the built-in strategy through the host
     (engine/host_template.py, strategies/microstructure.py) vs v1 (bench/_v1_loop.py: the nine
     features fixed in the engine, as before strategies were files), ns per tick;
  2. backtest loop (features + the default 200x6 model + decision + signal record), ns per tick;
  3. the book: a DEPTH=10 strategy vs the same strategy at DEPTH=0 over the same 10-level stream
     (both do nothing in on_tick): the difference is what applying level ticks to the loop's
     10-level book costs, per level tick and per tick of the stream; and depth_imbalance's full
     data-set loop for scale;
  4. across instruments: a UNIVERSE strategy of 2 and of 8 members (strategies/lead_lag.py's shape:
     every member's touch and the lead's DEPTH levels read through `u` on every tick of a member)
     over an 8-instrument, 10-level stream, against the same work on the tick's own book alone
     (no UNIVERSE), ns per tick of the data-set loop;
  5. the risk gate in the backtest loop (2. with every rule of engine/risk.py armed: position,
     notional, gross, rate per instrument and for the run, flip; clip mode) against the same loop
     with the gate off, ns per tick, and the difference per decision that went through the gate
     (bench/risk_gate.py times the gate alone, where the difference is not lost in the loop's noise).
  6. paper trading on and off: the whole command a user types, `engine run --rate 20000 --duration D`
     with and without --paper (the execution simulator on a thread of the control plane's cores,
     reading the tap ring), bare and with --isolate, the four interleaved in rounds; tick_to_signal
     p50/p99/p99.9 and the strategy thread's wait for its core (/proc) of each run, and the median
     of each over the rounds. Paper trading never runs on the strategy core; on a machine whose
     other cores it loads (2 cores here) the kernel puts other tasks on the strategy core unless
     --isolate moves them off, which the core wait shows.
  7. shadow models: the same command with two shadows (--shadow, twice the default model: the live
     model's size) and without, bare and with --isolate, interleaved in rounds; tick_to_signal and
     the core wait as in 6 (target: p99 with two shadows within 10% of none: the shadows run off
     the strategy core, on the tap's copy of the ticks).
No peer outside the engine does this (hftbacktest runs a Python/numba strategy per event, not
compiled into a pinned loop); the peer here is the engine's own v1 loop.
"""
import sys
import tempfile
import time
from pathlib import Path

import _common
import _v1_loop as V1
import numpy as np

from engine import latency
from engine.loop_args import BacktestArgs, backtest_args
from engine.records import KIND_LEVEL, SIGNAL_WORDS, tick_kinds
from engine.strategy_build import build, load_host
from engine.strategy_load import load
from models import artifact
from models.artifact import uses_sigmoid
from models.default import default_model_dir
from models.training import input_streams, source_ticks

TRIVIAL = '''
from numba import njit
FEATURES = ("x",)
DEPTH = {depth}
STATE = 1
PARAMS = {{}}

@njit
def on_tick(state, book, tick, row, params):
    state[0] += 1.0
    return False
'''

# 4: a member's touch and book read through `u` (M members), or the tick's own book alone (M = 0)
CROSS = '''
from numba import njit
from engine.strategy_api import ask_px, bid_px, member_ask, member_bid, member_book
FEATURES = ("mid", "lead_imb")
DEPTH = 5
STATE = 1
PARAMS = {{}}
{universe}

@njit
def on_tick(state, book, tick, row, params{u}):
    s = 0.0
    {touch}
    b = {lead_book}
    bs, as_ = 0.0, 0.0
    for i in range(b.bid_sz.shape[0]):
        bs += b.bid_sz[i]
        as_ += b.ask_sz[i]
    row[0] = s
    row[1] = (bs - as_) / (bs + as_ + 1.0)
    return {ret}
'''


def cross_strategy(m):
    if m == 0:
        return CROSS.format(universe="", u="", touch="s += 0.5 * (bid_px(tick) + ask_px(tick))", lead_book="book",
                            ret="True")
    names = ", ".join(f'"SYNTHETIC:SYN{i:04d}"' for i in range(m))
    return CROSS.format(universe=f"UNIVERSE = ({names},)", u=", u", lead_book="member_book(u, 0)", ret="u.me",
                        touch=f"for m in range({m}):\n        s += 0.5 * (member_bid(u, m) + member_ask(u, m))")


def best(fns, reps):
    """{name: best seconds}, the functions run in turn, rep after rep."""
    out = {k: float("inf") for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            out[k] = min(out[k], time.perf_counter() - t0)
    return out


def main():
    a = _common.args(__doc__, lambda p: p.add_argument("--reps", type=int, default=None))
    r = compare(a.reps or (5 if a.quick else 15), 300_000 if a.quick else 1_000_000)
    for section in (paper_on_off, shadows_on_off):
        got = section(2 if a.quick else 3, 6 if a.quick else 12)
        r["metrics"].update(got["metrics"])
        r["ratios"].update(got["ratios"])
    _common.save("strategy_host", r["metrics"], r["peers"], r["ratios"])


PAPER_VARIANTS = {"off": [], "paper": ["--paper"], "off+isolate": ["--isolate"], "paper+isolate": ["--isolate", "--paper"]}
TAIL_KEYS = ("tick_to_signal_p50_ns", "tick_to_signal_p99_ns", "tick_to_signal_p999_ns", "preempted_ms")


def paper_on_off(rounds, duration, rate=20_000):
    """6: tick_to_signal of `engine run` with --paper and without, bare and with --isolate, the
    variants interleaved in rounds."""
    import os
    out_dir = f"/tmp/bench-paper-{os.getpid()}"
    variants = {v: x + (["--paper-out", out_dir] if "--paper" in x else []) for v, x in PAPER_VARIANTS.items()}
    runs, med = on_off(variants, rounds, duration, rate, f"paper trading on and off: `engine run --rate {rate:,} "
                       f"--duration {duration}`", lambda d: f", {d['paper']['fills']:,} paper fills" if d.get("paper")
                       else "", cleanup=[out_dir])
    print("  (the paper thread runs off the strategy core; without --isolate the load it adds to the other cores "
          "makes the kernel put other tasks on the strategy core: 'core wait' is the strategy thread's wait for it)")
    metrics = {f"paper_{v.replace('+', '_')}_{k}": round(med[v][k], 1) for v in runs for k in TAIL_KEYS}
    metrics["paper_runs"] = runs
    ratios = {f"{p}_vs_{o}_tick_to_signal_p99".replace("+", "_"): _common.ratio(med[p][TAIL_KEYS[1]],
                                                                               med[o][TAIL_KEYS[1]], False)
              for p, o in (("paper", "off"), ("paper+isolate", "off+isolate"))}
    return {"metrics": metrics, "ratios": ratios}


def shadows_on_off(rounds, duration, rate=20_000):
    """7: tick_to_signal of `engine run` with two shadow models (--shadow, the default model's size)
    and without, bare and with --isolate, interleaved in rounds (target: p99 within 10% of none)."""
    from models.default import default_model_dir
    m = str(default_model_dir())
    two = ["--shadow", m, "--shadow", m]
    variants = {"none": [], "2 shadows": two, "none+isolate": ["--isolate"], "2 shadows+isolate": ["--isolate", *two]}
    runs, med = on_off(variants, rounds, duration, rate, f"two shadow models and none: `engine run --rate {rate:,} "
                       f"--duration {duration}`", lambda d: ", shadows " + ", ".join(
                           f"{x['signals']:,} signals/{x['gaps']} gaps" for x in d["shadows"]) if d.get("shadows")
                       else "")
    key = TAIL_KEYS[1]
    for a, b in (("2 shadows", "none"), ("2 shadows+isolate", "none+isolate")):
        print(f"  {a} vs {b}: tick_to_signal p99 {med[a][key] / med[b][key] - 1:+.1%} (target within 10%)")
    metrics = {f"shadows_{v.replace('+', '_').replace(' ', '_')}_{k}": round(med[v][k], 1) for v in runs
               for k in TAIL_KEYS}
    metrics["shadows_runs"] = runs
    ratios = {f"{a}_vs_{b}_tick_to_signal_p99".replace("+", "_").replace(" ", "_"): _common.ratio(
        med[a][key], med[b][key], False) for a, b in (("2 shadows", "none"), ("2 shadows+isolate", "none+isolate"))}
    return {"metrics": metrics, "ratios": ratios}


def on_off(variants, rounds, duration, rate, title, said, cleanup=()):
    """`engine run --rate RATE --duration D` with each variant's flags, interleaved in rounds:
    ({variant: [per run tail figures]}, {variant: median of each}); a table printed."""
    import glob
    import os
    import shutil
    core = max(os.sched_getaffinity(0))
    runs = {v: [] for v in variants}
    for i in range(rounds):
        for variant, extra in variants.items():
            d = _common.engine_run(core, rate, duration, extra)
            t = _common.tail(d)
            runs[variant].append({k: t[k] for k in TAIL_KEYS} | {"scored": d["scored"],
                                  "paper_fills": (d.get("paper") or {}).get("fills"),
                                  "shadow_signals": [x["signals"] for x in d.get("shadows") or []]})
            print(f"  round {i + 1}/{rounds} {variant:<18} " + "  ".join(f"{k[15:-3]} {t[k]:,.0f}" for k in TAIL_KEYS[:3])
                  + f" ns, waited for the core {t['preempted_ms'] or 0:.1f} ms  ({d['scored']:,} scored{said(d)})",
                  file=sys.stderr, flush=True)
    for x in list(cleanup) + glob.glob(f"/tmp/bench-engine-run-{os.getpid()}.shadow-*.sig"):
        shutil.rmtree(x, ignore_errors=True) if os.path.isdir(x) else os.unlink(x)
    med = {v: {k: float(np.median([r[k] or 0 for r in runs[v]])) for k in TAIL_KEYS} for v in runs}
    _common.table(f"{title}, tick_to_signal ns (median of {rounds} interleaved runs each)",
                  ["p50", "p99", "p99.9", "core wait ms"],
                  [(v, {"p50": med[v][TAIL_KEYS[0]], "p99": med[v][TAIL_KEYS[1]], "p99.9": med[v][TAIL_KEYS[2]],
                        "core wait ms": med[v][TAIL_KEYS[3]]}) for v in runs])
    print("  p99 range over the runs: " + ", ".join(f"{v} {min(r[TAIL_KEYS[1]] for r in runs[v]):,.0f}-"
                                                   f"{max(r[TAIL_KEYS[1]] for r in runs[v]):,.0f}" for v in runs) + " ns")
    return runs, med


class Loops:
    """The built-in strategy's loops over one stream, v1's and the host's, on shared buffers."""

    def __init__(self, host, words, k, levels, pred):
        self.host, self.words, self.k, self.levels, self.pred = host, words, k, levels, pred
        self.nf = nf = len(host.strategy.features)
        self.X = np.empty((len(words), nf), np.float32)
        self.ii, self.mid = np.empty(len(words), np.int64), np.empty(len(words))
        self.idx = np.empty(len(words), np.int64)
        self.v1cfg = V1.make_cfg(sigmoid=uses_sigmoid(pred))
        self.cfg = host.loop_cfg(sigmoid=uses_sigmoid(pred))
        self.sigs = np.zeros((1 << 20, 8), np.int64)
        self.sigs16 = np.zeros((1 << 20, SIGNAL_WORDS), np.int64)
        self.margins = np.full(len(words), np.nan, np.float32)
        self.row = host.new_row()

    def v1_feat(self):
        return V1.featurize(self.words, np.zeros((self.k, V1.STATE_WIDTH)), self.X, self.ii, self.mid, self.idx)

    def host_feat(self):
        hs = self.host.state(self.k, self.levels)
        return self.host.mod.featurize_loop(self.words, *hs.arrays(), self.host.params(), self.X, self.ii, self.mid,
                                            self.idx, self.row)

    def v1_bt(self):
        return V1.backtest_loop(self.words, 0, np.zeros((self.k, V1.STATE_WIDTH)), np.zeros(self.nf, np.float32),
                                np.zeros(1, np.float32), self.pred.addr, np.zeros(self.k, np.int8), self.v1cfg,
                                self.sigs, 0, 0, self.margins, latency.new_counts())

    def host_bt(self, hs=None):
        """The host's backtest loop, from a fresh state or from hs (the risk gate's limits set)."""
        host = self.host
        hs = hs or host.state(self.k, self.levels)
        return host.mod.backtest_loop(*backtest_args(host.mod, BacktestArgs(
            words=self.words, state=hs.loop_arrays(), row=host.new_row(), out=np.zeros(1, np.float32),
            model=self.pred.addr, pvals=host.params(), cfg=self.cfg, sigs=self.sigs16, margins=self.margins,
            hist=latency.new_counts())))

    def gated_bt(self, mode, cut):
        """host_bt with every rule of the risk gate armed (position 1 lot, every other limit out of
        reach) in `mode`; what it cut added to `cut`."""
        from engine import risk as R
        hs = self.host.state(self.k, self.levels)
        for i in range(self.k):
            R.set_limits(hs.rlim, i, max_position=1, max_notional=1e12, multiplier=1.0, max_rate=1e6, min_flip_ms=0)
        R.set_limits(hs.rlim, self.k, max_notional=1e15, max_rate=1e9)
        hs.rg[R.RG_MODE] = mode
        r = self.host_bt(hs)
        cut.update({r_: n_ for r_, n_ in R.blocked(hs.rg).items() if n_})
        return r


def compare(reps, n):
    """Time v1 against the host (and the 10-level book); prints a table, returns the figures."""
    host = load_host("microstructure")
    words, k, levels, _ = source_ticks("synthetic://?instruments=4&seed=11", n, host.strategy)
    pred = artifact.load(str(default_model_dir(host.strategy)), strategy=host.strategy)
    print(f"{len(words):,} ticks, model {pred.model_id} ({pred.backend}); {reps} reps", file=sys.stderr)
    loops = Loops(host, words, k, levels, pred)
    per, b2 = v1_vs_host(loops, reps)
    gate = risk_gate(loops, b2, reps)
    tmp = Path(tempfile.mkdtemp(prefix="bench-host-"))
    book = book_cost(tmp, n, reps)
    metrics = {"ticks": len(words), "model": pred.model_id, "backend": pred.backend,
               "host_featurize_ns_per_tick": round(per["host_feat"], 1),
               "host_backtest_ns_per_tick": round(per["host_bt"], 1), **book["metrics"],
               "risk_gate_off_ns_per_tick": round(gate["tick"]["off"], 1),
               "risk_gate_armed_ns_per_tick": round(gate["tick"]["armed"], 1), "risk_gate_decisions": gate["decisions"],
               "risk_gate_ns_per_decision": round(gate["ns_per_decision"], 1)}
    peers = {"v1_loop": {"featurize_ns_per_tick": round(per["v1_feat"], 1),
                         "backtest_ns_per_tick": round(per["v1_bt"], 1)}}
    ratios = {"host_vs_v1_featurize_ns_per_tick": _common.ratio(per["host_feat"], per["v1_feat"], False),
              "host_vs_v1_backtest_ns_per_tick": _common.ratio(per["host_bt"], per["v1_bt"], False)}
    _common.table("the loop alone, ns per tick (best of reps)", ["v1", "host", "ratio"],
                  [("data set (features only)", {"v1": per["v1_feat"], "host": per["host_feat"]}),
                   ("backtest (features+model+decide)", {"v1": per["v1_bt"], "host": per["host_bt"]})])
    print(f"  ratios v1/host (> 1: the host is faster): features {ratios['host_vs_v1_featurize_ns_per_tick']}, "
          f"backtest {ratios['host_vs_v1_backtest_ns_per_tick']}")
    cross_instruments(tmp, n, reps, metrics, ratios)
    print(f"\nrisk gate in the backtest loop ({gate['decisions']:,} decisions over {len(words):,} ticks, every rule "
          f"armed; cut: {', '.join(f'{r_} {n_:,}' for r_, n_ in gate['cut'].items()) or 'none'}, the no_price ones "
          f"where the book had no mid): off {gate['tick']['off']:.1f} ns/tick, armed {gate['tick']['armed']:.1f} "
          f"ns/tick: {gate['ns_per_decision']:.1f} ns per decision (target <= 20; within the loop's noise: "
          "bench/risk_gate.py times the gate alone)")
    print(f"\n10-level book in the loop, over {metrics['book_stream_ticks']:,} ticks of which "
          f"{metrics['book_level_ticks']:,} level ticks:")
    print(f"  {book['ns_per_level']:.2f} ns per level tick applied, {book['ns_per_tick']:.2f} ns per tick of the "
          f"stream (DEPTH=10 vs DEPTH=0, both trivial); depth_imbalance data-set loop "
          f"{metrics['depth_imbalance_featurize_ns_per_tick']} ns per tick")
    return {"metrics": metrics, "peers": peers, "ratios": ratios}


def v1_vs_host(loops, reps):
    """1 + 2: the built-in strategy, v1 vs host, checked to compute the same rows and signals:
    (ns per tick of each loop, the host's backtest result)."""
    a1, a2 = loops.v1_feat(), loops.host_feat()
    b1, b2 = loops.v1_bt(), loops.host_bt()
    assert a1 == a2 and b1[1:] == b2[1:], ("v1 and host disagree", a1, a2, b1, b2)  # same rows, same signals
    t = best({"v1_feat": loops.v1_feat, "host_feat": loops.host_feat, "v1_bt": loops.v1_bt,
              "host_bt": loops.host_bt}, reps)
    return {key: t[key] / len(loops.words) * 1e9 for key in t}, b2


def risk_gate(loops, b2, reps):
    """5: the risk gate, armed vs off, in the same backtest loop: ns per tick of each, the
    difference per decision that reached the gate, what it cut."""
    from engine import risk as R
    nd = int(b2[1])  # (decisions that reached the gate: every changed target is one)
    cut = {}
    assert loops.gated_bt(R.MODE_OFF, cut)[1:] == b2[1:], "the gate off changes nothing"
    tg = best({"off": lambda: loops.gated_bt(R.MODE_OFF, cut), "armed": lambda: loops.gated_bt(R.MODE_CLIP, cut)},
              reps)
    return {"tick": {key: tg[key] / len(loops.words) * 1e9 for key in tg}, "decisions": nd, "cut": cut,
            "ns_per_decision": (tg["armed"] - tg["off"]) / max(nd, 1) * 1e9}


def book_cost(tmp, n, reps):
    """3: the 10-level book: a trivial strategy at DEPTH=10 against the same at DEPTH=0 over one
    10-level stream, and depth_imbalance's data-set loop for scale."""
    hosts = {}
    for d in (0, 10):
        f = tmp / f"book{d}.py"
        f.write_text(TRIVIAL.format(depth=d))
        hosts[d] = build(load(str(f)))
    dwords, dk, dlevels, _ = source_ticks("synthetic://?instruments=4&seed=11&depth=10", n, None)
    level_ticks = int((tick_kinds(dwords) == KIND_LEVEL).sum())
    deep = load_host("depth_imbalance")
    tb = best({"book0": lambda: hosts[0].featurize(dwords, dk, dlevels),
               "book10": lambda: hosts[10].featurize(dwords, dk, dlevels),
               "depth_imbalance": lambda: deep.featurize(dwords, dk, dlevels)}, reps)
    ns_level = (tb["book10"] - tb["book0"]) / max(level_ticks, 1) * 1e9
    ns_tick = (tb["book10"] - tb["book0"]) / len(dwords) * 1e9
    return {"ns_per_level": ns_level, "ns_per_tick": ns_tick, "metrics": {
        "book_stream_ticks": len(dwords), "book_level_ticks": level_ticks,
        "book10_ns_per_level_tick": round(ns_level, 2), "book10_ns_per_tick": round(ns_tick, 2),
        "depth_imbalance_featurize_ns_per_tick": round(tb["depth_imbalance"] / len(dwords) * 1e9, 1),
        "trivial_depth0_ns_per_tick": round(tb["book0"] / len(dwords) * 1e9, 1)}}


def cross_instruments(tmp, n, reps, metrics, ratios):
    """4: across instruments: UNIVERSE strategies of 2 and 8 members against the tick's own book
    alone; their figures into metrics and ratios, and a table."""
    ((_, cwords, ck, clevels, cnames, cspecs),) = input_streams(["synthetic://?instruments=8&seed=12&depth=10"], n)
    cross = {}
    for m in (0, 2, 8):
        f = tmp / f"cross{m}.py"
        f.write_text(cross_strategy(m))
        cross[m] = build(load(str(f)))
    tc = best({m: (lambda m=m: cross[m].featurize(cwords, ck, clevels, cnames, cspecs)) for m in cross}, reps)
    for m in cross:
        metrics[f"cross_{m}_members_ns_per_tick" if m else "cross_own_book_ns_per_tick"] = \
            round(tc[m] / len(cwords) * 1e9, 1)
    ratios["universe_2_vs_own_book_ns_per_tick"] = _common.ratio(tc[2], tc[0], False)
    ratios["universe_8_vs_own_book_ns_per_tick"] = _common.ratio(tc[8], tc[0], False)
    _common.table(f"across instruments, data-set loop, ns per tick ({len(cwords):,} ticks, 8 instruments, "
                  "10 levels)", ["ns/tick"],
                  [("own book only (no UNIVERSE)", {"ns/tick": tc[0] / len(cwords) * 1e9}),
                   ("UNIVERSE of 2", {"ns/tick": tc[2] / len(cwords) * 1e9}),
                   ("UNIVERSE of 8", {"ns/tick": tc[8] / len(cwords) * 1e9})])


if __name__ == "__main__":
    main()

"""Several sources in one loop: what reading K rings costs the strategy loop, and what --record's
tap costs, per tick, against the one-ring loop (run_loop, what a one-source run uses).

Every configuration runs over the same synthetic ticks, published beforehand into real rings (this
process their producer; the rings marked finished), so the loop runs flat out from its first tick
to the end of the stream and its time over the tick count is its cost per tick (no conflation).
Two strategies: the built-in one with the default model (most ticks scored: the model's ~1 us a
call is most of a tick, and its noise too), and a trivial one that never scores (what is left is
the loop itself: polling, merging, mapping, state), each in these configurations:
  run_loop            one ring (a one-source run)
  multi K=1           run_loop_multi over one ring (a one-source run with --record, tap off here)
  multi K=1 + tap     the same, publishing every tick into the tap ring (--record)
  multi K=2           two rings, the ticks dealt alternately (the merge takes from both in turn)
  multi K=2 + tap     the same with the tap
Best of --reps runs each, in turn (this VM is shared and noisy: compare within one run).
"""
import os
import time

import _common
import numpy as np
from numba import njit

from engine import control as C
from engine import shm, sigring, tickring
from engine.loop_args import LiveArgs, SignalView, TickView, new_tick, run_args, run_multi_args
from engine.strategy_build import load_host
from engine.tickring import TickConsumer, TickRing
from models import artifact
from models.default import default_model_dir
from models.training import source_ticks

TRIVIAL = '''
from numba import njit
FEATURES = ("x",)
DEPTH = 0
STATE = 1
PARAMS = {}

@njit
def on_tick(state, book, tick, row, params):
    state[0] += 1.0
    return False
'''


@njit(cache=True)
def _publish_all(hdr, data, mask, words):
    for i in range(words.shape[0]):
        tickring.publish(hdr, data, mask, words[i])


def _rings(tag, parts, cap):
    rings = []
    for k, w in enumerate(parts):
        r = TickRing(f"{tag}.r{k}", cap)
        _publish_all(r.hdr, r.data, r.mask, w)
        r.set_state(shm.STATE_FINISHED)
        rings.append(r)
    return rings


def run_once(host, pred, words, k, tap, tag):
    """Seconds the loop takes over `words` dealt into k rings (k=0: run_loop on one ring)."""
    from app.multi_rings import MultiRings
    mod = host.mod
    n = len(words)
    cap = 1 << max(4, int(n).bit_length())
    parts = [words] if k <= 1 else [words[i::k] for i in range(k)]
    rings = _rings(tag, parts, cap)
    tapring = TickRing(f"{tag}.tap", cap) if tap else None
    blk = C.ControlBlock(f"{tag}.ctl")
    sring = sigring.SignalRing(f"{tag}.sig")
    ctl = blk.hdr
    ctl[C.CTL_MODEL_ADDR], ctl[C.CTL_MODEL_GEN] = pred.addr, 1
    ctl[C.CTL_LEASE_NS] = time.monotonic_ns() + 600 * 10**9
    n_inst = 64 * max(1, k)
    hs = host.state(n_inst, 0)
    cfg = host.loop_cfg(exit_on_eof=True, sigmoid=artifact.uses_sigmoid(pred))
    cfg[mod.CFG_TAP] = 1.0 if tap else 0.0
    live = LiveArgs(signals=SignalView.of(sring), ctl=ctl, hist=blk.hist, state=hs.loop_arrays(), row=host.new_row(),
                    out=np.zeros(1, np.float32), tick=new_tick(), sig=np.zeros(16, np.int64),
                    pvals=host.params(), cfg=cfg)
    try:
        if k == 0:
            c = TickConsumer(f"{tag}.r0")
            c.claim("oldest")
            a = run_args(mod, TickView.of(c), live)
            t0 = time.perf_counter()
            st = mod.run_loop(*a)
            dt = time.perf_counter() - t0
            c.close()
        else:
            m = MultiRings([f"{tag}.r{i}" for i in range(len(rings))], [str(i) for i in range(len(rings))],
                           np.arange(len(rings), dtype=np.int64) * 64, np.full(len(rings), 64, np.int64),
                           mod.RS_WIDTH, tap=tapring)
            m.attach("oldest", backpressure=False)
            a = run_multi_args(mod, m.view(), live)
            t0 = time.perf_counter()
            st = mod.run_loop_multi(*a)
            dt = time.perf_counter() - t0
            m.close()
        assert st == C.LOOP_EOF and blk.counters()["ticks"] == n, (st, blk.counters())
        return dt
    finally:
        for r in rings + ([tapring] if tapring else []):
            r.unlink()
        for p in (blk.path, sring.path):
            os.unlink(p)


def main():
    a = _common.args(__doc__, lambda p: p.add_argument("--reps", type=int, default=None))
    reps = a.reps or (3 if a.quick else 7)
    n = 200_000 if a.quick else 1_000_000
    import tempfile
    from app.multi_rings import compile_multi
    builtin = load_host("microstructure")
    pred = artifact.load(str(default_model_dir()), strategy=builtin.strategy)
    words, _, _, _ = source_ticks(f"synthetic://?instruments=4&count={n}&seed=5&depth=0", 0, builtin.strategy)
    words = np.ascontiguousarray(words)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trivial.py")
        with open(path, "w") as f:
            f.write(TRIVIAL)
        hosts = {"builtin": builtin, "trivial": load_host(path)}  # (trivial never calls the model)
    cases = {"run_loop": (0, False), "multi_k1": (1, False), "multi_k1_tap": (1, True),
             "multi_k2": (2, False), "multi_k2_tap": (2, True)}
    for h in hosts.values():
        h.compile_live()
        for k in (1, 2):
            compile_multi(h, k)
    tag = f"bench-multi-{os.getpid()}"
    best = {(s, c): float("inf") for s in hosts for c in cases}
    for _ in range(reps):
        for s, h in hosts.items():
            for c, (k, tap) in cases.items():
                best[s, c] = min(best[s, c], run_once(h, pred, words, k, tap, tag))
    ns = {key: v / len(words) * 1e9 for key, v in best.items()}
    print(f"{len(words):,} ticks, model {pred.model_id} ({pred.backend}); best of {reps}")
    _common.table("the strategy loop, ns per tick (x10: one decimal)", [f"{s}_x10" for s in hosts],
                  [(c, {f"{s}_x10": 10 * ns[s, c] for s in hosts}) for c in cases])
    metrics = {f"{s}_{c}_ns_per_tick": round(ns[s, c], 1) for s in hosts for c in cases}
    for s in hosts:
        metrics[f"{s}_merge_k2_ns_per_tick"] = round(ns[s, "multi_k2"] - ns[s, "run_loop"], 1)
        metrics[f"{s}_tap_k2_ns_per_tick"] = round(ns[s, "multi_k2_tap"] - ns[s, "multi_k2"], 1)
    ratios = {f"run_loop_vs_multi_k2_{s}_ns_per_tick": _common.ratio(ns[s, "run_loop"], ns[s, "multi_k2"], False)
              for s in hosts}
    _common.save("multi_feed", metrics, {}, ratios)
    pred.release()


if __name__ == "__main__":
    main()

"""Backtest throughput: ticks/s through features and the 200-tree model on the real Binance
USD-M capture, against hftbacktest replaying the same capture with a trivial strategy that
reads the touch on every feed event, in the same run.

Ours: the capture converted to a tick file once (not timed), then `engine backtest`'s loop over
the mapped file (features, model call, decision per tick), best of --reps. Peer: hftbacktest's
own converter (not timed), then HashMapMarketDepthBacktest + wait_next_feed per event, best of
--reps, in its own virtualenv (hftbacktest 2.4.4 pins numpy < 2.3; the engine pins 2.4.6).
Both are also given per capture message (the same 93,954 lines), the like-for-like figure.
"""
import json
import os
import subprocess
import sys
import time
import venv

import _common  # noqa: F401
import numpy as np

from _common import ROOT

DATA = ROOT.parent / "shared" / "data" / "binance" / "usdm_btcusdt_20240808.gz"
CACHE = ROOT / "bench" / "results" / "cache"
PEER_VENV = CACHE / "venv-hftbacktest"
HFTBACKTEST = "hftbacktest==2.4.4"


def peer_python():
    py = PEER_VENV / "bin" / "python"
    if not py.exists() or subprocess.run([py, "-c", "import hftbacktest"], capture_output=True).returncode:
        print(f"setting up {PEER_VENV} ({HFTBACKTEST}) ...", file=sys.stderr, flush=True)
        venv.create(PEER_VENV, with_pip=True, clear=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", HFTBACKTEST], check=True)
    return py


def ours(reps):
    from engine.runner import uses_sigmoid
    from engine.strategy_build import load_host
    from feeds.convert import convert
    from models import artifact
    from models.default import default_model_dir
    from replay.backtest import run_file, warm_up
    CACHE.mkdir(parents=True, exist_ok=True)
    ticks = CACHE / "usdm_btcusdt_20240808.ticks"
    if not ticks.exists():
        convert(f"binance:{DATA}?size_unit=1e-3", str(ticks), progress=False)
    host = load_host()
    pred = artifact.load(str(default_model_dir(host.strategy)), backend="auto", strategy=host.strategy)
    cfg = host.loop_cfg(sigmoid=uses_sigmoid(pred))
    warm_up(pred, host, cfg)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        r = run_file(str(ticks), pred, host, cfg)
        times.append(time.perf_counter() - t)
    return r.ticks, r.scored, min(times), float(np.median(times)), pred


def main():
    a = _common.args(__doc__)
    if not DATA.exists():
        raise SystemExit(f"{DATA} is not here: this benchmark needs ../shared/data")
    reps = 5 if a.quick else 20
    lines = sum(1 for _ in __import__("gzip").open(DATA))
    n, scored, best, med, pred = ours(reps)
    metrics = {"ticks": n, "scored_ticks": scored, "capture_messages": lines, "model_trees": pred.manifest["num_trees"],
               "backend": pred.backend, "ticks_per_s": round(n / best), "ticks_per_s_median": round(n / med),
               "capture_messages_per_s": round(lines / best)}
    peers, ratios, notes = {}, {}, {}
    try:
        out = subprocess.run([str(peer_python()), str(ROOT / "bench" / "_hftbacktest_peer.py"), str(DATA),
                              str(3 if a.quick else 5)], capture_output=True, text=True, check=True, timeout=1800)
        p = json.loads(out.stdout.strip().splitlines()[-1])
        peers["hftbacktest"] = {"events_per_s": round(p["events"] / p["seconds"]),
                                "capture_messages_per_s": round(lines / p["seconds"]), "events": p["events"]}
        ratios["ours_vs_hftbacktest_capture_messages_per_s"] = _common.ratio(
            metrics["capture_messages_per_s"], peers["hftbacktest"]["capture_messages_per_s"], True)
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        notes["hftbacktest"] = f"peer not measured: {e}"
    rows = [("engine backtest (features+model)", {"ticks/s": metrics["ticks_per_s"],
                                                   "capture msgs/s": metrics["capture_messages_per_s"]})]
    if "hftbacktest" in peers:
        rows.append(("hftbacktest (touch per event)", {"ticks/s": peers["hftbacktest"]["events_per_s"],
                                                       "capture msgs/s": peers["hftbacktest"]["capture_messages_per_s"]}))
    _common.table(f"backtest throughput, one core, {n:,} ticks / {lines:,} capture messages (best of {reps})",
                  ["ticks/s", "capture msgs/s"], rows)
    print("  (hftbacktest's ticks/s column is its event rows/s: one row per depth level change or trade)")
    _common.save("backtest", metrics, peers, ratios, notes or None)


if __name__ == "__main__":
    main()

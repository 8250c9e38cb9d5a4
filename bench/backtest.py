"""Backtest throughput: ticks/s through features and the 200-tree model on the real Binance
USD-M capture, against hftbacktest replaying the same capture with a trivial strategy that
reads the touch on every feed event, in the same run.

Ours: the capture converted to a tick file once (not timed), then `engine backtest`'s loop over
the mapped file (features, model call, decision per tick), best of --reps. Peer: hftbacktest's
own converter (not timed), then HashMapMarketDepthBacktest + wait_next_feed per event, best of
--reps, in its own virtualenv (hftbacktest 2.4.4 pins numpy < 2.3; the engine pins 2.4.6).
Both are also given per capture message (the same 93,954 lines), the like-for-like figure.

Execution, side by side (--exec, on by default): the same capture, the same rule (join the touch
on the side the touch imbalance favours: strategies/touch_imbalance.py, threshold 0.8, 1 lot of
0.001 BTC), both with queue-position fills for maker orders (a power-3 probabilistic queue model),
the same constant order latency (1 ms entry, 1 ms response) and fees (maker 2 bp, taker 5 bp).
Ours: `engine backtest`'s loop, then the execution simulator (replay/execsim.py); theirs:
hftbacktest 2.4.4 (bench/_hftbacktest_maker.py). Printed: PnL, fees, fills, lots traded and wall
time of each (ours: loop with the 200-tree model + simulator + evaluation; theirs: its backtest
loop, no model, compiled before it is timed).
"""
import json
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
    from models.artifact import uses_sigmoid
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


EXEC = {"entry_ns": 1_000_000, "response_ns": 1_000_000, "queue_power": 3.0, "maker_bps": 2.0, "taker_bps": 5.0,
        "threshold": 0.8, "warmup": 8}


def ours_exec():
    """The touch-imbalance maker through our backtest loop and execution simulator."""
    from models.artifact import uses_sigmoid
    from engine.strategy_build import load_host
    from models import artifact
    from models.default import default_model_dir
    from replay import execsim
    from replay.backtest import file_depth, run_file, warm_up
    from replay.evaluate import evaluate_file
    from engine.tickfile import TickFile
    host = load_host("touch_imbalance", {"threshold": EXEC["threshold"], "warmup": float(EXEC["warmup"])})
    pred = artifact.load(str(default_model_dir(host.strategy)), backend="auto", strategy=host.strategy)
    cfg = host.loop_cfg(sigmoid=uses_sigmoid(pred))
    warm_up(pred, host, cfg)
    tf = TickFile(str(CACHE / "usdm_btcusdt_20240808.ticks"))
    spec = np.array([[0.001, EXEC["maker_bps"], EXEC["taker_bps"], 0.0]])  # a lot is 0.001 BTC
    xp = execsim.ExecParams(entry_ns=EXEC["entry_ns"], response_ns=EXEC["response_ns"], maker=True,
                            queue_power=EXEC["queue_power"])
    t = time.perf_counter()
    res = run_file(tf, pred, host, cfg)
    part, _ = evaluate_file(tf.words, res, depth=file_depth(tf), xp=xp, spec=spec)
    dt = time.perf_counter() - t
    return {"pnl": float(part["equity"][-1]) if len(part["equity"]) else 0.0, "fees": part["fees"],
            "fills": part["fills"], "traded_lots": part["turnover_units"], "signals": len(res.signals),
            "seconds": dt}


def whole_command(quick):
    """`engine backtest F --out D --quiet --json` as a user types it, on synthetic files of n and
    8n ticks: ticks/s of the whole command, how it scales, and the execution simulator's share."""
    out = {}
    n = 375_000 if quick else 3_000_000
    for label, count in (("1x", n // 8), ("8x", n)):
        f = CACHE / f"synthetic_{count}.ticks"
        if not f.exists():
            subprocess.run([sys.executable, "-m", "engine", "convert", f"synthetic://?count={count}&rate=0&seed=4",
                            "--out", str(f)], check=True, capture_output=True, cwd=ROOT)
        best = None
        for _ in range(2):  # (the first run may compile or build the default model)
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "engine", "backtest", str(f), "--out", str(CACHE / "bt-out"),
                                "--quiet", "--json", "--orders", "maker"], check=True, capture_output=True, text=True,
                               cwd=ROOT)
            dt = time.perf_counter() - t
            s = json.loads(r.stdout.strip().splitlines()[-1])
            if best is None or dt < best[0]:
                best = (dt, s)
        dt, s = best
        out[label] = {"ticks": count, "seconds": round(dt, 3), "ticks_per_s": round(count / dt),
                      "loop_seconds": s["loop_seconds"], "exec_seconds": s["exec_seconds"],
                      "eval_seconds": s["eval_seconds"]}
    out["time_ratio_8x"] = round(out["8x"]["seconds"] / out["1x"]["seconds"], 2)
    out["exec_share_8x"] = round(out["8x"]["exec_seconds"] / out["8x"]["seconds"], 3)
    print("\nthe whole `engine backtest F --orders maker` command (process start to exit), synthetic market")
    for label in ("1x", "8x"):
        r = out[label]
        print(f"  {r['ticks']:>10,} ticks: {r['seconds']:7.2f} s = {r['ticks_per_s']:>10,} ticks/s "
              f"(loop {r['loop_seconds']:.2f} s, execution simulator {r['exec_seconds']:.2f} s, "
              f"evaluation {r['eval_seconds']:.2f} s)")
    print(f"  8x the ticks took {out['time_ratio_8x']}x the time; the execution simulator is "
          f"{out['exec_share_8x']:.1%} of the 8x command")
    return out


def exec_compare(peers, notes):
    ours_r = ours_exec()
    try:
        out = subprocess.run([str(peer_python()), str(ROOT / "bench" / "_hftbacktest_maker.py"), str(DATA),
                              json.dumps(EXEC)], capture_output=True, text=True, check=True, timeout=1800)
        theirs = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        notes["hftbacktest_exec"] = f"peer not measured: {e}"
        theirs = None
    rows = [("ours (loop + execsim)", ours_r)] + ([("hftbacktest 2.4.4", theirs)] if theirs else [])
    print("\nthe same maker rule on the same capture, power-3 queue model, 1 ms / 1 ms latency, maker 2 bp")
    print(f"  {'':<26}{'PnL USDT':>12}{'fees USDT':>12}{'fills':>8}{'lots':>8}{'seconds':>10}")
    for label, r in rows:
        print(f"  {label:<26}{r['pnl']:>12.4f}{r['fees']:>12.4f}{r['fills']:>8}{r['traded_lots']:>8}{r['seconds']:>10.2f}")
    print("  PnL and fees in USDT. Differences come from: hftbacktest acts on every feed event (each depth\n"
          "  level and trade row) and sizes orders from the position its responses reported (after the\n"
          "  response latency); ours acts on quote ticks (touch changes) and sizes from the exchange's\n"
          "  position; our cancel model nets the trades of a book event before counting a cancel, theirs\n"
          "  subtracts trades seen at the level since its last change.")
    if theirs:
        peers["hftbacktest_exec"] = theirs
    return ours_r


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
    metrics["exec"] = exec_compare(peers, notes)
    metrics["whole_command"] = whole_command(a.quick)
    _common.save("backtest", metrics, peers, ratios, notes or None)


if __name__ == "__main__":
    main()

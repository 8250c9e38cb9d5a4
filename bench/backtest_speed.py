"""Backtest throughput against hftbacktest 2.4.4, the same work on both sides, in the same run, on
the real Binance USD-M capture (93,954 lines: depth diffs, trades, bookTickers).

What both sides read: the depth diffs and the trades (hftbacktest's converter drops bookTickers,
so ours is converted with book_ticker=check: quotes from the diff book only, as theirs sees it).
What both sides compute, per event: the shipped strategy's features (strategies/microstructure.py:
spread, imbalance, microprice, three return EWMAs, volatility, trade flow, time since the last
trade) on every touch change and trade, a float32 row, a call through the model's function
pointer, the sigmoid and the hysteresis rule, a signal record when the position changes.
hftbacktest's side is that strategy ported into its numba loop (bench/_hftbacktest_peer.py).
  (a) no model: on both sides the pointer is a cfunc that writes margin 0 (score 0.5: the rule
      never trades), so the row is features + decision;
  (b) model: on both sides the pointer is the engine's flat kernel from the strategy's default
      model artifact (200 trees of depth 6), loaded in hftbacktest's venv from sha256-checked
      bytes and called through the engine's own call_predict intrinsic
      (bench/_hftbacktest_model.py). The two loops' scored rows are paired by exchange time and
      their margins compared bit for bit: the check that both compute the same thing.
Timed: the loop alone, best (and median) of 20 runs (5 with --quick), ours and theirs interleaved
run by run (a shared machine's passing load falls on both), after a round that compiles. Ours: the
host's backtest_loop over the mapped tick file (conversion, file open and result arrays not timed);
theirs: the njit strategy loop over ROIVectorMarketDepthBacktest, its faster depth (its converter
and the backtest's construction not timed). Their loop also keeps its order book from the depth
rows (466k rows); ours reads ticks whose book the converter built, and times every scored tick
into its compute-time histogram (two clock reads). Hence the like-for-like unit: capture messages
per second, the same 93,954 lines on both sides. The whole `engine backtest` command is measured
apart (below).

Execution, side by side: the same capture (the same tick file on our side), the same rule (join
the touch on the side the touch imbalance favours: strategies/touch_imbalance.py, threshold 0.8,
1 lot of 0.001 BTC), both with queue-position fills for maker orders (a power-3 probabilistic queue model),
the same constant order latency (1 ms entry, 1 ms response) and fees, stated explicitly (maker
2 bp, taker 5 bp; no instrument defaults). Ours: `engine backtest`'s loop, then the execution
simulator (replay/execsim.py); theirs: hftbacktest 2.4.4 (bench/_hftbacktest_maker.py). Printed:
PnL, fees, fills, lots traded and wall time of each (ours: loop with touch_imbalance's model +
simulator + evaluation; theirs: its backtest loop, no model, compiled before it is timed).
"""
import hashlib
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
TICK_SIZE, LOT = 0.1, 0.001  # BTCUSDT USD-M: price step 0.1 USDT, a lot (one size unit) 0.001 BTC


def peer_python():
    py = PEER_VENV / "bin" / "python"
    if not py.exists() or subprocess.run([py, "-c", "import hftbacktest"], capture_output=True).returncode:
        print(f"setting up {PEER_VENV} ({HFTBACKTEST}) ...", file=sys.stderr, flush=True)
        venv.create(PEER_VENV, with_pip=True, clear=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", HFTBACKTEST], check=True)
    return py


def ticks_file(book_ticker):
    """The capture converted once (not timed) with a lot of 0.001 BTC; keyed by the converter's
    sources, so an edited converter never benchmarks a stale file."""
    from feeds.convert import convert
    h = hashlib.sha256()
    for pkg in ("feeds", "engine"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            h.update(p.read_bytes())
    stem = f"usdm_btcusdt_20240808-{book_ticker}"
    f = CACHE / f"{stem}-{h.hexdigest()[:12]}.ticks"
    if not f.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        for old in CACHE.glob(f"{stem}-*.ticks"):
            old.unlink()
        print(f"converting {DATA.name} (book_ticker={book_ticker}) ...", file=sys.stderr, flush=True)
        convert(f"binance:{DATA}?size_unit={LOT}&book_ticker={book_ticker}", str(f), progress=False)
    return f


def _no_model():
    """`void f(const float* row, float* out)` writing margin 0: the loop's model call, minus a model."""
    from numba import cfunc, types

    @cfunc(types.void(types.CPointer(types.float32), types.CPointer(types.float32)))
    def no_model(row, out):
        out[0] = 0.0
    return no_model


def ours_once(tf, host, addr, cfg):
    """One run of the host's backtest_loop alone over the mapped file (what run_file calls), on
    fresh state: seconds, scored ticks, signals, and every tick's margin (NaN where not scored)."""
    from engine import latency
    from engine.loop_args import BacktestArgs, backtest_args
    from engine.records import SIGNAL_WORDS
    from replay.backtest import file_depth, instrument_count
    words = tf.words
    hs = host.state(instrument_count(tf), file_depth(tf))
    margins = np.full(len(words), np.nan, np.float32)
    sigs = np.zeros((len(words) + len(hs.ist) + 1, SIGNAL_WORDS), np.int64)  # never stops for room
    args = backtest_args(host.mod, BacktestArgs(words=words, state=hs.loop_arrays(), row=host.new_row(),
                                                out=np.zeros(1, np.float32), model=addr, pvals=host.params(), cfg=cfg,
                                                sigs=sigs, margins=margins, hist=latency.new_counts()))
    t = time.perf_counter()
    i, nsig, scored = host.mod.backtest_loop(*args)
    dt = time.perf_counter() - t
    assert i == len(words)
    return {"seconds": dt, "scored": int(scored), "signals": int(nsig)}, margins


class Peer:
    """bench/_hftbacktest_peer.py in hftbacktest's venv, kept running: one timed run per request."""

    def __init__(self, job):
        self.log = CACHE / "hftbacktest_peer.log"
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen([str(peer_python()), str(ROOT / "bench" / "_hftbacktest_peer.py"),
                                          json.dumps(job)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, cwd=ROOT / "bench")
        self.info = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            tail = self.log.read_text().strip().splitlines()[-1:]
            raise RuntimeError(f"exited {self.proc.returncode}: {tail[0] if tail else 'no output'} (see {self.log})")
        return json.loads(line)

    def run(self, name):
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def compare_margins(our_ts, ours, their_ts, theirs):
    """Pair the two loops' scored rows by exchange time, in order (both are sorted), and count
    the pairs whose margins are equal bit for bit: the same features into the same model."""
    i = j = paired = equal = 0
    while i < len(ours) and j < len(theirs):
        if our_ts[i] == their_ts[j]:
            paired += 1
            equal += int(ours[i].view(np.int32) == theirs[j].view(np.int32))
            i += 1
            j += 1
        elif our_ts[i] < their_ts[j]:
            i += 1
        else:
            j += 1
    before = int(np.searchsorted(their_ts, our_ts[0])) if len(ours) else 0
    return {"ours": len(ours), "hftbacktest": len(theirs), "paired": paired, "bit_equal": equal,
            "hftbacktest_before_ours_first": before}


def throughput(reps, lines, ticks):
    """Rows (a) and (b), ours and hftbacktest's, their runs interleaved (this machine is shared:
    a load that comes and goes then falls on both): metrics, peers, ratios, notes."""
    from engine.strategy_build import load_host
    from engine.tickfile import TickFile
    from models import artifact
    from models.artifact import uses_sigmoid
    from models.default import default_model_dir
    host = load_host()
    art = default_model_dir(host.strategy)
    pred = artifact.load(str(art), backend="flat", strategy=host.strategy)  # verified: hashes, ABI, margins
    cfg = host.loop_cfg(sigmoid=uses_sigmoid(pred))
    tf = TickFile(str(ticks))
    m = pred.manifest
    lib, rows = m["backends"][pred.backend]["lib"], m["validation"]["rows_file"]
    margins_out = CACHE / "hftbacktest_margins.npz"
    job = {"capture": str(DATA), "artifact": str(art), "lib": lib, "lib_sha256": m["files"][lib], "rows": rows,
           "rows_sha256": m["files"][rows], "params": host.strategy.values, "tick_size": TICK_SIZE, "lot_size": LOT,
           "features": len(host.strategy.features), "margins_out": str(margins_out)}
    notes = {}
    try:
        peer = Peer(job)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        notes["hftbacktest"] = f"peer not measured: {e}"
        peer = None
    stub = _no_model()
    modes = (("no_model", stub.address, "stub"), ("model", pred.addr, "model"))
    ours, theirs = {k: [] for k, _, _ in modes}, {k: [] for k, _, _ in modes}
    try:
        for rep in range(reps + 1):  # the first round compiles or warms up, and is not counted
            for k, addr, name in modes:
                ours[k].append(ours_once(tf, host, addr, cfg))
                if peer is not None:
                    theirs[k].append(peer.run(name))
    except (RuntimeError, OSError, ValueError) as e:
        notes["hftbacktest"] = f"peer not measured: {e}"
        peer = None
    finally:
        if peer is not None:
            peer.close()

    def figures(runs, n, unit):
        secs = [r["seconds"] for r in runs[1:]]
        best = min(secs)
        return {"loop_seconds": round(best, 5), "loop_seconds_median": round(float(np.median(secs)), 5),
                unit: round(n / best),
                "capture_messages_per_s": round(lines / best), "scored_ticks": runs[-1]["scored"],
                "signals": runs[-1]["signals"]}

    metrics = {"capture_messages": lines, "ticks": len(tf.words), "model_trees": m["num_trees"],
               "backend": pred.backend}
    peers, ratios = {}, {}
    for k, _, _ in modes:
        metrics[k] = figures([r for r, _ in ours[k]], len(tf.words), "ticks_per_s")
        if peer is not None:
            peers[f"hftbacktest_{k}"] = {**figures(theirs[k], peer.info["events"], "events_per_s"),
                                         "events": peer.info["events"],
                                         "feed_events": theirs[k][-1]["feed_events"], "roi": peer.info["roi"]}
            ratios[f"{k}_vs_hftbacktest_{k}_capture_messages_per_s"] = _common.ratio(
                metrics[k]["capture_messages_per_s"], peers[f"hftbacktest_{k}"]["capture_messages_per_s"], True)
            ratios[f"{k}_vs_hftbacktest_{k}_loop_seconds_median"] = _common.ratio(
                metrics[k]["loop_seconds_median"], peers[f"hftbacktest_{k}"]["loop_seconds_median"], False)
    if peer is not None:
        margins = ours["model"][-1][1]
        with np.load(margins_out) as z:
            metrics["margins_compared"] = compare_margins(tf.words[:, 1][~np.isnan(margins)],
                                                          margins[~np.isnan(margins)], z["ts_event"], z["margin"])
    _print_throughput(metrics, peers, ratios, reps, lines)
    return metrics, peers, ratios, notes


def _print_throughput(metrics, peers, ratios, reps, lines):
    rows = next(iter(peers.values()), {}).get("events", 0)
    print(f"\nbacktest loop alone (not the whole command), one core, the real USD-M capture: {lines:,} capture "
          f"messages;\nours {metrics['ticks']:,} ticks, hftbacktest {rows:,} event rows; best of {reps} runs "
          f"(median in brackets)")
    print(f"  {'':<40}{'seconds':>19}{'capture msgs/s':>16}{'scored':>9}{'signals':>9}")
    model = f"{metrics['model_trees']}-tree model ({metrics['backend']})"
    for k, title in (("no_model", "(a) features + decision, no model"),
                     ("model", f"(b) features + {model} + decision")):
        print(f"  {title}")
        for label, r in (("ours (engine backtest's loop)", metrics[k]),
                         ("hftbacktest 2.4.4 (its njit loop)", peers.get(f"hftbacktest_{k}"))):
            if r:
                secs = f"{r['loop_seconds']:.4f} ({r['loop_seconds_median']:.4f})"
                print(f"    {label:<38}{secs:>19}{r['capture_messages_per_s']:>16,}{r['scored_ticks']:>9,}"
                      f"{r['signals']:>9,}")
        key = f"{k}_vs_hftbacktest_{k}_capture_messages_per_s"
        if key in ratios:
            print(f"    ours / theirs per capture message: {ratios[key]}x best, "
                  f"{ratios[f'{k}_vs_hftbacktest_{k}_loop_seconds_median']}x median")
    mc = metrics.get("margins_compared")
    if mc:
        print(f"  model margins: ours {mc['ours']:,} rows, hftbacktest {mc['hftbacktest']:,}; paired by exchange time "
              f"{mc['paired']:,}, of which {mc['bit_equal']:,} are equal bit for bit.")
        if mc["hftbacktest_before_ours_first"]:
            print(f"  hftbacktest scored {mc['hftbacktest_before_ours_first']:,} rows before our first: its book "
                  f"starts from the first diff,\n  ours from the capture's REST snapshot (Binance's documented sync).")
    print("  Both loops: the same features on every touch change and trade, the model (or the margin-0 stub)\n"
          "  through a function pointer, sigmoid + hysteresis. hftbacktest's loop also applies every depth row\n"
          "  to its book; ours reads ticks the converter (not timed) built from the same diffs.")


EXEC = {"entry_ns": 1_000_000, "response_ns": 1_000_000, "queue_power": 3.0, "maker_bps": 2.0, "taker_bps": 5.0,
        "threshold": 0.8, "warmup": 8}


def ours_exec(ticks):
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
    tf = TickFile(str(ticks))
    # fees stated here, not the instrument's defaults: [lot, maker bp, taker bp, per lot]
    spec = np.array([[LOT, EXEC["maker_bps"], EXEC["taker_bps"], 0.0]])
    xp = execsim.ExecParams(entry_ns=EXEC["entry_ns"], response_ns=EXEC["response_ns"], maker=True,
                            queue_power=EXEC["queue_power"])
    for _ in range(2):  # the first run compiles the simulator when numba's cache is cold; the second is timed
        t = time.perf_counter()
        res = run_file(tf, pred, host, cfg)
        part, _ = evaluate_file(tf.words, res, depth=file_depth(tf), xp=xp, spec=spec)
        dt = time.perf_counter() - t
    return {"pnl": float(part["equity"][-1]) if len(part["equity"]) else 0.0, "fees": part["fees"],
            "fills": part["fills"], "traded_lots": part["turnover_units"], "signals": len(res.signals),
            "seconds": dt, "maker_bps": EXEC["maker_bps"], "taker_bps": EXEC["taker_bps"]}


def whole_command(quick):
    """`engine backtest F --out D --quiet --json` as a user types it, on synthetic files of n and
    8n ticks: ticks/s of the whole command, how it scales, and the execution simulator's share."""
    out = {}
    n = 375_000 if quick else 3_000_000
    for label, count in (("1x", n // 8), ("8x", n)):
        f = CACHE / f"synthetic_{count}.ticks"
        if not f.exists():
            subprocess.run([sys.executable, "-m", "app", "convert", f"synthetic://?count={count}&rate=0&seed=4",
                            "--out", str(f)], check=True, capture_output=True, cwd=ROOT)
        best = None
        for _ in range(2):  # (the first run may compile or build the default model)
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "app", "backtest", str(f), "--out", str(CACHE / "bt-out"),
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


def exec_compare(peers, notes, ticks):
    ours_r = ours_exec(ticks)
    try:
        out = subprocess.run([str(peer_python()), str(ROOT / "bench" / "_hftbacktest_maker.py"), str(DATA),
                              json.dumps(EXEC)], capture_output=True, text=True, check=True, timeout=1800)
        theirs = json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError) as e:
        notes["hftbacktest_exec"] = f"peer not measured: {e}"
        theirs = None
    rows = [("ours (loop+model+execsim)", ours_r)] + ([("hftbacktest 2.4.4 (no model)", theirs)] if theirs else [])
    print(f"\nexecution: the same maker rule on the same capture, power-3 queue model, 1 ms / 1 ms latency, fees "
          f"stated\n(maker {EXEC['maker_bps']:g} bp, taker {EXEC['taker_bps']:g} bp, not the instrument's defaults); "
          f"seconds: ours the loop with\ntouch_imbalance's model, the simulator and the evaluation, theirs its loop")
    print(f"  {'':<30}{'PnL USDT':>12}{'fees USDT':>12}{'fills':>8}{'lots':>8}{'seconds':>10}")
    for label, r in rows:
        print(f"  {label:<30}{r['pnl']:>12.4f}{r['fees']:>12.4f}{r['fills']:>8}{r['traded_lots']:>8}"
              f"{r['seconds']:>10.2f}")
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
    ticks = ticks_file("check")  # the depth diffs and trades, what hftbacktest reads
    metrics, peers, ratios, notes = throughput(reps, lines, ticks)
    metrics["exec"] = exec_compare(peers, notes, ticks)
    metrics["whole_command"] = whole_command(a.quick)
    _common.save("backtest", metrics, peers, ratios, notes or None)


if __name__ == "__main__":
    main()

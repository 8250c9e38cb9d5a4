"""Model back ends at batch 1: flat (branch-free, each SIMD build) vs treelite (TL2cgen) vs XGBoost's
Booster.inplace_predict, on models of each size (`--sizes 200x6,500x8`, the default; TREESxDEPTH,
each trained with the built-in strategy on the synthetic market and cached on first use), in one
run; then tick-to-signal through the whole engine with each back end. Per size, results also go
to `sizes.<TxD>.<backend>` in bench/results/model_backends.json: p50/p99 per row, ns per tree,
each batch size, and the best flat build's ratio to the best peer at p50 (`best_flat_vs_best_peer_p50`,
> 1: ahead), printed as the last table.

Per-row latency is timed from numba around each call through the C ABI function pointer, exactly
as the strategy loop calls it (the clock pair is reported); XGBoost per call from Python. Rows are
held-out synthetic ticks (the training distribution).

Rows per call (`--batch 1,8,64`, the default): each flat build's engine_predict_rows on k
consecutive rows a call, timed from numba through its function pointer, each call's time over k
(ns per row, one clock pair per call); vs_k1 is the gain per row over the smallest k, vs_xgboost
against XGBoost's inplace_predict on the same k rows (from Python, whose per-call cost it then
shares over k rows).

Peers at every size (the `peers` extra; each is skipped, with a printed line, when its package
is missing), timed per call from Python like XGBoost, one row at a time (but lignum_cfunc):
- ONNX Runtime: the same booster converted with onnxmltools (a TreeEnsembleClassifier; onnxmltools
  needs f0..fN feature names, so a copy of the booster without names is converted), an
  InferenceSession on the CPU provider with 1 intra-op and 1 inter-op thread, sequential, fed a
  float32 row; it outputs probabilities, so it is checked against XGBoost's probabilities.
- pylignum (`import lignum`): lignum.load(model.json), predict(row, raw_score=True, n_jobs=1,
  strategy="serial") on a float64 row (its native input; float32 -> float64 is exact, done before
  timing), checked against XGBoost's margins; its interpreter (the default) and, where a C compiler
  is present, its compiled trees (Model.compile, with the flags of our flat avx2 build).
- lignum_cfunc: those compiled trees called as ours are, from numba through the C ABI function
  pointer (bench/_lignum_cfunc.py: a shim widens the float32 row, bins it and calls lignum's tree
  blocks), at batch 1 and at each k of --batch; its outputs checked against XGBoost's margins.
Each peer's max abs diff to XGBoost is over the rows it was timed on.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import _common
import numpy as np
from _models import model_dir, test_rows, time_calls, time_rows
from numba import njit

from engine.intrinsics import call_predict_rows

from models import artifact
from models.flat import MAX_DEPTH

CORE = max(os.sched_getaffinity(0))


def time_one(addr, X, reps):
    """engine_predict at addr, one row a call over X `reps` times, timed from numba: p50/p99... ns."""
    lat = np.zeros(len(X) * reps, np.int64)
    time_calls(addr, X[:100], 1, lat)  # warm
    time_calls(addr, X, reps, lat)
    return _common.pct(lat, "model_call")


def time_batches(rows_addr, X, batches, reps):
    """engine_predict_rows at rows_addr, k rows a call for each k: {k: p50/p99... ns per row}."""
    res = {}
    for k in batches:
        lat = np.zeros(reps * (len(X) // k), np.int64)
        time_rows(rows_addr, X[:64 * k], k, 1, lat)  # warm
        n = time_rows(rows_addr, X, k, reps, lat)
        res[k] = _common.pct(lat[:n], "per_row")
    return res


def per_row(d, X, quick):
    res = {}
    man = artifact.read_manifest(d)
    for name in man["validation"]["checked_backends"]:
        if name == "xgboost":  # (its C shim: XGBoost is timed below, from Python, as users call it)
            continue
        res[name] = time_one(artifact.load(d, backend=name).addr, X, 3 if quick else 10)
    b = xgboost_booster(d)
    xl, _ = time_py(lambda r: b.inplace_predict(r, predict_type="margin"), X, 500 if quick else 3000)
    res["xgboost"] = _common.pct(xl, "model_call")
    return res


def per_batch(d, X, batches, quick):
    """{backend: {k: p50/p99 ns per row}}: each flat build's engine_predict_rows on k rows a call,
    timed from numba through its function pointer; XGBoost's inplace_predict on k rows, from Python."""
    res = {}
    man = artifact.read_manifest(d)
    reps = 3 if quick else 10
    for name in man["validation"]["checked_backends"]:
        pred = artifact.load(d, backend=name)
        if not pred.rows_addr:
            continue
        res[name] = time_batches(pred.rows_addr, X, batches, reps)
    b = xgboost_booster(d)
    res["xgboost"] = {}
    for k in batches:
        calls = max(50, (300 if quick else 2000) // k)
        lat = np.zeros(calls, np.int64)
        for i in range(calls):
            rows = X[i * k % (len(X) - k):][:k]
            t0 = time.perf_counter_ns()
            b.inplace_predict(rows, predict_type="margin")
            lat[i] = (time.perf_counter_ns() - t0) // k
        res["xgboost"][k] = _common.pct(lat, "per_row")
    return res


def xgboost_booster(d):
    import xgboost as xgb
    b = xgb.Booster(model_file=str(d / "model.json"))
    b.set_param({"nthread": 1})
    return b


def time_py(call, X, n):
    """call(row) on rows X[i:i+1], each timed from Python; (latencies ns, first output value per row)."""
    lat = np.zeros(n, np.int64)
    out = np.zeros(n, np.float64)
    for i in range(20):
        call(X[i:i + 1])
    for i in range(n):
        row = X[i:i + 1]
        t0 = time.perf_counter_ns()
        r = call(row)
        lat[i] = time.perf_counter_ns() - t0
        out[i] = r[0]
    return lat, out


def onnxruntime_peer(d, X, n):
    """(results, skip note): the booster through onnxmltools and an ONNX Runtime session."""
    try:
        import onnxmltools
        import onnxruntime as ort
        from onnxmltools.convert.common.data_types import FloatTensorType
    except ImportError as e:
        return None, f"skipped: {e.name} is not installed (pip install -e '.[peers]')"
    b = xgboost_booster(d)
    anon = b.copy()
    anon.feature_names = None  # onnxmltools reads splits as f<index>
    onx = onnxmltools.convert_xgboost(anon, initial_types=[("input", FloatTensorType([None, X.shape[1]]))])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(onx.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0].name
    lat, out = time_py(lambda r: sess.run(["probabilities"], {inp: r})[0][:, 1], X, n)
    diff = float(np.abs(out - b.inplace_predict(X[:n], predict_type="value")).max())
    return {"onnxruntime": {**_common.pct(lat, "model_call"), "max_abs_diff_vs_xgboost": diff,
                            "compared_as": "probability", "version": ort.__version__}}, None


def lignum_peer(d, X, n, batches=(1,), quick=False, compile_timeout_s=900.0):
    """(results, skip note): pylignum's interpreter and, with a C compiler, its compiled trees (built
    with our flat avx2 build's flags), timed from Python; and those compiled trees timed as ours are,
    from numba through the C ABI function pointer (bench/_lignum_cfunc.py: `lignum_cfunc`, at batch
    1 and per batch size k, checked against XGBoost's margins on every row timed)."""
    try:
        import lignum
    except ImportError:
        return None, "skipped: pylignum is not installed (pip install -e '.[peers]')"
    import shutil

    import _lignum_cfunc
    from models.flat import BUILDS
    full = xgboost_booster(d).inplace_predict(X, predict_type="margin")
    ref = full[:n]
    X64 = np.ascontiguousarray(X[:n + 20], dtype=np.float64)
    m = lignum.load(str(d / "model.json"), format="xgboost")
    res = {}

    def one(name):
        lat, out = time_py(lambda r: m.predict(r, raw_score=True, n_jobs=1, strategy="serial"), X64, n)
        res[name] = {**_common.pct(lat, "model_call"), "max_abs_diff_vs_xgboost": float(np.abs(out - ref).max()),
                     "compared_as": "margin", "version": lignum.__version__}
    one("pylignum")
    print("pylignum: compiling its trees with the C compiler ...", file=sys.stderr, flush=True)
    work = tempfile.mkdtemp(prefix="bench-lignum-")
    try:
        try:
            flags = " ".join(BUILDS["avx2"][0])
            lib = _lignum_cfunc.compile_trees(d / "model.json", flags, work, compile_timeout_s)
            h, addr, rows_addr = _lignum_cfunc.build(d / "model.json", X.shape[1], lib, flags, work)
            m = lignum.load(str(d / "model.json"), format="xgboost", compiled=str(lib))
        except RuntimeError as e:
            print(f"pylignum_compiled, lignum_cfunc: skipped: {e}", flush=True)
            return res, None
        one("pylignum_compiled")
        reps = 3 if quick else 10
        out = np.zeros(len(X), np.float32)
        score_rows(rows_addr, X, out)
        res["lignum_cfunc"] = {**time_one(addr, X, reps),
                               "max_abs_diff_vs_xgboost": float(np.abs(out - full).max()), "compared_as": "margin",
                               "version": lignum.__version__, "batch": time_batches(rows_addr, X, batches, reps)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res, None


@njit(nogil=True, cache=True)
def score_rows(addr, X, out):
    """Every row of X scored in one engine_predict_rows call (the bit-exactness check)."""
    call_predict_rows(addr, X, X.shape[0], out)


def tick_to_signal(backend, duration):
    name = f"bench-mb-{os.getpid()}"
    cmd = [sys.executable, "-m", "app", "run", "--core", str(CORE), "--duration", str(duration), "--rate",
           "20000", "--no-rt", "--json", "--backend", backend, "--name", name, "--signals-out", f"/tmp/{name}.sig"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(_common.ROOT)),
                       timeout=duration + 120)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    os.unlink(f"/tmp/{name}.sig")
    d = json.loads(r.stdout)["latency_ns"]
    return {f"tick_to_signal_{k.replace('.', '')}_ns": v for k, v in d["tick_to_signal"].items()} | {
        f"model_{k.replace('.', '')}_ns": v for k, v in d["model"].items() if k in ("p50", "p99")}


def parse_sizes(text):
    """"200x6,500x8" -> [(200, 6), (500, 8)] (trees x depth), or a one-line exit."""
    try:
        out = []
        for part in text.split(","):
            t, d = part.lower().split("x")
            out.append((int(t), int(d)))
        assert out and all(1 <= t <= 5000 and 1 <= d <= MAX_DEPTH for t, d in out)
        return list(dict.fromkeys(out))
    except (ValueError, AssertionError):
        raise SystemExit(f"--sizes: give TREESxDEPTH pairs, trees 1..5000 and depth 1..{MAX_DEPTH} (the flat back "
                         f"end's deepest), comma-separated (got {text!r})") from None


def size_summary(trees, res, bat, peer_p50, best):
    """sizes.<TxD>: per back end and peer, p50/p99 per row at batch 1 (and each k), ns per tree at
    p50 batch 1; best (the fastest flat build) and its ratio to the best peer at p50 (> 1: ahead)."""
    out = {}
    for n, v in res.items():
        out[n] = {"per_row_p50_ns": v["model_call_p50_ns"], "per_row_p99_ns": v["model_call_p99_ns"],
                  "ns_per_tree_p50": round(v["model_call_p50_ns"] / trees, 2)}
    for n, per in bat.items():
        out.setdefault(n, {})["batch"] = {str(k): {"per_row_p50_ns": x["per_row_p50_ns"],
                                                   "per_row_p99_ns": x["per_row_p99_ns"]} for k, x in per.items()}
    for n, p50 in peer_p50.items():
        if n not in res:  # (TL2cgen is one of res: timed as ours are)
            out.setdefault(n, {}).update({"per_row_p50_ns": p50, "ns_per_tree_p50": round(p50 / trees, 2)})
    peer = min(peer_p50, key=peer_p50.get)
    out["best_flat"] = best
    out["best_peer"] = peer
    out["best_flat_vs_best_peer_p50"] = _common.ratio(res[best]["model_call_p50_ns"], peer_p50[peer], False)
    return out


class Figures:
    """What the run gathers for the results file and the printed tables."""

    def __init__(self):
        self.metrics, self.peers, self.ratios = {"sizes": {}}, {}, {}
        self.rows, self.batch_rows, self.skipped = [], [], []


def main():
    a, batches = parse_args()
    sizes = parse_sizes(a.sizes)
    X = test_rows()
    f = Figures()
    for trees, depth in sizes:
        time_size(f, trees, depth, X, batches, a)
    print_sizes(f, batches)
    dur = 3 if a.quick else 8
    time_tick_to_signal(f, dur)
    _common.save("model_backends", f.metrics, f.peers, f.ratios,
                 notes="flat ratios use the fastest flat build on this CPU; each timed call includes one "
                       "CLOCK_MONOTONIC pair (~20 ns); xgboost, onnxruntime and pylignum are timed per call "
                       "from Python" + "".join(f"; {s}" for s in f.skipped))


def parse_args():
    """The command line, and --batch's row counts (sorted), or a one-line exit."""
    def extra(p):
        p.add_argument("--batch", default="1,8,64",
                       help="rows per call for the batch table (engine_predict_rows), comma-separated")
        p.add_argument("--peer-compile-timeout", type=float, default=900.0, metavar="S",
                       help="seconds lignum's compile of a model may take before its compiled peers are "
                            "skipped (default 900)")
        p.add_argument("--sizes", default="200x6,500x8",
                       help="models to time, TREESxDEPTH comma-separated (each trained on the synthetic market "
                            "and cached on first use; large ones take minutes: TL2cgen's compile)")
    a = _common.args(__doc__, extra)
    try:
        batches = sorted({int(k) for k in a.batch.split(",")})
        assert batches and all(1 <= k <= 4096 for k in batches)
    except (ValueError, AssertionError):
        raise SystemExit(f"--batch: give row counts 1..4096, comma-separated (got {a.batch!r})") from None
    return a, batches


def time_size(f, trees, depth, X, batches, a):
    """One model size: every back end per row and per batch, then the peers; its figures into f."""
    key = f"m{trees}x{depth}"
    print(f"{key}: building or loading the model ...", file=sys.stderr, flush=True)
    d = model_dir(trees, depth)
    print(f"{key}: timing every back end ...", file=sys.stderr, flush=True)
    res = per_row(d, X, a.quick)
    f.peers[f"xgboost_{key}"] = res.pop("xgboost")
    f.metrics[key] = res
    best_flat = min((n for n in res if n.startswith("flat")), key=lambda n: res[n]["model_call_p50_ns"])
    for q in ("p50", "p99", "p999"):
        x = res[best_flat][f"model_call_{q}_ns"]
        if "treelite" in res:
            f.ratios[f"flat_vs_treelite_{key}_{q}"] = _common.ratio(x, res["treelite"][f"model_call_{q}_ns"], False)
        f.ratios[f"flat_vs_xgboost_{key}_{q}"] = _common.ratio(x, f.peers[f"xgboost_{key}"][f"model_call_{q}_ns"],
                                                               False)
    f.rows += [(f"{key} {n}", v) for n, v in res.items()] + [(f"{key} xgboost", f.peers[f"xgboost_{key}"])]
    print(f"{key}: timing rows per call {batches} ...", file=sys.stderr, flush=True)
    bat = per_batch(d, X, batches, a.quick)
    f.peers[f"xgboost_{key}_batch"] = {str(k): v for k, v in bat.pop("xgboost").items()}
    f.metrics[f"{key}_batch"] = {n: {str(k): v for k, v in per.items()} for n, per in bat.items()}
    for n, per in bat.items():
        for k in batches:
            vs = (_common.ratio(per[k]["per_row_p50_ns"], per[batches[0]]["per_row_p50_ns"], False),
                  _common.ratio(per[k]["per_row_p50_ns"], f.peers[f"xgboost_{key}_batch"][str(k)]["per_row_p50_ns"],
                                False))
            f.batch_rows.append((f"{key} {n} k={k}", {**per[k], "vs_k1_p50": f"{vs[0]:.2f}x",
                                                     "vs_xgboost_p50": f"{vs[1]:.1f}x"}))
        f.ratios[f"{n}_{key}_k{batches[-1]}_vs_k{batches[0]}_per_row_p50"] = _common.ratio(
            per[batches[-1]]["per_row_p50_ns"], per[batches[0]]["per_row_p50_ns"], False)
    # peers per row at batch 1: TL2cgen through the same function-pointer path as ours, the rest from Python
    peer_p50 = {"xgboost": f.peers[f"xgboost_{key}"]["model_call_p50_ns"]}
    if "treelite" in res:
        peer_p50["treelite"] = res["treelite"]["model_call_p50_ns"]
    time_peers(f, key, d, X, batches, a, res, bat, peer_p50, best_flat)
    f.metrics["sizes"][f"{trees}x{depth}"] = size_summary(trees, res, bat, peer_p50, best_flat)


def time_peers(f, key, d, X, batches, a, res, bat, peer_p50, best_flat):
    """ONNX Runtime and lignum on one model (each skipped, said once, when missing): their figures
    into f, their p50 into peer_p50, lignum_cfunc's batches into bat."""
    n = 500 if a.quick else 3000
    for label, peer in (("onnxruntime", lambda: onnxruntime_peer(d, X, n)),
                        ("pylignum", lambda: lignum_peer(d, X, n, batches, a.quick, a.peer_compile_timeout))):
        print(f"{key}: timing {label} ...", file=sys.stderr, flush=True)
        got, skip = peer()
        if skip:
            print(f"{label}: {skip}", flush=True)
            if f"{label} {skip}" not in f.skipped:
                f.skipped.append(f"{label} {skip}")
            continue
        for name, v in got.items():
            f.peers[f"{name}_{key}"] = v
            peer_p50[name] = v["model_call_p50_ns"]
            print(f"{key} {name}: max abs diff vs xgboost ({v['compared_as']}, {n} rows): "
                  f"{v['max_abs_diff_vs_xgboost']:.3g}", flush=True)
            for q in ("p50", "p99"):
                f.ratios[f"flat_vs_{name}_{key}_{q}"] = _common.ratio(
                    res[best_flat][f"model_call_{q}_ns"], v[f"model_call_{q}_ns"], False)
            f.rows.append((f"{key} {name}", v))
            if "batch" in v:  # (a peer timed as ours are, k rows a call)
                per = v.pop("batch")
                bat[name] = per
                f.peers[f"{name}_{key}_batch"] = {str(k): x for k, x in per.items()}
                for k in batches:
                    f.batch_rows.append((f"{key} {name} k={k}", {**per[k], "vs_k1_p50": "{:.2f}x".format(
                        _common.ratio(per[k]["per_row_p50_ns"], per[batches[0]]["per_row_p50_ns"], False))}))
                    f.ratios[f"flat_vs_{name}_{key}_k{k}_per_row_p50"] = _common.ratio(  # (our best batch build)
                        min(b[k]["per_row_p50_ns"] for n2, b in bat.items() if n2.startswith("flat")),
                        per[k]["per_row_p50_ns"], False)


def print_sizes(f, batches):
    """The tables per row, per batch and per size."""
    _common.table("model call at batch 1 (ns)", ["model_call_p50_ns", "model_call_p99_ns", "model_call_p999_ns",
                                                  "model_call_max_ns"], f.rows)
    _common.table(f"rows per call (engine_predict_rows; ns per row; vs_k1: the gain over {batches[0]} row a call)",
                  ["per_row_p50_ns", "per_row_p99_ns", "vs_k1_p50", "vs_xgboost_p50"], f.batch_rows)
    _common.table("per size at batch 1 (p50): our best flat build, ns per tree, the best peer (TL2cgen, XGBoost, "
                  "ONNX Runtime, lignum) and how far ahead",
                  ["best_flat", "per_row_p50_ns", "ns_per_tree_p50", "best_peer", "peer_p50_ns", "ahead_p50"],
                  [(size, {"best_flat": v["best_flat"], "per_row_p50_ns": v[v["best_flat"]]["per_row_p50_ns"],
                           "ns_per_tree_p50": v[v["best_flat"]]["ns_per_tree_p50"], "best_peer": v["best_peer"],
                           "peer_p50_ns": v[v["best_peer"]]["per_row_p50_ns"],
                           "ahead_p50": f"{v['best_flat_vs_best_peer_p50']:.2f}x"})
                   for size, v in f.metrics["sizes"].items()])


def time_tick_to_signal(f, dur):
    """Tick to signal through the whole engine with the flat and the TL2cgen back ends; a table."""
    t2s = {}
    for backend in ("flat", "treelite"):
        print(f"tick to signal with {backend} ...", file=sys.stderr, flush=True)
        t2s[backend] = tick_to_signal(backend, dur)
    f.metrics["tick_to_signal_20k_per_s"] = t2s
    for q in ("p50", "p99"):
        f.ratios[f"flat_vs_treelite_tick_to_signal_{q}"] = _common.ratio(
            t2s["flat"][f"tick_to_signal_{q}_ns"], t2s["treelite"][f"tick_to_signal_{q}_ns"], False)
    _common.table(f"tick to signal, default model, 20k ticks/s, pinned ({dur} s each, ns)",
                  ["model_p50_ns", "model_p99_ns", "tick_to_signal_p50_ns", "tick_to_signal_p99_ns",
                   "tick_to_signal_p999_ns"], [(f"engine --backend {b}", v) for b, v in t2s.items()])


if __name__ == "__main__":
    main()

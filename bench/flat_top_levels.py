"""The SIMD flat kernels on deep trees (depth 7-10): the depth-6 block under a tree's top levels found
32 trees at a time by the AVX2 build (TOP_SIMD in models/templates/flat.c.tpl, stop 50) and 64 at a
time by the AVX-512 one (stop 52, where the CPU has AVX-512 VBMI), each against the same generated
source with TOP_SIMD left undefined, which walks each tree's top nodes in scalar code (block_of,
the kernel until stop 49 and 51): the peer is our previous kernel, built and run here in the same run.

Per size (`--sizes 500x8,1000x8`, the bench models of bench/_models.py, trained and cached on first
use): both builds checked bit for bit against each other and XGBoost's margins on every row timed;
then, in interleaved rounds, p50/p99 ns per row one row a call (engine_predict, timed from numba
through the C ABI function pointer as the strategy loop calls it) and at 16 rows a call
(engine_predict_rows; 16: under LANE_MIN, since from 32 rows the AVX-512 build walks the rows as
lanes, which do not use the top levels, and both its builds would time the same code), the median of the rounds quoted; and, when valgrind is installed,
instructions per tree counted by callgrind inside engine_predict alone over 512 rows (a count, so
it does not move with this VM's speed, which does by 2x within the hour).
"""
import ctypes
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _common
import numpy as np
from _models import model_dir, test_rows, time_calls, time_rows

from models import artifact, flat
from models.compile import base_margin_c

HARNESS = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW);
  void (*f)(const float*, float*) = (void (*)(const float*, float*))dlsym(h, "engine_predict");
  int n = atoi(argv[3]), nf = atoi(argv[4]);
  float* X = malloc(sizeof(float) * n * nf);
  float out[1];
  FILE* fp = fopen(argv[2], "rb");
  if (!h || !f || !fp || fread(X, sizeof(float), (size_t)n * nf, fp) != (size_t)n * nf) return 2;
  for (int i = 0; i < n; ++i) f(X + i * nf, out);
  return 0;
}
"""


WIDTH = {"avx2": 32, "avx512": 64}  # trees a build's top levels take at once
K = 16  # rows a call for the batch column (below the template's LANE_MIN)


def variants(model_json):
    """{name: (build, C source)}: per SIMD build this CPU runs, the kernel and the same source without
    TOP_SIMD; None when the model is not one the SIMD kernels take with top levels (depth 7-10,
    byte ranks; the AVX2 one <= 16 features)."""
    forest = flat.read_forest(model_json)
    tab = flat.build_tables(forest)
    if tab["depth"] <= flat.SIMD_DEPTH or not flat.simd_ok(tab):
        return None, tab
    src = flat.generate_c(tab, base_margin_c(forest.base_score, forest.objective))
    out = {}
    for b, w in WIDTH.items():
        if flat.kernels(tab)[b] == "scalar" or not set(flat.BUILDS[b][1]) <= artifact.cpu_flag_set():
            continue
        if f"#define TOP_SIMD {w}\n" not in src:
            raise SystemExit("models/templates/flat.c.tpl no longer defines TOP_SIMD: this bench does not know the kernel")
        out[f"{b}_top{w}"] = (b, src)
        out[f"{b}_scalar_top"] = (b, src.replace(f"#define TOP_SIMD {w}\n", ""))
    return out or None, tab


def build(build_name, src, work, name):
    """The given build of src: (ctypes library, engine_predict, engine_predict_rows addresses)."""
    c, lib = Path(work) / f"{name}.c", Path(work) / f"lib{name}.so"
    c.write_text(src)
    subprocess.run([flat.CC, *flat.BUILDS[build_name][0], *flat.COMMON_FLAGS, "-o", str(lib), str(c), "-lm"],
                   check=True)
    h = ctypes.CDLL(str(lib))
    addr = [ctypes.cast(getattr(h, f), ctypes.c_void_p).value for f in ("engine_predict", "engine_predict_rows")]
    return h, lib, addr[0], addr[1]


def instructions(lib, X, work):
    """Instructions callgrind counts inside engine_predict over the rows of X (None: no valgrind)."""
    if shutil.which("valgrind") is None:
        return None
    exe, rows = Path(work) / "harness", Path(work) / "rows.bin"
    if not exe.exists():
        (Path(work) / "harness.c").write_text(HARNESS)
        subprocess.run([flat.CC, "-O2", "-o", str(exe), str(Path(work) / "harness.c"), "-ldl"], check=True)
    np.ascontiguousarray(X, np.float32).tofile(rows)
    r = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=engine_predict", "--callgrind-out-file=/dev/null",
                        str(exe), str(lib), str(rows), str(len(X)), str(X.shape[1])], capture_output=True, text=True)
    m = re.search(r"Collected\s*:\s*(\d+)", r.stderr) or re.search(r"I\s+refs:\s*([\d,]+)", r.stderr)
    if r.returncode != 0 or m is None:
        raise SystemExit(f"callgrind did not run the harness: {r.stderr.strip()[-300:]}")
    return int(m.group(1).replace(",", ""))


def main():
    def extra(p):
        p.add_argument("--sizes", default="500x8,1000x8",
                       help="bench models to time, TREESxDEPTH comma-separated, depth 7-10 (trained and cached on "
                            "first use by bench/_models.py: minutes each)")
    a = _common.args(__doc__, extra)
    from model_backends import parse_sizes, score_rows, xgboost_booster
    sizes = parse_sizes(a.sizes)
    X = test_rows()
    rounds = 3 if a.quick else 7
    metrics, ratios, rows = {}, {}, []
    work = tempfile.mkdtemp(prefix="bench-top-")
    try:
        for trees, depth in sizes:
            key = f"{trees}x{depth}"
            print(f"{key}: building or loading the model ...", file=sys.stderr, flush=True)
            d = model_dir(trees, depth)
            srcs, tab = variants(d / "model.json")
            if srcs is None:
                print(f"{key}: skipped: the SIMD kernels have no top levels for it (depth {tab['depth']}, "
                      f"{tab['num_feature']} features)", flush=True)
                continue
            want = xgboost_booster(d).inplace_predict(X, predict_type="margin")
            libs = {}
            for name, (b, src) in srcs.items():
                h, lib, addr, rows_addr = build(b, src, work, f"{name}_{key}")
                out = np.zeros(len(X), np.float32)
                score_rows(rows_addr, X, out)
                if not np.array_equal(out.view(np.int32), want.view(np.int32)):
                    raise SystemExit(f"{key} {name}: not bit-exact with XGBoost")
                libs[name] = (h, lib, addr, rows_addr)
            res = {n: {"one": [], "k16": []} for n in libs}
            for _ in range(rounds):  # interleaved: both builds see the same moments of this VM
                for name, (_, _, addr, rows_addr) in libs.items():
                    lat = np.zeros(2000, np.int64)
                    time_calls(addr, X[:100], 1, lat)  # warm
                    time_calls(addr, X[:2000], 1, lat)
                    res[name]["one"].append(_common.pct(lat, "per_row"))
                    lat = np.zeros(len(X) // K, np.int64)
                    got = time_rows(rows_addr, X, K, 1, lat)
                    res[name]["k16"].append(_common.pct(lat[:got], "per_row"))
            metrics[key] = {}
            for name in libs:
                m = {f"{w}_{q}_ns": int(np.median([r[f"per_row_{q}_ns"] for r in res[name][w]]))
                     for w in ("one", "k16") for q in ("p50", "p99")}
                # (valgrind does not run AVX-512 code)
                n_ins = instructions(libs[name][1], X[:512], work) if srcs[name][0] != "avx512" else None
                if n_ins is not None:
                    m["instructions_per_tree"] = round(n_ins / (512 * trees), 1)
                m["ns_per_tree_p50"] = round(m["one_p50_ns"] / trees, 2)
                metrics[key][name] = m
                rows.append((f"{key} {name}", m))
            for b, wd in WIDTH.items():
                if f"{b}_top{wd}" not in libs:
                    continue
                new, old = metrics[key][f"{b}_top{wd}"], metrics[key][f"{b}_scalar_top"]
                for w in ("one_p50_ns", "one_p99_ns", "k16_p50_ns"):
                    ratios[f"{b}_top{wd}_vs_scalar_top_{key}_{w[:-3]}"] = _common.ratio(new[w], old[w], False)
                if "instructions_per_tree" in new:
                    ratios[f"{b}_top{wd}_vs_scalar_top_{key}_instructions"] = _common.ratio(
                        new["instructions_per_tree"], old["instructions_per_tree"], False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _common.table(f"SIMD flat kernels, deep trees: ns per row (median of {rounds} interleaved rounds) and instructions "
                  "per tree (callgrind, engine_predict)",
                  ["one_p50_ns", "one_p99_ns", "k16_p50_ns", "k16_p99_ns", "ns_per_tree_p50", "instructions_per_tree"],
                  rows)
    _common.save("flat_top_levels", metrics, {}, ratios,
                 notes="<build>_top<w>: the kernel as generated (its top levels w trees at a time); <build>_scalar_top: "
                       "the same source without TOP_SIMD (the top levels walked tree by tree); bit-exact")


if __name__ == "__main__":
    main()

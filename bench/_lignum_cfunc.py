"""lignum's compiled trees called from numba through the same C ABI function pointers as our flat
kernels and TL2cgen (engine.intrinsics call_predict / call_predict_rows), so its speed is not hidden
behind Python's per-call cost.

lignum.Model.compile writes C (one `lignum_bin` that turns a float64 row into uint16 bin codes,
then `lignum_block_<i>` functions of 16 trees each that add their leaves, in float32, to a float64
accumulator) and links it into a library. A shim of ours gives that library our ABI:
`engine_predict(const float* row, float* out)` and `engine_predict_rows(rows, n, out)`: the float32
row widened to float64 (lignum's native input; exact), binned, each block called in order on an
accumulator that starts at XGBoost's base margin (the same expression our kernel uses), the float32
sum written out. The shim is compiled with the flags of our flat avx2 build, and so is lignum's code.
"""
import ctypes
import re
import subprocess
import sys
from pathlib import Path

CHUNK = 64  # rows binned and scored per block call in engine_predict_rows (the shim's stack arrays)


def _shim_c(n_blocks, n_codes, n_features, base_c):
    decl = "".join(f"void lignum_block_{i}(const uint16_t*, const uint64_t*, size_t, double*);\n"
                   for i in range(n_blocks))
    calls = "".join(f"    lignum_block_{i}(c, dec, n, acc);\n" for i in range(n_blocks))
    return f"""#include <math.h>
#include <stddef.h>
#include <stdint.h>
void lignum_bin(const double*, size_t, size_t, uint16_t*);
{decl}
static const uint64_t dec[1] = {{0}};  /* categorical decisions: none in these models */

static void score(const float* rows, size_t n, float* out) {{
    double x[{CHUNK} * {n_features}], acc[{CHUNK}];
    uint16_t c[{CHUNK} * {n_codes}];
    for (size_t i = 0; i < n * {n_features}; i++) x[i] = rows[i];
    lignum_bin(x, {n_features}, n, c);
    const float base = {base_c};
    for (size_t i = 0; i < n; i++) acc[i] = base;
{calls}    for (size_t i = 0; i < n; i++) out[i] = (float)acc[i];
}}

__attribute__((visibility("default"))) void engine_predict(const float* row, float* out) {{ score(row, 1, out); }}

__attribute__((visibility("default"))) void engine_predict_rows(const float* rows, int64_t n, float* out) {{
    for (int64_t i = 0; i < n; i += {CHUNK}) {{
        int64_t k = n - i < {CHUNK} ? n - i : {CHUNK};
        score(rows + i * {n_features}, (size_t)k, out + i);
    }}
}}
"""


def compile_trees(model_json, flags, work, timeout_s):
    """lignum.Model.compile of model_json with `flags` in the directory `work`, in a child process
    stopped after timeout_s (gcc on 2000x10's generated C ran for many minutes here); the library's
    path, or a RuntimeError saying why not."""
    lib = Path(work) / "lignum_trees.so"
    code = ("import sys, lignum\n"
            "m = lignum.load(sys.argv[1], format='xgboost')\n"
            "st = m.compile(flags=sys.argv[2], work_dir=sys.argv[3], library=sys.argv[4])\n"
            "sys.exit(0 if st.get('compiled') else st.get('error') or 'lignum did not compile')\n")
    try:
        r = subprocess.run([sys.executable, "-c", code, str(model_json), flags, str(work), str(lib)],
                           capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"lignum's compile took over {timeout_s:g} s (--peer-compile-timeout)") from None
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["lignum did not compile"])[-1])
    return lib


def build(model_json, n_features, lib, flags, work):
    """(ctypes library, engine_predict address, engine_predict_rows address) over lignum's compiled
    trees `lib` (compile_trees, its C left in `work`), the shim compiled with `flags`."""
    from models.compile import base_margin_c
    from models.flat import read_forest
    forest = read_forest(model_json)
    src = "".join(p.read_text() for p in sorted(Path(work).glob("lignum_*.c")))
    n_blocks = len(set(re.findall(r"void lignum_block_(\d+)\(", src)))
    m = re.search(r"uint16_t\* restrict c = codes \+ i \* (\d+);", src)
    if not n_blocks or m is None:
        raise RuntimeError("lignum's generated C is not the shape this shim knows (lignum_bin / lignum_block_<i>)")
    shim = Path(work) / "shim.c"
    shim.write_text(_shim_c(n_blocks, int(m.group(1)), n_features, base_margin_c(forest.base_score, forest.objective)))
    out = Path(work) / "lignum_engine.so"
    r = subprocess.run(["gcc", *flags.split(), "-fPIC", "-shared", "-ffp-contract=off", str(shim), "-o", str(out),
                        str(lib), f"-Wl,-rpath,{work}", "-lm"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the shim did not compile: {r.stderr.strip()[:300]}")
    h = ctypes.CDLL(str(out))
    return h, ctypes.cast(h.engine_predict, ctypes.c_void_p).value, ctypes.cast(h.engine_predict_rows,
                                                                                  ctypes.c_void_p).value

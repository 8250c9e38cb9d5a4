"""The `xgboost` back end: XGBoost's own predictor behind the engine's C ABI, for validation.

A small generic shim (the same for every model) calls XGBoost's C API for one row; the model is
handed over as the verified bytes from the artifact, never re-read from disk. About 200 us a
call: `auto` never picks it, `--backend xgboost` runs the live loop against the reference.
"""
import subprocess
from pathlib import Path

from .compile import ABI_VERSION, CC, CompileError

SHIM = "libxgb_shim.so"
FLAGS = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-std=gnu99"]

SOURCE = r"""/* engine C ABI over XGBoost's C API (XGBoosterPredictFromDense, one row). Generated. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#define EXPORT __attribute__((visibility("default")))
typedef void* BoosterHandle;
static int (*p_create)(const void*, uint64_t, BoosterHandle*);
static int (*p_load)(BoosterHandle, const void*, uint64_t);
static int (*p_set)(BoosterHandle, const char*, const char*);
static int (*p_pred)(BoosterHandle, const char*, const char*, void*, const uint64_t**, uint64_t*, const float**);
static const char* (*p_err)(void);
static BoosterHandle g_h;
static int g_nf;
static const char* CONFIG =
  "{\"type\": 1, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, "
  "\"strict_shape\": false, \"missing\": NaN, \"cache_id\": 0}";

EXPORT int engine_abi_version(void) { return ABI; }
EXPORT int engine_num_feature(void) { return g_nf; }

/* Returns NULL on success, else an error message. */
EXPORT const char* engine_xgb_init(const char* libxgboost, const void* model, uint64_t len, int nf) {
  void* lib = dlopen(libxgboost, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return dlerror();
  p_create = dlsym(lib, "XGBoosterCreate");
  p_load = dlsym(lib, "XGBoosterLoadModelFromBuffer");
  p_set = dlsym(lib, "XGBoosterSetParam");
  p_pred = dlsym(lib, "XGBoosterPredictFromDense");
  p_err = dlsym(lib, "XGBGetLastError");
  if (!p_create || !p_load || !p_set || !p_pred || !p_err) return "libxgboost lacks the C API this shim needs";
  if (p_create(NULL, 0, &g_h) || p_load(g_h, model, len) || p_set(g_h, "nthread", "1")) return p_err();
  g_nf = nf;
  return NULL;
}

EXPORT void engine_predict(const float* row, float* out) {
  char arr[192];
  const uint64_t* shape;
  uint64_t dim;
  const float* res;
  snprintf(arr, sizeof arr, "{\"data\": [%llu, true], \"shape\": [1, %d], \"typestr\": \"<f4\", \"version\": 3}",
           (unsigned long long)(uintptr_t)row, g_nf);
  out[0] = p_pred(g_h, arr, CONFIG, NULL, &shape, &dim, &res) == 0 ? res[0] : NAN;
}

EXPORT void engine_predict_batch(const float* rows, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) engine_predict(rows + i * g_nf, out + i);
}
"""


def compile_shim(out_dir):
    out_dir = Path(out_dir)
    src = out_dir / "xgb_shim.c"
    src.write_text(SOURCE.replace("ABI;", f"{ABI_VERSION};"))
    lib = out_dir / SHIM
    cmd = [CC, *FLAGS, "-o", str(lib), str(src), "-ldl"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise CompileError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return lib.name


def init(lib, model_bytes, num_feature):
    """Hand the verified model bytes to the shim; raises RuntimeError with XGBoost's message."""
    import ctypes

    import xgboost.libpath
    lib.engine_xgb_init.restype = ctypes.c_char_p
    lib.engine_xgb_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]
    err = lib.engine_xgb_init(xgboost.libpath.find_lib_path()[0].encode(), model_bytes, len(model_bytes), num_feature)
    if err:
        raise RuntimeError(f"xgboost back end: {err.decode(errors='replace')}")

"""XGBoost model -> Treelite -> TL2cgen C -> shared library with the engine's C ABI.

Out of the box TL2cgen is not bit-exact with XGBoost: it adds the base score last
(XGBoost starts the sum from it) and writes leaves as double literals (so each
`result += leaf` is a double add rounded back). We drop TL2cgen's base-score line, seed
the sum with XGBoost's float32 base margin, and cast every leaf literal to float. The
result is then checked bit for bit against XGBoost before an artifact is written.

The library exports (C ABI shared by every back end):
  void engine_predict(const float* row, float* out)   out[0] = float32 margin; NaN = missing
  void engine_predict_batch(const float* rows, int64_t n, float* out)   row by row
  int  engine_abi_version(void), engine_num_feature(void)
and the flat kernels also (models/templates/flat.c.tpl; the loader checks it when present):
  void engine_predict_rows(const float* rows, int64_t n, float* out)    rows scored together
"""
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ABI_VERSION = 1
CC = "gcc"
# No -ffast-math (it breaks NaN tests and float semantics); no FMA contraction.
CFLAGS = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off", "-fno-fast-math", "-std=gnu99"]

_LEAF = re.compile(r"(result\[\d+\] \+= )([-+0-9.eE]+);")
_BASE = re.compile(r"^\s*result\[\d+\] \+= [-+0-9.eE]+;\s*$")


class CompileError(RuntimeError):
    pass


def base_score(model_json):
    """XGBoost's base_score (probability space for logistic) from its JSON model."""
    d = json.loads(Path(model_json).read_text())
    lmp = d["learner"]["learner_model_param"]
    raw = lmp["base_score"].strip("[]").split(",")
    if len(raw) != 1:
        raise CompileError(f"multi-target base_score {lmp['base_score']!r} is not supported")
    return float(raw[0]), d["learner"]["objective"]["name"]


def base_margin_c(p, objective):
    """C expression XGBoost uses to turn base_score into a float32 margin."""
    if objective == "binary:logistic" or objective == "reg:logistic" or objective == "binary:logitraw":
        if objective == "binary:logitraw":
            return f"{p!r}f"
        # volatile: GCC would fold logf at compile time with MPFR, one ulp away from the
        # glibc logf XGBoost calls at run time
        return f"-logf(1.0f / *(volatile float*)&(float){{{p!r}f}} - 1.0f)"
    if objective in ("reg:squarederror", "reg:pseudohubererror", "reg:absoluteerror"):
        return f"{p!r}f"
    raise CompileError(f"objective {objective!r} is not supported (binary:logistic, reg:squarederror)")


def patch_tl2cgen(src):
    """Make TL2cgen's predict() bit-exact: float leaf literals, no trailing base score."""
    lines = src.split("\n")
    out = []
    skip_next_base = False
    for line in lines:
        if "Apply base_scores" in line:
            skip_next_base = True
            out.append(line + " (removed: the engine seeds result[0] with XGBoost's base margin)")
            continue
        if skip_next_base and _BASE.match(line):
            skip_next_base = False
            continue
        out.append(_LEAF.sub(r"\1(float)(\2);", line))
    if skip_next_base:
        raise CompileError("TL2cgen output changed: no base-score line after 'Apply base_scores'")
    return "\n".join(out)


def wrapper_c(num_feature, margin_expr):
    return f"""/* Engine C ABI over TL2cgen's predict(); generated, do not edit. */
#include <math.h>
#include <stdint.h>
#include "header.h"
#define EXPORT __attribute__((visibility("default")))
#define NF {num_feature}
static float g_base_margin;
__attribute__((constructor)) static void engine_init(void) {{ g_base_margin = {margin_expr}; }}
EXPORT int engine_abi_version(void) {{ return {ABI_VERSION}; }}
EXPORT int engine_num_feature(void) {{ return NF; }}
EXPORT void engine_predict(const float* row, float* out) {{
  union Entry e[NF];
  for (int i = 0; i < NF; ++i) {{
    if (isnan(row[i])) e[i].missing = -1; else e[i].fvalue = row[i];
  }}
  float r = g_base_margin;  /* XGBoost starts its float32 sum here */
  predict(e, 1, &r);
  out[0] = r;
}}
EXPORT void engine_predict_batch(const float* rows, int64_t n, float* out) {{
  for (int64_t i = 0; i < n; ++i) engine_predict(rows + i * NF, out + i);
}}
"""


@contextlib.contextmanager
def _native_output_held():
    """Treelite/TL2cgen's C++ logs version chatter straight to fds 1 and 2 (stdout!). Hold both
    and show what they said on stderr only if the step fails."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as tmp:
        for fd in saved:
            os.dup2(tmp.fileno(), fd)
        try:
            yield
        except BaseException:
            _restore(saved)
            tmp.seek(0)
            sys.stderr.write(tmp.read().decode(errors="replace"))
            raise
        finally:
            _restore(saved)


def _restore(saved):
    for fd, dup in list(saved.items()):
        os.dup2(dup, fd)
        os.close(dup)
        del saved[fd]


def gcc_version():
    try:
        return subprocess.run([CC, "--version"], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"a C compiler ({CC}) is needed to build a model: {e}") from e


def compile_treelite(model_json, out_dir, num_feature, progress=None):
    """Generate, patch and compile; writes predictor/*.c and libpredictor.so into out_dir.
    progress(done, total): called as each translation unit is compiled."""
    import tl2cgen
    import treelite

    out_dir = Path(out_dir)
    with _native_output_held():
        tl_model = treelite.frontend.load_xgboost_model(str(model_json))
    if tl_model.num_feature != num_feature:
        raise CompileError(f"model has {tl_model.num_feature} features, expected {num_feature}")
    p, objective = base_score(model_json)
    src_dir = out_dir / "predictor"
    # One function for all trees makes gcc superlinearly slow (minutes for 500x8): split the trees
    # into translation units of TREES_PER_UNIT. predict() calls the units in order and each unit
    # adds its trees in order, so the float32 sum keeps XGBoost's order.
    units = tl_model.num_tree // TREES_PER_UNIT if tl_model.num_tree > TREES_PER_UNIT else 0
    with tempfile.TemporaryDirectory() as tmp:
        with _native_output_held():
            tl2cgen.generate_c_code(tl_model, tmp, params={"parallel_comp": units})
        src_dir.mkdir(parents=True, exist_ok=True)
        for c in sorted(Path(tmp).glob("*.c")):
            (src_dir / c.name).write_text(patch_tl2cgen(c.read_text()))
        shutil.copy(Path(tmp, "header.h"), src_dir / "header.h")
    (src_dir / "engine_predict.c").write_text(wrapper_c(num_feature, base_margin_c(p, objective)))
    lib = out_dir / "libpredictor.so"
    sources = sorted(src_dir.glob("*.c"))
    objs = _compile_parallel(sources, out_dir / "obj", progress)
    cmd = [CC, *CFLAGS, "-o", str(lib), *map(str, objs), "-lm"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(out_dir / "obj", ignore_errors=True)
    if r.returncode != 0:
        raise CompileError(f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}")
    return lib, {"cc": CC, "cc_version": gcc_version(), "flags": CFLAGS, "objective": objective, "base_score": p,
                 "units": max(1, units)}


TREES_PER_UNIT = 20


def _compile_parallel(sources, obj_dir, progress=None):
    """gcc -c each source, as many at once as there are cores; progress(done, total) after each."""
    obj_dir.mkdir(parents=True, exist_ok=True)
    flags = [f for f in CFLAGS if f != "-shared"]
    pending, running, objs = list(sources), [], []
    width = max(1, os.cpu_count() or 1)
    while pending or running:
        while pending and len(running) < width:
            src = pending.pop(0)
            obj = obj_dir / (src.stem + ".o")
            objs.append(obj)
            cmd = [CC, *flags, "-c", "-o", str(obj), str(src)]
            running.append((cmd, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
        cmd, proc = running.pop(0)
        _, err = proc.communicate()
        if proc.returncode != 0:
            for _, other in running:
                other.kill()
            raise CompileError(f"{' '.join(cmd)} failed:\n{err[-4000:]}")
        if progress is not None:
            progress(len(objs) - len(running), len(sources))  # (objs: every source started)
    return objs

"""Vitis HLS C++ for the fixed-point tree ensemble, and its g++ emulation.

Generated (DIR/hls/):
  fixed_types.h   widths and types: ap_int<W> under __SYNTHESIS__, int64_t/__int128 here
                  (exact either way: every width is proven to hold its values)
  kernel.cpp      one function per tree (all comparators at once, a leaf-select mux), a
                  pipelined adder tree, and three tops: engine_tree_kernel (quantized inputs,
                  II=1), engine_tree_stream (AXI-stream of float rows) and engine_tree_mm
                  (m_axi, host calls in batches); the float->fixed quantizer is in the kernel
  emu_abi.cpp     the engine's C ABI, engine_predict(const float*, float*), over the kernel
  tb.cpp          testbench: float rows + golden accumulators in, mismatches out (csim or g++)
  run_hls.tcl     Vitis HLS: csim, synthesis at the target clock, export; v++.cfg for linking
Each file's text is a template, fpga/templates/hls/NAME.tpl (engine/render.py); the functions
here compute only its per-model parts.
"""
import os
import subprocess
from pathlib import Path

import numpy as np

from engine.render import render

CLOCK_MHZ = 200
TEMPLATES = Path(__file__).resolve().parent / "templates" / "hls"


def _lit(v, w):
    """A C++ integer literal of value v for a W-bit signed type, in both builds."""
    v = int(v)
    if -(2 ** 63) <= v < 2 ** 63:
        return f"((fx{w})INT64_C({v}))" if v != -(2 ** 63) else f"((fx{w})INT64_MIN)"
    hi, lo = v >> 64, v & ((1 << 64) - 1)
    return f"WIDE({w}, INT64_C({hi}), UINT64_C({lo}))"


def _tree_fn(fm, t):
    tr = fm.trees
    lines = [f"static inline leaf_t tree{t}(const feat_t x, const mask_t m) {{"]
    inner = np.nonzero(tr.feature[t] >= 0)[0]
    for n in inner:
        f = int(tr.feature[t, n])
        dl = "true" if tr.default_left[t, n] else "false"
        lines.append(f"  const bool c{n} = MISSING(m, {f}) ? {dl} : (x.f{f} < {_lit(fm.T[t, n], int(fm.width[f]))});")

    def sel(n):
        if tr.feature[t, n] < 0:
            return f"(leaf_t)INT64_C({int(fm.leaf_q[t, n])})"
        return f"(c{n} ? {sel(int(tr.left[t, n]))} : {sel(int(tr.right[t, n]))})"
    lines.append(f"  return {sel(0)};")
    lines.append("}")
    return "\n".join(lines)


def _adder_tree(n):
    """Balanced pairwise sums as HLS sees them: one level per pipeline stage."""
    out = ["  acc_t s0[%d];" % n, "#pragma HLS ARRAY_PARTITION variable=s0 complete"]
    out += [f"  s0[{i}] = tree{i}(x, m);" for i in range(n)]
    level, width = 0, n
    while width > 1:
        nw = (width + 1) // 2
        out.append(f"  acc_t s{level + 1}[{nw}];")
        out.append(f"#pragma HLS ARRAY_PARTITION variable=s{level + 1} complete")
        for i in range(nw):
            a, b = 2 * i, 2 * i + 1
            out.append(f"  s{level + 1}[{i}] = s{level}[{a}]" + (f" + s{level}[{b}];" if b < width else ";"))
        level, width = level + 1, nw
    out.append(f"  return s{level}[0] + (acc_t)BASE_Q;")
    return out, level


def _header_fields(fm, model_name):
    """fixed_types.h: the model's sizes, one type per width in use, the feature struct."""
    widths = sorted(set(int(w) for w in fm.width) | {fm.acc_bits, fm.leaf_width})
    return {"model_name": model_name, "nf": fm.trees.n_features, "nt": fm.n_trees, "leaf_bits": fm.leaf_bits,
            "acc_bits": fm.acc_bits, "base_q": fm.base_q, "leaf_width": fm.leaf_width,
            "types": "\n".join(f"typedef FX({w}) fx{w};" for w in widths),
            "feat_fields": "\n".join(f"  fx{int(fm.width[f])} f{f};" for f in range(fm.trees.n_features))}


def _quantize_lines(fm):
    """engine_quantize's body: one saturating float->fixed conversion per feature."""
    lines = []
    for f in range(fm.trees.n_features):
        w = int(fm.width[f])
        lines.append(f"  {{ bool miss; x->f{f} = quant<fx{w}, {w}>(row[{f}], {int(fm.frac[f])}, "
                     f"{_lit(fm.qmin[f], w)}, {_lit(fm.qmax[f], w)}, &miss); if (miss) mm |= ((mask_t)1) << {f}; }}")
    return "\n".join(lines)


def sources(fm, model_name="model"):
    """{file name: text} of every HLS file for FixedModel fm, and the adder tree's levels."""
    adder, levels = _adder_tree(fm.n_trees)
    fields = {
        "fixed_types.h": _header_fields(fm, model_name),
        "kernel.cpp": {"trees": "\n".join(_tree_fn(fm, t) for t in range(fm.n_trees)),
                       "adder_tree": "\n".join(adder), "quantize": _quantize_lines(fm)},
        "emu_abi.cpp": {},
        "tb.cpp": {},
        "run_hls.tcl": {"clock_period_ns": f"{1000.0 / CLOCK_MHZ:.3f}"},
        "v++.cfg": {"clock_mhz": CLOCK_MHZ},
    }
    return {name: render(TEMPLATES / f"{name}.tpl", **f) for name, f in fields.items()}, levels


def generate(fm, out_dir, model_name="model"):
    """Write the HLS sources for FixedModel fm into out_dir/hls; returns (the file list, adder levels)."""
    d = os.path.join(out_dir, "hls")
    os.makedirs(d, exist_ok=True)
    files, levels = sources(fm, model_name)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return [os.path.join(d, n) for n in files], levels


CXXFLAGS = ["-O1", "-std=c++14", "-fPIC", "-fno-strict-aliasing", "-ffp-contract=off"]


def compile_emulation(out_dir):
    """g++ the kernel and the C ABI into DIR/libfpga_sim.so and the testbench into DIR/tb."""
    d = os.path.join(out_dir, "hls")
    lib = os.path.join(out_dir, "libfpga_sim.so")
    tb = os.path.join(out_dir, "tb")
    cxx = os.environ.get("CXX", "g++")
    for cmd in ([cxx, *CXXFLAGS, "-shared", "-fvisibility=hidden", os.path.join(d, "kernel.cpp"),
                 os.path.join(d, "emu_abi.cpp"), "-o", lib],
                [cxx, *CXXFLAGS, os.path.join(d, "kernel.cpp"), os.path.join(d, "tb.cpp"), "-o", tb]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"compiling the HLS emulation failed ({' '.join(cmd[:2])} ...):\n{r.stderr[-3000:]}")
    return lib, tb

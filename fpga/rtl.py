"""An equivalent Verilog pipeline, its Icarus Verilog simulation, and a Yosys resource estimate.

Pipeline (one row per clock, II = 1):
  stage 1  input register (quantized features + missing bits, as the HLS kernel's inputs)
  stage 2  every comparator of every tree at once (x_f < T, or the default direction if missing)
  stage 3  per tree, the leaf the comparator bits select (a mux tree), registered
  stage 4+ a pipelined adder tree, one level per stage; the base margin joins the last level
Latency = 3 + ceil(log2(trees)) cycles (one more for a single tree); the testbench measures it.
The module and its testbench are templates, fpga/templates/rtl/*.v.tpl (engine/render.py); the
functions here compute only their per-model parts.
"""
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from engine.render import render

TEMPLATES = Path(__file__).resolve().parent / "templates" / "rtl"


def latency_cycles(n_trees):
    levels = math.ceil(math.log2(n_trees)) if n_trees > 1 else 0
    return 3 + max(levels, 1)


def _const(v, w):
    v = int(v)
    return f"{w}'sh{(v & ((1 << w) - 1)):x}"


def _inner_nodes(fm):
    """(tree, node) of every split, in tree then node order."""
    tr = fm.trees
    return [(t, int(n)) for t in range(fm.n_trees) for n in np.nonzero(tr.feature[t] >= 0)[0]]


def _comparators(fm):
    """Stage 2: one registered comparator per split (the default direction when missing)."""
    tr = fm.trees
    regs, cmps = [], []
    for t, n in _inner_nodes(fm):
        f = int(tr.feature[t, n])
        dl = "1'b1" if tr.default_left[t, n] else "1'b0"
        regs.append(f"  reg c{t}_{n};")
        cmps.append(f"    c{t}_{n} <= rm[{f}] ? {dl} : (r{f} < {_const(fm.T[t, n], int(fm.width[f]))});")
    return "\n".join(regs), "\n".join(cmps)


def _leaf_select(fm, t, n=0):
    """Stage 3: tree t's leaf as a mux tree over its comparator bits."""
    tr = fm.trees
    if tr.feature[t, n] < 0:
        return _const(fm.leaf_q[t, n], fm.leaf_width)
    return f"(c{t}_{n} ? {_leaf_select(fm, t, int(tr.left[t, n]))} : {_leaf_select(fm, t, int(tr.right[t, n]))})"


def _adder_tree(fm):
    """Stages 4+: pairwise sums of the sign-extended leaves, one level per stage, the base margin
    joining the last; returns (the lines, the name of the final sum)."""
    nt, A, LW = fm.n_trees, fm.acc_bits, fm.leaf_width
    prev = [f"{{{{{A - LW}{{l{t}[{LW - 1}]}}}}, l{t}}}" for t in range(nt)]
    base = _const(fm.base_q, A)
    lines, lvl = [], 0
    if nt == 1:
        lines.append(f"  reg signed [{A - 1}:0] a0_0;")
        lines.append(f"  always @(posedge clk) a0_0 <= {prev[0]} + {base};")
        prev = ["a0_0"]
    while len(prev) > 1:
        nxt = []
        last = len(prev) <= 2
        for i in range(0, len(prev), 2):
            name = f"a{lvl}_{i // 2}"
            lines.append(f"  reg signed [{A - 1}:0] {name};")
            expr = f"{prev[i]} + {prev[i + 1]}" if i + 1 < len(prev) else prev[i]
            if last:
                expr += f" + {base}"
            lines.append(f"  always @(posedge clk) {name} <= {expr};")
            nxt.append(name)
        prev, lvl = nxt, lvl + 1
    return "\n".join(lines), prev[0]


def _module_fields(fm, stages):
    nf, nt, LW = fm.trees.n_features, fm.n_trees, fm.leaf_width
    comparator_regs, comparators = _comparators(fm)
    adder_tree, score = _adder_tree(fm)
    return {
        "nf_msb": nf - 1, "acc_msb": fm.acc_bits - 1, "stages_msb": stages - 1,
        "ports": ",\n".join(f"  input  wire signed [{int(fm.width[f]) - 1}:0] x{f}" for f in range(nf)),
        "input_regs": "\n".join(f"  reg signed [{int(fm.width[f]) - 1}:0] r{f};" for f in range(nf)),
        "input_loads": "\n".join(f"    r{f} <= x{f};" for f in range(nf)),
        "valid_shift": f"    vpipe <= {{vpipe[{stages - 2}:0], in_valid}};" if stages > 1 else "    vpipe <= in_valid;",
        "comparator_regs": comparator_regs, "comparators": comparators,
        "leaf_regs": "\n".join(f"  reg signed [{LW - 1}:0] l{t};" for t in range(nt)),
        "leaf_selects": "\n".join(f"    l{t} <= {_leaf_select(fm, t)};" for t in range(nt)),
        "adder_tree": adder_tree, "score": score,
    }


def generate(fm, out_dir):
    """Write DIR/rtl/engine_tree_rtl.v and its testbench (templates in fpga/templates/rtl/);
    returns (paths, predicted cycles)."""
    d = os.path.join(out_dir, "rtl")
    os.makedirs(d, exist_ok=True)
    stages = latency_cycles(fm.n_trees)
    texts = {"engine_tree_rtl.v": render(TEMPLATES / "engine_tree_rtl.v.tpl", **_module_fields(fm, stages)),
             "tb_engine_tree_rtl.v": _testbench(fm)}
    paths = []
    for name, text in texts.items():
        paths.append(os.path.join(d, name))
        with open(paths[-1], "w") as f:
            f.write(text)
    return paths, stages


def _testbench(fm):
    nf = fm.trees.n_features
    decl = "\n".join(f"  reg signed [{int(fm.width[f]) - 1}:0] mx{f} [0:MAXN-1];\n  reg signed [{int(fm.width[f]) - 1}:0] x{f};"
                     for f in range(nf))
    return render(TEMPLATES / "tb_engine_tree_rtl.v.tpl", nf_msb=nf - 1, acc_msb=fm.acc_bits - 1, decl=decl,
                  loads="\n".join(f'    $readmemh({{dir, "/x{f}.hex"}}, mx{f});' for f in range(nf)),
                  drive="\n".join(f"      x{f} = mx{f}[i];" for f in range(nf)),
                  conns=", ".join(f".x{f}(x{f})" for f in range(nf)))


def simulate(fm, out_dir, X, timeout=1800):
    """Run X through the RTL with Icarus Verilog. Returns (accumulators int64 [n], cycles)."""
    iverilog, vvp = shutil.which("iverilog"), shutil.which("vvp")
    if not iverilog or not vvp:
        raise RuntimeError("Icarus Verilog is not installed (apt-get install iverilog); the RTL cannot be simulated")
    d = os.path.join(out_dir, "rtl")
    q, m = fm.quantize(X)
    for f in range(q.shape[1]):
        w = int(fm.width[f])
        with open(os.path.join(d, f"x{f}.hex"), "w") as fh:
            fh.write("\n".join(f"{(int(v) & ((1 << w) - 1)):x}" for v in q[:, f]) + "\n")
    with open(os.path.join(d, "missing.hex"), "w") as fh:
        fh.write("\n".join(f"{sum(1 << f for f in range(m.shape[1]) if m[i, f]):x}" for i in range(len(m))) + "\n")
    vvp_out = os.path.join(d, "tb.vvp")
    r = subprocess.run([iverilog, "-g2005", "-o", vvp_out, os.path.join(d, "tb_engine_tree_rtl.v"),
                        os.path.join(d, "engine_tree_rtl.v")], capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"iverilog failed:\n{r.stderr[-3000:]}")
    r = subprocess.run([vvp, "-n", vvp_out, f"+dir={d}", f"+n={len(X)}"], capture_output=True, text=True,
                       timeout=timeout, cwd=d)
    if r.returncode:
        raise RuntimeError(f"vvp failed:\n{r.stderr[-3000:]}")
    lines = open(os.path.join(d, "rtl_out.txt")).read().split("\n")
    cycles = int([ln for ln in lines if ln.startswith("cycles")][0].split()[1])
    acc = np.array([int(ln) for ln in lines if ln and not ln.startswith("cycles")], np.int64)
    return acc, cycles


def resources(out_dir, timeout=900):
    """Yosys's generic estimate (synth_xilinx: LUTs, FFs, carry chains), or None if Yosys is absent."""
    yosys = shutil.which("yosys")
    if not yosys:
        return None
    path = os.path.join(out_dir, "rtl", "engine_tree_rtl.v")
    try:
        r = subprocess.run([yosys, "-q", "-p", f"read_verilog {path}; synth_xilinx -top engine_tree_rtl -flatten; "
                            "tee -o /dev/stdout stat"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"yosys did not finish within {timeout} s"}
    if r.returncode:
        return {"error": r.stderr[-500:]}
    cells = {}
    for ln in r.stdout.splitlines():  # `stat` lists "  <count> <cell type>" or "  <cell type> <count>"
        parts = ln.split()
        if len(parts) != 2:
            continue
        a, b = parts
        if b.isdigit() and a[:1].isupper():
            cells[a] = int(b)
        elif a.isdigit() and b[:1].isupper():
            cells[b] = int(a)
    luts = sum(v for k, v in cells.items() if k.startswith("LUT"))
    ffs = sum(v for k, v in cells.items() if k.startswith("FD"))
    return {"luts": luts, "ffs": ffs, "carry4": cells.get("CARRY4", 0) + cells.get("CARRY8", 0), "cells": cells}

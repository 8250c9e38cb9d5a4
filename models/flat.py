"""The `flat` back end: a branch-free tree kernel generated from the model's trees (models/trees.py).

- Each feature is quantised to its rank among that feature's split thresholds:
  q(x) = #{t : t <= x} over the feature's sorted float32 thresholds. Then XGBoost's
  `x < t_j` is exactly `q(x) <= j` (lossless: the same float32 comparisons, done once per
  feature instead of once per node).
- Missing values (NaN): the row is quantised twice, once with NaN -> 0 (compares "left" at every
  node) and once with NaN -> QMAX (compares "right"); each node reads the copy that matches its
  default direction, so there is no branch for missing values either.
- Every tree is padded to a perfect tree of the model's depth: node i's children are 2i+1 and
  2i+2, and a tree is D steps of `i = 2i + 1 + (q[sel[i]] > thr[i])`, with no data-dependent branch;
  sel and thr share one 32-bit word, so a step is one node load and one feature load.
  Padding nodes always go left (thr = QMAX) and repeat their leaf below them.
- Leaves are added in tree order in float32, starting from XGBoost's base margin: that order is
  what makes the result bit-exact. Trees are walked sixteen at a time so their independent
  dependency chains overlap in the CPU.
- The SIMD builds (byte ranks, up to 64 or 16 features) compare a depth-6 block's 63 nodes at
  once; a deeper tree is its top depth-6 levels (compared at once, walked in a register) over
  2^(depth-6) such blocks. `auto` keeps whichever build the validation rows time fastest.
The same C source is built once per entry of BUILDS (AVX-512 VBMI, AVX2, portable x86-64); the
loader picks what the CPU runs (see artifact.py). The source is a template,
models/templates/flat.c.tpl (engine/render.py): generate_c computes only its per-model parts.
"""
import subprocess
from pathlib import Path

import numpy as np

from engine.render import render
from .compile import ABI_VERSION, CC, CompileError, base_margin_c
from .trees import ModelFormatError, read_model

TEMPLATE = Path(__file__).resolve().parent / "templates" / "flat.c.tpl"

BUILDS = {
    # name: (extra flags, cpu flags it needs); fastest first
    "avx512": (["-O2", "-march=x86-64", "-mavx2", "-mbmi", "-mbmi2", "-mavx512f", "-mavx512bw", "-mavx512vbmi",
                "-mtune=generic"], ["avx", "avx2", "bmi1", "bmi2", "avx512f", "avx512bw", "avx512vbmi"]),
    "portable": (["-O2", "-march=x86-64", "-mtune=generic"], []),
    "avx2": (["-O2", "-march=x86-64", "-mavx2", "-mbmi", "-mbmi2", "-mtune=generic"], ["avx", "avx2", "bmi1", "bmi2"]),
}
COMMON_FLAGS = ["-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off", "-fno-fast-math", "-std=gnu99"]
MAX_DEPTH = 10


def read_forest(model_json):
    """The model's trees (models/trees.py), or a CompileError saying why the flat back end cannot take it."""
    try:
        return read_model(model_json)
    except ModelFormatError as e:
        raise CompileError(str(e)) from None


def build_tables(forest, pad_to=None):
    """Quantised, padded, flat arrays for the whole model (numpy), plus the quantisation grid."""
    nf = forest.n_features
    depth = max(1, max(forest.depths()), pad_to or 0)
    if depth > MAX_DEPTH:
        raise CompileError(f"trees of depth {depth}: the flat back end goes up to depth {MAX_DEPTH}")
    thr_sets = [set() for _ in range(nf)]
    for t, n in zip(*np.nonzero(forest.feature >= 0)):  # tree, then node order: which of 0.0/-0.0 a grid keeps
        thr_sets[forest.feature[t, n]].add(forest.threshold[t, n].item())
    grids = [np.array(sorted(s), np.float32) for s in thr_sets]
    kmax = max((len(g) for g in grids), default=0)
    # ranks 0..kmax: a byte holds them up to 255 thresholds (XGBoost's max_bin=256 gives 255),
    # with thr = 255 (padding) never beaten and the NaN -> QMAX copy beating every real node
    qtype, qmax = ("uint8_t", 255) if kmax <= 255 else ("uint16_t", 65535)
    if kmax > 65534:
        raise CompileError(f"a feature has {kmax} distinct thresholds; the flat back end takes up to 65534")
    n_int, n_leaf = (1 << depth) - 1, 1 << depth
    T = forest.n_trees
    sel = np.zeros((T, n_int), np.uint16 if 2 * nf <= 65535 else np.uint32)
    thr = np.full((T, n_int), qmax, np.uint8 if qmax == 255 else np.uint16)
    leaves = np.zeros((T, n_leaf), np.float32)
    rank = [{v: j for j, v in enumerate(g.tolist())} for g in grids]

    def fill(t, i, pos, d):
        f = int(forest.feature[t, i])
        if f < 0:
            lo = pos
            for _ in range(depth - d):  # leftmost descendant at the bottom; padding goes left
                lo = 2 * lo + 1
            span = 1 << (depth - d)
            first = lo - n_int
            leaves[t, first:first + span] = forest.leaf[t, i]
            return
        sel[t, pos] = f + (0 if forest.default_left[t, i] else nf)
        thr[t, pos] = rank[f][forest.threshold[t, i].item()]
        fill(t, int(forest.left[t, i]), 2 * pos + 1, d + 1)
        fill(t, int(forest.right[t, i]), 2 * pos + 2, d + 1)

    for t in range(T):
        fill(t, 0, 0, 0)
    return {"num_feature": nf, "depth": depth, "trees": T, "grids": grids, "qtype": qtype, "qmax": qmax, "kmax": kmax,
            "sel": sel, "thr": thr, "leaves": leaves}


SIMD_DEPTH = 6  # the SIMD kernels' block: 63 nodes = one 64-byte vector (two 32-byte ones)


def simd_ok(tab):
    """The SIMD kernels serve depth 6 to 10 (a deeper tree is its top depth-6 levels, compared at
    once and walked in a register, over 2^(depth-6) depth-6 blocks) and byte ranks (<= 255
    thresholds per feature); AVX-512 VBMI up to 64 features (one vpermb), AVX2 up to 16 (vpshufb
    looks up 16 bytes)."""
    return tab["depth"] <= MAX_DEPTH and tab["num_feature"] <= 64 and tab["qmax"] == 255


def kernels(tab):
    """Which kernel each build runs for this model."""
    simd = simd_ok(tab)
    return {"avx512": "avx512vbmi" if simd else "scalar",
            "avx2": "avx2" if simd and tab["num_feature"] <= 16 else "scalar", "portable": "scalar"}


def _blocked_position(bfs):
    """Blocked layout of a depth-6 tree: the top depth-3 block (BFS nodes 0..6) then the eight
    depth-3 blocks below it, 7 nodes each, each in its own BFS order."""
    lv = (bfs + 1).bit_length() - 1
    k = bfs - ((1 << lv) - 1)
    if lv < 3:
        return bfs
    s, kk = k >> (lv - 3), k & ((1 << (lv - 3)) - 1)
    return 7 + 7 * s + ((1 << (lv - 3)) - 1) + kk


def _split_top(tab):
    """A tree of depth D as its top D-6 levels (2^(D-6)-1 nodes, BFS order) and the 2^(D-6)
    depth-6 blocks below them, left to right: (top sel, top thr, block sel, block thr), the
    blocks as [trees * blocks, 63]."""
    a = tab["depth"] - SIMD_DEPTH
    n_top, n_sub = (1 << a) - 1, 1 << a
    sel, thr = tab["sel"], tab["thr"]
    idx = np.zeros((n_sub, 63), np.int64)  # block s's node r (BFS within the block) in the whole tree
    for r in range(63):
        lv = (r + 1).bit_length() - 1
        k = r - ((1 << lv) - 1)
        for s in range(n_sub):
            idx[s, r] = ((1 << (a + lv)) - 1) + s * (1 << lv) + k
    T = tab["trees"]
    return (sel[:, :n_top], thr[:, :n_top], sel[:, idx].reshape(T * n_sub, 63), thr[:, idx].reshape(T * n_sub, 63))


def simd_tables(tab):
    """Per depth-6 block, 64 bytes each: the feature of every node, thr+1, and a default-left mask;
    the top levels' node words (sel << 8 | thr, as the scalar kernel's)."""
    nf = tab["num_feature"]
    top_sel, top_thr, sel, thr = _split_top(tab)
    U = sel.shape[0]
    feat = np.zeros((U, 64), np.uint8)
    thr1 = np.full((U, 64), 255, np.uint8)  # padding: direction does not matter (same leaf below)
    dleft = np.zeros((U, 64), np.uint8)
    for i in range(63):
        b = _blocked_position(i)
        f = sel[:, i].astype(np.int64)
        feat[:, b] = np.where(f >= nf, f - nf, f)
        dleft[:, b] = np.where(f < nf, 0xFF, 0)
        thr1[:, b] = np.minimum(thr[:, i].astype(np.int64) + 1, 255)
    dmask = np.zeros(U, np.uint64)
    for b in range(64):
        dmask |= (dleft[:, b] != 0).astype(np.uint64) << np.uint64(b)
    walk3 = np.zeros(128, np.uint8)
    for bits in range(128):
        j = 0
        for _ in range(3):
            j = 2 * j + 1 + ((bits >> j) & 1)
        walk3[bits] = j - 7
    top = (top_sel.astype(np.uint32) << 8) | top_thr.astype(np.uint32)
    return feat, thr1, dleft, dmask, walk3, top


def top_columns(top):
    """The top levels' node words by node, 64 trees past the last (a 64-byte load from any tree
    stays inside): which q2 byte (TOPF) and the rank to beat with its sign bit flipped (TOPT), so
    the AVX2 kernel compares 32 trees' node j at once as signed bytes (the AVX-512 one 64, unsigned,
    flipping it back)."""
    T, n_top = top.shape
    f = np.zeros((n_top, T + 64), np.uint8)
    t = np.zeros((n_top, T + 64), np.uint8)
    f[:, :T] = (top >> 8).T
    t[:, :T] = ((top & 255) ^ 0x80).T
    return f, t


def _c_array(ctype, name, values, fmt):
    body = ",".join(fmt(v) for v in values)
    return f"static const {ctype} {name}[{max(1, len(values))}] = {{{body or '0'}}};"


def _f32(v):
    return f"{float(v)!r}f" if np.isfinite(v) else ("INFINITY" if v > 0 else "-INFINITY")


def _node_words(tab):
    """One word per node: which quantised copy to read (high bits) and the rank to beat (low
    bits); 16-bit words when they fit, so more of the model stays in L1. Returns (shift, C type,
    words [trees, nodes])."""
    nf = tab["num_feature"]
    shift = 8 if tab["qmax"] == 255 else 16
    if 2 * nf >= 1 << (32 - shift):
        raise CompileError(f"{nf} features is more than the flat back end packs ({(1 << (32 - shift)) // 2 - 1})")
    wtype = "uint16_t" if shift == 8 and 2 * nf <= 255 else "uint32_t"
    return shift, wtype, (tab["sel"].astype(np.uint32) << shift) | tab["thr"].astype(np.uint32)


def _tables(tab, wtype, node):
    """The model as C arrays: thresholds per feature, node words, leaves, and the SIMD kernels'
    per-block tables when the model has their shape (depth 6 to 10, byte ranks)."""
    grid_all = np.concatenate(tab["grids"]) if tab["grids"] else np.zeros(0, np.float32)
    offs = np.cumsum([0] + [len(g) for g in tab["grids"]])
    out = [_c_array("float", "GRID", grid_all, _f32), _c_array("int32_t", "GOFF", offs, str),
           _c_array(wtype, "NODE", node.ravel(), str), _c_array("float", "LEAF", tab["leaves"].ravel(), _f32)]
    if simd_ok(tab) and tab["depth"] >= SIMD_DEPTH:
        feat, thr1, dleft, dmask, walk3, top = simd_tables(tab)
        aligned = "uint8_t __attribute__((aligned(64)))"
        out += ["#define HAVE_SIMD_TABLES 1", f"#define NTOP {top.shape[1]}", _c_array("uint16_t", "TOP", top.ravel(), str),
                _c_array(aligned, "SFEAT", feat.ravel(), str),
                _c_array(aligned, "STHR1", thr1.ravel(), str), _c_array(aligned, "SDLEFT", dleft.ravel(), str),
                _c_array("uint64_t", "SDMASK", dmask, lambda v: f"{int(v)}ULL"), _c_array("uint8_t", "WALK3", walk3, str)]
        # the AVX-512 kernel's lanes (32+ rows a call): each tree's node bytes in BFS order, padded so
        # that a level's 64-byte load past the last tree's nodes stays inside
        pad = np.zeros(128, np.uint8)
        out += ["#define HAVE_LANE_TABLES 1",
                _c_array(aligned, "LSEL", np.concatenate([tab["sel"].astype(np.uint8).ravel(), pad]), str),
                _c_array(aligned, "LTHR", np.concatenate([tab["thr"].astype(np.uint8).ravel(), pad]), str)]
        if top.shape[1]:
            topf, topt = top_columns(top)
            out += [f"#define NTP {topf.shape[1]}", _c_array(aligned, "TOPF", topf.ravel(), str),
                    _c_array(aligned, "TOPT", topt.ravel(), str)]
    return "\n".join(out)


def generate_c(tab, margin_expr):
    """The kernel's C source: models/templates/flat.c.tpl with this model's sizes and tables."""
    shift, wtype, node = _node_words(tab)
    depth = tab["depth"]
    return render(TEMPLATE, nf=tab["num_feature"], depth=depth, trees=tab["trees"], n_inner=(1 << depth) - 1,
                  n_leaf=1 << depth, qmax=tab["qmax"], shift=shift, qtype=tab["qtype"],
                  tables=_tables(tab, wtype, node), margin_expr=margin_expr, abi_version=ABI_VERSION)


def compile_flat(model_json, out_dir, num_feature):
    """Generate the kernel and build every variant; returns ({build: lib name}, info)."""
    out_dir = Path(out_dir)
    forest = read_forest(model_json)
    tab = build_tables(forest)
    if simd_ok(tab) and tab["depth"] < SIMD_DEPTH:
        tab = build_tables(forest, pad_to=SIMD_DEPTH)  # one kernel shape for every shallow model
    if tab["num_feature"] != num_feature:
        raise CompileError(f"model has {tab['num_feature']} features, expected {num_feature}")
    src_dir = out_dir / "flat"
    src_dir.mkdir(parents=True, exist_ok=True)
    src = src_dir / "flat.c"
    src.write_text(generate_c(tab, base_margin_c(forest.base_score, forest.objective)))
    libs, flags = {}, {}
    for name, (extra, _) in BUILDS.items():
        lib = out_dir / f"libflat_{name}.so"
        cmd = [CC, *extra, *COMMON_FLAGS, "-o", str(lib), str(src), "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}")
        libs[name] = lib.name
        flags[name] = extra + COMMON_FLAGS
    info = {"depth": tab["depth"], "quantisation": tab["qtype"], "simd_kernel": bool(simd_ok(tab)),
            "kernels": kernels(tab),
            "max_thresholds_per_feature": int(tab["kmax"]),
            "flags": flags, "requires": {k: v[1] for k, v in BUILDS.items()}}
    return libs, info

"""The `flat` back end: a branch-free tree kernel generated from the Treelite model.

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
The same C source is built twice: a portable x86-64 library and one compiled for AVX2; the
loader picks what the CPU runs (see artifact.py).
"""
import json
import subprocess
from pathlib import Path

import numpy as np

from .compile import ABI_VERSION, CC, CompileError, _native_output_held, base_margin_c, base_score

BUILDS = {
    # name: (extra flags, cpu flags it needs); fastest first
    "avx512": (["-O2", "-march=x86-64", "-mavx2", "-mbmi", "-mbmi2", "-mavx512f", "-mavx512bw", "-mavx512vbmi",
                "-mtune=generic"], ["avx", "avx2", "bmi1", "bmi2", "avx512f", "avx512bw", "avx512vbmi"]),
    "portable": (["-O2", "-march=x86-64", "-mtune=generic"], []),
    "avx2": (["-O2", "-march=x86-64", "-mavx2", "-mbmi", "-mbmi2", "-mtune=generic"], ["avx", "avx2", "bmi1", "bmi2"]),
}
COMMON_FLAGS = ["-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off", "-fno-fast-math", "-std=gnu99"]
MAX_DEPTH = 10


def _trees_from_treelite(model_json):
    import treelite
    with _native_output_held():
        m = treelite.frontend.load_xgboost_model(str(model_json))
        d = json.loads(m.dump_as_json(pretty_print=False))
    trees = []
    for t in d["trees"]:
        if t.get("has_categorical_split"):
            raise CompileError("categorical splits are not supported by the flat back end")
        nodes = {n["node_id"]: n for n in t["nodes"]}
        for n in t["nodes"]:
            split = "leaf_value" not in n
            if split and (n.get("node_type") != "numerical_test_node" or n.get("comparison_op") != "<"):
                raise CompileError(f"flat back end handles numerical `<` splits only, got {n.get('node_type')} "
                                   f"{n.get('comparison_op')}")
        trees.append(nodes)
    return trees, d["num_feature"]


def _depth(nodes, i=0):
    n = nodes[i]
    if "leaf_value" in n:
        return 0
    return 1 + max(_depth(nodes, n["left_child"]), _depth(nodes, n["right_child"]))


def build_tables(trees, nf, pad_to=None):
    """Quantised, padded, flat arrays for the whole model (numpy), plus the quantisation grid."""
    depth = max(1, max(_depth(t) for t in trees), pad_to or 0)
    if depth > MAX_DEPTH:
        raise CompileError(f"trees of depth {depth}: the flat back end goes up to depth {MAX_DEPTH}")
    thr_sets = [set() for _ in range(nf)]
    for t in trees:
        for n in t.values():
            if "leaf_value" not in n:
                thr_sets[n["split_feature_id"]].add(np.float32(n["threshold"]).item())
    grids = [np.array(sorted(s), np.float32) for s in thr_sets]
    kmax = max((len(g) for g in grids), default=0)
    qtype, qmax = ("uint8_t", 255) if kmax <= 254 else ("uint16_t", 65535)
    if kmax > 65534:
        raise CompileError(f"a feature has {kmax} distinct thresholds; the flat back end takes up to 65534")
    n_int, n_leaf = (1 << depth) - 1, 1 << depth
    T = len(trees)
    sel = np.zeros((T, n_int), np.uint16 if 2 * nf <= 65535 else np.uint32)
    thr = np.full((T, n_int), qmax, np.uint8 if qmax == 255 else np.uint16)
    leaves = np.zeros((T, n_leaf), np.float32)
    rank = [{v: j for j, v in enumerate(g.tolist())} for g in grids]

    def fill(t, nodes, i, pos, d):
        n = nodes[i]
        if "leaf_value" in n:
            lo = pos
            for _ in range(depth - d):  # leftmost descendant at the bottom; padding goes left
                lo = 2 * lo + 1
            span = 1 << (depth - d)
            first = lo - n_int
            leaves[t, first:first + span] = np.float32(n["leaf_value"])
            return
        f = n["split_feature_id"]
        sel[t, pos] = f + (0 if n["default_left"] else nf)
        thr[t, pos] = rank[f][np.float32(n["threshold"]).item()]
        fill(t, nodes, n["left_child"], 2 * pos + 1, d + 1)
        fill(t, nodes, n["right_child"], 2 * pos + 2, d + 1)

    for t, nodes in enumerate(trees):
        fill(t, nodes, 0, 0, 0)
    return {"num_feature": nf, "depth": depth, "trees": T, "grids": grids, "qtype": qtype, "qmax": qmax,
            "sel": sel, "thr": thr, "leaves": leaves}


SIMD_DEPTH = 6  # the SIMD kernels: 63 nodes = one 64-byte vector (two 32-byte ones) per tree


def simd_ok(tab):
    """The SIMD kernels serve depth <= 6 and <= 254 thresholds per feature; AVX-512 VBMI up to 64
    features (one vpermb), AVX2 up to 16 (vpshufb looks up 16 bytes)."""
    return tab["depth"] <= SIMD_DEPTH and tab["num_feature"] <= 64 and tab["qmax"] == 255


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


def simd_tables(tab):
    """Per tree, 64 bytes each: the feature of every node, thr+1, and a default-left mask."""
    nf, T = tab["num_feature"], tab["trees"]
    feat = np.zeros((T, 64), np.uint8)
    thr1 = np.full((T, 64), 255, np.uint8)  # padding: direction does not matter (same leaf below)
    dleft = np.zeros((T, 64), np.uint8)
    sel, thr = tab["sel"], tab["thr"]
    for i in range(sel.shape[1]):
        b = _blocked_position(i)
        f = sel[:, i].astype(np.int64)
        feat[:, b] = np.where(f >= nf, f - nf, f)
        dleft[:, b] = np.where(f < nf, 0xFF, 0)
        thr1[:, b] = np.minimum(thr[:, i].astype(np.int64) + 1, 255)
    dmask = np.zeros(T, np.uint64)
    for b in range(64):
        dmask |= (dleft[:, b] != 0).astype(np.uint64) << np.uint64(b)
    walk3 = np.zeros(128, np.uint8)
    for bits in range(128):
        j = 0
        for _ in range(3):
            j = 2 * j + 1 + ((bits >> j) & 1)
        walk3[bits] = j - 7
    return feat, thr1, dleft, dmask, walk3


def _c_array(ctype, name, values, fmt):
    body = ",".join(fmt(v) for v in values)
    return f"static const {ctype} {name}[{max(1, len(values))}] = {{{body or '0'}}};\n"


def _f32(v):
    return f"{float(v)!r}f" if np.isfinite(v) else ("INFINITY" if v > 0 else "-INFINITY")


def generate_c(tab, margin_expr):
    nf, depth, T = tab["num_feature"], tab["depth"], tab["trees"]
    grid_all = np.concatenate(tab["grids"]) if tab["grids"] else np.zeros(0, np.float32)
    offs = np.cumsum([0] + [len(g) for g in tab["grids"]])
    # one word per node: which quantised copy to read (high bits) and the rank to beat (low bits);
    # 16-bit words when they fit, so more of the model stays in L1
    shift = 8 if tab["qmax"] == 255 else 16
    if 2 * nf >= 1 << (32 - shift):
        raise CompileError(f"{nf} features is more than the flat back end packs ({(1 << (32 - shift)) // 2 - 1})")
    wtype = "uint16_t" if shift == 8 and 2 * nf <= 255 else "uint32_t"
    node = (tab["sel"].astype(np.uint32) << shift) | tab["thr"].astype(np.uint32)
    src = [f"/* flat branch-free kernel: {T} trees, depth {depth}, {nf} features. Generated, do not edit. */\n",
           "#include <math.h>\n#include <stdint.h>\n#define EXPORT __attribute__((visibility(\"default\")))\n",
           f"#define NF {nf}\n#define DEPTH {depth}\n#define NT {T}\n#define NINT {(1 << depth) - 1}\n"
           f"#define NLEAF {1 << depth}\n#define QMAX {tab['qmax']}\n#define SHIFT {shift}\ntypedef {tab['qtype']} q_t;\n"]
    src.append(_c_array("float", "GRID", grid_all, _f32))
    src.append(_c_array("int32_t", "GOFF", offs, str))
    src.append(_c_array(wtype, "NODE", node.ravel(), str))
    src.append(_c_array("float", "LEAF", tab["leaves"].ravel(), _f32))
    use_simd = simd_ok(tab) and depth == SIMD_DEPTH
    if use_simd:
        feat, thr1, dleft, dmask, walk3 = simd_tables(tab)
        src.append("#define HAVE_SIMD_TABLES 1\n")
        src.append(_c_array("uint8_t __attribute__((aligned(64)))", "SFEAT", feat.ravel(), str))
        src.append(_c_array("uint8_t __attribute__((aligned(64)))", "STHR1", thr1.ravel(), str))
        src.append(_c_array("uint8_t __attribute__((aligned(64)))", "SDLEFT", dleft.ravel(), str))
        src.append(_c_array("uint64_t", "SDMASK", dmask, lambda v: f"{int(v)}ULL"))
        src.append(_c_array("uint8_t", "WALK3", walk3, str))
    src.append(f"""
static float g_base_margin;
__attribute__((constructor)) static void engine_init(void) {{ g_base_margin = {margin_expr}; }}
EXPORT int engine_abi_version(void) {{ return {ABI_VERSION}; }}
EXPORT int engine_num_feature(void) {{ return NF; }}

/* rank of x among the feature's sorted thresholds: #{{t <= x}}, branch-free binary search */
static inline int rank_of(float x, int f) {{
  const float* g = GRID + GOFF[f];
  int n = GOFF[f + 1] - GOFF[f], base = 0;
  while (n > 1) {{ int half = n >> 1; base = (g[base + half] <= x) ? base + half : base; n -= half; }}
  return n ? base + (g[base] <= x) : 0;
}}

#define STEP(i, t) do {{ uint32_t w_ = (uint32_t)NODE[(t) * NINT + i]; \
  i = 2 * i + 1 + (q[w_ >> SHIFT] > (q_t)(w_ & QMAX)); }} while (0)

#if defined(HAVE_SIMD_TABLES) && defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
/* One tree: vpermb gathers all 63 node features from the 64-byte rank vector, compares land in
   a mask register, then two WALK3 lookups find the leaf. */
static inline int simd_leaf(__m512i qv, __m512i ff, int t) {{
  __m512i n = _mm512_permutexvar_epi8(_mm512_load_si512((const void*)(SFEAT + t * 64)), qv);
  __mmask64 ge = _mm512_cmpge_epu8_mask(n, _mm512_load_si512((const void*)(STHR1 + t * 64)));
  __mmask64 miss_left = _mm512_cmpeq_epi8_mask(n, ff) & SDMASK[t];  /* missing, default left */
  uint64_t r = (uint64_t)(ge & ~miss_left);
  int top = WALK3[r & 127];
  return top * 8 + WALK3[(r >> (7 + 7 * top)) & 127];
}}

EXPORT void engine_predict(const float* row, float* out) {{
  uint8_t q[64] __attribute__((aligned(64))) = {{0}};  /* NaN -> 255: each node's mask decides */
  for (int f = 0; f < NF; ++f) {{
    float x = row[f];
    q[f] = isnan(x) ? 255 : (uint8_t)rank_of(x, f);
  }}
  __m512i qv = _mm512_load_si512((const void*)q);
  __m512i ff = _mm512_set1_epi8((char)0xFF);
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  for (int t = 0; t < NT; ++t) s += LEAF[t * NLEAF + simd_leaf(qv, ff, t)];
  out[0] = s;
}}
#elif defined(HAVE_SIMD_TABLES) && defined(__AVX2__) && NF <= 16
#include <immintrin.h>
/* One tree: gather its 63 node features with a byte shuffle, compare all at once, then find the
   leaf with two lookups in WALK3 (top depth-3 block, then the block below it). */
static inline int simd_leaf(__m256i qv, __m256i ff, int t) {{
  const __m256i* F = (const __m256i*)(SFEAT + t * 64);
  const __m256i* H = (const __m256i*)(STHR1 + t * 64);
  const __m256i* D = (const __m256i*)(SDLEFT + t * 64);
  __m256i n0 = _mm256_shuffle_epi8(qv, _mm256_load_si256(F));
  __m256i n1 = _mm256_shuffle_epi8(qv, _mm256_load_si256(F + 1));
  __m256i h0 = _mm256_load_si256(H), h1 = _mm256_load_si256(H + 1);
  __m256i ge0 = _mm256_cmpeq_epi8(_mm256_max_epu8(n0, h0), n0);  /* n >= thr + 1: n > thr */
  __m256i ge1 = _mm256_cmpeq_epi8(_mm256_max_epu8(n1, h1), n1);
  __m256i m0 = _mm256_and_si256(_mm256_cmpeq_epi8(n0, ff), _mm256_load_si256(D));  /* missing, default left */
  __m256i m1 = _mm256_and_si256(_mm256_cmpeq_epi8(n1, ff), _mm256_load_si256(D + 1));
  uint64_t r = (uint32_t)_mm256_movemask_epi8(_mm256_andnot_si256(m0, ge0)) |
               ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_andnot_si256(m1, ge1)) << 32);
  int top = WALK3[r & 127];
  return top * 8 + WALK3[(r >> (7 + 7 * top)) & 127];
}}

EXPORT void engine_predict(const float* row, float* out) {{
  uint8_t q[16] __attribute__((aligned(16))) = {{0}};  /* NaN -> 255: each node's mask decides */
  for (int f = 0; f < NF; ++f) {{
    float x = row[f];
    q[f] = isnan(x) ? 255 : (uint8_t)rank_of(x, f);
  }}
  __m256i qv = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)q));
  __m256i ff = _mm256_set1_epi8((char)0xFF);
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  for (int t = 0; t < NT; ++t) s += LEAF[t * NLEAF + simd_leaf(qv, ff, t)];
  out[0] = s;
}}
#else
EXPORT void engine_predict(const float* row, float* out) {{
  q_t q[2 * NF];  /* [0, NF): NaN -> 0 (goes left); [NF, 2NF): NaN -> QMAX (goes right) */
  for (int f = 0; f < NF; ++f) {{
    float x = row[f];
    int nan = isnan(x);
    q_t r = (q_t)(nan ? 0 : rank_of(x, f));
    q[f] = r;
    q[NF + f] = nan ? (q_t)QMAX : r;
  }}
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  int t = 0;
  for (; t + 16 <= NT; t += 16) {{  /* sixteen independent walks in flight */
    int i0 = 0, i1 = 0, i2 = 0, i3 = 0, i4 = 0, i5 = 0, i6 = 0, i7 = 0, i8 = 0, i9 = 0, i10 = 0, i11 = 0, i12 = 0, i13 = 0, i14 = 0, i15 = 0;
    for (int k = 0; k < DEPTH; ++k) {{
      STEP(i0, t + 0); STEP(i1, t + 1); STEP(i2, t + 2); STEP(i3, t + 3);
      STEP(i4, t + 4); STEP(i5, t + 5); STEP(i6, t + 6); STEP(i7, t + 7);
      STEP(i8, t + 8); STEP(i9, t + 9); STEP(i10, t + 10); STEP(i11, t + 11);
      STEP(i12, t + 12); STEP(i13, t + 13); STEP(i14, t + 14); STEP(i15, t + 15);
    }}
    s += LEAF[(t + 0) * NLEAF + i0 - NINT];
    s += LEAF[(t + 1) * NLEAF + i1 - NINT];
    s += LEAF[(t + 2) * NLEAF + i2 - NINT];
    s += LEAF[(t + 3) * NLEAF + i3 - NINT];
    s += LEAF[(t + 4) * NLEAF + i4 - NINT];
    s += LEAF[(t + 5) * NLEAF + i5 - NINT];
    s += LEAF[(t + 6) * NLEAF + i6 - NINT];
    s += LEAF[(t + 7) * NLEAF + i7 - NINT];
    s += LEAF[(t + 8) * NLEAF + i8 - NINT];
    s += LEAF[(t + 9) * NLEAF + i9 - NINT];
    s += LEAF[(t + 10) * NLEAF + i10 - NINT];
    s += LEAF[(t + 11) * NLEAF + i11 - NINT];
    s += LEAF[(t + 12) * NLEAF + i12 - NINT];
    s += LEAF[(t + 13) * NLEAF + i13 - NINT];
    s += LEAF[(t + 14) * NLEAF + i14 - NINT];
    s += LEAF[(t + 15) * NLEAF + i15 - NINT];
  }}
  for (; t < NT; ++t) {{
    int a = 0;
    for (int k = 0; k < DEPTH; ++k) STEP(a, t);
    s += LEAF[t * NLEAF + a - NINT];
  }}
  out[0] = s;
}}
#endif
EXPORT void engine_predict_batch(const float* rows, int64_t n, float* out) {{
  for (int64_t i = 0; i < n; ++i) engine_predict(rows + i * NF, out + i);
}}
""")
    return "".join(src)


def compile_flat(model_json, out_dir, num_feature):
    """Generate the kernel and build every variant; returns ({build: lib name}, info)."""
    out_dir = Path(out_dir)
    trees, nf = _trees_from_treelite(model_json)
    tab = build_tables(trees, nf)
    if simd_ok(tab) and tab["depth"] < SIMD_DEPTH:
        tab = build_tables(trees, nf, pad_to=SIMD_DEPTH)  # one kernel shape for every shallow model
    if tab["num_feature"] != num_feature:
        raise CompileError(f"model has {tab['num_feature']} features, expected {num_feature}")
    p, objective = base_score(model_json)
    src_dir = out_dir / "flat"
    src_dir.mkdir(parents=True, exist_ok=True)
    src = src_dir / "flat.c"
    src.write_text(generate_c(tab, base_margin_c(p, objective)))
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
            "max_thresholds_per_feature": int(max((len(g) for g in tab["grids"]), default=0)),
            "flags": flags, "requires": {k: v[1] for k, v in BUILDS.items()}}
    return libs, info

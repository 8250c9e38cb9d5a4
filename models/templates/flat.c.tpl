/* flat branch-free kernel: ${trees} trees, depth ${depth}, ${nf} features. Generated, do not edit. */
#include <math.h>
#include <stdint.h>
#define EXPORT __attribute__((visibility("default")))
#define NF ${nf}
#define DEPTH ${depth}
#define NT ${trees}
#define NINT ${n_inner}
#define NLEAF ${n_leaf}
#define QMAX ${qmax}
#define SHIFT ${shift}
#define BLOCK 64  /* most rows engine_predict_rows scores together */
typedef ${qtype} q_t;
${tables}

static float g_base_margin;
__attribute__((constructor)) static void engine_init(void) { g_base_margin = ${margin_expr}; }
EXPORT int engine_abi_version(void) { return ${abi_version}; }
EXPORT int engine_num_feature(void) { return NF; }

/* rank of x among the feature's sorted thresholds: #{t <= x}, branch-free binary search */
static inline int rank_of(float x, int f) {
  const float* g = GRID + GOFF[f];
  int n = GOFF[f + 1] - GOFF[f], base = 0;
  while (n > 1) { int half = n >> 1; base = (g[base + half] <= x) ? base + half : base; n -= half; }
  return n ? base + (g[base] <= x) : 0;
}

#define STEP(i, t) do { uint32_t w_ = (uint32_t)NODE[(t) * NINT + i];   i = 2 * i + 1 + (q[w_ >> SHIFT] > (q_t)(w_ & QMAX)); } while (0)

#if defined(HAVE_SIMD_TABLES)
#define NSUB (NTOP + 1)  /* depth-6 blocks under each tree's top levels (1 at depth 6) */
/* Which depth-6 block a row reaches: the top DEPTH-6 levels' nodes compared at once (independent
   loads, q2 as the scalar kernel's two copies), then walked in a register. */
static inline int block_of(const uint8_t* q2, int t) {
  const uint16_t* w = TOP + t * NTOP;
  uint32_t bits = 0;
#pragma GCC unroll 16
  for (int j = 0; j < NTOP; ++j) bits |= (uint32_t)(q2[w[j] >> 8] > (w[j] & 255)) << j;
  int i = 0;
  for (int l = 0; l < DEPTH - 6; ++l) i = 2 * i + 1 + ((bits >> i) & 1);
  return i - NTOP;
}

/* A row's ranks: q (NaN -> 255), a NaN mask per feature, and q2 for the top levels
   ([0, NF): NaN -> 0, goes left; [NF, 2NF): NaN -> 255, goes right). */
static inline int simd_ranks(const float* row, uint8_t* q, uint8_t* nan, uint8_t* q2) {
  int any = 0;
  for (int f = 0; f < NF; ++f) {
    float x = row[f];
    int m = isnan(x);
    uint8_t r = (uint8_t)(m ? 0 : rank_of(x, f));
    q[f] = m ? 255 : r;
    nan[f] = m ? 255 : 0;
    q2[f] = r;
    q2[NF + f] = m ? 255 : r;
    any |= m;
  }
  return any;
}

#if NTOP > 0 && defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
#define TOP_SIMD 64
/* The top levels of 64 trees at once: per top node j, vpermi2b fetches 64 trees' q2 bytes (a row's
   2NF <= 128 of them in two vectors) and one unsigned compare leaves their directions in a mask;
   then from the last top level up, each node's block bits (its own bit, then its left or right
   child's, chosen by its mask), the root's being the block. Same compares as block_of. */
#define TOP_VECTORS __m512i q2lo, q2hi;
#define TOP_BITS (DEPTH - 6)
#define top_vectors(v) do { uint8_t t2_[128] __attribute__((aligned(64))) = {0}; \
  for (int f_ = 0; f_ < 2 * NF; ++f_) t2_[f_] = (v)->q2[f_]; \
  (v)->q2lo = _mm512_load_si512((const void*)t2_); (v)->q2hi = _mm512_load_si512((const void*)(t2_ + 64)); } while (0)

static inline void blocks_top(__m512i q2lo, __m512i q2hi, int t, uint8_t* blk) {
  __mmask64 c[NTOP];
  __m512i val[NTOP];
  const __m512i sgn = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 16
  for (int j = 0; j < NTOP; ++j) {
    __m512i x = _mm512_permutex2var_epi8(q2lo, _mm512_loadu_si512((const void*)(TOPF + j * NTP + t)), q2hi);
    c[j] = _mm512_cmpgt_epu8_mask(x, _mm512_xor_si512(_mm512_loadu_si512((const void*)(TOPT + j * NTP + t)), sgn));
  }
#pragma GCC unroll 16
  for (int n = NTOP - 1; n >= 0; --n) {
    int lvl = 31 - __builtin_clz(n + 1);
    __m512i w = _mm512_maskz_mov_epi8(c[n], _mm512_set1_epi8((char)(1 << (TOP_BITS - 1 - lvl))));
    val[n] = 2 * n + 1 >= NTOP ? w : _mm512_or_si512(w, _mm512_mask_blend_epi8(c[n], val[2 * n + 1], val[2 * n + 2]));
  }
  _mm512_storeu_si512((void*)blk, val[0]);
}
#elif NTOP > 0 && defined(__AVX2__) && NF <= 16
#include <immintrin.h>
#define TOP_SIMD 32
/* The top levels of 32 trees at once (a row's q2 in two 16-byte halves, one vpshufb each): per
   top node j, 32 trees' compares in one vector; then from the last top level up, each node's
   block bits (its own bit, then its left or right child's, chosen by its compare), the root's
   being the block. Same compares as block_of (unsigned bytes, as signed with the sign bit
   flipped), a third of the instructions a row at depth 8 and a quarter at depth 10. (block_of
   stays as the reference bench/flat_top_levels.py builds both against.) */
#define TOP_VECTORS __m256i q2lo, q2hi;
#define TOP_BITS (DEPTH - 6)
#define top_vectors(v) do { uint8_t t2_[32] __attribute__((aligned(16))) = {0}; \
  for (int f_ = 0; f_ < 2 * NF; ++f_) t2_[f_] = (v)->q2[f_]; \
  (v)->q2lo = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)t2_)); \
  (v)->q2hi = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)(t2_ + 16))); } while (0)

static inline void blocks_top(__m256i q2lo, __m256i q2hi, int t, uint8_t* blk) {
  __m256i c[NTOP], val[NTOP];
  const __m256i sgn = _mm256_set1_epi8((char)0x80);
#pragma GCC unroll 16
  for (int j = 0; j < NTOP; ++j) {
    __m256i f = _mm256_loadu_si256((const __m256i*)(TOPF + j * NTP + t));
    __m256i x = _mm256_blendv_epi8(_mm256_shuffle_epi8(q2lo, f), _mm256_shuffle_epi8(q2hi, f), _mm256_slli_epi16(f, 3));
    c[j] = _mm256_cmpgt_epi8(_mm256_xor_si256(x, sgn), _mm256_loadu_si256((const __m256i*)(TOPT + j * NTP + t)));
  }
#pragma GCC unroll 16
  for (int n = NTOP - 1; n >= 0; --n) {
    int lvl = 31 - __builtin_clz(n + 1);
    __m256i w = _mm256_and_si256(c[n], _mm256_set1_epi8((char)(1 << (TOP_BITS - 1 - lvl))));
    val[n] = 2 * n + 1 >= NTOP ? w : _mm256_or_si256(w, _mm256_blendv_epi8(val[2 * n + 1], val[2 * n + 2], c[n]));
  }
  _mm256_storeu_si256((__m256i*)blk, val[0]);
}
#else
#define TOP_VECTORS
#define top_vectors(v) ((void)(v))
#endif
#endif

#if defined(HAVE_SIMD_TABLES) && defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
/* One depth-6 block: vpermb gathers all 63 node features (and their NaN flags) from the row's
   64-byte vectors, compares land in a mask register, then two WALK3 lookups find the leaf. */
typedef struct { __m512i q, nan; uint8_t q2[2 * NF]; int nan_any; TOP_VECTORS } row_t;

static inline int simd_leaf(const row_t* v, int u, const int nan) {
  __m512i feat = _mm512_load_si512((const void*)(SFEAT + u * 64));
  __mmask64 ge = _mm512_cmpge_epu8_mask(_mm512_permutexvar_epi8(feat, v->q),
                                        _mm512_load_si512((const void*)(STHR1 + u * 64)));
  if (nan) ge &= ~(_mm512_movepi8_mask(_mm512_permutexvar_epi8(feat, v->nan)) & SDMASK[u]);  /* missing, default left */
  uint64_t r = (uint64_t)ge;
  int top = WALK3[r & 127];
  return top * 8 + WALK3[(r >> (7 + 7 * top)) & 127];
}

static inline void ranks(const float* row, row_t* v) {
  uint8_t q[64] __attribute__((aligned(64))) = {0}, nan[64] __attribute__((aligned(64))) = {0};
  v->nan_any = simd_ranks(row, q, nan, v->q2);
  v->q = _mm512_load_si512((const void*)q);
  v->nan = _mm512_load_si512((const void*)nan);
  top_vectors(v);
}
#elif defined(HAVE_SIMD_TABLES) && defined(__AVX2__) && NF <= 16
#include <immintrin.h>
/* One depth-6 block: gather its 63 node features (and NaN flags) with byte shuffles, compare all
   at once, then find the leaf with two lookups in WALK3 (top depth-3 block, then the one below). */
typedef struct { __m256i q, nan; uint8_t q2[2 * NF]; int nan_any; TOP_VECTORS } row_t;

static inline int simd_leaf(const row_t* v, int u, const int nan) {
  const __m256i* F = (const __m256i*)(SFEAT + u * 64);
  const __m256i* H = (const __m256i*)(STHR1 + u * 64);
  const __m256i* D = (const __m256i*)(SDLEFT + u * 64);
  __m256i f0 = _mm256_load_si256(F), f1 = _mm256_load_si256(F + 1);
  __m256i n0 = _mm256_shuffle_epi8(v->q, f0);
  __m256i n1 = _mm256_shuffle_epi8(v->q, f1);
  __m256i ge0 = _mm256_cmpeq_epi8(_mm256_max_epu8(n0, _mm256_load_si256(H)), n0);  /* n >= thr + 1: n > thr */
  __m256i ge1 = _mm256_cmpeq_epi8(_mm256_max_epu8(n1, _mm256_load_si256(H + 1)), n1);
  if (nan) {  /* missing, default left */
    ge0 = _mm256_andnot_si256(_mm256_and_si256(_mm256_shuffle_epi8(v->nan, f0), _mm256_load_si256(D)), ge0);
    ge1 = _mm256_andnot_si256(_mm256_and_si256(_mm256_shuffle_epi8(v->nan, f1), _mm256_load_si256(D + 1)), ge1);
  }
  uint64_t r = (uint32_t)_mm256_movemask_epi8(ge0) | ((uint64_t)(uint32_t)_mm256_movemask_epi8(ge1) << 32);
  int top = WALK3[r & 127];
  return top * 8 + WALK3[(r >> (7 + 7 * top)) & 127];
}

static inline void ranks(const float* row, row_t* v) {
  uint8_t q[16] __attribute__((aligned(16))) = {0}, nan[16] __attribute__((aligned(16))) = {0};
  v->nan_any = simd_ranks(row, q, nan, v->q2);
  v->q = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)q));
  v->nan = _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)nan));
  top_vectors(v);
}
#endif

#if defined(HAVE_SIMD_TABLES) && ((defined(__AVX512VBMI__) && defined(__AVX512BW__)) || (defined(__AVX2__) && NF <= 16))
/* nr rows, each scored on the m trees from t0, its leaves added to its s in tree order (u:
   scratch for nr * m). u = t * NSUB + block; its leaves start at u * 64 (NLEAF = NSUB * 64).
   Deeper than 6: three passes, each with short dependency chains so the CPU overlaps many trees
   (the block each reaches from the top levels, in L1; the leaf in it; the sum), measured faster
   than one pass per tree that depth and slower at depth 6. */
#define CHUNK 64  /* trees engine_predict scores a pass at a time */
/* a row with no missing value (the usual case) skips the NaN lookups: one branch a row, not a node */
#define LEAVES(r, body) do { if (v[r].nan_any) { const int nan = 1; body; } else { const int nan = 0; body; } } while (0)
static inline void trees_sum(const row_t* v, int nr, int t0, int m, float* s, int* u) {
#if defined(TOP_SIMD)
  uint8_t blk[CHUNK + TOP_SIMD];
  for (int r = 0; r < nr; ++r) {
    for (int k = 0; k < m; k += TOP_SIMD) blocks_top(v[r].q2lo, v[r].q2hi, t0 + k, blk + k);
    for (int k = 0; k < m; ++k) u[r * m + k] = (t0 + k) * NSUB + blk[k];
  }
#elif NTOP > 0
  for (int r = 0; r < nr; ++r)
    for (int k = 0; k < m; ++k) u[r * m + k] = (t0 + k) * NSUB + block_of(v[r].q2, t0 + k);
#endif
#if NTOP > 0
  for (int r = 0; r < nr; ++r)
    LEAVES(r, for (int k = 0; k < m; ++k) u[r * m + k] = u[r * m + k] * 64 + simd_leaf(&v[r], u[r * m + k], nan));
  for (int r = 0; r < nr; ++r)
    for (int k = 0; k < m; ++k) s[r] += LEAF[u[r * m + k]];
#else
  for (int r = 0; r < nr; ++r)
    LEAVES(r, for (int t = t0; t < t0 + m; ++t) s[r] += LEAF[t * 64 + simd_leaf(&v[r], t, nan)]);
#endif
}

EXPORT void engine_predict(const float* row, float* out) {
  row_t v;
  int u[CHUNK];
  ranks(row, &v);
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  for (int t = 0; t < NT; t += CHUNK) trees_sum(&v, 1, t, NT - t < CHUNK ? NT - t : CHUNK, &s, u);
  out[0] = s;
}

#if defined(HAVE_LANE_TABLES) && defined(__AVX512VBMI__) && defined(__AVX512BW__)
/* 32 or more rows a call: the rows are the lanes. One byte a row per vector (64 rows),
   each tree walked level by level for all of them at once: vpermb looks up every row's node
   feature and rank to beat in the level's nodes (LSEL/LTHR: one 64-byte vector a level, two for
   level 7's 128, four and eight, chosen by the node's upper bits, for 256 and 512), the row's rank of that feature is picked by one compare-and-move a feature
   (2NF when a row has a missing value: the NaN copies are features of their own), and the row's
   node in the next level is 2i + (rank > thr). Leaves are gathered 16 rows at a time and added in
   tree order, so each row's sum is engine_predict's to the bit. About 4 instructions a row and
   tree against simd_leaf's ~20: the batch path's per-row cost. */
#define LANES 64
#define LANE_MIN 32  /* fewer rows a call: trees_sum (a lanes call costs 64 rows: measured even at 23-34) */
#define LANE_TREES 4  /* trees walked at once: their level-by-level chains overlap */
/* Each row's node in its level: lo, the low 8 bits (one byte a row), and hi, the bits above (depth
   9-10 only: levels of 256 and 512 nodes, leaves up to 1024). */
typedef struct { __m512i lo, hi; } lane_t;

/* every row's byte of a level's table (n = 2^l entries from tab) at its node */
static inline __attribute__((always_inline)) __m512i lanes_lookup(const uint8_t* tab, int l, lane_t i) {
#define LOOKUP128(p) _mm512_permutex2var_epi8(_mm512_loadu_si512((const void*)(p)), i.lo, _mm512_loadu_si512((const void*)((p) + 64)))
#define LOOKUP256(p) _mm512_mask_blend_epi8(_mm512_movepi8_mask(i.lo), LOOKUP128(p), LOOKUP128((p) + 128))
  if (l < 7) return _mm512_permutexvar_epi8(i.lo, _mm512_loadu_si512((const void*)tab));
  if (l == 7) return LOOKUP128(tab);
  if (l == 8) return LOOKUP256(tab);
  return _mm512_mask_blend_epi8(_mm512_test_epi8_mask(i.hi, i.hi), LOOKUP256(tab), LOOKUP256(tab + 256));
#undef LOOKUP256
#undef LOOKUP128
}

static inline __attribute__((always_inline)) lane_t lanes_level(const uint8_t* sel, const uint8_t* thr, int l,
                                                                 lane_t i, const __m512i* Q, const int nsel) {
  const __m512i nfv = _mm512_set1_epi8((char)NF), one = _mm512_set1_epi8(1);
  __m512i f = lanes_lookup(sel + (1 << l) - 1, l, i), h = lanes_lookup(thr + (1 << l) - 1, l, i);
  if (nsel == NF) f = _mm512_mask_sub_epi8(f, _mm512_cmpge_epu8_mask(f, nfv), f, nfv);  /* no NaN: one copy */
  __m512i x = Q[0];
#pragma GCC unroll 128
  for (int k = 1; k < nsel; ++k) x = _mm512_mask_mov_epi8(x, _mm512_cmpeq_epi8_mask(f, _mm512_set1_epi8((char)k)), Q[k]);
  if (l >= 8) {  /* the node's index passes 255: lo's top bit moves up into hi */
    __m512i h2 = _mm512_add_epi8(i.hi, i.hi);
    i.hi = _mm512_mask_add_epi8(h2, _mm512_movepi8_mask(i.lo), h2, one);
  }
  __m512i lo2 = _mm512_add_epi8(i.lo, i.lo);
  i.lo = _mm512_mask_add_epi8(lo2, _mm512_cmpgt_epu8_mask(x, h), lo2, one);
  return i;
}

static inline __attribute__((always_inline)) void lanes_leaves(const float* leaf, lane_t i, __m512* acc) {
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m512i k = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(i.lo, j));
    if (DEPTH > 8) k = _mm512_add_epi32(k, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(i.hi, j)), 8));
    acc[j] = _mm512_add_ps(acc[j], _mm512_i32gather_ps(k, leaf, 4));
  }
}

/* m trees from t (m: LANE_TREES, or 1 for the last NT % LANE_TREES) walked at once, their
   level-by-level chains overlapping; their leaves added in tree order */
static inline __attribute__((always_inline)) void lanes_trees(const __m512i* Q, __m512* acc, const int nsel,
                                                              int t, const int m) {
  lane_t i[LANE_TREES];
#pragma GCC unroll 8
  for (int k = 0; k < m; ++k) i[k] = (lane_t){_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 10
  for (int l = 0; l < DEPTH; ++l)
#pragma GCC unroll 8
    for (int k = 0; k < m; ++k) i[k] = lanes_level(LSEL + (t + k) * NINT, LTHR + (t + k) * NINT, l, i[k], Q, nsel);
#pragma GCC unroll 8
  for (int k = 0; k < m; ++k) lanes_leaves(LEAF + (t + k) * NLEAF, i[k], acc);
}

static inline __attribute__((always_inline)) void lanes_walk(const __m512i* Q, __m512* acc, const int nsel) {
  for (int t = 0; t + LANE_TREES <= NT; t += LANE_TREES) lanes_trees(Q, acc, nsel, t, LANE_TREES);
  for (int t = NT - NT % LANE_TREES; t < NT; ++t) lanes_trees(Q, acc, nsel, t, 1);  /* (bounds the compiler sees) */
}

/* the rows' ranks only (simd_ranks: what the lanes read), transposed: Q[f] holds feature f's rank
   for each of the 64 rows, one byte a row (rows past n: 0) */
static void predict_lanes(const float* rows, int n, float* s) {
  uint8_t qt[2 * NF][LANES] __attribute__((aligned(64)));
  __m512i Q[2 * NF];
  __m512 acc[4];
  int nan = 0;
  for (int r = 0; r < n; ++r) {
    uint8_t q[NF], nq[NF], q2[2 * NF];
    nan |= simd_ranks(rows + r * NF, q, nq, q2);
    for (int f = 0; f < 2 * NF; ++f) qt[f][r] = q2[f];
  }
  for (int f = 0; f < 2 * NF; ++f) {
    for (int r = n; r < LANES; ++r) qt[f][r] = 0;
    Q[f] = _mm512_load_si512((const void*)qt[f]);
  }
  for (int j = 0; j < 4; ++j) acc[j] = _mm512_set1_ps(g_base_margin);
  if (nan) lanes_walk(Q, acc, 2 * NF);
  else lanes_walk(Q, acc, NF);
  float o[LANES] __attribute__((aligned(64)));
  for (int j = 0; j < 4; ++j) _mm512_store_ps(o + 16 * j, acc[j]);
  for (int r = 0; r < n; ++r) s[r] = o[r];
}
#endif

/* n <= BLOCK rows: each run of trees (about 16 KiB of tables, so they stay in L1) scored for all
   of them before the next, so a model bigger than the caches comes from memory once per block,
   not once per row; each row's sum in the same order as engine_predict's */
#define TREE_BYTES (NSUB * 192 + NLEAF * 4)
#if defined(TOP_SIMD)
#define RUN TOP_SIMD  /* the blocks_top width: AVX2's 32 measured faster at depth 8-10 than a run that
                         fits L1 (AVX-512's 64 not compared: it runs below LANE_MIN rows only) */
#else
#define RUN (16384 / TREE_BYTES < 4 ? 4 : 16384 / TREE_BYTES > CHUNK ? CHUNK : 16384 / TREE_BYTES)
#endif
static inline void predict_block(const float* rows, int n, float* out) {
#if defined(LANES)
  if (n >= LANE_MIN) {
    predict_lanes(rows, n, out);
    return;
  }
#endif
  row_t v[BLOCK];
  float s[BLOCK];
  int u[BLOCK * RUN];
  for (int r = 0; r < n; ++r) { ranks(rows + r * NF, &v[r]); s[r] = g_base_margin; }
  for (int t0 = 0; t0 < NT; t0 += RUN) trees_sum(v, n, t0, NT - t0 < RUN ? NT - t0 : RUN, s, u);
  for (int r = 0; r < n; ++r) out[r] = s[r];
}
#else
static inline void ranks(const float* row, q_t* q) {
  /* [0, NF): NaN -> 0 (goes left); [NF, 2NF): NaN -> QMAX (goes right) */
  for (int f = 0; f < NF; ++f) {
    float x = row[f];
    int nan = isnan(x);
    q_t r = (q_t)(nan ? 0 : rank_of(x, f));
    q[f] = r;
    q[NF + f] = nan ? (q_t)QMAX : r;
  }
}

/* sixteen trees from t walked at once for one row (independent walks in flight), their leaves
   added to s in tree order */
static inline float walk16(const q_t* q, int t, float s) {
  int i0 = 0, i1 = 0, i2 = 0, i3 = 0, i4 = 0, i5 = 0, i6 = 0, i7 = 0, i8 = 0, i9 = 0, i10 = 0, i11 = 0, i12 = 0, i13 = 0, i14 = 0, i15 = 0;
  for (int k = 0; k < DEPTH; ++k) {
    STEP(i0, t + 0); STEP(i1, t + 1); STEP(i2, t + 2); STEP(i3, t + 3);
    STEP(i4, t + 4); STEP(i5, t + 5); STEP(i6, t + 6); STEP(i7, t + 7);
    STEP(i8, t + 8); STEP(i9, t + 9); STEP(i10, t + 10); STEP(i11, t + 11);
    STEP(i12, t + 12); STEP(i13, t + 13); STEP(i14, t + 14); STEP(i15, t + 15);
  }
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
  return s;
}

static inline float walk1(const q_t* q, int t, float s) {
  int a = 0;
  for (int k = 0; k < DEPTH; ++k) STEP(a, t);
  return s + LEAF[t * NLEAF + a - NINT];
}

/* n <= BLOCK rows: each run of sixteen trees walked for every row while its nodes are in L1 (1-2
   KiB a tree at depth 8), then the next; each row's sum in the same order as engine_predict's */
static inline void predict_block(const float* rows, int n, float* out) {
  q_t qs[BLOCK][2 * NF];
  float s[BLOCK];
  for (int r = 0; r < n; ++r) { ranks(rows + r * NF, qs[r]); s[r] = g_base_margin; }
  int t = 0;
  for (; t + 16 <= NT; t += 16)
    for (int r = 0; r < n; ++r) s[r] = walk16(qs[r], t, s[r]);
  for (; t < NT; ++t)
    for (int r = 0; r < n; ++r) s[r] = walk1(qs[r], t, s[r]);
  for (int r = 0; r < n; ++r) out[r] = s[r];
}

EXPORT void engine_predict(const float* row, float* out) {
  q_t q[2 * NF];
  ranks(row, q);
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  int t = 0;
  for (; t + 16 <= NT; t += 16) s = walk16(q, t, s);
  for (; t < NT; ++t) s = walk1(q, t, s);
  out[0] = s;
}
#endif
/* one row at a time (the build's validation and the kernel choice time this: what the loop calls) */
EXPORT void engine_predict_batch(const float* rows, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) engine_predict(rows + i * NF, out + i);
}

/* n rows scored together, up to BLOCK at a time: the same bits as engine_predict row by row
   (checked at every load), less per row as n grows */
EXPORT void engine_predict_rows(const float* rows, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += BLOCK) predict_block(rows + i * NF, n - i < BLOCK ? (int)(n - i) : BLOCK, out + i);
}

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
#define BLOCK 8  /* rows engine_predict_rows scores together */
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

#if defined(HAVE_SIMD_TABLES) && defined(__AVX512VBMI__) && defined(__AVX512BW__)
#include <immintrin.h>
/* One tree: vpermb gathers all 63 node features from the 64-byte rank vector, compares land in
   a mask register, then two WALK3 lookups find the leaf. */
static inline int simd_leaf_of(__m512i qv, __m512i ff, __m512i feat, __m512i thr1, uint64_t dmask) {
  __m512i n = _mm512_permutexvar_epi8(feat, qv);
  __mmask64 ge = _mm512_cmpge_epu8_mask(n, thr1);
  __mmask64 miss_left = _mm512_cmpeq_epi8_mask(n, ff) & dmask;  /* missing, default left */
  uint64_t r = (uint64_t)(ge & ~miss_left);
  int top = WALK3[r & 127];
  return top * 8 + WALK3[(r >> (7 + 7 * top)) & 127];
}

static inline int simd_leaf(__m512i qv, __m512i ff, int t) {
  return simd_leaf_of(qv, ff, _mm512_load_si512((const void*)(SFEAT + t * 64)),
                      _mm512_load_si512((const void*)(STHR1 + t * 64)), SDMASK[t]);
}

static inline __m512i ranks(const float* row) {
  uint8_t q[64] __attribute__((aligned(64))) = {0};  /* NaN -> 255: each node's mask decides */
  for (int f = 0; f < NF; ++f) {
    float x = row[f];
    q[f] = isnan(x) ? 255 : (uint8_t)rank_of(x, f);
  }
  return _mm512_load_si512((const void*)q);
}

EXPORT void engine_predict(const float* row, float* out) {
  __m512i qv = ranks(row);
  __m512i ff = _mm512_set1_epi8((char)0xFF);
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  for (int t = 0; t < NT; ++t) s += LEAF[t * NLEAF + simd_leaf(qv, ff, t)];
  out[0] = s;
}

/* BLOCK rows: each tree's tables loaded once for all of them; each row's sum in the same order */
static inline void predict_block(const float* rows, float* out) {
  __m512i qv[BLOCK];
  float s[BLOCK];
  for (int r = 0; r < BLOCK; ++r) { qv[r] = ranks(rows + r * NF); s[r] = g_base_margin; }
  __m512i ff = _mm512_set1_epi8((char)0xFF);
  for (int t = 0; t < NT; ++t) {
    __m512i feat = _mm512_load_si512((const void*)(SFEAT + t * 64));
    __m512i thr1 = _mm512_load_si512((const void*)(STHR1 + t * 64));
    uint64_t dmask = SDMASK[t];
    const float* leaf = LEAF + t * NLEAF;
    for (int r = 0; r < BLOCK; ++r) s[r] += leaf[simd_leaf_of(qv[r], ff, feat, thr1, dmask)];
  }
  for (int r = 0; r < BLOCK; ++r) out[r] = s[r];
}
#elif defined(HAVE_SIMD_TABLES) && defined(__AVX2__) && NF <= 16
#include <immintrin.h>
/* One tree: gather its 63 node features with a byte shuffle, compare all at once, then find the
   leaf with two lookups in WALK3 (top depth-3 block, then the block below it). */
typedef struct { __m256i f0, f1, h0, h1, d0, d1; } tree_t;

static inline tree_t tree_at(int t) {
  const __m256i* F = (const __m256i*)(SFEAT + t * 64);
  const __m256i* H = (const __m256i*)(STHR1 + t * 64);
  const __m256i* D = (const __m256i*)(SDLEFT + t * 64);
  tree_t k = {_mm256_load_si256(F), _mm256_load_si256(F + 1), _mm256_load_si256(H), _mm256_load_si256(H + 1),
              _mm256_load_si256(D), _mm256_load_si256(D + 1)};
  return k;
}

static inline int simd_leaf_of(__m256i qv, __m256i ff, const tree_t* k) {
  __m256i n0 = _mm256_shuffle_epi8(qv, k->f0);
  __m256i n1 = _mm256_shuffle_epi8(qv, k->f1);
  __m256i ge0 = _mm256_cmpeq_epi8(_mm256_max_epu8(n0, k->h0), n0);  /* n >= thr + 1: n > thr */
  __m256i ge1 = _mm256_cmpeq_epi8(_mm256_max_epu8(n1, k->h1), n1);
  __m256i m0 = _mm256_and_si256(_mm256_cmpeq_epi8(n0, ff), k->d0);  /* missing, default left */
  __m256i m1 = _mm256_and_si256(_mm256_cmpeq_epi8(n1, ff), k->d1);
  uint64_t r = (uint32_t)_mm256_movemask_epi8(_mm256_andnot_si256(m0, ge0)) |
               ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_andnot_si256(m1, ge1)) << 32);
  int top = WALK3[r & 127];
  return top * 8 + WALK3[(r >> (7 + 7 * top)) & 127];
}

static inline __m256i ranks(const float* row) {
  uint8_t q[16] __attribute__((aligned(16))) = {0};  /* NaN -> 255: each node's mask decides */
  for (int f = 0; f < NF; ++f) {
    float x = row[f];
    q[f] = isnan(x) ? 255 : (uint8_t)rank_of(x, f);
  }
  return _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i*)q));
}

EXPORT void engine_predict(const float* row, float* out) {
  __m256i qv = ranks(row);
  __m256i ff = _mm256_set1_epi8((char)0xFF);
  float s = g_base_margin;  /* XGBoost's order: base margin, then each tree's leaf */
  for (int t = 0; t < NT; ++t) {
    tree_t k = tree_at(t);
    s += LEAF[t * NLEAF + simd_leaf_of(qv, ff, &k)];
  }
  out[0] = s;
}

/* BLOCK rows: each tree's tables loaded once for all of them; each row's sum in the same order */
static inline void predict_block(const float* rows, float* out) {
  __m256i qv[BLOCK];
  float s[BLOCK];
  for (int r = 0; r < BLOCK; ++r) { qv[r] = ranks(rows + r * NF); s[r] = g_base_margin; }
  __m256i ff = _mm256_set1_epi8((char)0xFF);
  for (int t = 0; t < NT; ++t) {
    tree_t k = tree_at(t);
    const float* leaf = LEAF + t * NLEAF;
    for (int r = 0; r < BLOCK; ++r) s[r] += leaf[simd_leaf_of(qv[r], ff, &k)];
  }
  for (int r = 0; r < BLOCK; ++r) out[r] = s[r];
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

/* BLOCK rows: each run of sixteen trees walked for every row while its nodes are in L1 (1-2 KiB a
   tree at depth 8), then the next; each row's sum in the same order as engine_predict's */
static inline void predict_block(const float* rows, float* out) {
  q_t qs[BLOCK][2 * NF];
  float s[BLOCK];
  for (int r = 0; r < BLOCK; ++r) { ranks(rows + r * NF, qs[r]); s[r] = g_base_margin; }
  int t = 0;
  for (; t + 16 <= NT; t += 16)
    for (int r = 0; r < BLOCK; ++r) s[r] = walk16(qs[r], t, s[r]);
  for (; t < NT; ++t)
    for (int r = 0; r < BLOCK; ++r) s[r] = walk1(qs[r], t, s[r]);
  for (int r = 0; r < BLOCK; ++r) out[r] = s[r];
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

/* n rows scored together, BLOCK at a time (the rest one by one): the same bits as engine_predict
   row by row (checked at every load), less per row as n grows */
EXPORT void engine_predict_rows(const float* rows, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) predict_block(rows + i * NF, out + i);
  for (; i < n; ++i) engine_predict(rows + i * NF, out + i);
}

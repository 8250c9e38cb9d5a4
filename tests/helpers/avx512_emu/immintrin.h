/* Plain-C stand-ins for the AVX-512 intrinsics models/templates/flat.c.tpl uses, lane by lane as
   Intel documents them: the AVX-512 kernel's logic built and run on a CPU without AVX-512
   (tests/test_backends.py, test_avx512_kernel_logic_is_exact_without_avx512). */
#ifndef AVX512_EMU_H
#define AVX512_EMU_H
#include <stdint.h>
#include <string.h>
typedef struct { uint8_t b[64]; } __attribute__((aligned(64))) __m512i;
typedef uint64_t __mmask64;
static inline __m512i _mm512_load_si512(const void* p) { __m512i r; memcpy(r.b, p, 64); return r; }
/* vpermb: r[i] = a[idx[i] mod 64] */
static inline __m512i _mm512_permutexvar_epi8(__m512i idx, __m512i a) {
  __m512i r;
  for (int i = 0; i < 64; ++i) r.b[i] = a.b[idx.b[i] & 63];
  return r;
}
static inline __mmask64 _mm512_cmpge_epu8_mask(__m512i a, __m512i b) {
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i) m |= (uint64_t)(a.b[i] >= b.b[i]) << i;
  return m;
}
/* vpmovb2m: each byte's top bit */
static inline __mmask64 _mm512_movepi8_mask(__m512i a) {
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i) m |= (uint64_t)(a.b[i] >> 7) << i;
  return m;
}
/* the top levels' 64 trees at once (blocks_top) */
static inline __m512i _mm512_loadu_si512(const void* p) { return _mm512_load_si512(p); }
static inline void _mm512_storeu_si512(void* p, __m512i a) { memcpy(p, a.b, 64); }
static inline __m512i _mm512_set1_epi8(char c) { __m512i r; memset(r.b, (uint8_t)c, 64); return r; }
static inline __m512i _mm512_xor_si512(__m512i a, __m512i b) {
  for (int i = 0; i < 64; ++i) a.b[i] ^= b.b[i];
  return a;
}
static inline __m512i _mm512_or_si512(__m512i a, __m512i b) {
  for (int i = 0; i < 64; ++i) a.b[i] |= b.b[i];
  return a;
}
/* vpermi2b: r[i] = (idx[i] & 64 ? b : a)[idx[i] mod 64] */
static inline __m512i _mm512_permutex2var_epi8(__m512i a, __m512i idx, __m512i b) {
  __m512i r;
  for (int i = 0; i < 64; ++i) r.b[i] = (idx.b[i] & 64 ? b : a).b[idx.b[i] & 63];
  return r;
}
static inline __mmask64 _mm512_cmpgt_epu8_mask(__m512i a, __m512i b) {
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i) m |= (uint64_t)(a.b[i] > b.b[i]) << i;
  return m;
}
static inline __m512i _mm512_maskz_mov_epi8(__mmask64 k, __m512i a) {
  for (int i = 0; i < 64; ++i) a.b[i] = (k >> i) & 1 ? a.b[i] : 0;
  return a;
}
static inline __m512i _mm512_mask_blend_epi8(__mmask64 k, __m512i a, __m512i b) {
  for (int i = 0; i < 64; ++i) a.b[i] = (k >> i) & 1 ? b.b[i] : a.b[i];
  return a;
}
/* the lanes (predict_lanes: 64 rows a tree at a time) */
typedef struct { uint8_t b[16]; } __m128i;
typedef struct { float f[16]; } __attribute__((aligned(64))) __m512;
static inline __m512i _mm512_setzero_si512(void) { __m512i r; memset(r.b, 0, 64); return r; }
static inline __m512i _mm512_add_epi8(__m512i a, __m512i b) {
  for (int i = 0; i < 64; ++i) a.b[i] = (uint8_t)(a.b[i] + b.b[i]);
  return a;
}
static inline __m512i _mm512_mask_add_epi8(__m512i src, __mmask64 k, __m512i a, __m512i b) {
  for (int i = 0; i < 64; ++i) src.b[i] = (k >> i) & 1 ? (uint8_t)(a.b[i] + b.b[i]) : src.b[i];
  return src;
}
static inline __m512i _mm512_mask_sub_epi8(__m512i src, __mmask64 k, __m512i a, __m512i b) {
  for (int i = 0; i < 64; ++i) src.b[i] = (k >> i) & 1 ? (uint8_t)(a.b[i] - b.b[i]) : src.b[i];
  return src;
}
static inline __m512i _mm512_mask_mov_epi8(__m512i src, __mmask64 k, __m512i a) { return _mm512_mask_blend_epi8(k, src, a); }
static inline __mmask64 _mm512_cmpeq_epi8_mask(__m512i a, __m512i b) {
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i) m |= (uint64_t)(a.b[i] == b.b[i]) << i;
  return m;
}
static inline __m128i _mm512_extracti32x4_epi32(__m512i a, int j) { __m128i r; memcpy(r.b, a.b + 16 * j, 16); return r; }
/* 32-bit lanes, held in the same 64 bytes */
static inline int32_t lane32(__m512i a, int i) { int32_t v; memcpy(&v, a.b + 4 * i, 4); return v; }
static inline void set_lane32(__m512i* a, int i, int32_t v) { memcpy(a->b + 4 * i, &v, 4); }
static inline __m512i _mm512_cvtepu8_epi32(__m128i a) {
  __m512i r;
  for (int i = 0; i < 16; ++i) set_lane32(&r, i, a.b[i]);
  return r;
}
static inline __m512i _mm512_add_epi32(__m512i a, __m512i b) {
  for (int i = 0; i < 16; ++i) set_lane32(&a, i, (int32_t)((uint32_t)lane32(a, i) + (uint32_t)lane32(b, i)));
  return a;
}
static inline __m512i _mm512_slli_epi32(__m512i a, unsigned n) {
  for (int i = 0; i < 16; ++i) set_lane32(&a, i, n > 31 ? 0 : (int32_t)((uint32_t)lane32(a, i) << n));
  return a;
}
static inline __m512 _mm512_i32gather_ps(__m512i idx, const float* base, int scale) {
  __m512 r;
  for (int i = 0; i < 16; ++i) r.f[i] = *(const float*)((const char*)base + (int64_t)lane32(idx, i) * scale);
  return r;
}
static inline __mmask64 _mm512_test_epi8_mask(__m512i a, __m512i b) {
  uint64_t m = 0;
  for (int i = 0; i < 64; ++i) m |= (uint64_t)((a.b[i] & b.b[i]) != 0) << i;
  return m;
}
static inline __m512 _mm512_set1_ps(float x) { __m512 r; for (int i = 0; i < 16; ++i) r.f[i] = x; return r; }
static inline __m512 _mm512_add_ps(__m512 a, __m512 b) { for (int i = 0; i < 16; ++i) a.f[i] += b.f[i]; return a; }
static inline void _mm512_store_ps(float* p, __m512 a) { memcpy(p, a.f, 64); }
#endif

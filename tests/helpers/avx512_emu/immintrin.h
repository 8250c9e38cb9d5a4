/* Plain-C stand-ins for the AVX-512 intrinsics models/templates/flat.c.tpl uses, lane by lane as
   Intel documents them: the AVX-512 kernel's logic built and run on a CPU without AVX-512
   (tests/test_backends.py, test_avx512_kernel_logic_is_exact_without_avx512). */
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

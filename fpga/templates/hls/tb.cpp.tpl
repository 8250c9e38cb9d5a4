// generated testbench: rows.f32 (n x NF float32) and golden.i64 (n int64 accumulators) in,
// prints {"rows": n, "mismatches": k}; exit status 1 on any mismatch. Runs under Vitis csim or g++.
#include <stdio.h>
#include <stdlib.h>
#include "fixed_types.h"
int main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : ".";
  char p[4096];
  snprintf(p, sizeof p, "%s/rows.f32", dir);
  FILE* fr = fopen(p, "rb");
  snprintf(p, sizeof p, "%s/golden.i64", dir);
  FILE* fg = fopen(p, "rb");
  if (!fr || !fg) { fprintf(stderr, "tb: cannot open rows.f32 / golden.i64 in %s\n", dir); return 2; }
  float row[NF];
  int64_t want;
  long n = 0, bad = 0;
  while (fread(row, sizeof(float), NF, fr) == NF && fread(&want, sizeof want, 1, fg) == 1) {
    feat_t x; mask_t m;
    engine_quantize(row, &x, &m);
    if ((int64_t)engine_tree_kernel(x, m) != want) bad++;
    n++;
  }
  printf("{\"rows\": %ld, \"mismatches\": %ld}\n", n, bad);
  return bad ? 1 : 0;
}

// generated: the engine's predictor ABI over the fixed-point kernel (emulation of the card)
#include "fixed_types.h"
extern "C" __attribute__((visibility("default"))) void engine_predict(const float* row, float* out) {
  feat_t x; mask_t m;
  engine_quantize(row, &x, &m);
  const acc_t acc = engine_tree_kernel(x, m);
  out[0] = (float)((double)acc / (double)(1ULL << LEAF_BITS));
}
extern "C" __attribute__((visibility("default"))) void engine_predict_batch(const float* rows, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i++) engine_predict(rows + i * NF, out + i);
}
extern "C" __attribute__((visibility("default"))) int engine_abi_version(void) { return 1; }
extern "C" __attribute__((visibility("default"))) int engine_num_feature(void) { return NF; }
// the raw accumulator, for bit-exact checks against the golden model (int64: ACC_BITS <= 63)
extern "C" __attribute__((visibility("default"))) int64_t engine_predict_acc(const float* row) {
  feat_t x; mask_t m;
  engine_quantize(row, &x, &m);
  return (int64_t)engine_tree_kernel(x, m);
}

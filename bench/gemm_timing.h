// Timing of one CPU GEMM the trainer runs, shared by the benchmarks that report GEMM rates
// (bench/gemm_bench, bench/train_bench).
#pragma once

namespace tnmt::bench {

// c[m, n] = op(a) op(b), stored row-major as a linear's operands are (trans_a: a stored
// [k, m]; trans_b: b stored [n, k]).
struct GemmShape {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
};

// The best milliseconds of `reps` calls (after one untimed call) of the product through the
// GEMM the trainer uses: bfloat16 operands (kernels::cpu::GemmBf16) or float32 (the BLAS via
// GemmNT/GemmNN/GemmTN), on random operands, c 64-byte aligned as the trainer's tensors are.
double BestGemmMs(const GemmShape& s, bool bf16, int reps);

// The best milliseconds of `reps` calls of the engine's product c[m, n] = a[m, k] W^T + bias
// through kernels::cpu::GemmPacked, W [n, k] packed once beforehand (float32, or int8 per
// output column when int8), as a decode step runs its linears. `copies` packed copies of W
// are cycled through, so that W comes from where a model's weights come from in a step (L3 or
// memory) rather than from the cache the previous call left it in. Each activation is zero
// with probability zero_fraction (a ReLU's output is mostly zeros), else uniform in [-1, 1].
double BestPackedGemmMs(int m, int n, int k, bool int8, int copies, int reps, double zero_fraction = 0.0);

// GFLOP/s of a product of this shape taking `ms` milliseconds.
inline double GemmGflops(const GemmShape& s, double ms) { return 2.0 * s.m * s.n * s.k / (ms * 1e6); }

}  // namespace tnmt::bench

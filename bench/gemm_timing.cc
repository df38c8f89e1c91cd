#include "bench/gemm_timing.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>

#include <vector>

#include "kernels/cpu/gemm.h"

namespace tnmt::bench {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

double BestGemmMs(const GemmShape& s, bool bf16, int reps) {
  namespace k = kernels::cpu;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const size_t c_bytes = (static_cast<size_t>(s.m) * s.n * sizeof(float) + 63) / 64 * 64;
  std::unique_ptr<float, FreeDeleter> c(static_cast<float*>(std::aligned_alloc(64, c_bytes)));
  const auto call = [&] {
    if (bf16) {
      k::GemmBf16(s.trans_a, s.trans_b, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, nullptr, false, c.get(), s.n);
    } else if (s.trans_a) {
      k::GemmTN(s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.get(), s.n);
    } else if (s.trans_b) {
      k::GemmNT(s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.get(), s.n);
    } else {
      k::GemmNN(s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.get(), s.n);
    }
  };
  call();  // warm-up (packing buffers, threads)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double BestPackedGemmMs(int m, int n, int k, bool int8, int copies, int reps, double zero_fraction) {
  namespace k_ = kernels::cpu;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::bernoulli_distribution zero(zero_fraction);
  std::vector<float> a(static_cast<size_t>(m) * k), w(static_cast<size_t>(n) * k), bias(n);
  for (float& x : a) x = zero(rng) ? 0.0f : u(rng);
  for (float& x : w) x = u(rng);
  for (float& x : bias) x = u(rng);
  std::vector<k_::PackedMatrix> packed;
  for (int i = 0; i < copies; ++i) {
    packed.push_back(int8 ? k_::PackedMatrix::PackInt8(n, k, w.data(), k) : k_::PackedMatrix::Pack(n, k, w.data(), k));
  }
  std::vector<float> c(static_cast<size_t>(m) * n);
  k_::GemmPacked(m, a.data(), k, packed[0], bias.data(), false, c.data(), n);  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const k_::PackedMatrix& b = packed[(r + 1) % copies];
    const auto t0 = std::chrono::steady_clock::now();
    k_::GemmPacked(m, a.data(), k, b, bias.data(), false, c.data(), n);
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace tnmt::bench

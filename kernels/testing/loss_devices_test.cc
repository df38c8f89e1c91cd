// The training losses (kernels/cpu/loss.h, kernels/cuda/loss.h), each test body run on every
// device (kernels/testing/devices.h) against float64 host loops: the label-smoothed
// cross-entropy (summed loss, summed target NLL, non-pad count, and the logits' gradient in
// place; pad rows zero) and R-Drop's consistency term (the term summed over the pairs and both
// halves' gradients; pad pairs zero). The CPU returns the sums; the GPU adds them into device
// memory, which the test reads back: the same numbers.
//
// Tolerances (each the GPU's earlier bound against the CPU kernel doubled, which covers the
// CPU's own distance from float64): the cross-entropy's sums within 2e-5 relative and R-Drop's
// term within 2e-4 (log-sum-exp in float32 over up to 32000 logits); the gradients within 1e-5
// (cross-entropy) and 1e-4 (R-Drop) per element scaled by 1 + |want|.
//
// On one device only: the bfloat16-gradient variants and the fused cross-entropy with R-Drop
// are CPU kernels (kernels/cpu/backward_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/loss.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/loss.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::MaxScaledError;

// {summed loss, summed NLL, count}.
struct LossSums {
  double loss = 0.0, nll = 0.0, count = 0.0;
};

class LossTest : public testing::DeviceTest {
 protected:
  absl::StatusOr<LossSums> LabelSmoothedCrossEntropy(float* logits, const int32_t* targets, int64_t rows,
                                                     int vocab, float eps, int32_t pad) {
    LossSums s;
    if (cpu()) {
      int64_t count = 0;
      s.loss = cpu::LabelSmoothedCrossEntropy(logits, targets, rows, vocab, eps, pad, &s.nll, &count);
      s.count = static_cast<double>(count);
      return s;
    }
    double* sums = Alloc<double>(3);
    absl::Status st =
        TNMT_IF_CUDA(cuda::LabelSmoothedCrossEntropy(ctx(), logits, targets, rows, vocab, eps, pad, sums));
    if (!st.ok()) return st;
    const std::vector<double> h = Download(sums, 3);
    return LossSums{h[0], h[1], h[2]};
  }
  absl::StatusOr<double> RDropConsistency(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                          float alpha, int32_t pad) {
    if (cpu()) return cpu::RDropConsistency(logits, targets, pairs, vocab, alpha, pad);
    double* sum = Upload(std::vector<double>{0.25});  // the GPU adds to what is there
    absl::Status st =
        TNMT_IF_CUDA(cuda::RDropConsistency(ctx(), logits, targets, pairs, vocab, alpha, pad, sum));
    if (!st.ok()) return st;
    return Download(sum, 1)[0] - 0.25;
  }

};

// log(sum(exp(x))) of a row, in double.
double LogSumExp(const float* x, int n) {
  double mx = -INFINITY, sum = 0.0;
  for (int j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(x[j]));
  for (int j = 0; j < n; ++j) sum += std::exp(x[j] - mx);
  return mx + std::log(sum);
}

TEST_P(LossTest, LabelSmoothedCrossEntropy) {
  struct Case {
    int rows, vocab;
    float eps;
  };
  for (const Case c : {Case{37, 8000, 0.1f}, Case{5, 31, 0.1f}, Case{64, 32000, 0.1f}, Case{3, 2, 0.0f}}) {
    SCOPED_TRACE(absl::StrCat("rows ", c.rows, " vocab ", c.vocab, " eps ", c.eps));
    const int32_t pad = 1;
    const std::vector<float> logits = Random(static_cast<size_t>(c.rows) * c.vocab, 0.0f, 4.0f);
    std::vector<int32_t> targets(c.rows);
    std::uniform_int_distribution<int> tok(0, c.vocab - 1);
    for (int r = 0; r < c.rows; ++r) targets[r] = r % 7 == 3 ? pad : tok(rng_);
    // Target distribution: on at the target, off elsewhere, 0 at pad (sums to 1).
    const double off = c.vocab > 1 ? static_cast<double>(c.eps) / (c.vocab - 1) : 0.0;
    const double on = 1.0 - c.eps + off;
    LossSums want;
    std::vector<double> grad(logits.size(), 0.0);
    for (int r = 0; r < c.rows; ++r) {
      if (targets[r] == pad) continue;
      const float* x = logits.data() + static_cast<size_t>(r) * c.vocab;
      const double lse = LogSumExp(x, c.vocab);
      for (int j = 0; j < c.vocab; ++j) {
        const double q = j == targets[r] ? on : j == pad ? 0.0 : off;
        want.loss -= q * (x[j] - lse);
        grad[static_cast<size_t>(r) * c.vocab + j] = std::exp(x[j] - lse) - q;
      }
      want.nll -= x[targets[r]] - lse;
      want.count += 1.0;
    }
    float* dlogits = Upload(logits);
    const absl::StatusOr<LossSums> got =
        LabelSmoothedCrossEntropy(dlogits, Upload(targets), c.rows, c.vocab, c.eps, pad);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(got->loss, want.loss, 2e-5 * (1.0 + std::fabs(want.loss)));
    EXPECT_NEAR(got->nll, want.nll, 2e-5 * (1.0 + std::fabs(want.nll)));
    EXPECT_EQ(got->count, want.count);
    EXPECT_LE(MaxScaledError(Download(dlogits, logits.size()), grad), 1e-5);
  }
}

TEST_P(LossTest, RDropConsistency) {
  struct Case {
    int pairs, vocab;
  };
  for (const Case c : {Case{37, 8000}, Case{5, 31}, Case{16, 32000}, Case{3, 2}}) {
    SCOPED_TRACE(absl::StrCat("pairs ", c.pairs, " vocab ", c.vocab));
    const int32_t pad = 1;
    const float alpha = 3.0f;
    const double h = 0.5 * alpha;
    const std::vector<float> logits = Random(static_cast<size_t>(2 * c.pairs) * c.vocab, 0.0f, 4.0f);
    std::vector<int32_t> targets(c.pairs);
    std::uniform_int_distribution<int> tok(0, c.vocab - 1);
    for (int r = 0; r < c.pairs; ++r) targets[r] = r % 7 == 3 ? pad : tok(rng_);
    targets.insert(targets.end(), targets.begin(), targets.end());
    double term = 0.0;
    std::vector<double> grad(logits.size(), 0.0);
    for (int r = 0; r < c.pairs; ++r) {
      if (targets[r] == pad) continue;
      const float* x = logits.data() + static_cast<size_t>(r) * c.vocab;
      const float* y = logits.data() + static_cast<size_t>(r + c.pairs) * c.vocab;
      const double lx = LogSumExp(x, c.vocab), ly = LogSumExp(y, c.vocab);
      double kpq = 0.0, kqp = 0.0;  // KL(p || q), KL(q || p)
      for (int j = 0; j < c.vocab; ++j) {
        const double lp = x[j] - lx, lq = y[j] - ly;
        kpq += std::exp(lp) * (lp - lq);
        kqp += std::exp(lq) * (lq - lp);
      }
      term += h * (kpq + kqp);
      for (int j = 0; j < c.vocab; ++j) {
        const double lp = x[j] - lx, lq = y[j] - ly, p = std::exp(lp), q = std::exp(lq), d = lp - lq;
        grad[static_cast<size_t>(r) * c.vocab + j] = h * (p * (d - kpq) + p - q);
        grad[static_cast<size_t>(r + c.pairs) * c.vocab + j] = h * (q * (-d - kqp) + q - p);
      }
    }
    float* dlogits = Upload(logits);
    const absl::StatusOr<double> got =
        RDropConsistency(dlogits, Upload(targets), c.pairs, c.vocab, alpha, pad);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, term, 2e-4 * (1.0 + std::fabs(term)));
    EXPECT_LE(MaxScaledError(Download(dlogits, logits.size()), grad), 1e-4);
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(LossTest);

}  // namespace
}  // namespace tnmt::kernels

// Training kernels against the CPU's (kernels/cpu loss.h, dropout.h, adam.h) on random data:
// the label-smoothed loss and its gradient (pad rows, several vocabularies), dropout
// (bit-identical masks) and Adam
// (several steps, within an ulp or two: the CPU's x86-64-v3/v4 clones may fuse multiply-adds).
#include "kernels/cuda/adam.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/loss.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/loss.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;
using testing::MaxScaledError;

class TrainOpsTest : public CudaTest {};

TEST_F(TrainOpsTest, LabelSmoothedCrossEntropyMatchesCpu) {
  struct Case {
    int rows, vocab;
    float eps;
  };
  for (const Case c : {Case{37, 8000, 0.1f}, Case{5, 31, 0.1f}, Case{64, 32000, 0.1f}, Case{3, 2, 0.0f}}) {
    const int32_t pad = 1;
    std::vector<float> logits = Random(static_cast<size_t>(c.rows) * c.vocab, 0.0f, 4.0f);
    std::vector<int32_t> targets(c.rows);
    std::uniform_int_distribution<int> tok(0, c.vocab - 1);
    for (int r = 0; r < c.rows; ++r) targets[r] = r % 7 == 3 ? pad : tok(rng_);
    float* dlogits = ToDevice(logits);
    int32_t* dtargets = ToDevice(targets);
    double* dsums = Alloc<double>(3);
    ASSERT_TRUE(LabelSmoothedCrossEntropy(*ctx_, dlogits, dtargets, c.rows, c.vocab, c.eps, pad, dsums).ok());
    double nll = 0.0;
    int64_t count = 0;
    const double loss = cpu::LabelSmoothedCrossEntropy(logits.data(), targets.data(), c.rows,
                                                       c.vocab, c.eps, pad, &nll, &count);
    const std::vector<double> sums = ToHost(dsums, 3);
    EXPECT_NEAR(sums[0], loss, 1e-5 * (1.0 + std::fabs(loss))) << c.vocab;
    EXPECT_NEAR(sums[1], nll, 1e-5 * (1.0 + std::fabs(nll))) << c.vocab;
    EXPECT_EQ(sums[2], static_cast<double>(count));
    const double err = MaxScaledError(ToHost(dlogits, logits.size()), logits);
    EXPECT_LE(err, 5e-6) << c.vocab;
    std::printf("cross-entropy rows=%d vocab=%d: loss %.6f vs cpu %.6f, gradient max error %.2e\n",
                c.rows, c.vocab, sums[0], loss, err);
  }
}

TEST_F(TrainOpsTest, RDropConsistencyMatchesCpu) {
  struct Case {
    int pairs, vocab;
  };
  for (const Case c : {Case{37, 8000}, Case{5, 31}, Case{16, 32000}, Case{3, 2}}) {
    const int32_t pad = 1;
    std::vector<float> logits = Random(static_cast<size_t>(2 * c.pairs) * c.vocab, 0.0f, 4.0f);
    std::vector<int32_t> targets(c.pairs);
    std::uniform_int_distribution<int> tok(0, c.vocab - 1);
    for (int r = 0; r < c.pairs; ++r) targets[r] = r % 7 == 3 ? pad : tok(rng_);
    targets.insert(targets.end(), targets.begin(), targets.end());
    float* dlogits = ToDevice(logits);
    int32_t* dtargets = ToDevice(targets);
    const std::vector<double> start = {0.25};
    double* dsum = ToDevice(start);
    ASSERT_TRUE(RDropConsistency(*ctx_, dlogits, dtargets, c.pairs, c.vocab, 3.0f, pad, dsum).ok());
    const double term = cpu::RDropConsistency(logits.data(), targets.data(), c.pairs, c.vocab, 3.0f, pad);
    const double got = ToHost(dsum, 1)[0] - 0.25;  // added to what was there
    EXPECT_NEAR(got, term, 1e-4 * (1.0 + std::fabs(term))) << c.vocab;
    const double err = MaxScaledError(ToHost(dlogits, logits.size()), logits);
    EXPECT_LE(err, 5e-5) << c.vocab;
    std::printf("r-drop pairs=%d vocab=%d: term %.6f vs cpu %.6f, gradient max error %.2e\n", c.pairs, c.vocab,
                got, term, err);
  }
}

TEST_F(TrainOpsTest, DropoutMasksAreBitIdentical) {
  const int64_t n = 1 << 20;
  std::vector<float> x = Random(n);
  float* dx = ToDevice(x);
  ASSERT_TRUE(Dropout(*ctx_, dx, n, 0.3f, 1234, 7).ok());
  cpu::Dropout(x.data(), n, 0.3f, 1234, 7);
  const std::vector<float> got = ToHost(dx, n);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += got[i] != x[i];
  EXPECT_EQ(differ, 0);
}

TEST_F(TrainOpsTest, AdamMatchesCpu) {
  const int64_t n = 100003;
  std::vector<float> w = Random(n), m(n, 0.0f), v(n, 0.0f);
  float* dw = ToDevice(w);
  float* dm = ToDevice(m);
  float* dv = ToDevice(v);
  AdamOptions o;
  o.lr = 7e-4f;
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> g = Random(n, 0.0f, 0.01f);
    o.step = step;
    cpu::AdamUpdate(w.data(), m.data(), v.data(), g.data(), n, 0.5f, o);
    ASSERT_TRUE(AdamUpdate(*ctx_, dw, dm, dv, ToDevice(g), n, 0.5f, o).ok());
  }
  const std::vector<float> gw = ToHost(dw, n), gm = ToHost(dm, n), gv = ToHost(dv, n);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += gw[i] != w[i] || gm[i] != m[i] || gv[i] != v[i];
  EXPECT_LE(MaxScaledError(gw, w), 1e-6);
  EXPECT_LE(MaxScaledError(gm, m), 1e-6);
  EXPECT_LE(MaxScaledError(gv, v), 1e-6);
  std::printf("adam: %lld of %lld elements differ from the CPU in some bit (w max error %.2e)\n",
              static_cast<long long>(differ), static_cast<long long>(n), MaxScaledError(gw, w));
}

}  // namespace
}  // namespace tnmt::kernels::cuda

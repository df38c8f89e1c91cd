// FlatOptimizer over host kernels on a tiny model's layout: Adam over the flat array equals
// kernels/cpu's update element by element (padding stays zero); the gradient norm is computed
// once per set of gradients and divided by the loss scale; buckets are handed out once each,
// in layout order, as their last stage is reached; float16 dynamic scaling halves the scale and
// skips the update (parameters, moments and step unchanged) on non-finite gradients, doubles it
// after `window` applied updates, and fails below kMinLossScale; bad scaling options are refused.
#include "trainer/optim/flat_optimizer.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/adam.h"
#include "trainer/model/parameters.h"
#include "trainer/model/train_test_util.h"

namespace tnmt::train {
namespace {

struct Host {
  std::vector<float> params, grads, m, v;
  int norm_calls = 0, updates = 0;

  explicit Host(int64_t n) : params(n), grads(n), m(n), v(n) {}
  FlatArrays Arrays() { return {params.data(), grads.data(), m.data(), v.data()}; }
  FlatKernels Kernels() {
    FlatKernels k;
    k.sum_of_squares = [this](const float* x, int64_t n) -> absl::StatusOr<double> {
      ++norm_calls;
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
      return s;
    };
    k.adam_update = [](float* w, float* m, float* v, const float* g, int64_t n, float scale,
                       const kernels::AdamOptions& o) {
      kernels::cpu::AdamUpdate(w, m, v, g, n, scale, o);
      return absl::OkStatus();
    };
    k.after_update = [this] {
      ++updates;
      return absl::OkStatus();
    };
    return k;
  }
};

FlatLayout TinyLayout(int64_t bucket_bytes) {
  const ModelConfig c = testing::TinyVariants()[0].config;
  auto w = InitializeWeights(c, 1);
  EXPECT_TRUE(w.ok());
  auto L = FlatLayout::Create(c, *w, bucket_bytes);
  EXPECT_TRUE(L.ok());
  return *std::move(L);
}

// Fills every tensor's elements (not the padding) with a pattern.
void Fill(const FlatLayout& L, std::vector<float>* x, float scale) {
  for (const FlatTensor& t : L.tensors()) {
    for (int64_t i = 0; i < t.numel; ++i) (*x)[t.offset + i] = scale * std::sin(0.37f * (t.offset + i) + 1.0f);
  }
}

TEST(FlatOptimizerTest, AdamOverTheArrayIsTheKernelElementByElement) {
  const FlatLayout L = TinyLayout(1 << 20);
  Host h(L.size());
  Fill(L, &h.params, 0.5f);
  Fill(L, &h.grads, 2.0f);
  std::vector<float> w = h.params, m(L.size()), v(L.size());
  kernels::AdamOptions ao;
  FlatOptimizer opt(&L, h.Arrays(), h.Kernels(), ao, /*step=*/4, LossScaling());
  EXPECT_EQ(opt.loss_scale(), 1.0);
  auto applied = opt.AdamStep(1e-3, 0.25f);
  ASSERT_TRUE(applied.ok() && *applied);
  EXPECT_EQ(opt.step(), 5);
  EXPECT_EQ(h.updates, 1);
  kernels::AdamOptions o = ao;
  o.lr = 1e-3f;
  o.step = 5;
  // Tensor by tensor, as a ModelWeights-shaped optimizer would.
  for (const FlatTensor& t : L.tensors()) {
    kernels::cpu::AdamUpdate(w.data() + t.offset, m.data() + t.offset, v.data() + t.offset,
                             h.grads.data() + t.offset, t.numel, 0.25f, o);
  }
  EXPECT_EQ(0, std::memcmp(w.data(), h.params.data(), sizeof(float) * L.size()));
  EXPECT_EQ(0, std::memcmp(m.data(), h.m.data(), sizeof(float) * L.size()));
  EXPECT_EQ(0, std::memcmp(v.data(), h.v.data(), sizeof(float) * L.size()));
  // Padding between tensors stays zero.
  for (size_t i = 1; i < L.tensors().size(); ++i) {
    const FlatTensor& prev = L.tensors()[i - 1];
    for (int64_t j = prev.offset + prev.numel; j < L.tensors()[i].offset; ++j) ASSERT_EQ(h.params[j], 0.0f);
  }
}

TEST(FlatOptimizerTest, NormOncePerGradientsAndBucketsInOrder) {
  const FlatLayout L = TinyLayout(1);  // a bucket per stage
  ASSERT_GT(L.buckets().size(), 2u);
  Host h(L.size());
  Fill(L, &h.grads, 1.0f);
  double want = 0;
  for (float g : h.grads) want += static_cast<double>(g) * g;
  FlatOptimizer opt(&L, h.Arrays(), h.Kernels(), {}, 0, LossScaling());
  for (int update = 0; update < 2; ++update) {
    opt.BeginStep();
    std::vector<size_t> seen;
    auto record = [&](size_t i, const GradBucket& b) {
      EXPECT_EQ(b.offset, L.buckets()[i].offset);
      seen.push_back(i);
      return absl::OkStatus();
    };
    const int first_stage = L.buckets()[0].last_stage;
    ASSERT_TRUE(opt.ReduceBuckets(first_stage, record).ok());
    ASSERT_EQ(seen, std::vector<size_t>{0});
    ASSERT_TRUE(opt.ReduceBuckets(first_stage, record).ok());  // nothing twice
    ASSERT_TRUE(opt.ReduceBuckets(INT_MAX, record).ok());
    ASSERT_EQ(seen.size(), L.buckets().size());
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);

    const int calls = h.norm_calls;
    auto n1 = opt.GradNorm();
    auto n2 = opt.GradNorm();
    ASSERT_TRUE(n1.ok() && n2.ok());
    EXPECT_EQ(*n1, std::sqrt(want));
    EXPECT_EQ(*n2, *n1);
    EXPECT_EQ(h.norm_calls, calls + 1);
  }
  // A failing reduce stops there and is reported.
  opt.BeginStep();
  auto failed = opt.ReduceBuckets(INT_MAX, [](size_t, const GradBucket&) { return absl::InternalError("link down"); });
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
}

TEST(FlatOptimizerTest, DynamicLossScaling) {
  const FlatLayout L = TinyLayout(1 << 20);
  Host h(L.size());
  Fill(L, &h.params, 0.5f);
  LossScaling s;
  s.dynamic = true;
  s.initial = 64;
  s.window = 2;
  FlatOptimizer opt(&L, h.Arrays(), h.Kernels(), {}, 0, s);
  EXPECT_EQ(opt.loss_scale(), 64.0);

  // Gradients carry the scale: the norm is of the unscaled gradients, and the update divides.
  Fill(L, &h.grads, 64.0f);
  opt.BeginStep();
  double raw = 0;
  for (float g : h.grads) raw += static_cast<double>(g) * g;
  auto norm = opt.GradNorm();
  ASSERT_TRUE(norm.ok());
  EXPECT_DOUBLE_EQ(*norm, std::sqrt(raw) / 64);
  std::vector<float> w = h.params, m(L.size()), v(L.size());
  kernels::AdamOptions o;
  o.lr = 1e-3f;
  o.step = 1;
  kernels::cpu::AdamUpdate(w.data(), m.data(), v.data(), h.grads.data(), L.size(), static_cast<float>(0.5 / 64), o);
  auto applied = opt.AdamStep(1e-3, 0.5f);
  ASSERT_TRUE(applied.ok() && *applied);
  EXPECT_EQ(0, std::memcmp(w.data(), h.params.data(), sizeof(float) * L.size()));
  EXPECT_EQ(opt.loss_scale(), 64.0);

  // Not finite: halved, skipped, nothing changed.
  const std::vector<float> params = h.params, m1 = h.m, v1 = h.v;
  h.grads[L.tensors()[0].offset] = std::numeric_limits<float>::infinity();
  opt.BeginStep();
  applied = opt.AdamStep(1e-3, 0.5f);
  ASSERT_TRUE(applied.ok());
  EXPECT_FALSE(*applied);
  EXPECT_EQ(opt.loss_scale(), 32.0);
  EXPECT_EQ(opt.step(), 1);
  EXPECT_EQ(h.params, params);
  EXPECT_EQ(h.m, m1);
  EXPECT_EQ(h.v, v1);

  // `window` good updates in a row double it (the skip reset the count).
  h.grads[L.tensors()[0].offset] = 1.0f;
  for (int i = 0; i < 2; ++i) {
    opt.BeginStep();
    applied = opt.AdamStep(1e-3, 0.5f);
    ASSERT_TRUE(applied.ok() && *applied);
  }
  EXPECT_EQ(opt.loss_scale(), 64.0);
  EXPECT_EQ(opt.step(), 3);

  // Non-finite forever: halves down to the floor, then fails.
  h.grads[L.tensors()[0].offset] = std::numeric_limits<float>::quiet_NaN();
  absl::StatusOr<bool> r = true;
  int skips = 0;
  while (r.ok()) {
    opt.BeginStep();
    r = opt.AdamStep(1e-3, 0.5f);
    if (r.ok()) {
      EXPECT_FALSE(*r);
      ++skips;
    }
    ASSERT_LT(skips, 100);
  }
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("training diverged"), std::string::npos) << r.status();
  EXPECT_EQ(skips, 20);  // 64 / 2^20 = 1/16384 is the floor; one more halving fails
}

TEST(FlatOptimizerTest, ScalingOptionsAreChecked) {
  LossScaling s;
  EXPECT_TRUE(ValidateLossScaling(s).ok());
  s.window = 0;
  EXPECT_EQ(ValidateLossScaling(s).message(), "loss scale window must be positive");
  s.window = 10;
  s.dynamic = true;
  s.initial = 0;
  EXPECT_NE(ValidateLossScaling(s).message().find("initial loss scale 0 out of range"), std::string::npos);
  s.initial = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ValidateLossScaling(s).ok());
  s.initial = 1.0;
  EXPECT_TRUE(ValidateLossScaling(s).ok());
}

}  // namespace
}  // namespace tnmt::train

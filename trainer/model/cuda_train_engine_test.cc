// The CUDA TrainEngine against the CPU engine (the reference) on tiny models covering every
// wiring option, with dropout on (the masks must match) and padded batches:
// - one forward/backward: the loss (relative 1e-5 in float32, 3e-2 in half precision) and every
//   gradient tensor (relative 2-norm error <= 1e-4 in float32, <= 3e-2 in bfloat16/float16);
// - validation loss; bit-identical gradients when the same batch runs twice;
// - three updates with gradient accumulation and clipping: the losses and the parameters after;
// - float16 loss scaling: an overflow skips the update (nothing changes) and halves the scale;
//   good updates double it after the window;
// - one rank forced through NCCL equals no NCCL bit for bit (the overlapped path on one GPU);
// - with two or more GPUs: two ranks over NCCL (bucketed all-reduce overlapped with the
//   backward) equal one GPU accumulating both ranks' batches, identically on both ranks.
// Skips without a CUDA device ("SKIPPED: no CUDA device").
#include "trainer/model/cuda_train_engine.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"
#include "trainer/model/cpu_train_engine.h"
#include "trainer/model/parameters.h"
#include "trainer/model/train_test_util.h"

namespace tnmt::train {
namespace {

using testing::BitIdentical;
using testing::Clone;
using testing::RandomBatch;
using testing::RelativeError;
using testing::TinyVariants;
using testing::Variant;

struct Tolerance {
  double loss, grad;
};
// Relative errors against the CPU's float32 step. Measured on an H200 (tiny models, one step
// with every dropout on; bench/results/gpu-check-2026-12-04-H200-a.txt): loss float32
// 1e-7, float16 4e-5, bfloat16 7e-4; worst gradient tensor float32 1.3e-6, float16 1.7e-2,
// bfloat16 1.4e-1. bfloat16 keeps 8 significant bits to float16's 11: its gradient bound is
// 8x float16's.
Tolerance TolFor(TrainPrecision p) {
  switch (p) {
    case TrainPrecision::kFloat32: return {1e-5, 1e-4};
    case TrainPrecision::kFloat16: return {1e-3, 3e-2};
    default: return {5e-3, 2.4e-1};
  }
}

class CudaTrainEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = kernels::cuda::testing::NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
    single_ = MakeSingleProcessCollective();
  }

  std::unique_ptr<TrainEngine> Cpu(const ModelConfig& c, const ModelWeights& init) {
    auto p = Clone(c, init);
    EXPECT_TRUE(p.ok()) << p.status();
    auto a = Adam::Create(c, *p);
    TrainEngineOptions o;
    o.collective = single_.get();
    auto e = MakeCpuTrainEngine(c, o, *std::move(p), *std::move(a));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }
  std::unique_ptr<TrainEngine> Gpu(const ModelConfig& c, const ModelWeights& init, TrainPrecision precision,
                                   TrainEngineOptions o = {}) {
    auto p = Clone(c, init);
    EXPECT_TRUE(p.ok()) << p.status();
    auto a = Adam::Create(c, *p);
    if (o.collective == nullptr) o.collective = single_.get();
    o.device.cuda = true;
    o.device.index = 0;
    o.precision = precision;
    auto e = MakeCudaTrainEngine(c, o, *std::move(p), *std::move(a));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }
  // Gradients of an engine, divided by its loss scale.
  ModelWeights Grads(const ModelConfig& c, const ModelWeights& like, TrainEngine* e) {
    auto g = ZerosLike(c, like);
    EXPECT_TRUE(g.ok());
    EXPECT_TRUE(e->CopyGradients(&*g).ok());
    const float inv = static_cast<float>(1.0 / e->loss_scale());
    for (ParamRef& r : TrainableParams(c, &*g)) {
      for (int64_t i = 0; i < r.tensor->numel(); ++i) r.tensor->f32()[i] *= inv;
    }
    return *std::move(g);
  }

  std::unique_ptr<Collective> single_;
};

TrainStepOptions Options(const ModelConfig& c, uint64_t seed, float dropout = 0.1f) {
  TrainStepOptions o;
  o.dropout = dropout;
  o.label_smoothing = c.label_smoothing;
  o.dropout_seed = seed;
  return o;
}

TEST_F(CudaTrainEngineTest, ForwardBackwardMatchesCpu) {
  for (TrainPrecision precision : {TrainPrecision::kFloat32, TrainPrecision::kBFloat16, TrainPrecision::kFloat16}) {
    const Tolerance tol = TolFor(precision);
    for (const Variant& v : TinyVariants()) {
      SCOPED_TRACE(v.name + " " + TrainPrecisionName(precision));
      const ModelConfig& c = v.config;
      auto init = InitializeWeights(c, 21);
      ASSERT_TRUE(init.ok());
      auto cpu = Cpu(c, *init);
      // Activation gradients of the summed loss are O(1) per token: a scale as large as 2^15
      // may overflow float16 here (the trainer would skip the update); this test wants a step.
      TrainEngineOptions o16;
      o16.initial_loss_scale = 1024;
      auto gpu = Gpu(c, *init, precision, o16);
      ASSERT_TRUE(cpu && gpu);
      // Every kind of dropout on: the GPU must drop the CPU's elements. With bfloat16, R-Drop
      // too (its consistency term over a doubled batch).
      const bool rdrop = precision == TrainPrecision::kBFloat16;
      const TrainBatch b = rdrop ? DoubleForRDrop(RandomBatch(c, 8, 4, 9, 7)) : RandomBatch(c, 8, 4, 9, 7);
      TrainStepOptions o = Options(c, 1234);
      o.attention_dropout = 0.1f;
      o.activation_dropout = 0.2f;
      o.rdrop_alpha = rdrop ? 2.0f : 0.0f;
      StepTotals want, got;
      for (TrainEngine* e : {cpu.get(), gpu.get()}) {
        ASSERT_TRUE(e->BeginStep(1).ok());
        ASSERT_TRUE(e->ForwardBackward(b, o).ok());
        auto t = e->AllReduce(false);
        ASSERT_TRUE(t.ok()) << t.status();
        (e == cpu.get() ? want : got) = *t;
      }
      EXPECT_EQ(got.tokens, want.tokens);
      EXPECT_NEAR(got.loss_sum, want.loss_sum, tol.loss * std::fabs(want.loss_sum));
      EXPECT_NEAR(got.nll_sum, want.nll_sum, tol.loss * std::fabs(want.nll_sum));
      EXPECT_FALSE(got.stop);

      ModelWeights gw = Grads(c, *init, cpu.get()), gg = Grads(c, *init, gpu.get());
      auto want_refs = TrainableParams(c, &gw);
      auto got_refs = TrainableParams(c, &gg);
      double worst = 0;
      std::string worst_at;
      for (size_t i = 0; i < want_refs.size(); ++i) {
        const double err = RelativeError(*got_refs[i].tensor, *want_refs[i].tensor);
        EXPECT_LE(err, tol.grad) << want_refs[i].name;
        if (!(err <= worst)) worst = err, worst_at = want_refs[i].name;
      }
      std::printf("%s %s: loss %.9g vs cpu %.9g; worst gradient error %.3g at %s\n", v.name.c_str(),
                  TrainPrecisionName(precision), got.loss_sum, want.loss_sum, worst, worst_at.c_str());

      const TrainBatch vb = RandomBatch(c, 9, 3, 6, 8);
      auto ve = cpu->EvaluateLoss(vb, c.label_smoothing);
      auto vg = gpu->EvaluateLoss(vb, c.label_smoothing);
      ASSERT_TRUE(ve.ok() && vg.ok()) << vg.status();
      EXPECT_EQ(vg->tokens, ve->tokens);
      EXPECT_NEAR(vg->loss_sum, ve->loss_sum, tol.loss * std::fabs(ve->loss_sum));
    }
  }
}

TEST_F(CudaTrainEngineTest, SameBatchTwiceGivesBitIdenticalGradients) {
  const ModelConfig c = TinyVariants()[1].config;
  auto init = InitializeWeights(c, 4);
  ASSERT_TRUE(init.ok());
  for (TrainPrecision precision : {TrainPrecision::kFloat32, TrainPrecision::kBFloat16}) {
    auto gpu = Gpu(c, *init, precision);
    ASSERT_TRUE(gpu);
    const TrainBatch b = RandomBatch(c, 3, 5, 8, 8);
    std::vector<ModelWeights> g;
    std::vector<double> loss;
    for (int run = 0; run < 2; ++run) {
      ASSERT_TRUE(gpu->BeginStep(1).ok());
      ASSERT_TRUE(gpu->ForwardBackward(b, Options(c, 5)).ok());
      auto t = gpu->AllReduce(false);
      ASSERT_TRUE(t.ok());
      loss.push_back(t->loss_sum);
      g.push_back(Grads(c, *init, gpu.get()));
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_TRUE(BitIdentical(c, g[0], g[1])) << TrainPrecisionName(precision);
  }
}

TEST_F(CudaTrainEngineTest, ThreeUpdatesMatchCpu) {
  for (TrainPrecision precision : {TrainPrecision::kFloat32, TrainPrecision::kBFloat16}) {
    const bool fp32 = precision == TrainPrecision::kFloat32;
    for (const Variant& v : TinyVariants()) {
      SCOPED_TRACE(v.name + " " + TrainPrecisionName(precision));
      const ModelConfig& c = v.config;
      auto init = InitializeWeights(c, 33);
      ASSERT_TRUE(init.ok());
      auto cpu = Cpu(c, *init);
      auto gpu = Gpu(c, *init, precision);
      ASSERT_TRUE(cpu && gpu);
      double lr_sum = 0;
      for (int step = 0; step < 3; ++step) {
        const double clip = step == 1 ? 0.5 : 0.0;
        const double lr = 3e-3;
        lr_sum += lr;
        StepTotals totals[2];
        for (int which = 0; which < 2; ++which) {
          TrainEngine* e = which == 0 ? cpu.get() : gpu.get();
          ASSERT_TRUE(e->BeginStep(2).ok());
          for (int a = 0; a < 2; ++a) {
            ASSERT_TRUE(e->ForwardBackward(RandomBatch(c, 50 + 10 * step + a, 3, 8, 7), Options(c, 7 * step + a)).ok());
          }
          auto t = e->AllReduce(false);
          ASSERT_TRUE(t.ok()) << t.status();
          totals[which] = *t;
          float scale = static_cast<float>(1.0 / std::max(1.0, t->tokens));
          if (clip > 0) {
            auto norm = e->GradNorm();
            ASSERT_TRUE(norm.ok());
            const double gnorm = *norm * scale;
            if (gnorm > clip) scale *= static_cast<float>(clip / gnorm);
          }
          auto applied = e->AdamStep(lr, scale);
          ASSERT_TRUE(applied.ok()) << applied.status();
          EXPECT_TRUE(*applied);
        }
        const double loss_tol = fp32 ? (step == 0 ? 1e-5 : 1e-4) : 3e-2;
        EXPECT_NEAR(totals[1].loss_sum, totals[0].loss_sum, loss_tol * totals[0].loss_sum) << "step " << step;
        EXPECT_EQ(totals[1].tokens, totals[0].tokens);
      }
      auto want = cpu->Snapshot();
      auto got = gpu->Snapshot();
      ASSERT_TRUE(want.ok() && got.ok());
      EXPECT_EQ(got->adam_step, 3);
      // Adam's first steps move an element by about lr * sign(g): where g is near zero, rounding
      // may flip the sign. So most elements must agree closely and none may be far off.
      auto w = TrainableParams(c, const_cast<ModelWeights*>(want->params));
      auto g = TrainableParams(c, const_cast<ModelWeights*>(got->params));
      int64_t total = 0, close = 0;
      double worst = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        for (int64_t j = 0; j < w[i].tensor->numel(); ++j) {
          const double a = w[i].tensor->f32()[j], b = g[i].tensor->f32()[j];
          const double err = std::fabs(a - b) - 1e-6 * std::fabs(a);
          ++total;
          close += err <= (fp32 ? 1e-3 : 0.1) * lr_sum;
          worst = std::max(worst, err / lr_sum);
        }
      }
      std::printf("%s %s: after 3 updates %.4f%% of parameters within tolerance; worst %.3g x summed lr\n",
                  v.name.c_str(), TrainPrecisionName(precision), 100.0 * close / total, worst);
      EXPECT_GE(close, (fp32 ? 0.99 : 0.9) * total);
      EXPECT_LE(worst, 3.0);
      auto ve = cpu->EvaluateLoss(RandomBatch(c, 99, 3, 7, 7), c.label_smoothing);
      auto vg = gpu->EvaluateLoss(RandomBatch(c, 99, 3, 7, 7), c.label_smoothing);
      ASSERT_TRUE(ve.ok() && vg.ok());
      EXPECT_NEAR(vg->loss_sum, ve->loss_sum, (fp32 ? 1e-4 : 3e-2) * ve->loss_sum);
    }
  }
}

TEST_F(CudaTrainEngineTest, Float16OverflowSkipsTheUpdateAndHalvesTheScale) {
  const ModelConfig c = TinyVariants()[0].config;
  auto init = InitializeWeights(c, 8);
  ASSERT_TRUE(init.ok());
  TrainEngineOptions o;
  o.initial_loss_scale = std::ldexp(1.0, 40);  // dlogits * 2^40 overflow float16
  auto gpu = Gpu(c, *init, TrainPrecision::kFloat16, o);
  ASSERT_TRUE(gpu);
  EXPECT_EQ(gpu->loss_scale(), std::ldexp(1.0, 40));
  const TrainBatch b = RandomBatch(c, 2, 3, 6, 6);
  ASSERT_TRUE(gpu->BeginStep(1).ok());
  ASSERT_TRUE(gpu->ForwardBackward(b, Options(c, 1)).ok());
  auto t = gpu->AllReduce(false);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(std::isfinite(t->loss_sum));  // the loss itself is fine; its gradient overflowed
  auto norm = gpu->GradNorm();
  ASSERT_TRUE(norm.ok());
  EXPECT_FALSE(std::isfinite(*norm));
  auto applied = gpu->AdamStep(1e-3, 0.01f);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_FALSE(*applied);
  EXPECT_EQ(gpu->loss_scale(), std::ldexp(1.0, 39));
  auto snap = gpu->Snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->adam_step, 0);
  EXPECT_TRUE(BitIdentical(c, *snap->params, *init));
  auto zeros = ZerosLike(c, *init);
  ASSERT_TRUE(zeros.ok());
  EXPECT_TRUE(BitIdentical(c, *snap->adam_m, *zeros));

  // A sane scale: updates apply, and the scale doubles after `loss_scale_window` of them.
  o.initial_loss_scale = 1024;
  o.loss_scale_window = 2;
  gpu = Gpu(c, *init, TrainPrecision::kFloat16, o);
  ASSERT_TRUE(gpu);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(gpu->BeginStep(1).ok());
    ASSERT_TRUE(gpu->ForwardBackward(b, Options(c, step)).ok());
    ASSERT_TRUE(gpu->AllReduce(false).ok());
    auto ok = gpu->AdamStep(1e-3, 0.01f);
    ASSERT_TRUE(ok.ok());
    EXPECT_TRUE(*ok);
    EXPECT_EQ(gpu->loss_scale(), step == 0 ? 1024.0 : 2048.0);
  }
  snap = gpu->Snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->adam_step, 2);
  EXPECT_FALSE(BitIdentical(c, *snap->params, *init));
}

TEST_F(CudaTrainEngineTest, BadDeviceIsAnError) {
  const ModelConfig c = TinyVariants()[0].config;
  auto init = InitializeWeights(c, 8);
  ASSERT_TRUE(init.ok());
  TrainEngineOptions o;
  o.collective = single_.get();
  o.device.cuda = true;
  o.device.index = 4096;
  auto e = MakeCudaTrainEngine(c, o, *init, *Adam::Create(c, *init));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("cuda:4096"), std::string::npos) << e.status();
  o.device.index = -1;  // rank 0 % visible GPUs
  e = MakeCudaTrainEngine(c, o, *init, *Adam::Create(c, *init));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_NE((*e)->Describe().find("cuda:0"), std::string::npos) << (*e)->Describe();
}

// The NCCL path (buckets launched on the second stream during the backward, events, the totals'
// reduction) on one GPU: a one-rank all-reduce returns the rank's own sums, so gradients, totals
// and the updated parameters must equal the engine without NCCL bit for bit.
TEST_F(CudaTrainEngineTest, OneRankOverNcclEqualsNoNccl) {
  const ModelConfig c = TinyVariants()[1].config;
  auto init = InitializeWeights(c, 19);
  ASSERT_TRUE(init.ok());
  const TrainBatch batches[2] = {RandomBatch(c, 80, 3, 8, 6), RandomBatch(c, 81, 4, 5, 9)};
  TrainEngineOptions nccl;
  nccl.force_nccl = true;
  nccl.bucket_bytes = 8 << 10;  // many buckets
  for (TrainPrecision p : {TrainPrecision::kFloat32, TrainPrecision::kBFloat16}) {
    auto plain = Gpu(c, *init, p);
    auto over = Gpu(c, *init, p, nccl);
    ASSERT_TRUE(plain && over);
    StepTotals t[2];
    for (int e = 0; e < 2; ++e) {
      TrainEngine* engine = e == 0 ? plain.get() : over.get();
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE(engine->BeginStep(2).ok());
        for (int m = 0; m < 2; ++m) ASSERT_TRUE(engine->ForwardBackward(batches[m], Options(c, 200 + step * 2 + m)).ok());
        auto totals = engine->AllReduce(false, step == 1);
        ASSERT_TRUE(totals.ok()) << totals.status();
        t[e] = *totals;
        auto applied = engine->AdamStep(1e-3, 0.01f);
        ASSERT_TRUE(applied.ok() && *applied) << applied.status();
      }
    }
    EXPECT_EQ(t[0].loss_sum, t[1].loss_sum);
    EXPECT_EQ(t[0].tokens, t[1].tokens);
    EXPECT_TRUE(t[1].save);
    EXPECT_FALSE(t[1].stop);
    EXPECT_TRUE(BitIdentical(c, Grads(c, *init, plain.get()), Grads(c, *init, over.get())));
    auto a = plain->Snapshot();
    ASSERT_TRUE(a.ok());
    auto pa = Clone(c, *a->params);
    auto b = over->Snapshot();
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(BitIdentical(c, *pa, *b->params));
    std::printf("one rank over NCCL: %s\n", over->Describe().c_str());
  }
}

TEST_F(CudaTrainEngineTest, TwoGpusOverNcclEqualOneGpuAccumulating) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, found " << devices;
  const ModelConfig c = TinyVariants()[1].config;
  auto init = InitializeWeights(c, 17);
  ASSERT_TRUE(init.ok());
  const TrainBatch batches[2] = {RandomBatch(c, 70, 3, 8, 6), RandomBatch(c, 71, 4, 5, 9)};

  // Reference: one GPU, both batches as micro-batches of one update.
  auto one = Gpu(c, *init, TrainPrecision::kFloat32);
  ASSERT_TRUE(one);
  ASSERT_TRUE(one->BeginStep(2).ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(one->ForwardBackward(batches[r], Options(c, 100 + r)).ok());
  auto want_totals = one->AllReduce(false);
  ASSERT_TRUE(want_totals.ok());
  const ModelWeights want = Grads(c, *init, one.get());

  auto group = MakeInProcessGroup(2);
  std::vector<ModelWeights> grads(2), params(2);
  std::vector<StepTotals> totals(2);
  std::vector<std::string> described(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TrainEngineOptions o;
      o.collective = group[r].get();
      o.device.cuda = true;
      o.device.index = r;
      o.bucket_bytes = 8 << 10;  // many buckets
      auto p = Clone(c, *init);
      auto a = Adam::Create(c, *p);
      auto e = MakeCudaTrainEngine(c, o, *std::move(p), *std::move(a));
      ASSERT_TRUE(e.ok()) << e.status();
      described[r] = (*e)->Describe();
      ASSERT_TRUE((*e)->BeginStep(1).ok());
      ASSERT_TRUE((*e)->ForwardBackward(batches[r], Options(c, 100 + r)).ok());
      auto t = (*e)->AllReduce(r == 1);
      ASSERT_TRUE(t.ok()) << t.status();
      totals[r] = *t;
      auto g = ZerosLike(c, *init);
      ASSERT_TRUE((*e)->CopyGradients(&*g).ok());
      grads[r] = *std::move(g);
      auto applied = (*e)->AdamStep(1e-3, 0.01f);
      ASSERT_TRUE(applied.ok() && *applied);
      auto snap = (*e)->Snapshot();
      ASSERT_TRUE(snap.ok());
      auto copy = Clone(c, *snap->params);
      params[r] = *std::move(copy);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(HasFailure());
  std::printf("rank 0: %s\n", described[0].c_str());
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(totals[r].stop);
    EXPECT_EQ(totals[r].tokens, want_totals->tokens);
    EXPECT_NEAR(totals[r].loss_sum, want_totals->loss_sum, 1e-9 * want_totals->loss_sum);
  }
  EXPECT_TRUE(BitIdentical(c, grads[0], grads[1]));
  EXPECT_TRUE(BitIdentical(c, params[0], params[1]));
  auto w = TrainableParams(c, const_cast<ModelWeights*>(&want));
  auto g = TrainableParams(c, &grads[0]);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_LE(RelativeError(*g[i].tensor, *w[i].tensor), 1e-5) << w[i].name;
}

}  // namespace
}  // namespace tnmt::train

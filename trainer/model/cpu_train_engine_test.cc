// The CPU TrainEngine is bit-identical to the direct calls the train loop made before it
// (ForwardBackward, global-norm clipping, Adam) over updates with several micro-batches; two
// ranks agree on gradients, totals and stop requests; the factory refuses what the CPU cannot
// do and, in builds without CUDA, says how to get a CUDA engine.
#include "trainer/model/cpu_train_engine.h"

#include <cmath>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "trainer/model/make_train_engine.h"
#include "trainer/model/parameters.h"
#include "trainer/model/train_test_util.h"
#include "trainer/optim/adam.h"

namespace tnmt::train {
namespace {

using testing::BitIdentical;
using testing::Clone;
using testing::RandomBatch;
using testing::TinyVariants;

TEST(CpuTrainEngineTest, BitIdenticalToDirectCalls) {
  for (const auto& variant : TinyVariants()) {
    SCOPED_TRACE(variant.name);
    const ModelConfig& c = variant.config;
    auto init = InitializeWeights(c, 11);
    ASSERT_TRUE(init.ok()) << init.status();
    // Direct: what train_loop.cc did before the engine.
    auto params = Clone(c, *init);
    auto grads = ZerosLike(c, *init);
    auto adam = Adam::Create(c, *params);
    ASSERT_TRUE(params.ok() && grads.ok() && adam.ok());
    // Engine.
    auto engine_params = Clone(c, *init);
    auto engine_adam = Adam::Create(c, *engine_params);
    ASSERT_TRUE(engine_params.ok() && engine_adam.ok());
    auto single = MakeSingleProcessCollective();
    TrainEngineOptions o;
    o.collective = single.get();
    auto engine = MakeTrainEngine(c, o, *std::move(engine_params), *std::move(engine_adam));
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->Describe(), "cpu, float32");

    for (int step = 0; step < 3; ++step) {
      const double clip = step == 1 ? 1e-3 : 0.0;  // step 1 clips hard
      ZeroAll(c, &*grads);
      double stats[3] = {0, 0, 0};
      ASSERT_TRUE((*engine)->BeginStep(2).ok());
      for (int a = 0; a < 2; ++a) {
        const TrainBatch b = RandomBatch(c, 100 * step + a, 3, 7, 6);
        TrainStepOptions so;
        so.dropout = 0.1f;
        so.label_smoothing = c.label_smoothing;
        so.dropout_seed = 1000 + 10 * step + a;
        auto s = ForwardBackward(c, *params, b, so, 1.0f, &*grads);
        ASSERT_TRUE(s.ok()) << s.status();
        stats[0] += s->loss_sum, stats[1] += s->nll_sum, stats[2] += static_cast<double>(s->tokens);
        ASSERT_TRUE((*engine)->ForwardBackward(b, so).ok());
      }
      auto totals = (*engine)->AllReduce(false);
      ASSERT_TRUE(totals.ok()) << totals.status();
      EXPECT_EQ(totals->loss_sum, stats[0]);
      EXPECT_EQ(totals->nll_sum, stats[1]);
      EXPECT_EQ(totals->tokens, stats[2]);
      EXPECT_FALSE(totals->stop);
      float grad_scale = static_cast<float>(1.0 / std::max(1.0, stats[2]));
      float engine_scale = grad_scale;
      if (clip > 0) {
        const double gnorm = GlobalGradNorm(c, &*grads) * grad_scale;
        auto engine_norm = (*engine)->GradNorm();
        ASSERT_TRUE(engine_norm.ok());
        EXPECT_EQ(*engine_norm * engine_scale, gnorm);
        if (gnorm > clip) grad_scale *= static_cast<float>(clip / gnorm);
        if (*engine_norm * engine_scale > clip) engine_scale *= static_cast<float>(clip / (*engine_norm * engine_scale));
      }
      const double lr = NoamLearningRate(step + 1, c.d_model, {4, 1.0});
      adam->Step(&*params, &*grads, lr, grad_scale);
      auto applied = (*engine)->AdamStep(lr, engine_scale);
      ASSERT_TRUE(applied.ok());
      EXPECT_TRUE(*applied);
      EXPECT_EQ((*engine)->loss_scale(), 1.0);
    }
    auto host = (*engine)->Snapshot();
    ASSERT_TRUE(host.ok());
    EXPECT_EQ(host->adam_step, 3);
    EXPECT_TRUE(BitIdentical(c, *host->params, *params));
    EXPECT_TRUE(BitIdentical(c, *host->adam_m, adam->m()));
    EXPECT_TRUE(BitIdentical(c, *host->adam_v, adam->v()));
    auto copied = ZerosLike(c, *init);
    ASSERT_TRUE((*engine)->CopyGradients(&*copied).ok());
    EXPECT_TRUE(BitIdentical(c, *copied, *grads));

    const TrainBatch vb = RandomBatch(c, 77, 2, 5, 5);
    auto want = EvaluateLoss(c, *params, vb, c.label_smoothing);
    auto got = (*engine)->EvaluateLoss(vb, c.label_smoothing);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->loss_sum, want->loss_sum);
    EXPECT_EQ(got->tokens, want->tokens);
  }
}

TEST(CpuTrainEngineTest, TwoRanksAgreeOnGradientsTotalsAndStop) {
  const ModelConfig c = TinyVariants()[0].config;
  auto init = InitializeWeights(c, 5);
  ASSERT_TRUE(init.ok());
  auto group = MakeInProcessGroup(2);
  std::vector<ModelWeights> grads(2);
  std::vector<StepTotals> totals(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto p = Clone(c, *init);
      auto a = Adam::Create(c, *p);
      ASSERT_TRUE(p.ok() && a.ok());
      TrainEngineOptions o;
      o.collective = group[r].get();
      auto e = MakeTrainEngine(c, o, *std::move(p), *std::move(a));
      ASSERT_TRUE(e.ok()) << e.status();
      ASSERT_TRUE((*e)->BeginStep(1).ok());
      TrainStepOptions so;
      so.dropout_seed = r;
      ASSERT_TRUE((*e)->ForwardBackward(RandomBatch(c, 40 + r, 2, 5, 4), so).ok());
      auto t = (*e)->AllReduce(/*stop=*/r == 1);
      ASSERT_TRUE(t.ok()) << t.status();
      totals[r] = *t;
      auto g = ZerosLike(c, *init);
      ASSERT_TRUE(g.ok());
      ASSERT_TRUE((*e)->CopyGradients(&*g).ok());
      grads[r] = *std::move(g);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(totals[0].stop);
  EXPECT_TRUE(totals[1].stop);
  EXPECT_EQ(totals[0].loss_sum, totals[1].loss_sum);
  EXPECT_EQ(totals[0].tokens, totals[1].tokens);
  EXPECT_GT(totals[0].tokens, 0);
  EXPECT_TRUE(BitIdentical(c, grads[0], grads[1]));
}

TEST(CpuTrainEngineTest, FactoryRefusesHalfPrecisionOnCpuAndExplainsCuda) {
  const ModelConfig c = TinyVariants()[0].config;
  auto init = InitializeWeights(c, 5);
  ASSERT_TRUE(init.ok());
  auto single = MakeSingleProcessCollective();
  TrainEngineOptions o;
  o.collective = single.get();
  o.precision = TrainPrecision::kFloat16;
  auto e = MakeTrainEngine(c, o, *init, *Adam::Create(c, *init));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("float16"), std::string::npos) << e.status();

  o.precision = TrainPrecision::kFloat32;
  o.device.cuda = true;
  o.device.index = 0;
  e = MakeTrainEngine(c, o, *init, *Adam::Create(c, *init));
#ifdef TNMT_CUDA_BUILD
  // With CUDA: an engine when there is a GPU, else an error from the CUDA runtime.
  if (!e.ok()) {
    EXPECT_EQ(std::string(e.status().message()).find("--config=cuda"), std::string::npos);
  }
#else
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(e.status().message(), "this build has no CUDA support; build with --config=cuda");
#endif
}

}  // namespace
}  // namespace tnmt::train

// Golden test of training against an independent float64 PyTorch reference
// (trainer/testdata/train_golden/make_train_golden.py): on a fixed batch for each of the two
// fixture models (post-norm with all embeddings shared; pre-norm gelu with learned positions and
// nothing shared), the summed label-smoothed loss, the NLL, the token count and the gradient of
// every parameter tensor (fairseq names, via ModelWeights::ToTensors); then three Adam steps with
// the paper's schedule on the same batch, through the CPU TrainEngine the trainer runs: the loss
// before each step, the change of every parameter over the three steps, and the loss after them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/runtime/loaded_model.h"
#include "trainer/collective/collective.h"
#include "trainer/model/cpu_train_engine.h"
#include "trainer/model/parameters.h"
#include "trainer/model/transformer_train.h"
#include "trainer/optim/adam.h"

namespace tnmt::train {
namespace {

using json = nlohmann::json;

// Gradients, float32 against float64: |got - want| <= kGradRel |want| + kGradAbs max|want|
// over the tensor (an element that is small because contributions cancel keeps the float32
// rounding of those contributions; sharp attention in the post-norm model's first encoder layer
// gives the largest such errors, about 3e-6 of the tensor's largest gradient).
constexpr double kGradRel = 1e-4;
constexpr double kGradAbs = 1e-5;
// Adam's first update is lr * sign(g) and the next two depend on ratios of an element's
// gradients, so float32 rounding matters for the change of an element only when its gradient is
// near zero: the change over three steps is allowed to differ by kAdamNoise * max|g1| / |g1| of
// the summed learning rates (g1: the step-1 gradient, max over its tensor). Observed: below
// 2e-7 * max|g1| / |g1|.
constexpr double kAdamNoise = 1e-6;
constexpr double kLossRel = 1e-5;

json ReadGolden(const std::string& name) {
  const std::string path = "trainer/testdata/train_golden/" + name + ".json";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TrainBatch BatchFromJson(const json& j) {
  TrainBatch b;
  b.batch = j.at("batch").get<int>();
  b.src_len = j.at("src_len").get<int>();
  b.tgt_len = j.at("tgt_len").get<int>();
  b.src = j.at("src").get<std::vector<int32_t>>();
  b.src_lengths = j.at("src_lengths").get<std::vector<int32_t>>();
  b.tgt_in = j.at("tgt_in").get<std::vector<int32_t>>();
  b.tgt_out = j.at("tgt_out").get<std::vector<int32_t>>();
  return b;
}

// Element values of every tensor, by fairseq name (unfused, one entry per shared tensor).
std::map<std::string, std::vector<double>> Values(const ModelConfig& c, const ModelWeights& w) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, t] : w.ToTensors(c)) out[name].assign(t.f32(), t.f32() + t.numel());
  return out;
}

// The gradient of a key projection's bias is exactly zero: softmax ignores a shift shared by
// all keys (q . b_k is added to every score of a query).
bool IsKeyBias(const std::string& name) {
  const std::string suffix = ".k_proj.bias";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string KeyWeightOf(const std::string& bias) { return bias.substr(0, bias.size() - 4) + "weight"; }

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class TrainGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = ReadGolden(GetParam());
    auto m = LoadModelDirectory(golden_.at("model_dir").get<std::string>());
    ASSERT_TRUE(m.ok()) << m.status();
    config_ = (*m)->config;
    // A private, writable copy of the loaded (shared, immutable) weights.
    auto copy = ZerosLike(config_, (*m)->weights);
    ASSERT_TRUE(copy.ok()) << copy.status();
    params_ = *std::move(copy);
    auto src = TrainableParams(config_, const_cast<ModelWeights*>(&(*m)->weights));
    auto dst = TrainableParams(config_, &params_);
    ASSERT_EQ(src.size(), dst.size());
    for (size_t i = 0; i < src.size(); ++i) {
      ASSERT_EQ(src[i].tensor->numel(), dst[i].tensor->numel());
      std::copy(src[i].tensor->f32(), src[i].tensor->f32() + src[i].tensor->numel(), dst[i].tensor->f32());
    }
    batch_ = BatchFromJson(golden_.at("batch"));
    options_.dropout = golden_.at("dropout").get<float>();
    options_.label_smoothing = golden_.at("label_smoothing").get<float>();
    options_.dropout_seed = 0;
    ASSERT_EQ(options_.dropout, 0.0f);
  }

  json golden_;
  ModelConfig config_;
  ModelWeights params_;
  TrainBatch batch_;
  TrainStepOptions options_;
};

TEST_P(TrainGoldenTest, LossAndEveryGradient) {
  auto grads = ZerosLike(config_, params_);
  ASSERT_TRUE(grads.ok());
  auto stats = ForwardBackward(config_, params_, batch_, options_, 1.0f, &*grads);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const double loss = golden_.at("loss_sum").get<double>(), nll = golden_.at("nll_sum").get<double>();
  EXPECT_NEAR(stats->loss_sum, loss, kLossRel * std::fabs(loss));
  EXPECT_NEAR(stats->nll_sum, nll, kLossRel * std::fabs(nll));
  EXPECT_EQ(stats->tokens, golden_.at("tokens").get<int64_t>());

  const auto got_all = Values(config_, *grads);
  const json& want_all = golden_.at("grads");
  ASSERT_EQ(got_all.size(), want_all.size());
  double worst = 0;
  std::string worst_at;
  for (const auto& [name, got] : got_all) {
    ASSERT_TRUE(want_all.contains(name)) << name;
    const std::vector<double> want = want_all.at(name).get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size()) << name;
    // A key bias's exact gradient is 0: measure its rounding against the key weight's scale.
    const double scale =
        IsKeyBias(name) ? MaxAbs(want_all.at(KeyWeightOf(name)).get<std::vector<double>>()) : MaxAbs(want);
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = std::fabs(got[i] - want[i]);
      const double tol = kGradRel * std::fabs(want[i]) + kGradAbs * scale;
      if (err / tol > worst) worst = err / tol, worst_at = name + "[" + std::to_string(i) + "]";
      if (err > tol && ++bad <= 3) {
        ADD_FAILURE() << "gradient " << name << "[" << i << "]: trainer " << got[i] << ", reference "
                      << want[i] << " (largest |reference| in the tensor " << scale << ")";
      }
    }
    EXPECT_EQ(bad, 0) << name << ": " << bad << " of " << got.size() << " gradient elements differ";
  }
  std::printf("%s: largest gradient error %.3f of the tolerance, at %s\n", GetParam().c_str(), worst,
              worst_at.c_str());
}

TEST_P(TrainGoldenTest, ThreeAdamSteps) {
  const json& adam = golden_.at("adam");
  ASSERT_EQ(adam.at("d_model").get<int>(), config_.d_model);
  ASSERT_EQ(adam.at("grad_scale").get<std::string>(), "1/tokens");
  kernels::AdamOptions ao;
  ao.beta1 = adam.at("beta1").get<float>();
  ao.beta2 = adam.at("beta2").get<float>();
  ao.eps = adam.at("eps").get<float>();
  ScheduleOptions sched;
  sched.warmup_steps = adam.at("warmup_steps").get<int64_t>();
  sched.scale = adam.at("schedule_scale").get<double>();

  // The trainer's own update path: the CPU TrainEngine (flat arrays, FlatOptimizer).
  const auto before = Values(config_, params_);
  auto optimizer = Adam::Create(config_, params_, ao);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  auto single = MakeSingleProcessCollective();
  TrainEngineOptions eo;
  eo.collective = single.get();
  auto engine = MakeCpuTrainEngine(config_, eo, params_, *std::move(optimizer));
  ASSERT_TRUE(engine.ok()) << engine.status();
  double lr_sum = 0;
  ASSERT_EQ(adam.at("steps").size(), 3u);
  int64_t done = 0;
  for (const json& s : adam.at("steps")) {
    const int64_t step = s.at("step").get<int64_t>();
    ASSERT_EQ(step, done + 1);
    ASSERT_TRUE((*engine)->BeginStep(1).ok());
    ASSERT_TRUE((*engine)->ForwardBackward(batch_, options_).ok());
    auto stats = (*engine)->AllReduce(false);
    ASSERT_TRUE(stats.ok()) << stats.status();
    const double want_loss = s.at("loss_sum").get<double>();
    EXPECT_NEAR(stats->loss_sum, want_loss, kLossRel * want_loss) << "before step " << step;
    EXPECT_NEAR(stats->nll_sum, s.at("nll_sum").get<double>(), kLossRel * want_loss) << "before step " << step;
    const double lr = NoamLearningRate(step, config_.d_model, sched);
    EXPECT_NEAR(lr, s.at("lr").get<double>(), 1e-12 * lr) << "step " << step;
    lr_sum += lr;
    auto applied = (*engine)->AdamStep(lr, 1.0f / static_cast<float>(stats->tokens));
    ASSERT_TRUE(applied.ok() && *applied);
    ++done;
  }
  auto host = (*engine)->Snapshot();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->adam_step, 3);
  params_ = *host->params;

  // The change of every parameter over the three steps, within 1e-3 of the summed learning
  // rates plus kAdamNoise's allowance for near-zero gradients (at most 2: any change is at most
  // about the summed rates). Key biases have an exactly zero gradient, so the trainer's change
  // follows float32 noise (harmless: they do not change the model's function) and gets the
  // largest allowance. An exactly zero step-1 gradient (an embedding row or position the batch
  // does not use, a dead relu unit) is exactly zero in float32 too: no allowance.
  const auto after = Values(config_, params_);
  const double unit = golden_.at("update_unit").get<double>();
  const json& want_all = golden_.at("update");
  const json& g1_all = golden_.at("grads");
  ASSERT_EQ(after.size(), want_all.size());
  double worst = 0;
  std::string worst_at;
  int loose = 0, total = 0;
  for (const auto& [name, w] : after) {
    ASSERT_TRUE(want_all.contains(name)) << name;
    const std::vector<int64_t> want = want_all.at(name).get<std::vector<int64_t>>();
    const std::vector<double> g1 = g1_all.at(name).get<std::vector<double>>();
    const std::vector<double>& w0 = before.at(name);
    ASSERT_EQ(w.size(), want.size()) << name;
    ASSERT_EQ(g1.size(), want.size()) << name;
    const double gscale = MaxAbs(g1);
    int bad = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const double got = w[i] - w0[i];
      const double ref = want[i] * unit;
      double cond = 0;
      if (IsKeyBias(name)) {
        cond = 2;
      } else if (g1[i] != 0) {
        cond = std::min(2.0, kAdamNoise * gscale / std::fabs(g1[i]));
      }
      loose += cond > 0.1;
      ++total;
      // Plus the float32 rounding of the weights before and after.
      const double tol = lr_sum * (1e-3 + cond) + 2.5e-7 * (std::fabs(w0[i]) + std::fabs(w[i]));
      const double err = std::fabs(got - ref);
      if (!IsKeyBias(name) && err / tol > worst) worst = err / tol, worst_at = name + "[" + std::to_string(i) + "]";
      if (err > tol && ++bad <= 3) {
        ADD_FAILURE() << "update " << name << "[" << i << "]: trainer moved it by " << got << ", reference by "
                      << ref << " (step-1 gradient " << g1[i] << ", largest in the tensor " << gscale
                      << ", summed lr " << lr_sum << ")";
      }
    }
    EXPECT_EQ(bad, 0) << name << ": " << bad << " of " << w.size() << " updates differ";
  }
  std::printf("%s: largest update error (key biases aside) %.3f of the tolerance, at %s; %d of %d elements compared loosely\n",
              GetParam().c_str(), worst, worst_at.c_str(), loose, total);
  EXPECT_LT(loose, total / 20);

  auto final_stats = EvaluateLoss(config_, params_, batch_, options_.label_smoothing);
  ASSERT_TRUE(final_stats.ok()) << final_stats.status();
  const double final_loss = adam.at("final_loss_sum").get<double>();
  EXPECT_NEAR(final_stats->loss_sum, final_loss, kLossRel * final_loss);
  EXPECT_NEAR(final_stats->nll_sum, adam.at("final_nll_sum").get<double>(), kLossRel * final_loss);
}

INSTANTIATE_TEST_SUITE_P(Models, TrainGoldenTest, ::testing::Values("tiny", "tiny_prenorm"));

}  // namespace
}  // namespace tnmt::train

// Test helpers; see test_util.h.
#include "trainer/checkpoint/test_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <gtest/gtest.h>

#include "engine/core/status_macros.h"
#include "engine/runtime/loaded_model.h"

namespace tnmt::testing {

namespace fs = std::filesystem;

namespace {

absl::StatusOr<Tensor> RandomLike(const Tensor& like, std::mt19937* rng, bool positive) {
  TNMT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(like.shape()));
  std::normal_distribution<float> normal(0.0f, 0.5f);
  float* x = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float r = normal(*rng);
    x[i] = positive ? r * r + 1e-12f : r;
  }
  if (!positive && t.numel() >= 2) {
    x[0] = -0.0f;
    x[1] = 1e-40f;  // subnormal
  }
  return t;
}

}  // namespace

absl::StatusOr<Checkpoint> RandomTinyCheckpoint(int64_t step, uint32_t seed) {
  TNMT_ASSIGN_OR_RETURN(auto model, LoadModelDirectory(kTinyModelDir));
  Checkpoint c;
  c.config = model->config;
  c.spm_model_path = std::string(kTinyModelDir) + "/spm.model";
  std::mt19937 rng(seed);
  for (const auto& [name, t] : model->weights.ToTensors(model->config)) {
    TNMT_ASSIGN_OR_RETURN(c.params[name], RandomLike(t, &rng, false));
    TNMT_ASSIGN_OR_RETURN(c.adam_m[name], RandomLike(t, &rng, false));
    TNMT_ASSIGN_OR_RETURN(c.adam_v[name], RandomLike(t, &rng, true));
  }
  c.state.step = step;
  c.state.epoch = 3;
  c.state.batch_in_epoch = 12345;
  c.state.seed = 0xfedcba9876543210ull;  // above INT64_MAX
  c.state.tokens_seen = 0.1 + 0.2 + static_cast<double>(seed);
  c.state.elapsed_seconds = 1.0 / 3.0;
  c.state.loss_scale = 5e-324;  // smallest subnormal double
  c.state.extra = {{"rng", "mt19937 state 1 2 3"}, {"lr", 7e-4}, {"shard", seed}};
  return c;
}

std::string FreshTestDir(const std::string& suffix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(::testing::TempDir()) /
                       (std::string(info->test_suite_name()) + "." + info->name() + suffix);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

bool BitEqual(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return std::memcmp(a.data<char>(), b.data<char>(), a.numel() * DTypeSize(a.dtype())) == 0;
}

void WriteFileForTest(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

std::string ReadFileForTest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace tnmt::testing

// End to end on the real demo model (models/demo, English->German): the Translator on the GPU
// against the CPU on the first 50 sentences of its test set (testdata/). float32 must give
// the CPU's translations exactly (same ids, scores within 1e-4); float16 and bfloat16 at least
// 90% identical sentences. Beam 4 (the model's default) and greedy. Skips without a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/runtime/loaded_model.h"
#include "engine/runtime/translator.h"
#include "kernels/cuda/test_util.h"

namespace tnmt {
namespace {

constexpr char kModel[] = "models/demo";
constexpr char kSentences[] = "engine/cuda/testdata/test_2016_flickr_50.en";

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using Results = std::vector<absl::StatusOr<LineTranslation>>;

absl::StatusOr<Results> TranslateOn(const Placement& p, const std::vector<std::string>& lines,
                                    int beam) {
  auto model = LoadModelDirectory(kModel, p);
  if (!model.ok()) return model.status();
  Translator t(*model);
  TranslationOptions o;
  o.decode = DecodeOptions::FromConfig((*model)->config);
  o.decode.beam_size = beam;
  return t.Translate(lines, o);
}

struct Case {
  DType dtype;
  int beam;
};

class CudaTranslateTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string reason = kernels::cuda::testing::NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
    lines_ = ReadLines(kSentences);
    ASSERT_EQ(lines_.size(), 50u) << kSentences;
  }
  std::vector<std::string> lines_;
};

TEST_P(CudaTranslateTest, DemoModelMatchesCpu) {
  const Case cs = GetParam();
  auto cpu = TranslateOn(Placement{}, lines_, cs.beam);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  Placement p;
  p.device = Device::kCuda;
  p.index = 0;
  p.dtype = cs.dtype;
  auto gpu = TranslateOn(p, lines_, cs.beam);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ(gpu->size(), cpu->size());
  int same = 0;
  double worst_score = 0.0;
  for (size_t i = 0; i < cpu->size(); ++i) {
    const auto& a = (*cpu)[i];
    const auto& b = (*gpu)[i];
    ASSERT_TRUE(a.ok()) << "line " << i << ": " << a.status();
    ASSERT_TRUE(b.ok()) << "line " << i << ": " << b.status();
    ASSERT_FALSE(a->hypotheses.empty());
    ASSERT_FALSE(b->hypotheses.empty());
    const TextHypothesis& x = a->hypotheses[0];
    const TextHypothesis& y = b->hypotheses[0];
    if (x.ids == y.ids) {
      ++same;
      worst_score = std::max(worst_score, static_cast<double>(std::fabs(x.score - y.score)));
    } else {
      std::printf("line %zu differs:\n  cpu %.6f %s\n  gpu %.6f %s\n", i, x.score, x.text.c_str(),
                  y.score, y.text.c_str());
    }
  }
  const int n = static_cast<int>(cpu->size());
  std::printf("%s beam %d: %d/%d sentences identical to the CPU; worst |score difference| of "
              "identical ones %.2e\n",
              DTypeName(cs.dtype).c_str(), cs.beam, same, n, worst_score);
  if (cs.dtype == DType::kFloat32) {
    EXPECT_EQ(same, n);
    EXPECT_LE(worst_score, 1e-4);
  } else {
    EXPECT_GE(same, (9 * n + 9) / 10);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaTranslateTest,
                         ::testing::Values(Case{DType::kFloat32, 4}, Case{DType::kFloat32, 1},
                                           Case{DType::kFloat16, 4}, Case{DType::kBFloat16, 4}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return DTypeName(info.param.dtype) + "_beam" +
                                  std::to_string(info.param.beam);
                         });

}  // namespace
}  // namespace tnmt

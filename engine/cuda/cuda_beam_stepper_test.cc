// The GPU beam step against BeamDecoder on the same CUDA engine: FlatBeamDecoder with
// CudaBeamStepper must give BeamDecoder's outputs exactly (tokens, scores bit for bit), since
// both read the same device top-k and select by the same rule (kernels/beam_step.h). On the
// tiny fixture with random sources (beams 1..8, length penalty on and off, sentences cut at
// max_length) and on the demo model over the first sentences of its test set, float32 and
// float16, CUDA graphs on (the engine's default). Skips without a CUDA device.
#include "engine/cuda/cuda_beam_stepper.h"

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/decode/flat_beam_decoder.h"
#include "engine/runtime/loaded_model.h"
#include "kernels/cuda/test_util.h"

namespace tnmt {
namespace {

class CudaBeamStepperTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string reason = kernels::cuda::testing::NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
  }
  std::shared_ptr<const LoadedModel> Load(const std::string& dir) {
    auto placement = Placement::Parse("cuda", GetParam(), "");
    EXPECT_TRUE(placement.ok()) << placement.status();
    auto m = LoadModelDirectory(dir, *placement);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : nullptr;
  }
  // Both decoders over `sources`; the same results expected.
  void ExpectSame(const LoadedModel& m, const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& o,
                  const std::string& what) {
    auto beam = NewBeamDecoder(m);
    ASSERT_TRUE(beam.ok()) << beam.status();
    auto want = Decode(*beam, sources, o);
    ASSERT_TRUE(want.ok()) << want.status();
    auto step = m.backend->NewStepModel();
    ASSERT_TRUE(step.ok()) << step.status();
    std::unique_ptr<FlatBeamStepper> stepper = NewCudaBeamStepper(**step);
    ASSERT_NE(stepper, nullptr);
    FlatBeamDecoder flat(m.config, *std::move(step), std::move(stepper));
    auto got = Decode(flat, sources, o);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto& a = (*want)[i].hypotheses;
      const auto& b = (*got)[i].hypotheses;
      ASSERT_EQ(a.size(), 1u) << what << " sentence " << i;
      ASSERT_EQ(b.size(), 1u) << what << " sentence " << i;
      EXPECT_EQ(b[0].ids, a[0].ids) << what << " sentence " << i;
      EXPECT_EQ(std::memcmp(&b[0].score, &a[0].score, sizeof(float)), 0)
          << what << " sentence " << i << ": " << b[0].score << " vs " << a[0].score;
    }
  }
};

TEST_P(CudaBeamStepperTest, SameAsBeamDecoderOnTheTinyFixture) {
  auto m = Load("tests/golden/data/tiny");
  ASSERT_NE(m, nullptr);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(4, m->config.vocab_size - 1), len(1, 30);
  std::vector<std::vector<int32_t>> sources;
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> s(len(rng));
    for (int32_t& t : s) t = tok(rng);
    s.back() = m->config.eos_id;
    sources.push_back(s);
  }
  for (int beam = 1; beam <= 8; ++beam) {
    DecodeOptions o;
    o.beam_size = beam;
    ExpectSame(*m, sources, o, "beam " + std::to_string(beam));
    o.length_penalty = 0.0f;
    o.max_length = 6;
    ExpectSame(*m, sources, o, "no length penalty, max_length 6, beam " + std::to_string(beam));
  }
}

TEST_P(CudaBeamStepperTest, SameAsBeamDecoderOnTheDemoModel) {
  auto m = Load("models/demo");
  ASSERT_NE(m, nullptr);
  std::ifstream in("engine/cuda/testdata/test_2016_flickr_50.en");
  std::vector<std::vector<int32_t>> sources;
  for (std::string line; std::getline(in, line);) {
    auto ids = m->tokenizer->Encode(line);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ids->push_back(m->config.eos_id);
    sources.push_back(*ids);
  }
  ASSERT_EQ(sources.size(), 50u);
  for (int beam : {1, 4, 5}) {
    DecodeOptions o = DecodeOptions::FromConfig(m->config);
    o.beam_size = beam;
    o.n_best = 1;
    ExpectSame(*m, sources, o, "demo beam " + std::to_string(beam));
  }
}

TEST(CudaBeamStepper, OnlyForTheCudaEngine) {
  auto placement = Placement::Parse("cpu", "", "");
  ASSERT_TRUE(placement.ok());
  auto m = LoadModelDirectory("tests/golden/data/tiny", *placement);
  ASSERT_TRUE(m.ok()) << m.status();
  auto step = (*m)->backend->NewStepModel();
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(NewCudaBeamStepper(**step), nullptr);
  CudaBeamStepper stepper;
  FlatBeamStep st;
  EXPECT_EQ(stepper.Step(**step, nullptr, &st).code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBeamStepperTest, ::testing::Values("float32", "float16"));

}  // namespace
}  // namespace tnmt

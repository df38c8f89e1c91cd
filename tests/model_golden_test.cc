// The whole model against golden files from an independent float64 PyTorch reference
// (tests/golden/make_golden.py): tokenization, encoder output, decoder logits, greedy and
// beam-search outputs with scores, for a post-norm F32 model and a pre-norm BF16 one.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/decode/beam_search.h"
#include "engine/layers/decoder.h"
#include "engine/layers/encoder.h"
#include "engine/runtime/loaded_model.h"

namespace tnmt {
namespace {

using nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

void ExpectNear(const float* got, const std::vector<float>& want, double atol, double rtol,
                const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = "tests/golden/data/" + GetParam();
    auto m = LoadModelDirectory(dir);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    golden_ = ReadJson(dir + "/golden.json");
    ASSERT_GE(golden_["cases"].size(), 4u);
  }
  const ModelConfig& config() const { return model_->config; }
  const ModelWeights& weights() const { return model_->weights; }
  // The sources decoded together by one BeamDecoder on the model's CPU backend.
  absl::StatusOr<std::vector<DecodeResult>> DecodeAll(const std::vector<std::vector<int32_t>>& sources,
                                                      const DecodeOptions& options) {
    absl::StatusOr<BeamDecoder> decoder = NewBeamDecoder(*model_);
    if (!decoder.ok()) return decoder.status();
    return Decode(*decoder, sources, options);
  }

  std::shared_ptr<const LoadedModel> model_;
  json golden_;
  Workspace ws_;
};

TEST_P(GoldenTest, TokenizationMatchesReference) {
  for (const json& c : golden_["cases"]) {
    auto ids = model_->tokenizer->Encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    ids->push_back(config().eos_id);
    EXPECT_EQ(*ids, c["src_ids"].get<std::vector<int32_t>>()) << c["text"];
  }
}

TEST_P(GoldenTest, EncoderOutputAloneAndInPaddedBatch) {
  const auto& cases = golden_["cases"];
  const int d = config().d_model;
  int max_len = 0;
  for (const json& c : cases) max_len = std::max<int>(max_len, c["src_ids"].size());
  std::vector<int32_t> batch_ids(cases.size() * max_len, config().pad_id), lengths;
  for (size_t b = 0; b < cases.size(); ++b) {
    auto src = cases[b]["src_ids"].get<std::vector<int32_t>>();
    std::copy(src.begin(), src.end(), batch_ids.begin() + b * max_len);
    lengths.push_back(static_cast<int32_t>(src.size()));
    const int32_t len = lengths.back();
    auto alone = Encode(config(), weights(), src.data(), &len, 1, len, &ws_);
    ASSERT_TRUE(alone.ok());
    ExpectNear(alone->f32(), cases[b]["encoder_output"].get<std::vector<float>>(), 1e-4, 1e-4,
               "encoder_output alone, case " + std::to_string(b));
  }
  auto batched = Encode(config(), weights(), batch_ids.data(), lengths.data(),
                        static_cast<int>(cases.size()), max_len, &ws_);
  ASSERT_TRUE(batched.ok());
  for (size_t b = 0; b < cases.size(); ++b) {
    ExpectNear(batched->f32() + b * max_len * d,
               cases[b]["encoder_output"].get<std::vector<float>>(), 1e-4, 1e-4,
               "encoder_output batched, case " + std::to_string(b));
  }
}

TEST_P(GoldenTest, DecoderLogitsTeacherForced) {
  for (const json& c : golden_["cases"]) {
    auto src = c["src_ids"].get<std::vector<int32_t>>();
    auto tgt = c["decoder_input"].get<std::vector<int32_t>>();
    const int32_t len = static_cast<int32_t>(src.size());
    auto enc = Encode(config(), weights(), src.data(), &len, 1, len, &ws_);
    ASSERT_TRUE(enc.ok());
    auto state = DecoderState::Create(config(), weights(), *enc, &len, 1, tgt.size());
    ASSERT_TRUE(state.ok());
    ASSERT_TRUE(state->Start({0}).ok());
    std::vector<float> logits(tgt.size() * config().vocab_size);
    ASSERT_TRUE(DecoderForward(config(), weights(), &*state, tgt.data(), tgt.size(),
                               logits.data(), &ws_).ok());
    ExpectNear(logits.data(), c["decoder_logits"].get<std::vector<float>>(), 2e-4, 2e-4,
               "decoder_logits for " + c["text"].get<std::string>());
  }
}

void ExpectHypotheses(const DecodeResult& got, const json& want, const std::string& what) {
  ASSERT_EQ(got.hypotheses.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.hypotheses[i].ids, want[i]["ids"].get<std::vector<int32_t>>())
        << what << " hypothesis " << i;
    EXPECT_NEAR(got.hypotheses[i].score, want[i]["score"].get<double>(), 1e-3)
        << what << " hypothesis " << i;
  }
}

TEST_P(GoldenTest, GreedyAndBeamSearchMatchReference) {
  std::vector<std::vector<int32_t>> sources;
  for (const json& c : golden_["cases"]) sources.push_back(c["src_ids"].get<std::vector<int32_t>>());
  const json& first = golden_["cases"][0];

  DecodeOptions greedy;
  greedy.beam_size = 1;
  greedy.max_length_offset = first["max_length_offset"].get<int>();
  auto g = DecodeAll(sources, greedy);
  ASSERT_TRUE(g.ok()) << g.status();

  DecodeOptions beam;
  beam.beam_size = first["beam_size"].get<int>();
  beam.length_penalty = first["length_penalty"].get<float>();
  beam.max_length_offset = first["max_length_offset"].get<int>();
  beam.n_best = first["n_best"].get<int>();
  auto b = DecodeAll(sources, beam);
  ASSERT_TRUE(b.ok()) << b.status();

  DecodeOptions alpha1;
  alpha1.beam_size = 5;
  alpha1.length_penalty = 1.0f;
  alpha1.n_best = 2;
  alpha1.max_length_offset = 10;
  auto a = DecodeAll(sources, alpha1);
  ASSERT_TRUE(a.ok()) << a.status();

  for (size_t i = 0; i < sources.size(); ++i) {
    const json& c = golden_["cases"][i];
    const std::string what = c["text"].get<std::string>();
    ExpectHypotheses((*g)[i], json::array({c["greedy"]}), "greedy " + what);
    ExpectHypotheses((*b)[i], c["beam"], "beam " + what);
    ExpectHypotheses((*a)[i], c["beam_alpha1"], "beam_alpha1 " + what);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest, ::testing::Values("tiny", "tiny_prenorm"));

}  // namespace
}  // namespace tnmt

// The flat beam step against BeamDecoder: on the CPU engine, FlatBeamDecoder with the host
// stepper must give exactly BeamDecoder's outputs (tokens, and scores bit for bit) for every
// option it supports: beam sizes 1..8, length penalties on, off, negative and both styles,
// min_length, sentences stopped by the maximum length (both the offset rule and max_length),
// scores off, sentences joining a running decode; on the random tiny fixtures (which often
// run to the maximum length) and on the trained demo model over real sentences (which stop
// early). Bits compared with memcmp: -0 and +0, or two NaNs, would not pass as equal.
#include "engine/decode/flat_beam_decoder.h"

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "engine/runtime/loaded_model.h"

namespace tnmt {
namespace {

std::shared_ptr<const LoadedModel> LoadCpu(const std::string& dir) {
  auto placement = Placement::Parse("cpu", "", "");
  EXPECT_TRUE(placement.ok()) << placement.status();
  auto m = LoadModelDirectory(dir, *placement);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

std::vector<std::vector<int32_t>> RandomSources(const ModelConfig& c, int n, int max_len, int seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(4, c.vocab_size - 1), len(1, max_len);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> s(len(rng));
    for (int32_t& t : s) t = tok(rng);
    s.back() = c.eos_id;
    out.push_back(s);
  }
  return out;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Stats {
  int at_max = 0;  // sentences whose output reached the maximum length
  int early = 0;   // the others
};

// Decodes `sources` with both decoders and expects the same results; counts the outputs that
// reached the maximum length.
void ExpectSame(const LoadedModel& m, const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& o,
                const std::string& what, Stats* stats) {
  auto beam = NewBeamDecoder(m);
  ASSERT_TRUE(beam.ok()) << beam.status();
  auto want = Decode(*beam, sources, o);
  ASSERT_TRUE(want.ok()) << want.status();
  auto step = m.backend->NewStepModel();
  ASSERT_TRUE(step.ok()) << step.status();
  FlatBeamDecoder flat(m.config, *std::move(step), std::make_unique<HostFlatBeamStepper>());
  auto got = Decode(flat, sources, o);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& a = (*want)[i].hypotheses;
    const auto& b = (*got)[i].hypotheses;
    ASSERT_EQ(a.size(), 1u) << what << " sentence " << i;
    ASSERT_EQ(b.size(), 1u) << what << " sentence " << i;
    EXPECT_EQ(b[0].ids, a[0].ids) << what << " sentence " << i;
    EXPECT_TRUE(SameBits(b[0].score, a[0].score))
        << what << " sentence " << i << ": " << b[0].score << " vs " << a[0].score;
    const int max_len = MaxOutputLength(o, static_cast<int>(sources[i].size()), m.config);
    (static_cast<int>(a[0].ids.size()) + 1 == max_len ? stats->at_max : stats->early)++;
  }
}

std::vector<DecodeOptions> OptionGrid(int beam) {
  std::vector<DecodeOptions> grid;
  DecodeOptions o;
  o.beam_size = beam;
  grid.push_back(o);  // the paper's: alpha 0.6, input length + 50
  o.length_penalty = 0.0f;
  grid.push_back(o);
  o.length_penalty = 1.0f;
  o.length_penalty_style = LengthPenaltyStyle::kLength;
  o.max_length = 7;
  grid.push_back(o);
  o = DecodeOptions{};
  o.beam_size = beam;
  o.length_penalty = -0.4f;
  o.max_length_offset = 2;
  o.min_length = 3;
  grid.push_back(o);
  o = DecodeOptions{};
  o.beam_size = beam;
  o.max_length = 4;
  o.return_scores = false;
  grid.push_back(o);
  return grid;
}

TEST(FlatBeamDecoder, SameAsBeamDecoderOnTheTinyFixtures) {
  for (const char* dir : {"tests/golden/data/tiny", "tests/golden/data/tiny_prenorm"}) {
    auto m = LoadCpu(dir);
    ASSERT_NE(m, nullptr);
    const auto sources = RandomSources(m->config, 24, 30, 7);
    Stats stats;
    for (int beam = 1; beam <= 8; ++beam) {
      const auto grid = OptionGrid(beam);
      for (size_t g = 0; g < grid.size(); ++g) {
        ExpectSame(*m, sources, grid[g], std::string(dir) + " beam " + std::to_string(beam) + " options " + std::to_string(g),
                   &stats);
      }
    }
    EXPECT_GT(stats.at_max, 100) << dir;
    EXPECT_GT(stats.early, 100) << dir;
  }
}

TEST(FlatBeamDecoder, SameAsBeamDecoderOnTheDemoModel) {
  auto m = LoadCpu("models/demo");
  ASSERT_NE(m, nullptr);
  std::ifstream in("tests/convert/data/captions.en");
  ASSERT_TRUE(in) << "tests/convert/data/captions.en";
  std::vector<std::vector<int32_t>> sources;
  for (std::string line; std::getline(in, line) && sources.size() < 24;) {
    auto ids = m->tokenizer->Encode(line);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ids->push_back(m->config.eos_id);
    sources.push_back(*ids);
  }
  Stats stats;
  for (int beam : {1, 2, 4, 5, 8}) {
    DecodeOptions o = DecodeOptions::FromConfig(m->config);
    o.beam_size = beam;
    o.n_best = 1;
    ExpectSame(*m, sources, o, "demo beam " + std::to_string(beam), &stats);
    o.max_length = 6;  // most sentences cut short
    ExpectSame(*m, sources, o, "demo max_length 6 beam " + std::to_string(beam), &stats);
  }
  EXPECT_GT(stats.at_max, 50);
  EXPECT_GT(stats.early, 50);
}

// Sentences added between steps: each decoder gets the same sentences at the same steps, and
// every result is the same.
TEST(FlatBeamDecoder, SentencesJoiningARunningDecodeAsBeamDecoder) {
  auto m = LoadCpu("tests/golden/data/tiny");
  ASSERT_NE(m, nullptr);
  const auto sources = RandomSources(m->config, 12, 20, 3);
  DecodeOptions o;
  o.beam_size = 3;
  o.max_length_offset = 10;
  auto beam = NewBeamDecoder(*m);
  ASSERT_TRUE(beam.ok());
  auto step = m->backend->NewStepModel();
  ASSERT_TRUE(step.ok());
  FlatBeamDecoder flat(m->config, *std::move(step), std::make_unique<HostFlatBeamStepper>());
  std::map<int64_t, DecodeResult> want, got;
  std::vector<BeamDecoder::Done> done;
  for (int i = 0; i < 200 && (i < 6 || !beam->empty() || !flat.empty()); ++i) {
    if (i < 6) {  // two new sentences per step
      const std::vector<std::vector<int32_t>> two = {sources[2 * i], sources[2 * i + 1]};
      auto a = beam->Add(two, o);
      auto b = flat.Add(two, o);
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(*a, *b);
    }
    EXPECT_EQ(beam->live_rows(), flat.live_rows()) << "step " << i;
    done.clear();
    ASSERT_TRUE(beam->Step(&done).ok());
    for (auto& d : done) want[d.handle] = d.result;
    done.clear();
    ASSERT_TRUE(flat.Step(&done).ok());
    for (auto& d : done) got[d.handle] = d.result;
  }
  ASSERT_EQ(want.size(), sources.size());
  ASSERT_EQ(got.size(), sources.size());
  for (const auto& [h, r] : want) {
    ASSERT_EQ(got[h].hypotheses.size(), 1u);
    EXPECT_EQ(got[h].hypotheses[0].ids, r.hypotheses[0].ids) << "handle " << h;
    EXPECT_TRUE(SameBits(got[h].hypotheses[0].score, r.hypotheses[0].score)) << "handle " << h;
  }
}

TEST(FlatBeamDecoder, RefusesWhatItDoesNotSupport) {
  DecodeOptions o;
  EXPECT_TRUE(FlatBeamDecoder::Supports(o));
  o.n_best = 2;
  EXPECT_FALSE(FlatBeamDecoder::Supports(o));
  o = DecodeOptions{};
  o.beam_size = kernels::kMaxFlatBeam + 1;
  EXPECT_FALSE(FlatBeamDecoder::Supports(o));
  o = DecodeOptions{};
  o.repetition_penalty = 1.2f;
  EXPECT_FALSE(FlatBeamDecoder::Supports(o));
  o = DecodeOptions{};
  o.return_token_scores = true;
  EXPECT_FALSE(FlatBeamDecoder::Supports(o));

  auto m = LoadCpu("tests/golden/data/tiny");
  ASSERT_NE(m, nullptr);
  auto step = m->backend->NewStepModel();
  ASSERT_TRUE(step.ok());
  FlatBeamDecoder flat(m->config, *std::move(step), std::make_unique<HostFlatBeamStepper>());
  const auto sources = RandomSources(m->config, 2, 5, 1);
  DecodeInput with_prefix{sources[0], {5}, 0};
  EXPECT_EQ(flat.Add({with_prefix}, DecodeOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flat.Add(sources, o).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(flat.Add({sources[0]}, DecodeOptions{}).ok());
  DecodeOptions other;
  other.beam_size = 2;
  EXPECT_EQ(flat.Add({sources[1]}, other).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tnmt

// TNMT_GPU_BEAM=1 (translator.h): Translate with the flat beam step gives the same lines,
// tokens and scores as without it; on the CPU engine the step runs on the host, with the CUDA
// engine on the GPU (engine/cuda/cuda_beam_stepper_test checks that against BeamDecoder).
// Options the flat step does not take (n_best 2, target prefixes) decode as before.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/runtime/translator.h"

namespace tnmt {
namespace {

std::vector<absl::StatusOr<LineTranslation>> TranslateWith(bool flat, const std::vector<std::string>& lines,
                                                           const TranslationOptions& o,
                                                           const std::vector<std::string>* prefixes = nullptr) {
  if (flat) {
    setenv("TNMT_GPU_BEAM", "1", 1);
  } else {
    unsetenv("TNMT_GPU_BEAM");
  }
  EXPECT_EQ(FlatBeamRequested(), flat);
  auto m = LoadModelDirectory("models/demo");
  EXPECT_TRUE(m.ok()) << m.status();
  Translator t(*m);
  auto r = t.Translate(lines, o, nullptr, prefixes);
  unsetenv("TNMT_GPU_BEAM");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : std::vector<absl::StatusOr<LineTranslation>>{};
}

void ExpectSameLines(const std::vector<absl::StatusOr<LineTranslation>>& a,
                     const std::vector<absl::StatusOr<LineTranslation>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].ok() && b[i].ok()) << "line " << i;
    ASSERT_EQ(a[i]->hypotheses.size(), b[i]->hypotheses.size()) << "line " << i;
    for (size_t h = 0; h < a[i]->hypotheses.size(); ++h) {
      EXPECT_EQ(a[i]->hypotheses[h].text, b[i]->hypotheses[h].text) << "line " << i;
      EXPECT_EQ(a[i]->hypotheses[h].ids, b[i]->hypotheses[h].ids) << "line " << i;
      EXPECT_EQ(a[i]->hypotheses[h].score, b[i]->hypotheses[h].score) << "line " << i;
    }
  }
}

TEST(FlatBeamTranslate, SameLinesWithTheSwitchOnAndOff) {
  std::ifstream in("tests/convert/data/captions.en");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 20u);
  lines.push_back("");  // an empty line stays empty
  TranslationOptions o;
  o.max_batch_tokens = 64;  // sentences join a running decode
  for (int beam : {1, 4}) {
    o.decode.beam_size = beam;
    ExpectSameLines(TranslateWith(false, lines, o), TranslateWith(true, lines, o));
  }
  o.decode.beam_size = 4;
  o.decode.n_best = 2;  // BeamDecoder either way
  ExpectSameLines(TranslateWith(false, lines, o), TranslateWith(true, lines, o));
  o.decode.n_best = 1;
  std::vector<std::string> prefixes(lines.size());
  prefixes[0] = "Ein";
  ExpectSameLines(TranslateWith(false, lines, o, &prefixes), TranslateWith(true, lines, o, &prefixes));
}

}  // namespace
}  // namespace tnmt

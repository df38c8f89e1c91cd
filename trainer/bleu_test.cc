// Checks trainer/bleu.cc against sacreBLEU: 13a tokenization line by line, n-gram counts,
// lengths and corpus scores from trainer/testdata/bleu_golden.json (written by
// make_bleu_golden.py with sacrebleu 2.6.0), plus API behaviour (size mismatch, merging).
#include "trainer/bleu.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tnmt::trainer {
namespace {

using json = nlohmann::json;

const char* kGoldenPath = "trainer/testdata/bleu_golden.json";

// sacreBLEU agrees with itself to the last bit; 0.01 BLEU is the contract, this is the check.
constexpr double kScoreTolerance = 1e-9;

const json& Golden() {
  static const json* golden = [] {
    std::ifstream in(kGoldenPath, std::ios::binary);
    if (!in) {
      ADD_FAILURE() << "cannot open " << kGoldenPath;
      return new json(json::object());
    }
    std::stringstream buf;
    buf << in.rdbuf();
    return new json(json::parse(buf.str()));
  }();
  return *golden;
}

// The golden tokenization is sacreBLEU's ' '.join(tokens); its tokens contain no whitespace,
// so splitting on single spaces recovers them exactly ("" -> no tokens).
std::vector<std::string> SplitGolden(const std::string& joined) {
  std::vector<std::string> tokens;
  if (joined.empty()) return tokens;
  size_t start = 0;
  while (true) {
    const size_t space = joined.find(' ', start);
    tokens.push_back(joined.substr(start, space - start));
    if (space == std::string::npos) break;
    start = space + 1;
  }
  return tokens;
}

TEST(BleuGoldenTest, FileIsComplete) {
  const json& g = Golden();
  ASSERT_TRUE(g.contains("corpora"));
  EXPECT_EQ(g.at("sacrebleu_version").get<std::string>(), "2.6.0");
  EXPECT_EQ(g.at("signature").get<std::string>(),
            "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0");
  std::set<std::string> names;
  for (const json& c : g.at("corpora")) names.insert(c.at("name").get<std::string>());
  for (const char* required :
       {"identical", "empty_hyps", "some_empty", "short_hyps", "no_4gram", "no_3gram_no_4gram",
        "no_4gram_total", "no_matches", "case", "punctuation", "tokenizer_edges",
        "synthetic_large"}) {
    EXPECT_TRUE(names.count(required)) << "missing corpus " << required;
  }
  EXPECT_GE(g.at("tokenize").size(), 20u);
}

TEST(BleuSignatureTest, IsSacreBleusSignaturePlusTheSentenceCount) {
  // The signature sacreBLEU printed when it wrote the golden file, then the corpus size.
  EXPECT_EQ(BleuSignature(300), Golden().at("signature").get<std::string>() + "|sentences:300");
  EXPECT_EQ(BleuSignature(1014), Golden().at("signature").get<std::string>() + "|sentences:1014");
}

TEST(Tokenize13aTest, EdgeCasesMatchSacreBleu) {
  const json& g = Golden();
  ASSERT_TRUE(g.contains("tokenize"));
  for (const json& c : g.at("tokenize")) {
    const std::string line = c.at("line").get<std::string>();
    EXPECT_EQ(Tokenize13a(line), SplitGolden(c.at("tokens").get<std::string>()))
        << "line: " << line;
  }
}

TEST(Tokenize13aTest, CorpusLinesMatchSacreBleu) {
  const json& g = Golden();
  ASSERT_TRUE(g.contains("corpora"));
  int lines = 0;
  for (const json& c : g.at("corpora")) {
    const std::string name = c.at("name").get<std::string>();
    for (const char* side : {"hyps", "refs"}) {
      const json& raw = c.at(side);
      const json& toks = c.at(std::string(side) == "hyps" ? "hyp_tokens" : "ref_tokens");
      ASSERT_EQ(raw.size(), toks.size()) << name;
      for (size_t i = 0; i < raw.size(); ++i) {
        const std::string line = raw[i].get<std::string>();
        EXPECT_EQ(Tokenize13a(line), SplitGolden(toks[i].get<std::string>()))
            << name << " " << side << "[" << i << "]: " << line;
        ++lines;
      }
    }
  }
  EXPECT_GT(lines, 600);
}

TEST(BleuStatsTest, CorporaMatchSacreBleu) {
  const json& g = Golden();
  ASSERT_TRUE(g.contains("corpora"));
  for (const json& c : g.at("corpora")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const auto hyps = c.at("hyps").get<std::vector<std::string>>();
    const auto refs = c.at("refs").get<std::vector<std::string>>();
    ASSERT_EQ(hyps.size(), refs.size());
    BleuStats stats;
    for (size_t i = 0; i < hyps.size(); ++i) stats.Add(hyps[i], refs[i]);

    const auto counts = c.at("counts").get<std::vector<int64_t>>();
    const auto totals = c.at("totals").get<std::vector<int64_t>>();
    ASSERT_EQ(counts.size(), 4u);
    ASSERT_EQ(totals.size(), 4u);
    for (int n = 0; n < 4; ++n) {
      EXPECT_EQ(stats.counts()[n], counts[n]) << "order " << n + 1;
      EXPECT_EQ(stats.totals()[n], totals[n]) << "order " << n + 1;
    }
    EXPECT_EQ(stats.sys_len(), c.at("sys_len").get<int64_t>());
    EXPECT_EQ(stats.ref_len(), c.at("ref_len").get<int64_t>());
    EXPECT_EQ(stats.num_segments(), static_cast<int64_t>(hyps.size()));

    const double score = c.at("score").get<double>();
    EXPECT_NEAR(stats.Score(), score, kScoreTolerance);
    EXPECT_NEAR(stats.BrevityPenalty(), c.at("bp").get<double>(), 1e-12);
    const auto precisions = c.at("precisions").get<std::vector<double>>();
    const auto got_precisions = stats.Precisions();
    for (int n = 0; n < 4; ++n) {
      EXPECT_NEAR(got_precisions[n], precisions[n], 1e-9) << "order " << n + 1;
    }

    absl::StatusOr<double> corpus = CorpusBleu(hyps, refs);
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    EXPECT_NEAR(*corpus, score, kScoreTolerance);
  }
}

TEST(BleuStatsTest, MergeEqualsSinglePass) {
  const json& g = Golden();
  ASSERT_TRUE(g.contains("corpora"));
  for (const json& c : g.at("corpora")) {
    if (c.at("name").get<std::string>() != "synthetic_large") continue;
    const auto hyps = c.at("hyps").get<std::vector<std::string>>();
    const auto refs = c.at("refs").get<std::vector<std::string>>();
    BleuStats whole, first, second;
    for (size_t i = 0; i < hyps.size(); ++i) {
      whole.Add(hyps[i], refs[i]);
      (i < hyps.size() / 3 ? first : second).Add(hyps[i], refs[i]);
    }
    first.Merge(second);
    EXPECT_EQ(first.counts(), whole.counts());
    EXPECT_EQ(first.totals(), whole.totals());
    EXPECT_EQ(first.sys_len(), whole.sys_len());
    EXPECT_EQ(first.ref_len(), whole.ref_len());
    EXPECT_EQ(first.Score(), whole.Score());
    EXPECT_NEAR(first.Score(), c.at("score").get<double>(), kScoreTolerance);
    return;
  }
  FAIL() << "synthetic_large corpus missing";
}

TEST(BleuStatsTest, AddTokensEqualsAddOfTokenizedText) {
  BleuStats a, b;
  a.Add("The cat, 3.5 m away.", "The cat is 3.5 m away.");
  b.AddTokens(Tokenize13a("The cat, 3.5 m away."), Tokenize13a("The cat is 3.5 m away."));
  EXPECT_EQ(a.counts(), b.counts());
  EXPECT_EQ(a.totals(), b.totals());
  EXPECT_EQ(a.Score(), b.Score());
}

TEST(CorpusBleuTest, SizeMismatchIsAnError) {
  absl::StatusOr<double> r = CorpusBleu({"a b c", "d e"}, {"a b c"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(CorpusBleu({}, {"x"}).ok());
}

TEST(CorpusBleuTest, SimpleCases) {
  absl::StatusOr<double> same = CorpusBleu({"a b c d e", "x y z w"}, {"a b c d e", "x y z w"});
  ASSERT_TRUE(same.ok());
  EXPECT_NEAR(*same, 100.0, 1e-9);
  absl::StatusOr<double> none = CorpusBleu({"p q r s"}, {"a b c d"});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0.0);
  absl::StatusOr<double> empty = CorpusBleu({}, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, 0.0);
}

TEST(RStripTest, PythonWhitespace) {
  EXPECT_EQ(RStripUnicodeWhitespace("ab \t\n\r\v\f"), "ab");
  EXPECT_EQ(RStripUnicodeWhitespace("ab\xC2\xA0\xE3\x80\x80\xE2\x80\xA8\x1F"), "ab");
  EXPECT_EQ(RStripUnicodeWhitespace(" ab\xE2\x80\x8B"), " ab\xE2\x80\x8B");  // U+200B: no
  EXPECT_EQ(RStripUnicodeWhitespace("\xC2\x85"), "");
  EXPECT_EQ(RStripUnicodeWhitespace(""), "");
}

}  // namespace
}  // namespace tnmt::trainer

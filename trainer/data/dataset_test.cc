// Tests for the tokenized corpus cache: filters and their counts, ids read back equal the
// tokenizer's, multi-threaded tokenization equals single-threaded, errors name file and line.
#include "trainer/data/dataset.h"

#include <set>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/spm_trainer.h"
#include "trainer/data/test_corpus.h"

namespace tnmt::data {
namespace {

using ::testing::HasSubstr;
using testing::TempPath;

TEST(ClassifyPairTest, AppliesFiltersInOrder) {
  DatasetOptions options;
  options.max_length = 10;
  options.max_length_ratio = 1.5;
  EXPECT_EQ(ClassifyPair(0, 0, options), PairVerdict::kEmpty);
  EXPECT_EQ(ClassifyPair(0, 3, options), PairVerdict::kEmpty);
  EXPECT_EQ(ClassifyPair(3, 0, options), PairVerdict::kEmpty);
  EXPECT_EQ(ClassifyPair(0, 50, options), PairVerdict::kEmpty);  // empty wins over too long
  EXPECT_EQ(ClassifyPair(11, 10, options), PairVerdict::kTooLong);
  EXPECT_EQ(ClassifyPair(10, 11, options), PairVerdict::kTooLong);
  EXPECT_EQ(ClassifyPair(1, 11, options), PairVerdict::kTooLong);  // too long wins over ratio
  EXPECT_EQ(ClassifyPair(10, 10, options), PairVerdict::kKeep);
  EXPECT_EQ(ClassifyPair(2, 3, options), PairVerdict::kKeep);  // exactly 1.5
  EXPECT_EQ(ClassifyPair(3, 2, options), PairVerdict::kKeep);
  EXPECT_EQ(ClassifyPair(2, 4, options), PairVerdict::kBadRatio);
  EXPECT_EQ(ClassifyPair(7, 4, options), PairVerdict::kBadRatio);
  EXPECT_EQ(ClassifyPair(1, 1, options), PairVerdict::kKeep);
}

TEST(ClassifyPairTest, NonPositiveLimitsDisableFilters) {
  DatasetOptions options;
  options.max_length = 0;
  options.max_length_ratio = 0;
  EXPECT_EQ(ClassifyPair(1, 100000, options), PairVerdict::kKeep);
  EXPECT_EQ(ClassifyPair(0, 1, options), PairVerdict::kEmpty);  // empty sides always go
}

TEST(DatasetWriterTest, CountsAndStoresKeptPairs) {
  DatasetOptions options;
  options.max_length = 4;
  options.max_length_ratio = 2.0;
  absl::StatusOr<std::unique_ptr<DatasetWriter>> writer =
      DatasetWriter::Create(TempPath("writer.cache"), options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> pairs = {
      {{5, 6}, {7, 8, 9}},           // kept
      {{}, {7}},                     // empty
      {{5, 6, 7, 8, 9}, {7}},        // too long
      {{5}, {7, 8, 9}},              // ratio 3
      {{10, 11, 12, 13}, {14, 15}},  // kept (ratio 2)
      {{16}, {}},                    // empty
  };
  for (const auto& [source, target] : pairs) ASSERT_TRUE((*writer)->Add(source, target).ok());
  absl::StatusOr<std::unique_ptr<Dataset>> dataset = (*writer)->Finish();
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const DatasetStats& stats = (*dataset)->stats();
  EXPECT_EQ(stats.pairs_read, 6);
  EXPECT_EQ(stats.pairs_kept, 2);
  EXPECT_EQ(stats.dropped_empty, 2);
  EXPECT_EQ(stats.dropped_too_long, 1);
  EXPECT_EQ(stats.dropped_ratio, 1);
  EXPECT_EQ(stats.source_tokens, 6);
  EXPECT_EQ(stats.target_tokens, 5);
  ASSERT_EQ((*dataset)->size(), 2);
  EXPECT_EQ((*dataset)->source_length(1), 4);
  EXPECT_EQ((*dataset)->target_length(1), 2);
  std::vector<int32_t> source, target;
  ASSERT_TRUE((*dataset)->ReadPair(1, &source, &target).ok());
  EXPECT_EQ(source, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(target, (std::vector<int32_t>{14, 15}));
  ASSERT_TRUE((*dataset)->ReadPair(0, &source, &target).ok());
  EXPECT_EQ(source, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(target, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ((*dataset)->ReadPair(2, &source, &target).code(), absl::StatusCode::kOutOfRange);
}

class DatasetBuildTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto pairs = testing::SyntheticPairs(2000, /*seed=*/11);
    const std::string source = TempPath("dataset_spm.en");
    const std::string target = TempPath("dataset_spm.de");
    ASSERT_TRUE(testing::WritePlainFile(source, testing::JoinLines(testing::Sources(pairs))));
    ASSERT_TRUE(testing::WritePlainFile(target, testing::JoinLines(testing::Targets(pairs))));
    SpmTrainerOptions options;
    options.vocab_size = 100;
    const std::string model = TempPath("dataset_spm.model");
    ASSERT_EQ(TrainJointSentencePiece({source, target}, model, options), absl::OkStatus());
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(model);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  // A corpus with some pairs each filter must drop, written as source (.gz) and target.
  static void WriteCorpus(const std::string& name, std::string* source_path,
                          std::string* target_path,
                          std::vector<std::pair<std::string, std::string>>* pairs) {
    *pairs = testing::SyntheticPairs(500, /*seed=*/12, /*max_words=*/30);
    (*pairs)[10].second = "";    // empty target
    (*pairs)[20].first = "";     // empty source
    (*pairs)[30].first = "dog";  // ratio
    (*pairs)[30].second = "der Mann sitzt auf der Straße mit dem Ball";
    std::string long_line;
    for (int i = 0; i < 200; ++i) long_line += "the big river ";
    (*pairs)[40].first = long_line;  // too long
    *source_path = TempPath(name + ".en.gz");
    *target_path = TempPath(name + ".de");
    ASSERT_TRUE(testing::WriteGzipFile(*source_path, testing::JoinLines(testing::Sources(*pairs))));
    ASSERT_TRUE(
        testing::WritePlainFile(*target_path, testing::JoinLines(testing::Targets(*pairs))));
  }

  static Tokenizer* tokenizer_;
};
Tokenizer* DatasetBuildTest::tokenizer_ = nullptr;

TEST_F(DatasetBuildTest, FiltersCountAndIdsMatchTheTokenizer) {
  std::string source_path, target_path;
  std::vector<std::pair<std::string, std::string>> pairs;
  WriteCorpus("filters", &source_path, &target_path, &pairs);
  DatasetOptions options;
  options.max_length = 60;
  options.max_length_ratio = 1.8;
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      Dataset::Build(source_path, target_path, *tokenizer_, TempPath("filters.cache"), options);
  ASSERT_TRUE(dataset.ok()) << dataset.status();

  // Independent expectation: tokenize here and apply the rules directly.
  DatasetStats expected;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> kept;
  for (const auto& [source_text, target_text] : pairs) {
    const std::vector<int32_t> source = tokenizer_->Encode(source_text).value();
    const std::vector<int32_t> target = tokenizer_->Encode(target_text).value();
    const size_t s = source.size(), t = target.size();
    ++expected.pairs_read;
    if (s == 0 || t == 0) {
      ++expected.dropped_empty;
    } else if (s > 60 || t > 60) {
      ++expected.dropped_too_long;
    } else if (std::max(s, t) > 1.8 * std::min(s, t)) {
      ++expected.dropped_ratio;
    } else {
      kept.emplace_back(source, target);
    }
  }
  const DatasetStats& stats = (*dataset)->stats();
  EXPECT_EQ(stats.pairs_read, 500);
  EXPECT_EQ(stats.dropped_empty, 2);
  EXPECT_EQ(stats.dropped_empty, expected.dropped_empty);
  EXPECT_GE(stats.dropped_too_long, 1);
  EXPECT_EQ(stats.dropped_too_long, expected.dropped_too_long);
  EXPECT_GE(stats.dropped_ratio, 1);
  EXPECT_EQ(stats.dropped_ratio, expected.dropped_ratio);
  EXPECT_EQ(stats.pairs_kept, static_cast<int64_t>(kept.size()));
  EXPECT_EQ(stats.pairs_read,
            stats.pairs_kept + stats.dropped_empty + stats.dropped_too_long + stats.dropped_ratio);
  ASSERT_EQ((*dataset)->size(), static_cast<int64_t>(kept.size()));
  std::vector<int32_t> source, target;
  int64_t source_tokens = 0, target_tokens = 0;
  for (int64_t i = 0; i < (*dataset)->size(); ++i) {
    ASSERT_TRUE((*dataset)->ReadPair(i, &source, &target).ok());
    EXPECT_EQ(source, kept[i].first) << i;
    EXPECT_EQ(target, kept[i].second) << i;
    EXPECT_EQ((*dataset)->source_length(i), static_cast<int32_t>(source.size()));
    EXPECT_EQ((*dataset)->target_length(i), static_cast<int32_t>(target.size()));
    source_tokens += static_cast<int64_t>(source.size());
    target_tokens += static_cast<int64_t>(target.size());
  }
  EXPECT_EQ(stats.source_tokens, source_tokens);
  EXPECT_EQ(stats.target_tokens, target_tokens);
}

TEST_F(DatasetBuildTest, ThreadedTokenizationWritesTheSameCache) {
  std::string source_path, target_path;
  std::vector<std::pair<std::string, std::string>> pairs;
  WriteCorpus("threads", &source_path, &target_path, &pairs);
  DatasetOptions options;
  const std::string one = TempPath("threads1.cache");
  const std::string three = TempPath("threads3.cache");
  ASSERT_TRUE(Dataset::Build(source_path, target_path, *tokenizer_, one, options).ok());
  options.num_threads = 3;
  ASSERT_TRUE(Dataset::Build(source_path, target_path, *tokenizer_, three, options).ok());
  const std::string bytes = testing::ReadWholeFile(one);
  EXPECT_GT(bytes.size(), 8u);
  EXPECT_TRUE(bytes == testing::ReadWholeFile(three));
}

// Subword sampling: the same pairs and counts as without it, the best segmentation from
// ReadPair, and draws that are segmentations of the same text (they decode to it), replay for
// the same (seed, epoch), vary between epochs, stay within the index lengths and follow the
// stored probabilities (alpha large: almost always the best).
TEST_F(DatasetBuildTest, SubwordSamplingDrawsSegmentationsOfTheSameText) {
  std::string source_path, target_path;
  std::vector<std::pair<std::string, std::string>> pairs;
  WriteCorpus("sampling", &source_path, &target_path, &pairs);
  DatasetOptions plain_options;
  plain_options.max_length = 60;
  plain_options.max_length_ratio = 1.8;
  auto plain = Dataset::Build(source_path, target_path, *tokenizer_, TempPath("plain.cache"), plain_options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  DatasetOptions options = plain_options;
  options.subword_nbest = 8;
  options.subword_alpha = 0.2f;
  options.num_threads = 2;
  auto sampled = Dataset::Build(source_path, target_path, *tokenizer_, TempPath("sampled.cache"), options);
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  const Dataset& d = **sampled;
  ASSERT_TRUE(d.sampled());
  EXPECT_FALSE((*plain)->sampled());
  ASSERT_EQ(d.size(), (*plain)->size());
  EXPECT_EQ(d.stats().pairs_kept, (*plain)->stats().pairs_kept);
  EXPECT_EQ(d.stats().dropped_ratio, (*plain)->stats().dropped_ratio);
  EXPECT_EQ(d.stats().source_tokens, (*plain)->stats().source_tokens);

  std::vector<int32_t> best_s, best_t, plain_s, plain_t, s1, t1, s2, t2;
  int64_t differs_from_best = 0, differs_between_epochs = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    ASSERT_TRUE(d.ReadPair(i, &best_s, &best_t).ok());
    ASSERT_TRUE((*plain)->ReadPair(i, &plain_s, &plain_t).ok());
    EXPECT_EQ(best_s, plain_s) << i;
    EXPECT_EQ(best_t, plain_t) << i;
    const std::string source_text = tokenizer_->Decode(best_s).value();
    const std::string target_text = tokenizer_->Decode(best_t).value();
    ASSERT_TRUE(d.ReadSampledPair(i, 7, 3, &s1, &t1).ok());
    ASSERT_TRUE(d.ReadSampledPair(i, 7, 3, &s2, &t2).ok());
    EXPECT_EQ(s1, s2) << "the same (seed, epoch) draws the same";
    EXPECT_EQ(t1, t2);
    EXPECT_EQ(tokenizer_->Decode(s1).value(), source_text) << i;
    EXPECT_EQ(tokenizer_->Decode(t1).value(), target_text) << i;
    EXPECT_LE(static_cast<int32_t>(s1.size()), d.source_length(i));
    EXPECT_LE(static_cast<int32_t>(t1.size()), d.target_length(i));
    EXPECT_LE(d.source_length(i), 60);
    differs_from_best += s1 != best_s;
    ASSERT_TRUE(d.ReadSampledPair(i, 7, 4, &s2, &t2).ok());
    differs_between_epochs += s1 != s2 || t1 != t2;
  }
  EXPECT_GT(differs_from_best, d.size() / 10);
  EXPECT_GT(differs_between_epochs, d.size() / 10);

  options.subword_alpha = 50.0f;  // probabilities concentrate on the best segmentation
  auto sharp = Dataset::Build(source_path, target_path, *tokenizer_, TempPath("sharp.cache"), options);
  ASSERT_TRUE(sharp.ok()) << sharp.status();
  int64_t sharp_differs = 0;
  for (int64_t i = 0; i < (*sharp)->size(); ++i) {
    ASSERT_TRUE((*sharp)->ReadPair(i, &best_s, &best_t).ok());
    ASSERT_TRUE((*sharp)->ReadSampledPair(i, 7, 3, &s1, &t1).ok());
    sharp_differs += s1 != best_s;
  }
  EXPECT_LT(sharp_differs, differs_from_best / 4);
}

// The n-best search on the longest texts it is run on (just under the piece bound) and the
// largest n: no crash, the best first and equal to Encode, distinct segmentations of the text.
TEST_F(DatasetBuildTest, NBestOnLongTextsAndTheLargestN) {
  const auto pairs = testing::SyntheticPairs(200, /*seed=*/13, /*max_words=*/30);
  std::string text;
  for (const auto& pair : pairs) {
    const std::string longer = text.empty() ? pair.first : text + " " + pair.first;
    if (tokenizer_->Encode(longer).value().size() > Tokenizer::kNBestMaxPieces) break;
    text = longer;
  }
  const std::vector<int32_t> best = tokenizer_->Encode(text).value();
  ASSERT_GT(best.size(), Tokenizer::kNBestMaxPieces - 40);
  auto nbest = tokenizer_->EncodeNBest(text, Tokenizer::kNBestMax);
  ASSERT_TRUE(nbest.ok()) << nbest.status();
  ASSERT_EQ(nbest->size(), static_cast<size_t>(Tokenizer::kNBestMax));
  EXPECT_EQ((*nbest)[0].ids, best);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& s : *nbest) {
    EXPECT_EQ(tokenizer_->Decode(s.ids).value(), tokenizer_->Decode(best).value());
    EXPECT_LE(s.log_prob, (*nbest)[0].log_prob);
    distinct.insert(s.ids);
  }
  EXPECT_EQ(distinct.size(), nbest->size());
  // Over the bound: only the best.
  auto single = tokenizer_->EncodeNBest(text + " " + text, 8);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->size(), 1u);
  EXPECT_FALSE(tokenizer_->EncodeNBest("a", 0).ok());
}

TEST_F(DatasetBuildTest, EmptyCorpusGivesAnEmptyDataset) {
  const std::string source = TempPath("empty_corpus.en");
  const std::string target = TempPath("empty_corpus.de.gz");
  ASSERT_TRUE(testing::WritePlainFile(source, ""));
  ASSERT_TRUE(testing::WriteGzipFile(target, ""));
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      Dataset::Build(source, target, *tokenizer_, TempPath("empty.cache"), DatasetOptions());
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->size(), 0);
  EXPECT_EQ((*dataset)->stats().pairs_read, 0);
}

TEST_F(DatasetBuildTest, BadInputNamesFileAndLine) {
  const std::string source = TempPath("bad_corpus.en");
  const std::string target = TempPath("bad_corpus.de");
  ASSERT_TRUE(testing::WritePlainFile(source, "a dog\na cat\nthe man\n"));
  ASSERT_TRUE(testing::WritePlainFile(target, "ein Hund\neine Katze\n"));
  absl::StatusOr<std::unique_ptr<Dataset>> dataset =
      Dataset::Build(source, target, *tokenizer_, TempPath("bad.cache"), DatasetOptions());
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr(target + " ends after line 2"));

  ASSERT_TRUE(testing::WritePlainFile(target, "ein Hund\neine Katze\nder \xc3\x28 Mann\n"));
  dataset = Dataset::Build(source, target, *tokenizer_, TempPath("bad.cache"), DatasetOptions());
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr(target + ":3:"));
}

TEST_F(DatasetBuildTest, UnwritableCacheIsAnError) {
  const std::string source = TempPath("ok_corpus.en");
  ASSERT_TRUE(testing::WritePlainFile(source, "a dog\n"));
  absl::StatusOr<std::unique_ptr<Dataset>> dataset = Dataset::Build(
      source, source, *tokenizer_, TempPath("no/such/dir/x.cache"), DatasetOptions());
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr("no/such/dir/x.cache"));
}

}  // namespace
}  // namespace tnmt::data

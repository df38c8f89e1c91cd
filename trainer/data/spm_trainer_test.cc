// Tests for joint SentencePiece training: vocabulary size and special ids, determinism (with
// and without sampling), .gz input, and errors that name the input.
#include "trainer/data/spm_trainer.h"

#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/test_corpus.h"

namespace tnmt::data {
namespace {

using ::testing::HasSubstr;
using testing::JoinLines;
using testing::TempPath;

class SpmTrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto pairs = testing::SyntheticPairs(3000, /*seed=*/7);
    source_path_ = new std::string(TempPath("spm_corpus.en"));
    target_path_ = new std::string(TempPath("spm_corpus.de.gz"));
    ASSERT_TRUE(testing::WritePlainFile(*source_path_, JoinLines(testing::Sources(pairs))));
    ASSERT_TRUE(testing::WriteGzipFile(*target_path_, JoinLines(testing::Targets(pairs))));
  }
  static void TearDownTestSuite() {
    delete source_path_;
    delete target_path_;
  }
  static std::vector<std::string> Inputs() { return {*source_path_, *target_path_}; }

  static std::string* source_path_;
  static std::string* target_path_;
};
std::string* SpmTrainerTest::source_path_ = nullptr;
std::string* SpmTrainerTest::target_path_ = nullptr;

SpmTrainerOptions SmallOptions() {
  SpmTrainerOptions options;
  options.vocab_size = 120;
  return options;
}

TEST_F(SpmTrainerTest, TrainsRequestedVocabularyWithSpecialIds) {
  const std::string model = TempPath("vocab.spm.model");
  const absl::Status status = TrainJointSentencePiece(Inputs(), model, SmallOptions());
  ASSERT_TRUE(status.ok()) << status;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 120);
  EXPECT_EQ((*tokenizer)->pad_id(), 0);
  EXPECT_EQ((*tokenizer)->unk_id(), 1);
  EXPECT_EQ((*tokenizer)->bos_id(), 2);
  EXPECT_EQ((*tokenizer)->eos_id(), 3);
  // Both languages are covered: no unknown pieces, and text round-trips.
  for (const std::string text : {"the small dog jumps over the fence", "der Hund springt über"}) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    for (int32_t id : *ids) EXPECT_NE(id, 1) << text;
    absl::StatusOr<std::string> decoded = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, text);
  }
}

TEST_F(SpmTrainerTest, TrainingIsDeterministic) {
  const std::string first = TempPath("first.spm.model");
  const std::string second = TempPath("second.spm.model");
  ASSERT_EQ(TrainJointSentencePiece(Inputs(), first, SmallOptions()), absl::OkStatus());
  ASSERT_EQ(TrainJointSentencePiece(Inputs(), second, SmallOptions()), absl::OkStatus());
  const std::string bytes = testing::ReadWholeFile(first);
  EXPECT_FALSE(bytes.empty());
  EXPECT_TRUE(bytes == testing::ReadWholeFile(second)) << "two trainings differ";
}

TEST_F(SpmTrainerTest, SampledTrainingIsDeterministicPerSeed) {
  SpmTrainerOptions options = SmallOptions();
  options.input_sentence_size = 1500;  // of 6000 lines
  options.vocab_size = 90;
  const std::string first = TempPath("sampled1.spm.model");
  const std::string second = TempPath("sampled2.spm.model");
  const std::string other_seed = TempPath("sampled3.spm.model");
  ASSERT_EQ(TrainJointSentencePiece(Inputs(), first, options), absl::OkStatus());
  ASSERT_EQ(TrainJointSentencePiece(Inputs(), second, options), absl::OkStatus());
  options.seed = 99;
  ASSERT_EQ(TrainJointSentencePiece(Inputs(), other_seed, options), absl::OkStatus());
  EXPECT_TRUE(testing::ReadWholeFile(first) == testing::ReadWholeFile(second));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(other_seed);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 90);
}

TEST_F(SpmTrainerTest, InvalidUtf8NamesFileAndLine) {
  const std::string bad = TempPath("bad_utf8.de");
  ASSERT_TRUE(testing::WritePlainFile(bad, "gut\nnoch gut\n\xff\xfe kaputt\n"));
  const absl::Status status =
      TrainJointSentencePiece({*source_path_, bad}, TempPath("bad.model"), SmallOptions());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(bad + ":3:"));
}

TEST_F(SpmTrainerTest, MissingInputIsNamed) {
  const std::string missing = TempPath("nowhere.de");
  const absl::Status status =
      TrainJointSentencePiece({*source_path_, missing}, TempPath("missing.model"), SmallOptions());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(missing));
}

TEST_F(SpmTrainerTest, EmptyInputIsAnError) {
  const std::string empty = TempPath("empty_input.txt");
  ASSERT_TRUE(testing::WritePlainFile(empty, "\n\n"));
  const absl::Status status =
      TrainJointSentencePiece({empty}, TempPath("empty.model"), SmallOptions());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(empty));
}

TEST_F(SpmTrainerTest, VocabularyTooLargeForTheDataIsAnError) {
  SpmTrainerOptions options = SmallOptions();
  options.vocab_size = 50000;
  const std::string model = TempPath("too_big.model");
  const absl::Status status = TrainJointSentencePiece(Inputs(), model, options);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("SentencePiece"));
}

TEST_F(SpmTrainerTest, UnwritableModelPathIsAnError) {
  const absl::Status status =
      TrainJointSentencePiece(Inputs(), TempPath("no/such/directory/spm.model"), SmallOptions());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("no/such/directory"));
}

}  // namespace
}  // namespace tnmt::data

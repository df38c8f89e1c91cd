// Tests for LineReader and ParallelReader: plain and gzip input, long lines, empty files,
// mismatched line counts and invalid UTF-8 (errors must name file and line).
#include "trainer/data/text_reader.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/test_corpus.h"

namespace tnmt::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::JoinLines;
using testing::TempPath;
using testing::WriteGzipFile;
using testing::WritePlainFile;

std::vector<std::string> ReadAll(const std::string& path) {
  absl::StatusOr<std::unique_ptr<LineReader>> reader = LineReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<std::string> lines;
  if (!reader.ok()) return lines;
  std::string line;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    lines.push_back(line);
    EXPECT_EQ((*reader)->line_number(), static_cast<int64_t>(lines.size()));
  }
  return lines;
}

TEST(LineReaderTest, ReadsPlainLinesStrippingNewlines) {
  const std::string path = TempPath("plain.txt");
  ASSERT_TRUE(WritePlainFile(path, "one\ntwo\r\n\nlast without newline"));
  EXPECT_THAT(ReadAll(path), ElementsAre("one", "two", "", "last without newline"));
}

TEST(LineReaderTest, ReadsGzipLikePlain) {
  const std::string text = "ein Hund\nzwei Katzen\r\n\ngrüne Äpfel\n";
  const std::string path = TempPath("lines.txt.gz");
  ASSERT_TRUE(WriteGzipFile(path, text));
  EXPECT_THAT(ReadAll(path), ElementsAre("ein Hund", "zwei Katzen", "", "grüne Äpfel"));
}

TEST(LineReaderTest, KeepsEmbeddedNulBytes) {
  const std::string path = TempPath("nul.txt");
  ASSERT_TRUE(WritePlainFile(path, std::string("a\0b\nc\n", 6)));
  EXPECT_THAT(ReadAll(path), ElementsAre(std::string("a\0b", 3), "c"));
}

TEST(LineReaderTest, ReadsVeryLongLines) {
  std::string long_line;
  for (int i = 0; long_line.size() < (5u << 20); ++i) long_line += "word" + std::to_string(i) + ' ';
  const std::string text = "short\n" + long_line + "\nafter\n" + long_line;
  for (const bool gzip : {false, true}) {
    const std::string path = TempPath(gzip ? "long.txt.gz" : "long.txt");
    ASSERT_TRUE(gzip ? WriteGzipFile(path, text) : WritePlainFile(path, text));
    const std::vector<std::string> lines = ReadAll(path);
    ASSERT_EQ(lines.size(), 4u) << path;
    EXPECT_EQ(lines[0], "short");
    EXPECT_EQ(lines[1], long_line);
    EXPECT_EQ(lines[2], "after");
    EXPECT_EQ(lines[3], long_line);
  }
}

TEST(LineReaderTest, EmptyFilesHaveNoLines) {
  const std::string plain = TempPath("empty.txt");
  const std::string gzip = TempPath("empty.txt.gz");
  ASSERT_TRUE(WritePlainFile(plain, ""));
  ASSERT_TRUE(WriteGzipFile(gzip, ""));
  EXPECT_TRUE(ReadAll(plain).empty());
  EXPECT_TRUE(ReadAll(gzip).empty());
}

TEST(LineReaderTest, MissingFileIsNamed) {
  const std::string path = TempPath("does-not-exist.txt");
  absl::StatusOr<std::unique_ptr<LineReader>> reader = LineReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr(path));
}

TEST(LineReaderTest, TruncatedGzipIsAnErrorNamingFileAndLine) {
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "line " + std::to_string(i * 7919 % 100003) + "\n";
  const std::string full = TempPath("full.gz");
  ASSERT_TRUE(WriteGzipFile(full, text));
  const std::string compressed = testing::ReadWholeFile(full);
  const std::string path = TempPath("truncated.gz");
  ASSERT_TRUE(WritePlainFile(path, compressed.substr(0, compressed.size() / 2)));

  absl::StatusOr<std::unique_ptr<LineReader>> reader = LineReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string line;
  absl::Status error;
  int64_t lines = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line);
    if (!more.ok()) {
      error = more.status();
      break;
    }
    ASSERT_TRUE(*more) << "a truncated gzip file read to the end without an error";
    ++lines;
  }
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(error.message(), HasSubstr(path + ":"));
  EXPECT_LT(lines, 200000);
}

void WritePair(const std::string& name, const std::vector<std::string>& source,
               const std::vector<std::string>& target, bool gzip_target, std::string* source_path,
               std::string* target_path) {
  *source_path = TempPath(name + ".en");
  *target_path = TempPath(name + (gzip_target ? ".de.gz" : ".de"));
  ASSERT_TRUE(WritePlainFile(*source_path, JoinLines(source)));
  ASSERT_TRUE(gzip_target ? WriteGzipFile(*target_path, JoinLines(target))
                          : WritePlainFile(*target_path, JoinLines(target)));
}

// Reads pairs until the end or an error, which is returned.
absl::Status ReadPairs(const std::string& source_path, const std::string& target_path,
                       std::vector<std::pair<std::string, std::string>>* pairs) {
  absl::StatusOr<std::unique_ptr<ParallelReader>> reader =
      ParallelReader::Open(source_path, target_path);
  if (!reader.ok()) return reader.status();
  std::string source, target;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&source, &target);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    pairs->emplace_back(source, target);
    EXPECT_EQ((*reader)->line_number(), static_cast<int64_t>(pairs->size()));
  }
}

TEST(ParallelReaderTest, ReadsPairsFromPlainAndGzip) {
  std::string source_path, target_path;
  WritePair("pairs", {"a dog", "two cats", "a red house"},
            {"ein Hund", "zwei Katzen", "ein rotes Haus"},
            /*gzip_target=*/true, &source_path, &target_path);
  std::vector<std::pair<std::string, std::string>> pairs;
  ASSERT_TRUE(ReadPairs(source_path, target_path, &pairs).ok());
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[1].first, "two cats");
  EXPECT_EQ(pairs[1].second, "zwei Katzen");
}

TEST(ParallelReaderTest, EmptyFilesGiveNoPairs) {
  std::string source_path, target_path;
  WritePair("empty", {}, {}, /*gzip_target=*/true, &source_path, &target_path);
  std::vector<std::pair<std::string, std::string>> pairs;
  EXPECT_TRUE(ReadPairs(source_path, target_path, &pairs).ok());
  EXPECT_TRUE(pairs.empty());
}

TEST(ParallelReaderTest, ShorterTargetIsAnErrorNamingBothFilesAndTheLine) {
  std::string source_path, target_path;
  WritePair("short_target", {"1", "2", "3", "4", "5"}, {"eins", "zwei", "drei"},
            /*gzip_target=*/true, &source_path, &target_path);
  std::vector<std::pair<std::string, std::string>> pairs;
  const absl::Status status = ReadPairs(source_path, target_path, &pairs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(target_path + " ends after line 3"));
  EXPECT_THAT(status.message(), HasSubstr(source_path + " has line 4"));
  EXPECT_EQ(pairs.size(), 3u);
}

TEST(ParallelReaderTest, ShorterSourceIsAnErrorNamingBothFilesAndTheLine) {
  std::string source_path, target_path;
  WritePair("short_source", {"1"}, {"eins", "zwei"}, /*gzip_target=*/false, &source_path,
            &target_path);
  std::vector<std::pair<std::string, std::string>> pairs;
  const absl::Status status = ReadPairs(source_path, target_path, &pairs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(source_path + " ends after line 1"));
  EXPECT_THAT(status.message(), HasSubstr(target_path + " has line 2"));
}

TEST(ParallelReaderTest, InvalidUtf8IsAnErrorNamingFileAndLine) {
  std::string source_path, target_path;
  WritePair("bad_utf8", {"fine", "also fine", "fine again"}, {"gut", "caf\xe9 latin-1", "gut"},
            /*gzip_target=*/true, &source_path, &target_path);
  std::vector<std::pair<std::string, std::string>> pairs;
  const absl::Status status = ReadPairs(source_path, target_path, &pairs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(target_path + ":2:"));
  EXPECT_THAT(status.message(), HasSubstr("byte 3"));
  EXPECT_EQ(pairs.size(), 1u);
}

TEST(ParallelReaderTest, MissingFileIsNamed) {
  std::string source_path, target_path;
  WritePair("missing", {"a"}, {"b"}, /*gzip_target=*/false, &source_path, &target_path);
  const std::string missing = TempPath("missing.fr");
  absl::StatusOr<std::unique_ptr<ParallelReader>> reader =
      ParallelReader::Open(source_path, missing);
  ASSERT_FALSE(reader.ok());
  EXPECT_THAT(reader.status().message(), HasSubstr(missing));
}

}  // namespace
}  // namespace tnmt::data

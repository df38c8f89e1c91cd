// Shortlist tables: the file format round trip, every refusal of a bad file (naming the file,
// line and problem), the candidate set of a batch, and IBM Model 1 estimation on a corpus whose
// alignment is known.
#include "engine/model/shortlist.h"

#include <fstream>
#include <string>

#include "engine/model/shortlist_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tnmt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ShortlistTest, RoundTrip) {
  Shortlist s = Shortlist::Empty(10);
  s.frequent = {1, 4};
  ASSERT_TRUE(s.SetTargets(2, {7, 5, 7}).ok());
  ASSERT_TRUE(s.SetTargets(9, {0}).ok());
  const std::string path = ::testing::TempDir() + "/round.txt";
  ASSERT_TRUE(WriteShortlist(path, s, {"made by a test"}).ok());
  absl::StatusOr<Shortlist> r = ReadShortlist(path, 10);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->vocab_size, 10);
  EXPECT_THAT(r->frequent, ElementsAre(1, 4));
  EXPECT_THAT(r->TargetsOf(2), ElementsAre(5, 7));
  EXPECT_THAT(r->TargetsOf(9), ElementsAre(0));
  EXPECT_TRUE(r->TargetsOf(3).empty());
}

TEST(ShortlistTest, SetTargetsRefusesRepeatsAndRange) {
  Shortlist s = Shortlist::Empty(5);
  ASSERT_TRUE(s.SetTargets(3, {1}).ok());
  EXPECT_FALSE(s.SetTargets(3, {2}).ok());
  EXPECT_FALSE(s.SetTargets(1, {2}).ok());
  EXPECT_FALSE(s.SetTargets(4, {5}).ok());
  EXPECT_FALSE(s.SetTargets(5, {1}).ok());
}

TEST(ShortlistTest, Candidates) {
  Shortlist s = Shortlist::Empty(10);
  s.frequent = {0, 6};  // 0 is pad: never a candidate
  ASSERT_TRUE(s.SetTargets(2, {8, 9}).ok());
  ASSERT_TRUE(s.SetTargets(3, {9, 5}).ok());
  std::vector<uint8_t> mark;
  EXPECT_THAT(s.Candidates({2, 3, 3, 4}, /*eos=*/2, /*unk=*/1, /*pad=*/0, &mark), ElementsAre(1, 2, 5, 6, 8, 9));
  EXPECT_THAT(s.Candidates({}, 2, 1, 0, &mark), ElementsAre(1, 2, 6));
  for (uint8_t m : mark) EXPECT_EQ(m, 0);
}

struct BadFile {
  const char* name;
  const char* text;
  const char* message;
};

TEST(ShortlistTest, BadFilesAreRefusedWithTheirProblem) {
  const BadFile cases[] = {
      {"empty", "", "empty file"},
      {"garbage", "\x7f" "ELF\x01\x02 binary\n", "line 1: not a tnmt shortlist file"},
      {"version", "tnmt-shortlist 2\nvocab_size 4\nend\n", "line 1: format version \"2\" is not supported"},
      {"no_vocab", "tnmt-shortlist 1\n", "truncated after the first line"},
      {"bad_vocab", "tnmt-shortlist 1\nvocab_size x\nend\n", "line 2: expected \"vocab_size V\""},
      {"wrong_vocab", "tnmt-shortlist 1\nvocab_size 5\nend\n", "line 2: built for a vocabulary of 5 pieces, but the model has 4"},
      {"truncated_end", "tnmt-shortlist 1\nvocab_size 4\nfrequent 1 2\nsource 1 1 3\n", "truncated (no \"end\" line)"},
      {"truncated_line", "tnmt-shortlist 1\nvocab_size 4\nsource 1 3 2 3\nend\n",
       "line 3: \"source\" declares 3 ids but the line has 2 (truncated?)"},
      {"too_many", "tnmt-shortlist 1\nvocab_size 4\nfrequent 1 2 3\nend\n", "line 3: \"frequent\" declares 1 ids but the line has 2"},
      {"target_range", "tnmt-shortlist 1\nvocab_size 4\nsource 1 1 4\nend\n", "line 3: target id 4 is outside [0, 4)"},
      {"negative", "tnmt-shortlist 1\nvocab_size 4\nfrequent 1 -1\nend\n", "line 3: target id -1 is outside [0, 4)"},
      {"source_range", "tnmt-shortlist 1\nvocab_size 4\nsource 9 1 1\nend\n", "line 3: source id 9 is outside [0, 4)"},
      {"not_number", "tnmt-shortlist 1\nvocab_size 4\nsource 1 1 x\nend\n", "line 3: target id \"x\" is not a number"},
      {"repeated", "tnmt-shortlist 1\nvocab_size 4\nsource 1 1 1\nsource 1 1 2\nend\n",
       "line 4: source id 1 after source id 1"},
      {"frequent_late", "tnmt-shortlist 1\nvocab_size 4\nsource 1 1 1\nfrequent 0\nend\n",
       "line 4: \"frequent\" after a \"source\" line"},
      {"unknown", "tnmt-shortlist 1\nvocab_size 4\nhello 1\nend\n", "line 3: unknown line \"hello 1\""},
      {"after_end", "tnmt-shortlist 1\nvocab_size 4\nend\nsource 1 1 1\n", "line 4: text after \"end\""},
  };
  for (const BadFile& c : cases) {
    const std::string path = WriteText(c.name, c.text);
    absl::StatusOr<Shortlist> r = ReadShortlist(path, 4);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(path)) << c.name;
  }
  EXPECT_THAT(std::string(ReadShortlist(::testing::TempDir() + "/missing").status().message()),
              HasSubstr("cannot open"));
}

TEST(ShortlistTest, CommentsAreIgnored) {
  const std::string path = WriteText("comments", "tnmt-shortlist 1\n# a comment\nvocab_size 4\n# another\nend\n");
  EXPECT_TRUE(ReadShortlist(path, 4).ok());
}

// A corpus whose word alignment is one-to-one: source piece 10 + i always translates into target
// piece 20 + i, next to a "function word" target 5 present in every sentence. Model 1 ranks the
// translation first for every source piece; co-occurrence counts rank target 5 first.
TEST(ShortlistBuilderTest, ModelOneFindsTheTranslations) {
  ShortlistBuilder b(40, /*pad_id=*/0);
  for (int rep = 0; rep < 3; ++rep) {
    for (int i = 0; i < 6; ++i) {
      for (int j = i + 1; j < 6; ++j) ASSERT_TRUE(b.Add({10 + i, 10 + j}, {5, 20 + i, 20 + j}).ok());
    }
  }
  ASSERT_EQ(b.pairs(), 45);
  absl::StatusOr<Shortlist> em = b.Build({/*per_source=*/1, /*frequent=*/1, /*iterations=*/5});
  ASSERT_TRUE(em.ok()) << em.status();
  EXPECT_THAT(em->frequent, ElementsAre(5));
  for (int i = 0; i < 6; ++i) EXPECT_THAT(em->TargetsOf(10 + i), ElementsAre(20 + i)) << i;
  EXPECT_TRUE(em->TargetsOf(11 + 20).empty());
  absl::StatusOr<Shortlist> counts = b.Build({1, 1, /*iterations=*/0});
  ASSERT_TRUE(counts.ok());
  EXPECT_THAT(counts->TargetsOf(10), ElementsAre(5));
  EXPECT_FALSE(b.Build({-1, 1, 1}).ok());
  EXPECT_FALSE(b.Add({40}, {1}).ok());
}

TEST(ShortlistBuilderTest, PadNeverShortlisted) {
  ShortlistBuilder b(8, /*pad_id=*/0);
  ASSERT_TRUE(b.Add({3}, {0, 0, 0, 4}).ok());
  absl::StatusOr<Shortlist> s = b.Build({5, 5, 3});
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(s->frequent, ElementsAre(4));
  EXPECT_THAT(s->TargetsOf(3), ElementsAre(4));
}

}  // namespace
}  // namespace tnmt

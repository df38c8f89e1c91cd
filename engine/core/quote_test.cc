// QuoteForError: short strings quoted whole, long ones cut with their length, every byte that
// is not printable ASCII escaped, and the result bounded whatever the input.
#include "engine/core/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace tnmt {
namespace {

TEST(QuoteForError, ShortPrintableStringsAreQuotedWhole) {
  EXPECT_EQ(QuoteForError("demo"), "\"demo\"");
  EXPECT_EQ(QuoteForError(""), "\"\"");
}

TEST(QuoteForError, EscapesQuotesBackslashesAndBinary) {
  EXPECT_EQ(QuoteForError("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteForError(std::string("x\n\xff\0y", 5)), "\"x\\x0a\\xff\\x00y\"");
}

TEST(QuoteForError, LongStringsAreCutAndSayTheirLength) {
  const std::string name(16000, 'm');
  const std::string q = QuoteForError(name);
  EXPECT_EQ(q, "\"" + std::string(64, 'm') + "...\" (16000 bytes)");
}

TEST(QuoteForError, ExactlyTheLimitIsNotCut) {
  EXPECT_EQ(QuoteForError(std::string(64, 'a')), "\"" + std::string(64, 'a') + "\"");
  EXPECT_EQ(QuoteForError(std::string(65, 'a'), 64).size(), 1 + 64 + 3 + 1 + 11);
}

TEST(QuoteForError, BoundedForAnyInput) {
  std::string garbage;
  for (int i = 0; i < 1 << 20; ++i) garbage.push_back(static_cast<char>(i * 131 + 7));
  const std::string q = QuoteForError(garbage, 64);
  EXPECT_LE(q.size(), 64u + 32u);
  for (char c : q) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
}

}  // namespace
}  // namespace tnmt

// CheckJsonLimits against hand-built texts: depth counted outside strings only, escapes
// honoured, the size limit, and messages that name the input and the limit.
#include "engine/core/json_limits.h"

#include <string>

#include "gtest/gtest.h"

namespace tnmt {
namespace {

std::string Nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(JsonLimitsTest, DepthAtTheLimitPassesOneMoreFails) {
  JsonLimits limits;
  limits.max_depth = 5;
  EXPECT_TRUE(CheckJsonLimits(Nested(5), "x", limits).ok());
  const absl::Status s = CheckJsonLimits(Nested(6), "the request body", limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "the request body nests JSON arrays and objects deeper than 5 levels (the limit), at byte 5");
}

TEST(JsonLimitsTest, SiblingsDoNotAddUp) {
  JsonLimits limits;
  limits.max_depth = 2;
  EXPECT_TRUE(CheckJsonLimits(R"({"a":[1],"b":[2],"c":{"d":3}})", "x", limits).ok());
  EXPECT_FALSE(CheckJsonLimits(R"({"a":[1],"b":[2],"c":{"d":[3]}})", "x", limits).ok());
}

TEST(JsonLimitsTest, BracketsInsideStringsDoNotCount) {
  JsonLimits limits;
  limits.max_depth = 1;
  EXPECT_TRUE(CheckJsonLimits(R"(["[[[[{{{{", "\"[[[[", "\\"])", "x", limits).ok());
  // After an escaped backslash the quote ends the string, so the bracket after it counts.
  EXPECT_FALSE(CheckJsonLimits(R"(["\\", [1]])", "x", limits).ok());
}

TEST(JsonLimitsTest, TheDeepBodyThatOverflowedTheStack) {
  const std::string body = std::string(R"({"texts":["a"],"x":)") + Nested(60000) + "}";
  const absl::Status s = CheckJsonLimits(body, "the request body");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("deeper than 64 levels"), absl::string_view::npos) << s;
}

TEST(JsonLimitsTest, Size) {
  JsonLimits limits;
  limits.max_bytes = 10;
  EXPECT_TRUE(CheckJsonLimits("[1,2,3,4]", "x", limits).ok());
  const absl::Status s = CheckJsonLimits("[1,2,3,4,5]", "config.json", limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config.json is 11 bytes of JSON; the limit is 10 bytes");
}

TEST(JsonLimitsTest, ANulByteIsRefusedWhereverItStands) {
  const std::string tail = std::string(R"({"a": 1})") + '\0' + R"({"model": 7})";
  const absl::Status s = CheckJsonLimits(tail, "config.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config.json holds a NUL byte at byte 8, which JSON never has");
  EXPECT_FALSE(CheckJsonLimits(std::string("[\"a") + '\0' + "b\"]", "x").ok());
}

TEST(JsonLimitsTest, MalformedTextIsLeftToTheParser) {
  EXPECT_TRUE(CheckJsonLimits("]]]}}{", "x").ok());
  EXPECT_TRUE(CheckJsonLimits("\"unterminated [[[[", "x").ok());
}

}  // namespace
}  // namespace tnmt

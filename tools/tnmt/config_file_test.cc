// ParseConfigJson: syntax errors carry the file, line and column; both key spellings are
// accepted and rewritten to the command's own; a key given in both spellings is an error.
#include "tools/tnmt/config_file.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tnmt::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

TEST(ConfigFileTest, SyntaxErrorNamesFileLineAndColumn) {
  const std::string text = "{\n  \"max_steps\": 10,\n  \"save_dir\": oops\n}\n";
  auto j = ParseConfigJson(text, "run.json", '_');
  ASSERT_FALSE(j.ok());
  const std::string msg(j.status().message());
  EXPECT_THAT(msg, HasSubstr("run.json:3:"));
  EXPECT_THAT(msg, HasSubstr("invalid JSON"));
  EXPECT_THAT(msg, Not(HasSubstr("json.exception")));
}

TEST(ConfigFileTest, ColumnCountsFromOne) {
  auto j = ParseConfigJson("{\"a\": 1,, \"b\": 2}", "x.json", '_');
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("x.json:1:9: invalid JSON"));
}

TEST(ConfigFileTest, TruncatedFileNamesTheLastLine) {
  auto j = ParseConfigJson("{\n  \"a\": 1,\n", "t.json", '-');
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("t.json:3:"));
}

TEST(ConfigFileTest, NotAnObject) {
  auto j = ParseConfigJson("[1, 2]", "a.json", '_');
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("a.json: must be a JSON object"));
}

TEST(ConfigFileTest, DeepNestingIsRefusedNamingTheLimit) {
  const std::string text = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto j = ParseConfigJson(text, "deep.json", '_');
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("deep.json nests JSON arrays and objects deeper than 64 levels"),
            absl::string_view::npos)
      << j.status();
}

TEST(ConfigFileTest, BothSpellingsAreAcceptedAndRewritten) {
  const std::string text = R"({"max-steps": 5, "max_tokens": 7, "models": {"en_de": "/m/a", "de-en": "/m/b"}})";
  auto underscore = ParseConfigJson(text, "a.json", '_');
  ASSERT_TRUE(underscore.ok()) << underscore.status();
  EXPECT_EQ((*underscore)["max_steps"], 5);
  EXPECT_EQ((*underscore)["max_tokens"], 7);
  EXPECT_FALSE(underscore->contains("max-steps"));
  // Nested keys (here model names) are data, not settings: kept as written.
  EXPECT_TRUE((*underscore)["models"].contains("en_de"));
  EXPECT_TRUE((*underscore)["models"].contains("de-en"));
  auto dash = ParseConfigJson(text, "a.json", '-');
  ASSERT_TRUE(dash.ok()) << dash.status();
  EXPECT_EQ((*dash)["max-steps"], 5);
  EXPECT_EQ((*dash)["max-tokens"], 7);
}

TEST(ConfigFileTest, OneSettingInTwoSpellingsIsAnError) {
  auto j = ParseConfigJson(R"({"max_steps": 5, "max-steps": 6})", "a.json", '_');
  ASSERT_FALSE(j.ok());
  const std::string msg(j.status().message());
  EXPECT_THAT(msg, HasSubstr("a.json"));
  EXPECT_THAT(msg, HasSubstr("\"max_steps\""));
  EXPECT_THAT(msg, HasSubstr("\"max-steps\""));
}

TEST(ConfigFileTest, MissingFile) {
  auto j = ReadConfigFile("/nonexistent/run.json", '_');
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(j.status().message()), HasSubstr("/nonexistent/run.json"));
}

}  // namespace
}  // namespace tnmt::cli

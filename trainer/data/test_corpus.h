// Test helpers: files in the test's temporary directory and a synthetic parallel corpus
// ("sentences" drawn from small English and German word lists), so no test needs real data.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tnmt::data::testing {

// `name` inside ::testing::TempDir().
std::string TempPath(const std::string& name);

// Write `contents` to `path` as is, or gzip-compressed. Return false on failure.
bool WritePlainFile(const std::string& path, const std::string& contents);
bool WriteGzipFile(const std::string& path, const std::string& contents);
std::string ReadWholeFile(const std::string& path);

// `count` pairs (source, target) of 1..max_words words, reproducible from `seed`; the
// target is a word-by-word "translation" with an occasional extra word.
std::vector<std::pair<std::string, std::string>> SyntheticPairs(int count, uint64_t seed,
                                                                int max_words = 20);

// Lines joined with '\n' (and a final '\n').
std::string JoinLines(const std::vector<std::string>& lines);
std::vector<std::string> Sources(const std::vector<std::pair<std::string, std::string>>& pairs);
std::vector<std::string> Targets(const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace tnmt::data::testing

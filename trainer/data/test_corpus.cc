// Synthetic corpus and file helpers for the data tests; see test_corpus.h.
#include "trainer/data/test_corpus.h"

#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "gtest/gtest.h"

namespace tnmt::data::testing {
namespace {

constexpr const char* kEnglish[] = {
    "the",  "a",     "man",   "woman",   "child",  "dog",  "cat",       "walks",
    "runs", "sits",  "on",    "in",      "street", "park", "house",     "red",
    "blue", "green", "small", "big",     "with",   "ball", "water",     "jumps",
    "over", "fence", "while", "playing", "guitar", "near", "beautiful", "river"};
constexpr const char* kGerman[] = {
    "der",   "ein",   "Mann",    "Frau",   "Kind",    "Hund", "Katze",  "geht",
    "rennt", "sitzt", "auf",     "in",     "Straße",  "Park", "Haus",   "rot",
    "blau",  "grün",  "klein",   "groß",   "mit",     "Ball", "Wasser", "springt",
    "über",  "Zaun",  "während", "spielt", "Gitarre", "nahe", "schön",  "Fluss"};
constexpr int kWords = sizeof(kEnglish) / sizeof(kEnglish[0]);

}  // namespace

std::string TempPath(const std::string& name) {
  std::string base = ::testing::TempDir();
  if (base.empty() || base.back() != '/') base += '/';
  return base + name;
}

bool WritePlainFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  return static_cast<bool>(out);
}

bool WriteGzipFile(const std::string& path, const std::string& contents) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (file == nullptr) return false;
  size_t done = 0;
  while (done < contents.size()) {
    const unsigned part = static_cast<unsigned>(std::min<size_t>(contents.size() - done, 1 << 20));
    if (gzwrite(file, contents.data() + done, part) != static_cast<int>(part)) {
      gzclose(file);
      return false;
    }
    done += part;
  }
  return gzclose(file) == Z_OK;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::vector<std::pair<std::string, std::string>> SyntheticPairs(int count, uint64_t seed,
                                                                int max_words) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(count);
  for (int i = 0; i < count; ++i) {
    const int words = 1 + static_cast<int>(rng() % max_words);
    std::string source, target;
    for (int w = 0; w < words; ++w) {
      const int word = static_cast<int>(rng() % kWords);
      if (w > 0) {
        source += ' ';
        target += ' ';
      }
      source += kEnglish[word];
      target += kGerman[word];
      if (rng() % 8 == 0) target += std::string(" ") + kGerman[(word + 1) % kWords];
    }
    pairs.emplace_back(std::move(source), std::move(target));
  }
  return pairs;
}

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) {
    text += line;
    text += '\n';
  }
  return text;
}

std::vector<std::string> Sources(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<std::string> lines;
  for (const auto& pair : pairs) lines.push_back(pair.first);
  return lines;
}

std::vector<std::string> Targets(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<std::string> lines;
  for (const auto& pair : pairs) lines.push_back(pair.second);
  return lines;
}

}  // namespace tnmt::data::testing

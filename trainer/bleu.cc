// sacreBLEU-compatible 13a tokenization and corpus BLEU (see bleu.h).
//
// The tokenizer works on UTF-8 bytes, while sacreBLEU's Python regexes work on code points.
// Why the byte-level version gives the same result on valid UTF-8:
//  * In UTF-8 every byte of a multi-byte sequence is >= 0x80, and every byte < 0x80 is a whole
//    ASCII code point. So an ASCII literal ("<skipped>", "-\n", "&quot;", ...) or an ASCII
//    character class matches at a byte position exactly where it matches at the corresponding
//    code point, and never inside a multi-byte character.
//  * Rule 1 `[{-~[-` -&(-+:-@/]` and rule 4 `([0-9])(-)` only involve ASCII characters, so
//    their matches are the same byte and code point positions (rule 1 matches one character at
//    a time, so there is nothing to overlap; rule 4 cannot overlap itself since '-' is no digit).
//  * Rule 2 `([^0-9])([.,])`: the second character is an ASCII byte, so a byte match at j needs
//    byte j+1 to be '.' or ','; then byte j is the last byte of a code point (an ASCII byte, or
//    the final continuation byte of a multi-byte character), and "byte j is not an ASCII digit"
//    holds exactly when that code point is not one of 0-9 (the only digits `[0-9]` means in a
//    Python str pattern). The byte scan never matches at any other byte of a multi-byte
//    character (the next byte is a continuation byte, not '.'/','). Inserting " " after byte j
//    equals inserting it after the code point, and both scans resume right after the '.'/','.
//    Between matches both scans advance one unit at a time over the same code points, so they
//    find the same non-overlapping left-to-right matches as Python's re.sub.
//  * Rule 3 `([.,])([^0-9])`: the first character is ASCII; the second, if multi-byte, is
//    represented by its lead byte, which is "not a digit" exactly when the code point is not.
//    The byte scan then resumes at the character's continuation bytes, which can never start a
//    match (they are not '.'/',') and are copied unchanged, so the next candidate is the next
//    code point, as in Python. The output " . X" is the same in both views.
//  * The final split and BLEU's rstrip() use Python's notion of whitespace (str.isspace(): the
//    ASCII ones plus U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
//    U+202F, U+205F, U+3000), recognised below by their UTF-8 byte sequences. Their lead bytes
//    (0xC2, 0xE1, 0xE2, 0xE3) never occur inside another character, so in valid UTF-8 a match
//    of such a sequence is always a whole code point.
#include "trainer/bleu.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tnmt::trainer {
namespace {

bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsPeriodOrComma(unsigned char c) { return c == '.' || c == ','; }

// Rule 1's class: { | } ~  [ \ ] ^ _ `  space ! " # $ % &  ( ) * +  : ; < = > ? @  /
bool IsRule1Char(unsigned char c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == '/';
}

// Byte length of the Python-whitespace code point starting at s[i], or 0 if there is none.
size_t WhitespaceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
  const size_t left = s.size() - i;
  if (c == 0xC2 && left >= 2) {
    if (b(i + 1) == 0x85 || b(i + 1) == 0xA0) return 2;  // U+0085, U+00A0
    return 0;
  }
  if (left < 3) return 0;
  const unsigned char c1 = b(i + 1), c2 = b(i + 2);
  if (c == 0xE1) return (c1 == 0x9A && c2 == 0x80) ? 3 : 0;  // U+1680
  if (c == 0xE3) return (c1 == 0x80 && c2 == 0x80) ? 3 : 0;  // U+3000
  if (c == 0xE2) {
    if (c1 == 0x80) {
      // U+2000..U+200A, U+2028, U+2029, U+202F
      if ((c2 >= 0x80 && c2 <= 0x8A) || c2 == 0xA8 || c2 == 0xA9 || c2 == 0xAF) return 3;
    } else if (c1 == 0x81 && c2 == 0x9F) {
      return 3;  // U+205F
    }
  }
  return 0;
}

// Byte length of the Python-whitespace code point that ends s, or 0.
size_t WhitespaceAtEnd(std::string_view s) {
  for (size_t len = 1; len <= 3 && len <= s.size(); ++len) {
    const size_t start = s.size() - len;
    if (WhitespaceAt(s, start) == len) return len;
  }
  return 0;
}

// One pass of a two-character regex `(A)(B)` -> replacement, with Python re.sub's
// non-overlapping left-to-right scan. `emit` appends the replacement for a match at s[i], s[i+1].
template <typename Match, typename Emit>
std::string SubstitutePairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(static_cast<unsigned char>(s[i]),
                                  static_cast<unsigned char>(s[i + 1]))) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i];
      i += 1;
    }
  }
  return out;
}

std::string NGramKey(const std::vector<std::string>& tokens, size_t start, int n) {
  // Tokens contain no whitespace, so joining with ' ' is unambiguous.
  std::string key = tokens[start];
  for (int k = 1; k < n; ++k) absl::StrAppend(&key, " ", tokens[start + k]);
  return key;
}

// sacrebleu.utils.my_log: log, with log(0) floored to -9999999999.
double FlooredLog(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

}  // namespace

std::string_view RStripUnicodeWhitespace(std::string_view s) {
  while (!s.empty()) {
    const size_t len = WhitespaceAtEnd(s);
    if (len == 0) break;
    s.remove_suffix(len);
  }
  return s;
}

std::vector<std::string> Tokenize13a(std::string_view line) {
  // Language-independent part, as sequential whole-line str.replace calls.
  std::string s(line);
  s = absl::StrReplaceAll(s, {{"<skipped>", ""}});
  s = absl::StrReplaceAll(s, {{"-\n", ""}});
  s = absl::StrReplaceAll(s, {{"\n", " "}});
  if (s.find('&') != std::string::npos) {
    // One call per entity: "&amp;lt;" must become "&lt;" and then "<", as in Python.
    s = absl::StrReplaceAll(s, {{"&quot;", "\""}});
    s = absl::StrReplaceAll(s, {{"&amp;", "&"}});
    s = absl::StrReplaceAll(s, {{"&lt;", "<"}});
    s = absl::StrReplaceAll(s, {{"&gt;", ">"}});
  }
  s = absl::StrCat(" ", s, " ");

  // Rule 1: r'([\{-\~\[-\` -\&\(-\+\:-\@\/])' -> r' \1 '
  {
    std::string out;
    out.reserve(s.size() * 2);
    for (char c : s) {
      if (IsRule1Char(static_cast<unsigned char>(c))) {
        out += ' ';
        out += c;
        out += ' ';
      } else {
        out += c;
      }
    }
    s = std::move(out);
  }
  // Rule 2: r'([^0-9])([\.,])' -> r'\1 \2 '
  s = SubstitutePairs(
      s, [](unsigned char a, unsigned char b) { return !IsDigit(a) && IsPeriodOrComma(b); },
      [](std::string& out, char a, char b) {
        out += a;
        out += ' ';
        out += b;
        out += ' ';
      });
  // Rule 3: r'([\.,])([^0-9])' -> r' \1 \2'
  s = SubstitutePairs(
      s, [](unsigned char a, unsigned char b) { return IsPeriodOrComma(a) && !IsDigit(b); },
      [](std::string& out, char a, char b) {
        out += ' ';
        out += a;
        out += ' ';
        out += b;
      });
  // Rule 4: r'([0-9])(-)' -> r'\1 \2 '
  s = SubstitutePairs(
      s, [](unsigned char a, unsigned char b) { return IsDigit(a) && b == '-'; },
      [](std::string& out, char a, char b) {
        out += a;
        out += ' ';
        out += b;
        out += ' ';
      });

  // ' '.join(line.split()) followed by BLEU's own .split(): the whitespace-separated tokens.
  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < s.size()) {
    const size_t ws = WhitespaceAt(s, i);
    if (ws > 0) {
      i += ws;
      continue;
    }
    const size_t start = i;
    while (i < s.size() && WhitespaceAt(s, i) == 0) ++i;
    tokens.emplace_back(s, start, i - start);
  }
  return tokens;
}

void BleuStats::Add(std::string_view hypothesis, std::string_view reference) {
  AddTokens(Tokenize13a(RStripUnicodeWhitespace(hypothesis)),
            Tokenize13a(RStripUnicodeWhitespace(reference)));
}

void BleuStats::AddTokens(const std::vector<std::string>& hypothesis,
                          const std::vector<std::string>& reference) {
  sys_len_ += static_cast<int64_t>(hypothesis.size());
  ref_len_ += static_cast<int64_t>(reference.size());
  ++num_segments_;
  for (int n = 1; n <= kMaxOrder; ++n) {
    if (hypothesis.size() < static_cast<size_t>(n)) break;  // no n-grams of this order or above
    absl::flat_hash_map<std::string, int64_t> ref_counts;
    if (reference.size() >= static_cast<size_t>(n)) {
      for (size_t i = 0; i + n <= reference.size(); ++i) ++ref_counts[NGramKey(reference, i, n)];
    }
    absl::flat_hash_map<std::string, int64_t> hyp_counts;
    for (size_t i = 0; i + n <= hypothesis.size(); ++i) ++hyp_counts[NGramKey(hypothesis, i, n)];
    for (const auto& [ngram, count] : hyp_counts) {
      totals_[n - 1] += count;
      const auto it = ref_counts.find(ngram);
      if (it != ref_counts.end()) counts_[n - 1] += std::min(count, it->second);
    }
  }
}

void BleuStats::Merge(const BleuStats& other) {
  for (int n = 0; n < kMaxOrder; ++n) {
    counts_[n] += other.counts_[n];
    totals_[n] += other.totals_[n];
  }
  sys_len_ += other.sys_len_;
  ref_len_ += other.ref_len_;
  num_segments_ += other.num_segments_;
}

double BleuStats::BrevityPenalty() const {
  if (sys_len_ >= ref_len_) return 1.0;
  if (sys_len_ == 0) return 0.0;
  return std::exp(1.0 - static_cast<double>(ref_len_) / static_cast<double>(sys_len_));
}

std::array<double, BleuStats::kMaxOrder> BleuStats::Precisions() const {
  // Mirrors compute_bleu(smooth_method='exp', effective_order=False) operation by operation so
  // that the doubles come out bit-identical to Python's.
  std::array<double, kMaxOrder> precisions{};
  if (std::all_of(counts_.begin(), counts_.end(), [](int64_t c) { return c == 0; })) {
    return precisions;  // "Early stop if there are no matches"
  }
  double smooth_mteval = 1.0;
  for (int n = 0; n < kMaxOrder; ++n) {
    if (totals_[n] == 0) break;
    if (counts_[n] == 0) {
      smooth_mteval *= 2.0;
      precisions[n] = 100.0 / (smooth_mteval * static_cast<double>(totals_[n]));
    } else {
      precisions[n] = 100.0 * static_cast<double>(counts_[n]) / static_cast<double>(totals_[n]);
    }
  }
  return precisions;
}

double BleuStats::Score() const {
  if (std::all_of(counts_.begin(), counts_.end(), [](int64_t c) { return c == 0; })) {
    return 0.0;
  }
  const std::array<double, kMaxOrder> precisions = Precisions();
  // A missing order (no hypothesis n-grams) keeps precision 0, whose floored log drives the
  // score to exp(-2.5e9) = 0, as in sacreBLEU.
  double log_sum = 0.0;
  for (double p : precisions) log_sum += FlooredLog(p);
  return BrevityPenalty() * std::exp(log_sum / kMaxOrder);
}

absl::StatusOr<double> CorpusBleu(const std::vector<std::string>& hyps,
                                  const std::vector<std::string>& refs) {
  if (hyps.size() != refs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CorpusBleu: ", hyps.size(),
                                                   " hypotheses but ", refs.size(),
                                                   " references"));
  }
  BleuStats stats;
  for (size_t i = 0; i < hyps.size(); ++i) stats.Add(hyps[i], refs[i]);
  return stats.Score();
}

std::string BleuSignature(int64_t sentences) {
  return "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0|sentences:" + std::to_string(sentences);
}

}  // namespace tnmt::trainer

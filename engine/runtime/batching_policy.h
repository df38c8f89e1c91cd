// Batching policy: which sentences are decoded together, for offline translation
// (engine/runtime/translator.h) and the server's continuous batching (server/scheduler.h) alike.
//
// A batch costs hypothesis rows (sentences x beam) and padded source tokens (sentences x the
// longest source among them: the encoder and the cross-attention pad every source to the
// longest). A sentence joins while both stay within BatchLimits, counting what the running
// decode already holds. The first sentence into an idle decoder always joins, so a sentence
// larger than a limit alone still runs, alone. Callers offer sentences in their own order
// (longest first offline; requests taking turns in the server) and end a batch at the first
// sentence that does not fit.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace tnmt {

struct BatchLimits {
  // Hypothesis rows (sentences x beam) decoded at once. Default: no limit.
  int max_rows = std::numeric_limits<int>::max();
  // Source tokens decoded at once, counting padding (sentences x longest source). Default:
  // 4096, as TranslationOptions::max_batch_tokens.
  int64_t max_tokens = 4096;
};

// Fills one batch: offer sentences in order with Fits/Add (or TryAdd).
class BatchFill {
 public:
  // rows_in_use, tokens_in_use: what the running decode already holds of the limits (more than
  // a limit leaves no room). first_always_fits: the first sentence offered joins whatever its
  // size (set when nothing else is decoding).
  BatchFill(const BatchLimits& limits, int64_t rows_in_use, int64_t tokens_in_use, bool first_always_fits);

  // Whether a sentence of `length` source tokens taking `rows` rows fits beside those taken.
  bool Fits(int64_t length, int rows = 1) const;
  // Takes the sentence (fitting or not).
  void Add(int64_t length, int rows = 1);
  // Add if it Fits; returns whether it did.
  bool TryAdd(int64_t length, int rows = 1);

  int64_t count() const { return count_; }      // sentences taken
  int64_t longest() const { return longest_; }  // their longest source (0: none taken)
  int64_t rows() const { return rows_in_use_ + rows_; }  // rows in use, those taken included
  int64_t padded_tokens() const { return count_ * longest_; }  // the taken sentences' cost

 private:
  BatchLimits limits_;
  int64_t rows_in_use_;
  int64_t tokens_in_use_;
  bool first_always_fits_;
  int64_t count_ = 0;
  int64_t longest_ = 0;
  int64_t rows_ = 0;
};

// Sentences of `length` source tokens and `rows` rows each that an empty batch holds: at
// least 1 (a sentence over a limit runs alone).
int64_t FullBatch(const BatchLimits& limits, int64_t length, int rows = 1);

// Orders `items` by length_of[item], longest first; equal lengths keep their order (so the
// batches, and the first batch's peak memory, are deterministic).
void SortLongestFirst(std::vector<int>* items, const std::vector<int64_t>& length_of);

}  // namespace tnmt

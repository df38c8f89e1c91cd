// Batching policy; see batching_policy.h.
#include "engine/runtime/batching_policy.h"

#include <algorithm>

namespace tnmt {

BatchFill::BatchFill(const BatchLimits& limits, int64_t rows_in_use, int64_t tokens_in_use, bool first_always_fits)
    : limits_(limits),
      rows_in_use_(rows_in_use),
      tokens_in_use_(tokens_in_use),
      first_always_fits_(first_always_fits) {}

bool BatchFill::Fits(int64_t length, int rows) const {
  if (count_ == 0 && first_always_fits_) return true;
  const int64_t padded = (count_ + 1) * std::max(longest_, length);
  return rows_in_use_ + rows_ + rows <= limits_.max_rows && tokens_in_use_ + padded <= limits_.max_tokens;
}

void BatchFill::Add(int64_t length, int rows) {
  ++count_;
  longest_ = std::max(longest_, length);
  rows_ += rows;
}

bool BatchFill::TryAdd(int64_t length, int rows) {
  if (!Fits(length, rows)) return false;
  Add(length, rows);
  return true;
}

int64_t FullBatch(const BatchLimits& limits, int64_t length, int rows) {
  const int64_t by_tokens = limits.max_tokens / std::max<int64_t>(1, length);
  const int64_t by_rows = limits.max_rows / std::max(1, rows);
  return std::max<int64_t>(1, std::min(by_tokens, by_rows));
}

void SortLongestFirst(std::vector<int>* items, const std::vector<int64_t>& length_of) {
  std::stable_sort(items->begin(), items->end(), [&](int a, int b) { return length_of[a] > length_of[b]; });
}

}  // namespace tnmt

// Epoch planning (shuffle, windowed length sort, token-budget cut, batch shuffle, shard) and
// batch assembly; see batch_iterator.h.
#include "trainer/data/batch_iterator.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace tnmt::data {
namespace {

// Uniform in [0, n), n > 0, without modulo bias: draws below 2^64 mod n are rejected.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

template <typename T>
void Shuffle(std::vector<T>* values, std::mt19937_64& rng) {
  for (size_t i = values->size(); i > 1; --i) {
    std::swap((*values)[i - 1], (*values)[UniformBelow(rng, i)]);
  }
}

std::mt19937_64 EpochRng(uint64_t seed, int64_t epoch) {
  const uint64_t e = static_cast<uint64_t>(epoch);
  std::seed_seq sequence{static_cast<uint32_t>(seed & 0xffffffffu),
                         static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(e & 0xffffffffu),
                         static_cast<uint32_t>(e >> 32)};
  return std::mt19937_64(sequence);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BatchIterator>> BatchIterator::Create(const Dataset* dataset,
                                                                     const BatchOptions& options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("BatchIterator needs a dataset");
  if (options.max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be positive, got ", options.max_tokens));
  }
  if (options.sort_window_batches <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sort_window_batches must be positive, got ", options.sort_window_batches));
  }
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank must be in [0, world_size), got rank ",
                                                   options.rank, " of ", options.world_size));
  }
  if (dataset->size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dataset->cache_path(), ": the dataset has no pairs (all filtered out?)"));
  }
  std::unique_ptr<BatchIterator> iterator(new BatchIterator(dataset, options));
  // Average padded cost of one pair, hence the average batch and the window size.
  double cost = 0;
  for (int64_t i = 0; i < dataset->size(); ++i) {
    cost += std::max(dataset->source_length(i), dataset->target_length(i)) + 1;
  }
  const double mean_cost = cost / static_cast<double>(dataset->size());
  const int64_t pairs_per_batch = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(options.max_tokens) / mean_cost));
  iterator->window_pairs_ = pairs_per_batch * options.sort_window_batches;
  TNMT_RETURN_IF_ERROR(iterator->PlanEpoch(0));
  return iterator;
}

absl::Status BatchIterator::PlanEpoch(int64_t epoch) {
  const Dataset& data = *dataset_;
  const int64_t n = data.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  auto shorter = [&data](uint32_t a, uint32_t b) {
    const int32_t sa = data.source_length(a), ta = data.target_length(a);
    const int32_t sb = data.source_length(b), tb = data.target_length(b);
    return std::make_tuple(std::max(sa, ta), sa, ta) < std::make_tuple(std::max(sb, tb), sb, tb);
  };
  std::mt19937_64 rng = EpochRng(options_.seed, epoch);
  const int64_t window = options_.shuffle ? window_pairs_ : n;
  if (options_.shuffle) Shuffle(&order, rng);

  std::vector<Span> batches;
  for (int64_t window_begin = 0; window_begin < n; window_begin += window) {
    const int64_t window_end = std::min(n, window_begin + window);
    std::stable_sort(order.begin() + window_begin, order.begin() + window_end, shorter);
    int64_t i = window_begin;
    while (i < window_end) {
      const int64_t begin = i;
      int64_t longest = 0;  // max(source + 1, target + 1) over the batch so far
      while (i < window_end) {
        const uint32_t pair = order[i];
        const int64_t candidate = std::max<int64_t>(
            longest, std::max(data.source_length(pair), data.target_length(pair)) + 1);
        if (i > begin && (i - begin + 1) * candidate > options_.max_tokens) break;
        longest = candidate;
        ++i;
      }
      batches.push_back({begin, i});
    }
  }
  if (options_.shuffle) Shuffle(&batches, rng);

  const int64_t world = options_.world_size;
  const int64_t per_rank = static_cast<int64_t>(batches.size()) / world;
  if (per_rank == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("epoch ", epoch, " has ", batches.size(), " batches, fewer than the ", world,
                     " data-parallel ranks; lower max_tokens or use more data"));
  }
  std::vector<Span> local(per_rank);
  for (int64_t k = 0; k < per_rank; ++k) local[k] = batches[options_.rank + k * world];

  order_ = std::move(order);
  local_batches_ = std::move(local);
  epoch_ = epoch;
  cursor_ = 0;
  return absl::OkStatus();
}

absl::Status BatchIterator::Seek(const DataPosition& position) {
  if (position.epoch < 0 || position.batch_in_epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid data position: epoch ", position.epoch,
                                                   ", batch ", position.batch_in_epoch));
  }
  if (position.epoch != epoch_) TNMT_RETURN_IF_ERROR(PlanEpoch(position.epoch));
  if (position.batch_in_epoch > batches_per_epoch()) {
    return absl::OutOfRangeError(absl::StrCat("data position: epoch ", position.epoch, " has ",
                                              batches_per_epoch(), " batches on this rank, not ",
                                              position.batch_in_epoch));
  }
  cursor_ = position.batch_in_epoch;
  return absl::OkStatus();
}

absl::Status BatchIterator::Next(Batch* batch) {
  if (cursor_ >= batches_per_epoch()) TNMT_RETURN_IF_ERROR(PlanEpoch(epoch_ + 1));
  TNMT_RETURN_IF_ERROR(Fill(local_batches_[cursor_], batch));
  ++cursor_;
  return absl::OkStatus();
}

absl::Status BatchIterator::Fill(const Span& span, Batch* batch) const {
  const Dataset& data = *dataset_;
  const int rows = static_cast<int>(span.end - span.begin);
  // The pairs (with subword sampling: the segmentations drawn for this epoch), then the batch
  // sized by what was read.
  std::vector<std::vector<int32_t>> sources(rows), targets(rows);
  size_t longest_source = 0, longest_target = 0;
  for (int b = 0; b < rows; ++b) {
    const uint32_t pair = order_[span.begin + b];
    TNMT_RETURN_IF_ERROR(data.ReadSampledPair(pair, options_.seed, epoch_, &sources[b], &targets[b]));
    longest_source = std::max(longest_source, sources[b].size());
    longest_target = std::max(longest_target, targets[b].size());
  }
  const int src_len = static_cast<int>(longest_source) + 1;
  const int tgt_len = static_cast<int>(longest_target) + 1;
  batch->batch_size = rows;
  batch->src_len = src_len;
  batch->tgt_len = tgt_len;
  batch->src.assign(static_cast<size_t>(rows) * src_len, options_.pad_id);
  batch->tgt_in.assign(static_cast<size_t>(rows) * tgt_len, options_.pad_id);
  batch->tgt_out.assign(static_cast<size_t>(rows) * tgt_len, options_.pad_id);
  batch->src_lengths.assign(rows, 0);
  batch->pair_indices.assign(rows, 0);
  batch->src_tokens = 0;
  batch->tgt_tokens = 0;
  for (int b = 0; b < rows; ++b) {
    const std::vector<int32_t>& source = sources[b];
    const std::vector<int32_t>& target = targets[b];
    int32_t* src = batch->src.data() + static_cast<size_t>(b) * src_len;
    int32_t* tgt_in = batch->tgt_in.data() + static_cast<size_t>(b) * tgt_len;
    int32_t* tgt_out = batch->tgt_out.data() + static_cast<size_t>(b) * tgt_len;
    std::copy(source.begin(), source.end(), src);
    src[source.size()] = options_.eos_id;
    tgt_in[0] = options_.bos_id;
    std::copy(target.begin(), target.end(), tgt_in + 1);
    std::copy(target.begin(), target.end(), tgt_out);
    tgt_out[target.size()] = options_.eos_id;
    batch->src_lengths[b] = static_cast<int32_t>(source.size()) + 1;
    batch->pair_indices[b] = order_[span.begin + b];
    batch->src_tokens += static_cast<int64_t>(source.size()) + 1;
    batch->tgt_tokens += static_cast<int64_t>(target.size()) + 1;
  }
  return absl::OkStatus();
}

}  // namespace tnmt::data

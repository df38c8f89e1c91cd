// A tokenized parallel corpus kept on disk: one preprocessing pass tokenizes the text, filters
// the pairs and writes their ids to a binary cache file; memory holds only a compact index.
//
// Invariants:
//  - Pair i of the dataset is the i-th *kept* pair in corpus order. Its ids are the
//    SentencePiece pieces only (no bos/eos); BatchIterator adds those.
//  - Filters run in this order and each dropped pair is counted under the first that applies:
//    an empty side (no pieces), a side longer than max_length pieces, a length ratio
//    longer/shorter above max_length_ratio.
//  - The cache file is scratch data for this run: the magic "TNMTIDS1", then for each kept pair
//    its source ids then its target ids as int32 in host byte order. The index holds
//    offset + source length + target length per pair (16 bytes).
//  - Subword sampling (DatasetOptions::subword_nbest > 1): each side keeps its n best
//    segmentations, each with a draw probability proportional to P(segmentation)^alpha over
//    them (l-best sampling, Kudo 2018); ReadPair gives the best one, ReadSampledPair one drawn
//    with the counter RNG from (seed, epoch, pair), so an epoch reads the same pieces however
//    often it is replayed. The filters judge the best segmentation; alternatives longer than
//    max_length are left out; the index lengths are each side's longest kept segmentation.
//    Cache: the magic "TNMTIDS2", then per pair and side: count n, n probabilities (float32),
//    n lengths, then the n id lists.
//  - Reading (ReadPair) is thread-safe; the file is read with pread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace tnmt::data {

struct DatasetOptions {
  // Longest side kept, in pieces without bos/eos; <= 0 keeps every length.
  int max_length = 256;
  // Largest ratio longer side / shorter side kept (in pieces); <= 0 disables the filter.
  double max_length_ratio = 1.5;
  // Threads that tokenize (Build only); 1 tokenizes on the calling thread.
  int num_threads = 1;
  // Subword sampling: segmentations kept per side (1: only the best, no sampling) and the
  // exponent alpha of their draw probabilities (0: uniform over the n best).
  int subword_nbest = 1;
  float subword_alpha = 0.1f;
};

struct DatasetStats {
  int64_t pairs_read = 0;
  int64_t pairs_kept = 0;
  int64_t dropped_empty = 0;     // a side without pieces
  int64_t dropped_too_long = 0;  // a side over max_length
  int64_t dropped_ratio = 0;     // length ratio over max_length_ratio
  int64_t source_tokens = 0;     // pieces in kept pairs, without eos
  int64_t target_tokens = 0;     // pieces in kept pairs, without bos/eos
};

enum class PairVerdict { kKeep, kEmpty, kTooLong, kBadRatio };

// Which filter (if any) drops a pair with these piece counts.
PairVerdict ClassifyPair(int64_t source_length, int64_t target_length,
                         const DatasetOptions& options);

class Dataset {
 public:
  // Tokenizes `source_path`/`target_path` (plain or .gz, read in lockstep; see
  // ParallelReader) with `tokenizer`, writing the cache to `cache_path` (overwritten).
  // Errors name the file and line of the offending input.
  static absl::StatusOr<std::unique_ptr<Dataset>> Build(const std::string& source_path,
                                                        const std::string& target_path,
                                                        const Tokenizer& tokenizer,
                                                        const std::string& cache_path,
                                                        const DatasetOptions& options);
  ~Dataset();
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  int64_t size() const { return static_cast<int64_t>(index_.size()); }
  // Piece counts of pair i (0 <= i < size()), without bos/eos; with subword sampling each
  // side's longest kept segmentation, which bounds every draw.
  int32_t source_length(int64_t i) const { return index_[i].source_length; }
  int32_t target_length(int64_t i) const { return index_[i].target_length; }
  // Reads the ids of pair i from the cache (with subword sampling: the best segmentations).
  absl::Status ReadPair(int64_t i, std::vector<int32_t>* source,
                        std::vector<int32_t>* target) const;
  // With subword sampling, the segmentations drawn for (seed, epoch); otherwise ReadPair.
  absl::Status ReadSampledPair(int64_t i, uint64_t seed, int64_t epoch, std::vector<int32_t>* source,
                               std::vector<int32_t>* target) const;
  bool sampled() const { return sampled_; }

  const DatasetStats& stats() const { return stats_; }
  const std::string& cache_path() const { return cache_path_; }

 private:
  friend class DatasetWriter;
  struct Entry {
    int64_t offset;  // bytes from the start of the cache file
    int32_t source_length;
    int32_t target_length;
  };
  Dataset() = default;
  // Subword sampling: pair i's segmentations drawn with u_source and u_target, uniform in
  // [0, 1) (u < 0: the best one of that side).
  absl::Status ReadSegmentations(int64_t i, float u_source, float u_target, std::vector<int32_t>* source,
                                 std::vector<int32_t>* target) const;

  std::string cache_path_;
  int fd_ = -1;
  bool sampled_ = false;
  int64_t end_offset_ = 0;  // where the last record ends
  std::vector<Entry> index_;
  DatasetStats stats_;
};

// Writes a cache pair by pair, applying the filters; Dataset::Build uses it, and so can code
// that already has ids.
class DatasetWriter {
 public:
  static absl::StatusOr<std::unique_ptr<DatasetWriter>> Create(const std::string& cache_path,
                                                               const DatasetOptions& options);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Counts the pair, and appends it unless a filter drops it. Returns whether it was kept.
  absl::StatusOr<bool> Add(const std::vector<int32_t>& source, const std::vector<int32_t>& target);
  // Subword sampling: the pair as its n-best segmentations per side (best first, non-empty
  // lists); the filters judge the best ones. Without sampling only the best ones are stored.
  absl::StatusOr<bool> AddSegmentations(const std::vector<Tokenizer::Segmentation>& source,
                                        const std::vector<Tokenizer::Segmentation>& target);
  // Closes the cache and opens it for reading. The writer is spent afterwards.
  absl::StatusOr<std::unique_ptr<Dataset>> Finish();

  const DatasetStats& stats() const { return dataset_->stats_; }

 private:
  DatasetWriter(std::FILE* file, DatasetOptions options, std::unique_ptr<Dataset> dataset)
      : file_(file), options_(options), dataset_(std::move(dataset)) {}

  // Counts a pair of these lengths and applies the filters: whether it is kept.
  absl::StatusOr<bool> Judge(int64_t source_length, int64_t target_length);
  // Appends one side's record (sampled layout); *longest gets its longest kept segmentation.
  absl::Status WriteSide(const std::vector<Tokenizer::Segmentation>& side, int32_t* longest);

  std::FILE* file_;
  DatasetOptions options_;
  std::unique_ptr<Dataset> dataset_;  // collects index and stats until Finish
  int64_t offset_ = 0;
};

}  // namespace tnmt::data

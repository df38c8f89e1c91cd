// Tokenize-once corpus cache with filters; see dataset.h.
#include "trainer/data/dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/counter_uniform.h"
#include "trainer/data/text_reader.h"

namespace tnmt::data {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'M', 'T', 'I', 'D', 'S', '1'};
constexpr char kSampledMagic[8] = {'T', 'N', 'M', 'T', 'I', 'D', 'S', '2'};
constexpr size_t kPairsPerThreadChunk = 2048;

// Reads exactly `size` bytes at `offset`, retrying short reads.
absl::Status PreadFully(int fd, void* data, size_t size, int64_t offset, const std::string& path) {
  char* out = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat(path, ": read at byte ", offset));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path, ": cache file ends early at byte ", offset));
    }
    out += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

// Prefixes "<path>:<line>: " to a tokenizer error, keeping its code.
absl::Status AtLine(const absl::Status& status, const std::string& path, int64_t line) {
  return absl::Status(status.code(), absl::StrCat(path, ":", line, ": ", status.message()));
}

// One chunk of pairs in flight between reading, tokenizing and writing.
struct Chunk {
  std::vector<std::string> source_text, target_text;
  std::vector<std::vector<int32_t>> source_ids, target_ids;
  std::vector<std::vector<Tokenizer::Segmentation>> source_segs, target_segs;  // nbest > 1
  std::vector<absl::Status> source_error, target_error;
  int nbest = 1;

  Chunk(size_t capacity, int nbest)
      : source_text(capacity),
        target_text(capacity),
        source_ids(capacity),
        target_ids(capacity),
        source_segs(nbest > 1 ? capacity : 0),
        target_segs(nbest > 1 ? capacity : 0),
        source_error(capacity),
        target_error(capacity),
        nbest(nbest) {}

  void Encode(const Tokenizer& tokenizer, size_t i) {
    if (nbest > 1) {
      auto segs = tokenizer.EncodeNBest(source_text[i], nbest);
      source_error[i] = segs.status();
      if (segs.ok()) source_segs[i] = std::move(*segs);
      segs = tokenizer.EncodeNBest(target_text[i], nbest);
      target_error[i] = segs.status();
      if (segs.ok()) target_segs[i] = std::move(*segs);
      return;
    }
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(source_text[i]);
    source_error[i] = ids.status();
    if (ids.ok()) source_ids[i] = std::move(*ids);
    ids = tokenizer.Encode(target_text[i]);
    target_error[i] = ids.status();
    if (ids.ok()) target_ids[i] = std::move(*ids);
  }

  // Encodes pairs [0, count) with `threads` threads, pair i on thread i % threads.
  void EncodeAll(const Tokenizer& tokenizer, size_t count, int threads) {
    if (threads <= 1) {
      for (size_t i = 0; i < count; ++i) Encode(tokenizer, i);
      return;
    }
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([this, &tokenizer, count, threads, t] {
        for (size_t i = t; i < count; i += threads) Encode(tokenizer, i);
      });
    }
    for (std::thread& worker : workers) worker.join();
  }
};

}  // namespace

PairVerdict ClassifyPair(int64_t source_length, int64_t target_length,
                         const DatasetOptions& options) {
  if (source_length == 0 || target_length == 0) return PairVerdict::kEmpty;
  if (options.max_length > 0 &&
      (source_length > options.max_length || target_length > options.max_length)) {
    return PairVerdict::kTooLong;
  }
  if (options.max_length_ratio > 0) {
    const double longer = static_cast<double>(std::max(source_length, target_length));
    const double shorter = static_cast<double>(std::min(source_length, target_length));
    if (longer > options.max_length_ratio * shorter) return PairVerdict::kBadRatio;
  }
  return PairVerdict::kKeep;
}

Dataset::~Dataset() {
  if (fd_ >= 0) close(fd_);
}

absl::Status Dataset::ReadPair(int64_t i, std::vector<int32_t>* source,
                               std::vector<int32_t>* target) const {
  if (i < 0 || i >= size()) {
    return absl::OutOfRangeError(absl::StrCat("pair ", i, " outside the dataset of ", size()));
  }
  if (sampled_) return ReadSegmentations(i, -1.0f, -1.0f, source, target);
  const Entry& entry = index_[i];
  source->resize(entry.source_length);
  target->resize(entry.target_length);
  const size_t source_bytes = sizeof(int32_t) * entry.source_length;
  TNMT_RETURN_IF_ERROR(PreadFully(fd_, source->data(), source_bytes, entry.offset, cache_path_));
  return PreadFully(fd_, target->data(), sizeof(int32_t) * entry.target_length,
                    entry.offset + static_cast<int64_t>(source_bytes), cache_path_);
}

absl::Status Dataset::ReadSampledPair(int64_t i, uint64_t seed, int64_t epoch, std::vector<int32_t>* source,
                                      std::vector<int32_t>* target) const {
  if (!sampled_) return ReadPair(i, source, target);
  if (i < 0 || i >= size()) {
    return absl::OutOfRangeError(absl::StrCat("pair ", i, " outside the dataset of ", size()));
  }
  const uint64_t stream = static_cast<uint64_t>(epoch), index = 2 * static_cast<uint64_t>(i);
  return ReadSegmentations(i, kernels::CounterUniform(seed, stream, index),
                           kernels::CounterUniform(seed, stream, index + 1), source, target);
}

absl::Status Dataset::ReadSegmentations(int64_t i, float u_source, float u_target, std::vector<int32_t>* source,
                                        std::vector<int32_t>* target) const {
  const int64_t begin = index_[i].offset;
  const int64_t end = i + 1 < size() ? index_[i + 1].offset : end_offset_;
  std::vector<int32_t> words(static_cast<size_t>((end - begin) / 4));
  TNMT_RETURN_IF_ERROR(PreadFully(fd_, words.data(), sizeof(int32_t) * words.size(), begin, cache_path_));
  const auto corrupt = [&] {
    return absl::DataLossError(absl::StrCat(cache_path_, ": pair ", i, "'s segmentations are corrupt"));
  };
  size_t p = 0;
  for (int side = 0; side < 2; ++side) {
    if (p >= words.size()) return corrupt();
    const int64_t n = words[p];
    if (n < 1 || p + 1 + 2 * static_cast<size_t>(n) > words.size()) return corrupt();
    const int32_t* prob_bits = &words[p + 1];
    const int32_t* lengths = &words[p + 1 + n];
    size_t ids = p + 1 + 2 * static_cast<size_t>(n);
    // The drawn segmentation: the first whose cumulative probability passes u (u < 0: the best).
    const float u = side == 0 ? u_source : u_target;
    int64_t pick = 0;
    if (u >= 0.0f) {
      float cumulative = 0.0f;
      for (pick = 0; pick + 1 < n; ++pick) {
        float prob;
        std::memcpy(&prob, &prob_bits[pick], sizeof(prob));
        cumulative += prob;
        if (u < cumulative) break;
      }
    }
    size_t start = ids;
    for (int64_t c = 0; c < n; ++c) {
      if (lengths[c] < 0) return corrupt();
      if (c == pick) start = ids;
      ids += static_cast<size_t>(lengths[c]);
    }
    if (ids > words.size()) return corrupt();
    std::vector<int32_t>* out = side == 0 ? source : target;
    out->assign(words.begin() + start, words.begin() + start + lengths[pick]);
    p = ids;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Build(const std::string& source_path,
                                                        const std::string& target_path,
                                                        const Tokenizer& tokenizer,
                                                        const std::string& cache_path,
                                                        const DatasetOptions& options) {
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<ParallelReader> reader,
                        ParallelReader::Open(source_path, target_path));
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer,
                        DatasetWriter::Create(cache_path, options));
  const int threads = std::max(1, options.num_threads);
  const size_t capacity = kPairsPerThreadChunk * threads;
  const bool sampled = options.subword_nbest > 1;
  Chunk chunk(capacity, options.subword_nbest);
  while (true) {
    size_t count = 0;
    while (count < capacity) {
      TNMT_ASSIGN_OR_RETURN(bool more,
                            reader->Next(&chunk.source_text[count], &chunk.target_text[count]));
      if (!more) break;
      ++count;
    }
    const int64_t first_line = reader->line_number() - static_cast<int64_t>(count) + 1;
    chunk.EncodeAll(tokenizer, count, threads);
    for (size_t i = 0; i < count; ++i) {
      const int64_t line = first_line + static_cast<int64_t>(i);
      if (!chunk.source_error[i].ok()) return AtLine(chunk.source_error[i], source_path, line);
      if (!chunk.target_error[i].ok()) return AtLine(chunk.target_error[i], target_path, line);
      if (sampled) {
        TNMT_RETURN_IF_ERROR(writer->AddSegmentations(chunk.source_segs[i], chunk.target_segs[i]).status());
      } else {
        TNMT_RETURN_IF_ERROR(writer->Add(chunk.source_ids[i], chunk.target_ids[i]).status());
      }
    }
    if (count < capacity) break;
  }
  return writer->Finish();
}

absl::StatusOr<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(
    const std::string& cache_path, const DatasetOptions& options) {
  std::FILE* file = std::fopen(cache_path.c_str(), "wb");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat(cache_path, ": cannot create the data cache"));
  }
  std::setvbuf(file, nullptr, _IOFBF, 1 << 20);
  const bool sampled = options.subword_nbest > 1;
  if (std::fwrite(sampled ? kSampledMagic : kMagic, 1, sizeof(kMagic), file) != sizeof(kMagic)) {
    const int error = errno;
    std::fclose(file);
    return absl::ErrnoToStatus(error, absl::StrCat(cache_path, ": write failed"));
  }
  std::unique_ptr<Dataset> dataset(new Dataset());
  dataset->cache_path_ = cache_path;
  dataset->sampled_ = sampled;
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(file, options, std::move(dataset)));
  writer->offset_ = sizeof(kMagic);
  return writer;
}

DatasetWriter::~DatasetWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<bool> DatasetWriter::AddSegmentations(const std::vector<Tokenizer::Segmentation>& source,
                                                     const std::vector<Tokenizer::Segmentation>& target) {
  if (source.empty() || target.empty()) {
    return absl::InvalidArgumentError("a side without any segmentation");
  }
  if (!dataset_->sampled_) return Add(source[0].ids, target[0].ids);
  if (file_ == nullptr) return absl::FailedPreconditionError("DatasetWriter already finished");
  TNMT_ASSIGN_OR_RETURN(bool keep, Judge(static_cast<int64_t>(source[0].ids.size()),
                                         static_cast<int64_t>(target[0].ids.size())));
  if (!keep) return false;
  const int64_t offset = offset_;
  int32_t longest_source = 0, longest_target = 0;
  TNMT_RETURN_IF_ERROR(WriteSide(source, &longest_source));
  TNMT_RETURN_IF_ERROR(WriteSide(target, &longest_target));
  dataset_->index_.push_back({offset, longest_source, longest_target});
  DatasetStats& stats = dataset_->stats_;
  ++stats.pairs_kept;
  stats.source_tokens += static_cast<int64_t>(source[0].ids.size());
  stats.target_tokens += static_cast<int64_t>(target[0].ids.size());
  return true;
}

absl::Status DatasetWriter::WriteSide(const std::vector<Tokenizer::Segmentation>& side, int32_t* longest) {
  // The best segmentation always; alternatives that are non-empty and within max_length.
  std::vector<const Tokenizer::Segmentation*> kept;
  for (size_t c = 0; c < side.size() && static_cast<int>(kept.size()) < options_.subword_nbest; ++c) {
    const int64_t len = static_cast<int64_t>(side[c].ids.size());
    if (c == 0 || (len > 0 && (options_.max_length <= 0 || len <= options_.max_length))) kept.push_back(&side[c]);
  }
  // Draw probabilities proportional to P^alpha, relative to the most likely kept one.
  double best = kept[0]->log_prob;
  for (const auto* s : kept) best = std::max(best, static_cast<double>(s->log_prob));
  std::vector<double> weight;
  double total = 0.0;
  for (const auto* s : kept) {
    weight.push_back(std::exp(static_cast<double>(options_.subword_alpha) * (s->log_prob - best)));
    total += weight.back();
  }
  std::vector<int32_t> record = {static_cast<int32_t>(kept.size())};
  for (double w : weight) {
    const float prob = static_cast<float>(w / total);
    int32_t bits;
    std::memcpy(&bits, &prob, sizeof(bits));
    record.push_back(bits);
  }
  *longest = 0;
  for (const auto* s : kept) {
    record.push_back(static_cast<int32_t>(s->ids.size()));
    *longest = std::max(*longest, static_cast<int32_t>(s->ids.size()));
  }
  for (const auto* s : kept) record.insert(record.end(), s->ids.begin(), s->ids.end());
  if (std::fwrite(record.data(), sizeof(int32_t), record.size(), file_) != record.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat(dataset_->cache_path_, ": write failed"));
  }
  offset_ += static_cast<int64_t>(sizeof(int32_t) * record.size());
  return absl::OkStatus();
}

absl::StatusOr<bool> DatasetWriter::Judge(int64_t source_length, int64_t target_length) {
  DatasetStats& stats = dataset_->stats_;
  ++stats.pairs_read;
  switch (ClassifyPair(source_length, target_length, options_)) {
    case PairVerdict::kEmpty:
      ++stats.dropped_empty;
      return false;
    case PairVerdict::kTooLong:
      ++stats.dropped_too_long;
      return false;
    case PairVerdict::kBadRatio:
      ++stats.dropped_ratio;
      return false;
    case PairVerdict::kKeep:
      break;
  }
  // BatchIterator indexes pairs with uint32_t and lengths are int32_t.
  constexpr int64_t kMaxLength = std::numeric_limits<int32_t>::max() - 1;
  if (dataset_->size() >= std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError("more than 2^32-1 kept pairs in one dataset");
  }
  if (source_length > kMaxLength || target_length > kMaxLength) {
    return absl::InvalidArgumentError("a sentence has more than 2^31 pieces");
  }
  return true;
}

absl::StatusOr<bool> DatasetWriter::Add(const std::vector<int32_t>& source,
                                        const std::vector<int32_t>& target) {
  if (file_ == nullptr) return absl::FailedPreconditionError("DatasetWriter already finished");
  if (dataset_->sampled_) {
    return AddSegmentations({Tokenizer::Segmentation{source, 0.0f}}, {Tokenizer::Segmentation{target, 0.0f}});
  }
  TNMT_ASSIGN_OR_RETURN(bool keep, Judge(static_cast<int64_t>(source.size()), static_cast<int64_t>(target.size())));
  if (!keep) return false;
  DatasetStats& stats = dataset_->stats_;
  const size_t written_source = std::fwrite(source.data(), sizeof(int32_t), source.size(), file_);
  const size_t written_target = std::fwrite(target.data(), sizeof(int32_t), target.size(), file_);
  if (written_source != source.size() || written_target != target.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat(dataset_->cache_path_, ": write failed"));
  }
  dataset_->index_.push_back(
      {offset_, static_cast<int32_t>(source.size()), static_cast<int32_t>(target.size())});
  offset_ += static_cast<int64_t>(sizeof(int32_t) * (source.size() + target.size()));
  ++stats.pairs_kept;
  stats.source_tokens += static_cast<int64_t>(source.size());
  stats.target_tokens += static_cast<int64_t>(target.size());
  return true;
}

absl::StatusOr<std::unique_ptr<Dataset>> DatasetWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError("DatasetWriter already finished");
  const std::string& path = dataset_->cache_path_;
  const bool flushed = std::fflush(file_) == 0;
  const int flush_error = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!flushed || !closed) {
    return absl::ErrnoToStatus(flushed ? errno : flush_error,
                               absl::StrCat(path, ": cannot finish the data cache"));
  }
  dataset_->fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (dataset_->fd_ < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot reopen the data cache"));
  }
  dataset_->index_.shrink_to_fit();
  dataset_->end_offset_ = offset_;
  return std::move(dataset_);
}

}  // namespace tnmt::data

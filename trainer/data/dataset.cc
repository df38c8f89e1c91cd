// Tokenize-once corpus cache with filters; see dataset.h.
#include "trainer/data/dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "trainer/data/text_reader.h"

namespace tnmt::data {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'M', 'T', 'I', 'D', 'S', '1'};
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
  std::vector<absl::Status> source_error, target_error;

  explicit Chunk(size_t capacity)
      : source_text(capacity),
        target_text(capacity),
        source_ids(capacity),
        target_ids(capacity),
        source_error(capacity),
        target_error(capacity) {}

  void Encode(const Tokenizer& tokenizer, size_t i) {
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
  const Entry& entry = index_[i];
  source->resize(entry.source_length);
  target->resize(entry.target_length);
  const size_t source_bytes = sizeof(int32_t) * entry.source_length;
  TNMT_RETURN_IF_ERROR(PreadFully(fd_, source->data(), source_bytes, entry.offset, cache_path_));
  return PreadFully(fd_, target->data(), sizeof(int32_t) * entry.target_length,
                    entry.offset + static_cast<int64_t>(source_bytes), cache_path_);
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
  Chunk chunk(capacity);
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
      TNMT_RETURN_IF_ERROR(writer->Add(chunk.source_ids[i], chunk.target_ids[i]).status());
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
  if (std::fwrite(kMagic, 1, sizeof(kMagic), file) != sizeof(kMagic)) {
    const int error = errno;
    std::fclose(file);
    return absl::ErrnoToStatus(error, absl::StrCat(cache_path, ": write failed"));
  }
  std::unique_ptr<Dataset> dataset(new Dataset());
  dataset->cache_path_ = cache_path;
  std::unique_ptr<DatasetWriter> writer(new DatasetWriter(file, options, std::move(dataset)));
  writer->offset_ = sizeof(kMagic);
  return writer;
}

DatasetWriter::~DatasetWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<bool> DatasetWriter::Add(const std::vector<int32_t>& source,
                                        const std::vector<int32_t>& target) {
  if (file_ == nullptr) return absl::FailedPreconditionError("DatasetWriter already finished");
  DatasetStats& stats = dataset_->stats_;
  ++stats.pairs_read;
  switch (ClassifyPair(static_cast<int64_t>(source.size()), static_cast<int64_t>(target.size()),
                       options_)) {
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
  if (static_cast<int64_t>(source.size()) > kMaxLength ||
      static_cast<int64_t>(target.size()) > kMaxLength) {
    return absl::InvalidArgumentError("a sentence has more than 2^31 pieces");
  }
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
  return std::move(dataset_);
}

}  // namespace tnmt::data

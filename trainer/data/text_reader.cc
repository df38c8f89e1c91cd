// Buffered line reading over zlib's gz* API (plain files pass through unchanged); see
// text_reader.h.
#include "trainer/data/text_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"

namespace tnmt::data {
namespace {

constexpr size_t kReadChunk = 1 << 18;     // bytes per gzread call
constexpr unsigned kZlibBuffer = 1 << 17;  // zlib's internal input buffer

gzFile AsGz(void* file) { return static_cast<gzFile>(file); }

}  // namespace

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    if (error != 0) {
      return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot open"));
    }
    return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot open (out of memory)"));
  }
  gzbuffer(file, kZlibBuffer);
  return std::unique_ptr<LineReader>(new LineReader(path, file));
}

LineReader::LineReader(std::string path, void* file) : path_(std::move(path)), file_(file) {}

LineReader::~LineReader() { gzclose_r(AsGz(file_)); }

absl::StatusOr<size_t> LineReader::Fill() {
  if (eof_) return 0;
  // Keep the unread tail at the front, then append a chunk after it.
  if (begin_ > 0) {
    std::memmove(&buffer_[0], &buffer_[begin_], end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() < end_ + kReadChunk) buffer_.resize(end_ + kReadChunk);
  const int n = gzread(AsGz(file_), &buffer_[end_], kReadChunk);
  // gzread reports a truncated stream (Z_BUF_ERROR) by returning what it has, then 0, so the
  // error state is checked at the end of the file as well.
  int code = Z_OK;
  const char* message = n <= 0 ? gzerror(AsGz(file_), &code) : nullptr;
  if (n < 0 || code != Z_OK) {
    std::string reason = code == Z_ERRNO ? std::strerror(errno) : message;
    return absl::DataLossError(
        absl::StrCat(path_, ":", line_number_ + 1, ": read error: ", reason));
  }
  if (n == 0) eof_ = true;
  end_ += static_cast<size_t>(n);
  return static_cast<size_t>(n);
}

absl::StatusOr<bool> LineReader::Next(std::string* line) {
  size_t scan_from = begin_;
  while (true) {
    const char* start = buffer_.data() + scan_from;
    const void* newline = std::memchr(start, '\n', end_ - scan_from);
    if (newline != nullptr) {
      const size_t stop = static_cast<const char*>(newline) - buffer_.data();
      line->assign(buffer_, begin_, stop - begin_);
      begin_ = stop + 1;
      break;
    }
    const size_t pending = end_ - begin_;
    absl::StatusOr<size_t> got = Fill();
    if (!got.ok()) return got.status();
    scan_from = begin_ + pending;  // Fill moved the pending bytes to begin_ (now 0)
    if (*got == 0) {
      if (begin_ == end_) return false;
      line->assign(buffer_, begin_, end_ - begin_);  // last line without '\n'
      begin_ = end_;
      break;
    }
  }
  if (!line->empty() && line->back() == '\r') line->pop_back();
  ++line_number_;
  return true;
}

absl::Status ValidateUtf8Line(const std::string& line, const std::string& path,
                              int64_t line_number) {
  absl::Status status = ValidateUtf8(line);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line_number, ": ", status.message()));
}

absl::StatusOr<std::unique_ptr<ParallelReader>> ParallelReader::Open(
    const std::string& source_path, const std::string& target_path) {
  absl::StatusOr<std::unique_ptr<LineReader>> source = LineReader::Open(source_path);
  if (!source.ok()) return source.status();
  absl::StatusOr<std::unique_ptr<LineReader>> target = LineReader::Open(target_path);
  if (!target.ok()) return target.status();
  return std::unique_ptr<ParallelReader>(
      new ParallelReader(std::move(*source), std::move(*target)));
}

absl::StatusOr<bool> ParallelReader::Next(std::string* source, std::string* target) {
  absl::StatusOr<bool> has_source = source_->Next(source);
  if (!has_source.ok()) return has_source.status();
  absl::StatusOr<bool> has_target = target_->Next(target);
  if (!has_target.ok()) return has_target.status();
  if (*has_source != *has_target) {
    const LineReader& ended = *has_source ? *target_ : *source_;
    const LineReader& longer = *has_source ? *source_ : *target_;
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel files differ in length: ", ended.path(), " ends after line ", ended.line_number(),
        " but ", longer.path(), " has line ", longer.line_number()));
  }
  if (!*has_source) return false;
  absl::Status status = ValidateUtf8Line(*source, source_->path(), source_->line_number());
  if (!status.ok()) return status;
  status = ValidateUtf8Line(*target, target_->path(), target_->line_number());
  if (!status.ok()) return status;
  return true;
}

}  // namespace tnmt::data

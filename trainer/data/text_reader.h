// Line readers for training text: plain or gzip-compressed files (zlib detects which), read
// sequentially in constant memory, any line length.
//
// Invariants:
//  - A line is the bytes up to (not including) '\n'; one trailing '\r' is removed as well, so
//    CRLF files read like LF files. A last line without '\n' still counts; an empty file has
//    no lines. Line numbers start at 1.
//  - Every error message starts with "<path>:<line>: " (or "<path>: " when no line is
//    involved, e.g. the file cannot be opened), so a user can find the offending input.
//  - ParallelReader keeps a source and a target file in lockstep: pair i is line i of each.
//    Files of different lengths and lines that are not valid UTF-8 are errors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tnmt::data {

// Reads one file line by line.
class LineReader {
 public:
  // NOT_FOUND / PERMISSION_DENIED / ... (from errno) naming `path` when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Stores the next line in *line and returns true; returns false at the end of the file.
  // A read or decompression error (e.g. a truncated .gz) is DATA_LOSS naming file and line.
  absl::StatusOr<bool> Next(std::string* line);

  // Number of the line last returned by Next (0 before the first).
  int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }

 private:
  LineReader(std::string path, void* file);
  // Refills buffer_ from the file; returns the number of bytes read (0 at end of file).
  absl::StatusOr<size_t> Fill();

  std::string path_;
  void* file_;  // gzFile; kept opaque so that zlib.h stays out of this header.
  std::string buffer_;
  size_t begin_ = 0;  // unread bytes are buffer_[begin_, end_)
  size_t end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

// Reads a source and a target file pair by pair.
class ParallelReader {
 public:
  static absl::StatusOr<std::unique_ptr<ParallelReader>> Open(const std::string& source_path,
                                                              const std::string& target_path);

  // Stores the next pair and returns true; returns false when both files end together.
  // Errors (INVALID_ARGUMENT): one file ends before the other (the message names both files
  // and the first line that has no counterpart); a line that is not valid UTF-8 (names the
  // file, line and byte offset). I/O errors as LineReader::Next.
  absl::StatusOr<bool> Next(std::string* source, std::string* target);

  // Number of the pair last returned by Next (0 before the first); it is the line number in
  // both files.
  int64_t line_number() const { return source_->line_number(); }
  const std::string& source_path() const { return source_->path(); }
  const std::string& target_path() const { return target_->path(); }

 private:
  ParallelReader(std::unique_ptr<LineReader> source, std::unique_ptr<LineReader> target)
      : source_(std::move(source)), target_(std::move(target)) {}

  std::unique_ptr<LineReader> source_;
  std::unique_ptr<LineReader> target_;
};

// OK if `line` is valid UTF-8, else INVALID_ARGUMENT "<path>:<line_number>: <what is wrong>".
absl::Status ValidateUtf8Line(const std::string& line, const std::string& path,
                              int64_t line_number);

}  // namespace tnmt::data

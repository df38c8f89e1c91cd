// Crash-safe file system steps for checkpoints: write-and-fsync, atomic replace of a file or a
// whole directory (temp + fsync + rename + fsync of the parent), and removal that never leaves
// a half-deleted directory under its public name.
// Invariant: a path written by WriteFileAtomically or installed by InstallDirectory is either
// absent, its previous complete content, or its new complete content, even after kill -9 or a
// power cut; every error names the path and the failing system call.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tnmt {

// Creates or truncates `path`, writes `contents` and fsyncs it (no rename: for files inside a
// directory that is itself published atomically).
absl::Status WriteFileSynced(const std::string& path, std::string_view contents);

// Writes `contents` to `tmp_path`, fsyncs, renames it onto `path` and fsyncs the parent.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 const std::string& tmp_path);

// Reads a whole (small) file; NotFound naming `path` when it cannot be opened.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Copies `from` to `to` (created or truncated) and fsyncs `to`.
absl::Status CopyFileSynced(const std::string& from, const std::string& to);

// fsync of a file or a directory (a directory fsync persists the names inside it).
absl::Status SyncPath(const std::string& path);

// Publishes the complete directory `tmp_dir` as `final_dir` with one rename, then fsyncs the
// parent. If `final_dir` exists and `replace` is true it is swapped out atomically
// (renameat2 RENAME_EXCHANGE; where the file system lacks it, moved aside first) and deleted;
// if it exists, is not empty and `replace` is false, AlreadyExists.
absl::Status InstallDirectory(const std::string& tmp_dir, const std::string& final_dir,
                              bool replace);

// Deletes a directory tree: first renamed to `aside` (one atomic step, so a crash never leaves
// a partly deleted tree under its old name), then removed. `aside` must be in the same parent.
absl::Status RemoveTreeVia(const std::string& path, const std::string& aside);

// Parent directory of `path` ("." when it has none).
std::string ParentDirectory(const std::string& path);

}  // namespace tnmt

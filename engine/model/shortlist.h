// A vocabulary shortlist: for each source piece, the target pieces it is likely to translate
// into, and the target pieces frequent enough to be allowed always. Decoding with one (opt-in,
// DecodeOptions::use_shortlist) computes the output projection only for the candidate set of a
// batch: the shortlisted targets of every source piece in it, the frequent pieces, </s> and
// <unk> (never <pad>). `tnmt shortlist` builds the table from a parallel corpus
// (shortlist_builder.h).
//
// File format, version 1 (text, UTF-8 free: numbers only; docs/model-format.md#shortlist):
//   tnmt-shortlist 1              magic and version (the first line)
//   # any comment                 lines starting with '#' are ignored (the builder says how it
//                                 estimated the table)
//   vocab_size V                  the vocabulary the ids index; must equal the model's
//   frequent N ID...              N target ids (once, before any source line)
//   source S N ID...              the N target ids of source id S (at most one line per S;
//                                 a source without a line has no shortlisted targets)
//   end                           the last line: a file without it is truncated
// Ids are decimal, in [0, V), separated by single spaces or tabs. Invariants after Read: every
// id in range, each list sorted ascending without duplicates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tnmt {

inline constexpr int kShortlistFormatVersion = 1;

struct Shortlist {
  int vocab_size = 0;
  std::vector<int32_t> frequent;  // sorted, distinct
  // Source s <= last_source: its targets are targets[offsets[s], offsets[s + 1]), sorted,
  // distinct; a source after last_source has none. offsets: [V + 1].
  std::vector<int32_t> offsets;
  std::vector<int32_t> targets;
  int32_t last_source = -1;  // the last source SetTargets set

  // An empty table over `vocab_size` ids (no frequent pieces, no source lists).
  static Shortlist Empty(int vocab_size);
  absl::Span<const int32_t> TargetsOf(int32_t source) const {
    if (source > last_source) return {};
    return absl::MakeConstSpan(targets.data() + offsets[source], offsets[source + 1] - offsets[source]);
  }
  // Sets source s's targets (any order, duplicates dropped); sources must be set in
  // increasing order, each at most once, on a table from Empty (time: the ids, plus the
  // sources skipped since the last call).
  absl::Status SetTargets(int32_t source, std::vector<int32_t> ids);

  // The candidate set of a batch: the targets of every id in `sources` (ids in [0, V)), the
  // frequent ids, eos_id and unk_id (when >= 0), pad_id removed; sorted, distinct.
  // `mark` is scratch of the caller's ([V] bytes, all 0 before and after).
  std::vector<int32_t> Candidates(absl::Span<const int32_t> sources, int32_t eos_id, int32_t unk_id,
                                  int32_t pad_id, std::vector<uint8_t>* mark) const;
};

// Reads a shortlist file. expected_vocab_size > 0: the file's vocab_size must equal it. Errors
// name the file, the line and the problem (not a shortlist file, unsupported version, wrong
// vocabulary size, id out of range, fewer ids than declared, a repeated source, garbage,
// truncated).
absl::StatusOr<Shortlist> ReadShortlist(const std::string& path, int expected_vocab_size = 0);

// Writes `s` in the format above; `comment` lines (without '#') go after the magic line.
absl::Status WriteShortlist(const std::string& path, const Shortlist& s, const std::vector<std::string>& comment = {});

}  // namespace tnmt

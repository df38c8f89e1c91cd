// The decoding options, one row each: the DecodeOptions field, the `tnmt translate` flag, the
// tnmt.v1.DecodingOptions field, the kind, the accepted range, the flag's default and help.
// DecodeOptions::Validate, the CLI's decoding flags and the server's request checks all check
// through this table, so that a range and its message are written once; each renders the
// option's name in its own terms:
//   engine   beam_size must be in [1, 64], got 0
//   flag     --beam-size must be in [1, 64], got 0
//   request  options.beam_size: must be in [1, 64], got 0   (the field first, for BadRequest)
// A rule between options names the option it refuses the same way ("--n-best 3 exceeds
// --beam-size 2 ..."); a rule about several options is one sentence, in a request's terms
// prefixed "options." and naming the fields within it ("options.sampling needs beam_size 1, ...").
// Invariants: the rows are in --help order; every tnmt.v1.DecodingOptions field has a row
// (engine/decode/option_table_test.cc checks it against the proto descriptor); values are
// checked in the caller's units (the API's max_length and min_length exclude </s>, the
// engine's include it), so messages quote the value as the caller gave it.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/decode/options.h"

namespace tnmt {

enum class DecodingOptionId {
  kBeamSize,
  kLengthPenalty,
  kLengthPenaltyStyle,
  kMaxLengthOffset,
  kNBest,
  kMinLength,
  kNoRepeatNgramSize,
  kRepetitionPenalty,
  kDisableUnk,
  kSamplingTopk,
  kSamplingTopp,
  kSamplingTemperature,
  kSeed,
  kReturnTokenScores,
  kReturnAlignments,
  kAlignmentLayer,
  kMaxLength,
  kReturnScores,
  kUseShortlist,
};
inline constexpr int kNumDecodingOptions = static_cast<int>(DecodingOptionId::kUseShortlist) + 1;

// Whose words a message uses for an option's name.
enum class OptionTerms { kEngine, kFlag, kRequest };

// The DecodeOptions member of a row; its alternative is the row's kind.
using DecodeOptionsField =
    std::variant<int DecodeOptions::*, float DecodeOptions::*, bool DecodeOptions::*, uint64_t DecodeOptions::*,
                 LengthPenaltyStyle DecodeOptions::*>;
// kSeed: a uint64 (0: none); kStyle: a LengthPenaltyStyle, given by name. In
// DecodeOptionsField's order.
enum class OptionKind { kInt, kFloat, kBool, kSeed, kStyle };

// Which `tnmt translate` flags AddDecodingFlags declares together: the search flags, or the
// output flags that the command lists beside its own output flags; kNone: no flag.
enum class FlagGroup { kNone, kSearch, kOutput };

// Bounds of a numeric option; an infinite bound is none.
struct OptionRange {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;

  bool Contains(double v) const;  // false for NaN
  std::string ToString() const;   // "in [1, 64]", "in (0, 1]", ">= 0"
};

struct DecodingOption {
  DecodingOptionId id;
  const char* field;          // DecodeOptions member name
  DecodeOptionsField member;
  const char* flag;           // `tnmt translate` flag without "--"; "" if none
  const char* proto;          // tnmt.v1.DecodingOptions field; "" if none
  std::optional<OptionRange> range;  // numeric options only
  FlagGroup flag_group;
  double flag_default;        // the flag's stored value when not given (numbers and booleans)
  std::string shown_default;  // what --help states instead, when the stored value is a marker
  std::string help;           // the flag's --help text

  OptionKind kind() const { return static_cast<OptionKind>(member.index()); }
  bool numeric() const { return kind() == OptionKind::kInt || kind() == OptionKind::kFloat; }
};

const std::vector<DecodingOption>& DecodingOptionTable();
const DecodingOption& DecodingOptionRow(DecodingOptionId id);
// The row of a tnmt.v1.DecodingOptions field, or null.
const DecodingOption* FindDecodingOptionByProto(absl::string_view proto_field);

// beam_size, --beam-size or options.beam_size (a row without a flag or proto field: its
// DecodeOptions name).
std::string DecodingOptionName(const DecodingOption& row, OptionTerms terms);

// The numeric options a caller gives, in its units; an option not given is unset.
class DecodingOptionValues {
 public:
  void Set(DecodingOptionId id, double v) { values_[static_cast<int>(id)] = v; }
  void Clear(DecodingOptionId id) { values_[static_cast<int>(id)].reset(); }
  std::optional<double> Get(DecodingOptionId id) const { return values_[static_cast<int>(id)]; }

 private:
  std::array<std::optional<double>, kNumDecodingOptions> values_;
};

// What a rule needs from the model: its decoder layers (0: not known, not checked).
struct DecodingOptionContext {
  int decoder_layers = 0;
};

// The first option refused and the message, in the terms asked for.
struct DecodingOptionRefusal {
  DecodingOptionId option;
  std::string message;
};

// `value` against the row's range: InvalidArgument "NAME must be in RANGE, got VALUE".
absl::Status CheckDecodingOptionRange(const DecodingOption& row, double value, OptionTerms terms);

// Every range, then the rules between options: n_best within beam_size, min_length within a
// set max_length, sampling_topp and sampling_temperature only with sampling, sampling with
// beam_size 1, alignment_layer within the model's decoder layers. A rule whose options are not
// all set is not checked.
std::optional<DecodingOptionRefusal> FindDecodingOptionRefusal(const DecodingOptionValues& values, OptionTerms terms,
                                                               const DecodingOptionContext& context = {});
absl::Status CheckDecodingOptionValues(const DecodingOptionValues& values, OptionTerms terms,
                                       const DecodingOptionContext& context = {});

// The numeric fields of `o` (alignment_layer -1, "the last layer", unset), checked as above.
DecodingOptionValues DecodeOptionValues(const DecodeOptions& o);
absl::Status ValidateDecodeOptions(const DecodeOptions& o, OptionTerms terms, const DecodingOptionContext& context = {});

// A length_penalty_style name, or InvalidArgument "NAME: expected ...".
absl::StatusOr<LengthPenaltyStyle> ParseLengthPenaltyStyleOption(const std::string& text, OptionTerms terms);

}  // namespace tnmt

// The decoding flags of `tnmt translate` (--beam-size, --length-penalty, --max-length-offset,
// --n-best, ...): declared from the decoding-option table (engine/decode/option_table.h), with
// its defaults and help, once for local translation and --server; checked by the table before
// any work, and every error names the flag as typed, not the engine's or the API's field name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/decode/option_table.h"
#include "engine/decode/options.h"
#include "engine/runtime/loaded_model.h"
#include "engine/runtime/placement.h"
#include "proto/tnmt/v1/translation.pb.h"
#include "tools/tnmt/args.h"

namespace tnmt::cli {

// Declares the table's flags of `group`, in the table's order: kSearch, the search flags
// (--beam-size ... --seed); kOutput, --token-scores, --alignments and --alignment-layer, which
// the command lists beside its own output flags.
void AddDecodingFlags(Args* args, FlagGroup group);

// The models of --ensemble (comma-separated directories; empty: none), loaded with `placement`
// and checked against --model's `first`. Errors name the flag.
absl::StatusOr<std::vector<std::shared_ptr<const LoadedModel>>> LoadEnsembleFlag(const Args& args,
                                                                                 const LoadedModel& first,
                                                                                 const Placement& placement);

// The flags for token rules, repetition and sampling (--min-length, --no-repeat-ngram-size,
// --repetition-penalty, --disable-unk, --sampling-topk/-topp/-temperature, --seed) that were
// given, into local options (min-length counts tokens before </s>, as the API does) or into
// a request's (sampling with --beam-size not given: beam 1 in both).
void ApplyDecodingFlags(const Args& args, DecodeOptions* options);
void ApplyDecodingFlags(const Args& args, tnmt::v1::DecodingOptions* options);

// Checks the decoding flags that were given, as far as they go without a model: the table's
// ranges, --length-penalty-style's name, --seed, and the rules between the flags (--n-best
// within --beam-size, sampling with --beam-size 1, --sampling-topp and --sampling-temperature
// with sampling only). `args` declares both groups of AddDecodingFlags. The rules that need
// the model (its beam size, its decoder layers) are checked once the options are built, by
// ValidateDecodeOptions(options, OptionTerms::kFlag, ...).
absl::Status CheckDecodingFlags(const Args& args);

// A server's message about the request's options in the flags' words, through the table:
// each options.FIELD that has a flag becomes the flag, and "options.FIELD: " starting the
// message becomes "--flag " ("options.n_best: 5 exceeds options.beam_size 4 ..." ->
// "--n-best 5 exceeds --beam-size 4 ..."). The rules about several options, which name the
// fields within "options." ("options.sampling needs beam_size 1"), are checked by
// CheckDecodingFlags before a request is sent.
std::string InFlagTerms(absl::string_view message);

}  // namespace tnmt::cli

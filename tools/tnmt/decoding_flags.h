// The decoding flags of `tnmt translate` (--beam-size, --length-penalty, --max-length-offset,
// --n-best): declared once for local translation and --server, checked before any work, and
// every error names the flag as typed, not the engine's or the API's field name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/decode/options.h"
#include "engine/runtime/loaded_model.h"
#include "engine/runtime/placement.h"
#include "proto/tnmt/v1/translation.pb.h"
#include "tools/tnmt/args.h"

namespace tnmt::cli {

void AddDecodingFlags(Args* args);

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

// Checks the decoding flags that were given (ranges, --n-best within --beam-size).
absl::Status CheckDecodingFlags(const Args& args);

// Checks --n-best against the beam size it will be used with when --beam-size was not given
// (`beam_size`: the model's default).
absl::Status CheckNBestWithinBeam(const Args& args, int beam_size);

// A message about decoding options from the engine (`beam_size must be ...`) or a server
// (`options.n_best: ...`) in the flags' words (`--beam-size must be ...`).
std::string InFlagTerms(absl::string_view message);

}  // namespace tnmt::cli

// Decoding flags of `tnmt translate`; see decoding_flags.h.
#include "tools/tnmt/decoding_flags.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/decode/options.h"

namespace tnmt::cli {

void AddDecodingFlags(Args* args) {
  args->AddInt("beam-size", 0, absl::StrCat("beam size, 1 to ", kMaxBeamSize, "; 1 = greedy search"),
               "the model's config, usually 4");
  args->AddFloat("length-penalty", 0.0f, "length penalty alpha, -10 to 10 (0: none)",
                 "the model's config, usually 0.6");
  args->AddString("length-penalty-style", "", "gnmt: divide by ((5 + length) / 6)^alpha (the paper's); length: by length^alpha (Hugging Face, fairseq, CTranslate2)",
                  "the model's config, usually gnmt");
  args->AddInt("max-length-offset", 0, "max output length = input length + this",
               "the model's config, usually 50");
  args->AddInt("n-best", 1, "hypotheses written per input line, at most the beam size");
}

absl::Status CheckDecodingFlags(const Args& args) {
  if (args.given("beam-size")) {
    const int beam = args.GetInt("beam-size");
    if (beam < 1 || beam > kMaxBeamSize) {
      return absl::InvalidArgumentError(absl::StrCat("--beam-size must be in [1, ", kMaxBeamSize, "], got ", beam));
    }
  }
  if (args.given("length-penalty")) {
    const float lp = args.GetFloat("length-penalty");
    if (!std::isfinite(lp) || std::fabs(lp) > 10.0f) {
      return absl::InvalidArgumentError(absl::StrCat("--length-penalty must be a number in [-10, 10], got ", lp));
    }
  }
  if (args.given("length-penalty-style")) {
    absl::StatusOr<LengthPenaltyStyle> style = ParseLengthPenaltyStyle(args.GetString("length-penalty-style"));
    if (!style.ok()) return absl::InvalidArgumentError(absl::StrCat("--length-penalty-style: ", style.status().message()));
  }
  if (args.given("max-length-offset")) {
    const int offset = args.GetInt("max-length-offset");
    if (offset < 0 || offset > 10000) {
      return absl::InvalidArgumentError(absl::StrCat("--max-length-offset must be in [0, 10000], got ", offset));
    }
  }
  const int n_best = args.GetInt("n-best");
  if (n_best < 1) return absl::InvalidArgumentError(absl::StrCat("--n-best must be at least 1, got ", n_best));
  if (args.given("beam-size") && n_best > args.GetInt("beam-size")) {
    return absl::InvalidArgumentError(absl::StrCat("--n-best ", n_best, " exceeds --beam-size ", args.GetInt("beam-size"),
                                                   " (the hypotheses come from the beam)"));
  }
  return absl::OkStatus();
}

absl::Status CheckNBestWithinBeam(const Args& args, int beam_size) {
  const int n_best = args.GetInt("n-best");
  if (args.given("beam-size") || n_best <= beam_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--n-best ", n_best, " exceeds the model's beam size ", beam_size,
                                                 " (give --beam-size ", n_best, " or more)"));
}

std::string InFlagTerms(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"options.", ""},
                                       {"length_penalty_style", "--length-penalty-style"},
                                       {"beam_size", "--beam-size"},
                                       {"length_penalty", "--length-penalty"},
                                       {"max_length_offset", "--max-length-offset"},
                                       {"n_best", "--n-best"}});
}

}  // namespace tnmt::cli

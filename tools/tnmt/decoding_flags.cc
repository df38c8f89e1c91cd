// Decoding flags of `tnmt translate`; see decoding_flags.h.
#include "tools/tnmt/decoding_flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/decode/options.h"

namespace tnmt::cli {

absl::StatusOr<std::vector<std::shared_ptr<const LoadedModel>>> LoadEnsembleFlag(const Args& args,
                                                                                 const LoadedModel& first,
                                                                                 const Placement& placement) {
  const std::string flag = args.GetString("ensemble");
  if (flag.empty()) return std::vector<std::shared_ptr<const LoadedModel>>{};
  std::vector<std::string> dirs;
  for (absl::string_view d : absl::StrSplit(flag, ',')) {
    if (d.empty()) return absl::InvalidArgumentError(absl::StrCat("--ensemble \"", flag, "\" has an empty directory name"));
    dirs.emplace_back(d);
  }
  auto members = LoadEnsembleMembers(first, dirs, placement);
  if (!members.ok()) return absl::Status(members.status().code(), absl::StrCat("--ensemble: ", members.status().message()));
  return members;
}

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
  args->AddInt("min-length", 0, "fewest tokens before </s> may end a translation (0: none)");
  args->AddInt("no-repeat-ngram-size", 0, "no n-gram of this size occurs twice in a translation (0: off)");
  args->AddFloat("repetition-penalty", 1.0f, "log-probability of a token already in the translation x this (> 1 discourages repeats; 1: off)");
  args->AddBool("disable-unk", false, "never generate <unk>");
  args->AddInt("sampling-topk", 1, "sample each token from the K most likely (0: all; 1: no sampling, search); implies --beam-size 1");
  args->AddFloat("sampling-topp", 1.0f, "with sampling: keep the smallest most likely set whose probability reaches P");
  args->AddFloat("sampling-temperature", 1.0f, "with sampling: divide log-probabilities by T");
  args->AddString("seed", "", "with sampling: random seed (the same seed gives the same output)", "a seed drawn at start, printed on stderr");
}

void ApplyDecodingFlags(const Args& args, DecodeOptions* o) {
  if (args.given("min-length") && args.GetInt("min-length") > 0) o->min_length = args.GetInt("min-length") + 1;
  if (args.given("no-repeat-ngram-size")) o->no_repeat_ngram_size = args.GetInt("no-repeat-ngram-size");
  if (args.given("repetition-penalty")) o->repetition_penalty = args.GetFloat("repetition-penalty");
  if (args.given("disable-unk")) o->disable_unk = args.GetBool("disable-unk");
  if (args.given("sampling-topk")) o->sampling_topk = args.GetInt("sampling-topk");
  if (args.given("sampling-topp")) o->sampling_topp = args.GetFloat("sampling-topp");
  if (args.given("sampling-temperature")) o->sampling_temperature = args.GetFloat("sampling-temperature");
  if (o->sampling() && !args.given("beam-size")) o->beam_size = 1;
}

void ApplyDecodingFlags(const Args& args, tnmt::v1::DecodingOptions* o) {
  if (args.given("min-length")) o->set_min_length(args.GetInt("min-length"));
  if (args.given("no-repeat-ngram-size")) o->set_no_repeat_ngram_size(args.GetInt("no-repeat-ngram-size"));
  if (args.given("repetition-penalty")) o->set_repetition_penalty(args.GetFloat("repetition-penalty"));
  if (args.given("disable-unk")) o->set_disable_unk(args.GetBool("disable-unk"));
  if (args.given("sampling-topk")) o->set_sampling_topk(args.GetInt("sampling-topk"));
  if (args.given("sampling-topp")) o->set_sampling_topp(args.GetFloat("sampling-topp"));
  if (args.given("sampling-temperature")) o->set_sampling_temperature(args.GetFloat("sampling-temperature"));
  if (o->has_sampling_topk() && o->sampling_topk() != 1 && !args.given("beam-size")) o->set_beam_size(1);
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
  if (args.given("min-length") && args.GetInt("min-length") < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--min-length must be >= 0, got ", args.GetInt("min-length")));
  }
  if (args.given("seed")) {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(args.GetString("seed"), &seed) || seed == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--seed must be a positive integer below 2^64, got \"",
                                                     args.GetString("seed").substr(0, 40), "\""));
    }
  }
  // Ranges, sampling with beam search, temperature without sampling: the engine's rules.
  DecodeOptions probe;
  probe.beam_size = args.given("beam-size") ? args.GetInt("beam-size") : 1;
  ApplyDecodingFlags(args, &probe);
  if (!args.given("beam-size") && !probe.sampling()) probe.beam_size = 4;
  if (absl::Status s = probe.Validate(); !s.ok()) return absl::InvalidArgumentError(InFlagTerms(s.message()));
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
                                       {"n_best", "--n-best"},
                                       {"min_length", "--min-length"},
                                       {"no_repeat_ngram_size", "--no-repeat-ngram-size"},
                                       {"repetition_penalty", "--repetition-penalty"},
                                       {"disable_unk", "--disable-unk"},
                                       {"sampling_topk", "--sampling-topk"},
                                       {"sampling_topp", "--sampling-topp"},
                                       {"sampling_temperature", "--sampling-temperature"},
                                       {"alignment_layer", "--alignment-layer"}});
}

}  // namespace tnmt::cli

// Decoding flags of `tnmt translate`; see decoding_flags.h.
#include "tools/tnmt/decoding_flags.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/decode/option_table.h"

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

void AddDecodingFlags(Args* args, FlagGroup group) {
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (row.flag_group != group) continue;
    switch (row.kind()) {
      case OptionKind::kInt:
        args->AddInt(row.flag, static_cast<int>(row.flag_default), row.help, row.shown_default);
        break;
      case OptionKind::kFloat:
        args->AddFloat(row.flag, static_cast<float>(row.flag_default), row.help, row.shown_default);
        break;
      case OptionKind::kBool:
        args->AddBool(row.flag, row.flag_default != 0, row.help, row.shown_default);
        break;
      case OptionKind::kSeed:
      case OptionKind::kStyle:
        args->AddString(row.flag, "", row.help, row.shown_default);
        break;
    }
  }
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

namespace {

// A given flag of `row` into `values` (numbers), or checked as text (the style, the seed).
absl::Status ReadFlag(const Args& args, const DecodingOption& row, DecodingOptionValues* values) {
  switch (row.kind()) {
    case OptionKind::kInt:
      values->Set(row.id, args.GetInt(row.flag));
      return absl::OkStatus();
    case OptionKind::kFloat:
      values->Set(row.id, args.GetFloat(row.flag));
      return absl::OkStatus();
    case OptionKind::kStyle:
      return ParseLengthPenaltyStyleOption(args.GetString(row.flag), OptionTerms::kFlag).status();
    case OptionKind::kSeed: {
      const std::string text = args.GetString(row.flag);
      uint64_t seed = 0;
      if (absl::SimpleAtoi(text, &seed) && seed != 0) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat(DecodingOptionName(row, OptionTerms::kFlag),
                                                     " must be a positive integer below 2^64, got \"",
                                                     text.substr(0, 40), "\""));
    }
    case OptionKind::kBool:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDecodingFlags(const Args& args) {
  DecodingOptionValues values;
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (row.flag_group == FlagGroup::kNone || !args.given(row.flag)) continue;
    if (absl::Status s = ReadFlag(args, row, &values); !s.ok()) return s;
  }
  // Sampling without --beam-size searches with beam 1 (ApplyDecodingFlags).
  const std::optional<double> topk = values.Get(DecodingOptionId::kSamplingTopk);
  if (!values.Get(DecodingOptionId::kBeamSize) && topk && *topk != 1) values.Set(DecodingOptionId::kBeamSize, 1);
  return CheckDecodingOptionValues(values, OptionTerms::kFlag);
}

std::string InFlagTerms(absl::string_view message) {
  constexpr absl::string_view kOptions = "options.";
  std::string out;
  size_t at = 0;
  for (size_t found = message.find(kOptions); found != absl::string_view::npos; found = message.find(kOptions, at)) {
    size_t end = found + kOptions.size();
    while (end < message.size() && (absl::ascii_islower(message[end]) || absl::ascii_isdigit(message[end]) ||
                                    message[end] == '_')) {
      ++end;
    }
    const absl::string_view field = message.substr(found + kOptions.size(), end - found - kOptions.size());
    const DecodingOption* row = FindDecodingOptionByProto(field);
    absl::StrAppend(&out, message.substr(at, found - at));
    at = end;
    if (row == nullptr || *row->flag == '\0') {
      absl::StrAppend(&out, message.substr(found, end - found));
      continue;
    }
    absl::StrAppend(&out, DecodingOptionName(*row, OptionTerms::kFlag));
    if (found == 0 && absl::StartsWith(message.substr(end), ": ")) {  // the field the message is about
      out += ' ';
      at = end + 2;
    }
  }
  absl::StrAppend(&out, message.substr(at));
  return out;
}

}  // namespace tnmt::cli

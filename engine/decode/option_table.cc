// The decoding-option table and its checks; see option_table.h.
#include "engine/decode/option_table.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tnmt {

namespace {

using Id = DecodingOptionId;

OptionRange Closed(double lo, double hi) { return {lo, false, hi, false}; }
OptionRange AboveUpTo(double lo, double hi) { return {lo, true, hi, false}; }  // (lo, hi]
OptionRange AtLeast(double lo) { return {lo, false}; }

std::vector<DecodingOption> MakeTable() {
  const DecodingDefaults model;  // what a config.json without "decoding" gives
  const std::string from_config = "the model's config, usually ";
  return {
      {Id::kBeamSize, "beam_size", &DecodeOptions::beam_size, "beam-size", "beam_size", Closed(1, kMaxBeamSize),
       FlagGroup::kSearch, 0, absl::StrCat(from_config, model.beam_size),
       absl::StrCat("beam size, 1 to ", kMaxBeamSize, "; 1 = greedy search")},
      {Id::kLengthPenalty, "length_penalty", &DecodeOptions::length_penalty, "length-penalty", "length_penalty",
       Closed(-10, 10), FlagGroup::kSearch, 0, absl::StrCat(from_config, model.length_penalty),
       "length penalty alpha, -10 to 10 (0: none)"},
      {Id::kLengthPenaltyStyle, "length_penalty_style", &DecodeOptions::length_penalty_style, "length-penalty-style",
       "length_penalty_style", std::nullopt, FlagGroup::kSearch, 0,
       absl::StrCat(from_config, LengthPenaltyStyleName(model.length_penalty_style)),
       "gnmt: divide by ((5 + length) / 6)^alpha (the paper's); length: by length^alpha (Hugging Face, fairseq, "
       "CTranslate2)"},
      {Id::kMaxLengthOffset, "max_length_offset", &DecodeOptions::max_length_offset, "max-length-offset", "",
       Closed(0, 10000), FlagGroup::kSearch, 0, absl::StrCat(from_config, model.max_length_offset),
       "max output length = input length + this"},
      {Id::kNBest, "n_best", &DecodeOptions::n_best, "n-best", "n_best", Closed(1, kMaxBeamSize), FlagGroup::kSearch,
       1, "", "hypotheses written per input line, at most the beam size"},
      {Id::kMinLength, "min_length", &DecodeOptions::min_length, "min-length", "min_length", AtLeast(0),
       FlagGroup::kSearch, 0, "", "fewest tokens before </s> may end a translation (0: none)"},
      {Id::kNoRepeatNgramSize, "no_repeat_ngram_size", &DecodeOptions::no_repeat_ngram_size, "no-repeat-ngram-size",
       "no_repeat_ngram_size", Closed(0, 64), FlagGroup::kSearch, 0, "",
       "no n-gram of this size occurs twice in a translation (0: off)"},
      {Id::kRepetitionPenalty, "repetition_penalty", &DecodeOptions::repetition_penalty, "repetition-penalty",
       "repetition_penalty", AboveUpTo(0, 100), FlagGroup::kSearch, 1, "",
       "log-probability of a token already in the translation x this (> 1 discourages repeats; 1: off)"},
      {Id::kDisableUnk, "disable_unk", &DecodeOptions::disable_unk, "disable-unk", "disable_unk", std::nullopt,
       FlagGroup::kSearch, 0, "", "never generate <unk>"},
      {Id::kSamplingTopk, "sampling_topk", &DecodeOptions::sampling_topk, "sampling-topk", "sampling_topk", AtLeast(0),
       FlagGroup::kSearch, 1, "",
       "sample each token from the K most likely (0: all; 1: no sampling, search); implies --beam-size 1"},
      {Id::kSamplingTopp, "sampling_topp", &DecodeOptions::sampling_topp, "sampling-topp", "sampling_topp",
       AboveUpTo(0, 1), FlagGroup::kSearch, 1, "",
       "with sampling: keep the smallest most likely set whose probability reaches P"},
      {Id::kSamplingTemperature, "sampling_temperature", &DecodeOptions::sampling_temperature, "sampling-temperature",
       "sampling_temperature", AboveUpTo(0, 100), FlagGroup::kSearch, 1, "",
       "with sampling: divide log-probabilities by T"},
      {Id::kSeed, "seed", &DecodeOptions::seed, "seed", "seed", std::nullopt, FlagGroup::kSearch, 0,
       "a seed drawn at start, printed on stderr", "with sampling: random seed (the same seed gives the same output)"},
      {Id::kReturnTokenScores, "return_token_scores", &DecodeOptions::return_token_scores, "token-scores",
       "return_token_scores", std::nullopt, FlagGroup::kOutput, 0, "",
       "write each hypothesis with its pieces and their log-probabilities (see above)"},
      {Id::kReturnAlignments, "return_alignments", &DecodeOptions::return_alignments, "alignments",
       "return_alignments", std::nullopt, FlagGroup::kOutput, 0, "",
       "write each hypothesis with its pieces and their source alignment (see above)"},
      {Id::kAlignmentLayer, "alignment_layer", &DecodeOptions::alignment_layer, "alignment-layer", "alignment_layer",
       AtLeast(0), FlagGroup::kOutput, -1, "the last layer",
       "with --alignments: the decoder layer whose cross-attention aligns, from 0"},
      {Id::kMaxLength, "max_length", &DecodeOptions::max_length, "", "max_length", Closed(0, 10000), FlagGroup::kNone,
       0, "", ""},
      {Id::kReturnScores, "return_scores", &DecodeOptions::return_scores, "", "return_scores", std::nullopt,
       FlagGroup::kNone, 0, "", ""},
      // Set by `tnmt translate --shortlist FILE`, which also loads the table.
      {Id::kUseShortlist, "use_shortlist", &DecodeOptions::use_shortlist, "", "", std::nullopt, FlagGroup::kNone, 0,
       "", ""},
  };
}

std::string Number(double v) { return absl::StrCat(v); }
std::string Integer(double v) { return absl::StrCat(static_cast<int64_t>(v)); }

std::string Value(const DecodingOption& row, double v) {
  return row.kind() == OptionKind::kInt ? Integer(v) : Number(v);
}

// "beam_size", "--beam-size", "options.beam_size:": what a message about one option starts with.
std::string Subject(const DecodingOption& row, OptionTerms terms) {
  return terms == OptionTerms::kRequest ? DecodingOptionName(row, terms) + ":" : DecodingOptionName(row, terms);
}

DecodingOptionRefusal Refuse(Id id, OptionTerms terms, absl::string_view problem) {
  return {id, absl::StrCat(Subject(DecodingOptionRow(id), terms), " ", problem)};
}

// A name inside a sentence about several options: a request's names the field within options.
std::string InSentence(Id id, OptionTerms terms) {
  const DecodingOption& row = DecodingOptionRow(id);
  return terms == OptionTerms::kRequest ? row.proto : DecodingOptionName(row, terms);
}

DecodingOptionRefusal RefuseSentence(Id blamed, OptionTerms terms, absl::string_view sentence) {
  return {blamed, terms == OptionTerms::kRequest ? absl::StrCat("options.", sentence) : std::string(sentence)};
}

std::optional<DecodingOptionRefusal> RangeRefusal(const DecodingOption& row, double v, OptionTerms terms) {
  if (!row.range.has_value() || row.range->Contains(v)) return std::nullopt;
  return Refuse(row.id, terms, absl::StrCat("must be ", row.range->ToString(), ", got ", Value(row, v)));
}

// The rules between options of one set of values.
std::optional<DecodingOptionRefusal> RuleRefusal(const DecodingOptionValues& v, OptionTerms t,
                                                 const DecodingOptionContext& context) {
  const std::optional<double> beam = v.Get(Id::kBeamSize), n_best = v.Get(Id::kNBest);
  if (beam && n_best && *n_best > *beam) {
    return Refuse(Id::kNBest, t, absl::StrCat(Integer(*n_best), " exceeds ",
                                              DecodingOptionName(DecodingOptionRow(Id::kBeamSize), t), " ",
                                              Integer(*beam), " (the hypotheses come from the beam)"));
  }
  const std::optional<double> min = v.Get(Id::kMinLength), max = v.Get(Id::kMaxLength);
  if (min && max && *max > 0 && *min > *max) {
    return Refuse(Id::kMinLength, t, absl::StrCat(Integer(*min), " is outside [0, ", Integer(*max), "] (",
                                                  DecodingOptionName(DecodingOptionRow(Id::kMaxLength), t), " is ",
                                                  Integer(*max), ")"));
  }
  const std::optional<double> topk = v.Get(Id::kSamplingTopk), topp = v.Get(Id::kSamplingTopp),
                              temperature = v.Get(Id::kSamplingTemperature);
  const bool sampling = topk && *topk != 1;
  const bool cut = topp && *topp != 1;
  if (!sampling && (cut || (temperature && *temperature != 1))) {
    return RefuseSentence(cut ? Id::kSamplingTopp : Id::kSamplingTemperature, t,
                          absl::StrCat(InSentence(Id::kSamplingTopp, t), " and ", InSentence(Id::kSamplingTemperature, t),
                                       " apply to sampling only: set ", InSentence(Id::kSamplingTopk, t),
                                       " (0: all tokens)"));
  }
  if (sampling && beam && *beam != 1) {
    return RefuseSentence(Id::kBeamSize, t,
                          absl::StrCat("sampling needs ", InSentence(Id::kBeamSize, t), " 1, got ", Integer(*beam), " (",
                                       InSentence(Id::kSamplingTopk, t), " ", Integer(*topk), ")"));
  }
  const std::optional<double> layer = v.Get(Id::kAlignmentLayer);
  if (layer && context.decoder_layers > 0 && *layer >= context.decoder_layers) {
    return Refuse(Id::kAlignmentLayer, t, absl::StrCat(Integer(*layer), " is outside [0, ", context.decoder_layers,
                                                       ") (the model's decoder layers)"));
  }
  return std::nullopt;
}

}  // namespace

bool OptionRange::Contains(double v) const {
  if (std::isnan(v)) return false;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string OptionRange::ToString() const {
  if (std::isinf(hi)) return absl::StrCat(lo_open ? "> " : ">= ", Number(lo));
  return absl::StrCat("in ", lo_open ? "(" : "[", Number(lo), ", ", Number(hi), hi_open ? ")" : "]");
}

const std::vector<DecodingOption>& DecodingOptionTable() {
  static const std::vector<DecodingOption>* const table = new std::vector<DecodingOption>(MakeTable());
  return *table;
}

const DecodingOption& DecodingOptionRow(DecodingOptionId id) { return DecodingOptionTable()[static_cast<int>(id)]; }

const DecodingOption* FindDecodingOptionByProto(absl::string_view proto_field) {
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (!proto_field.empty() && proto_field == row.proto) return &row;
  }
  return nullptr;
}

std::string DecodingOptionName(const DecodingOption& row, OptionTerms terms) {
  switch (terms) {
    case OptionTerms::kEngine:
      return row.field;
    case OptionTerms::kFlag:
      return *row.flag != '\0' ? absl::StrCat("--", row.flag) : row.field;
    case OptionTerms::kRequest:
      return absl::StrCat("options.", *row.proto != '\0' ? row.proto : row.field);
  }
  return row.field;
}

absl::Status CheckDecodingOptionRange(const DecodingOption& row, double value, OptionTerms terms) {
  const std::optional<DecodingOptionRefusal> r = RangeRefusal(row, value, terms);
  return r ? absl::InvalidArgumentError(r->message) : absl::OkStatus();
}

std::optional<DecodingOptionRefusal> FindDecodingOptionRefusal(const DecodingOptionValues& values, OptionTerms terms,
                                                               const DecodingOptionContext& context) {
  for (const DecodingOption& row : DecodingOptionTable()) {
    const std::optional<double> v = values.Get(row.id);
    if (!v) continue;
    if (std::optional<DecodingOptionRefusal> r = RangeRefusal(row, *v, terms)) return r;
  }
  return RuleRefusal(values, terms, context);
}

absl::Status CheckDecodingOptionValues(const DecodingOptionValues& values, OptionTerms terms,
                                       const DecodingOptionContext& context) {
  const std::optional<DecodingOptionRefusal> r = FindDecodingOptionRefusal(values, terms, context);
  return r ? absl::InvalidArgumentError(r->message) : absl::OkStatus();
}

DecodingOptionValues DecodeOptionValues(const DecodeOptions& o) {
  DecodingOptionValues values;
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (const auto* m = std::get_if<int DecodeOptions::*>(&row.member)) values.Set(row.id, o.*(*m));
    if (const auto* m = std::get_if<float DecodeOptions::*>(&row.member)) values.Set(row.id, o.*(*m));
  }
  if (o.alignment_layer == -1) values.Clear(Id::kAlignmentLayer);  // the last layer
  return values;
}

absl::Status ValidateDecodeOptions(const DecodeOptions& o, OptionTerms terms, const DecodingOptionContext& context) {
  return CheckDecodingOptionValues(DecodeOptionValues(o), terms, context);
}

absl::StatusOr<LengthPenaltyStyle> ParseLengthPenaltyStyleOption(const std::string& text, OptionTerms terms) {
  absl::StatusOr<LengthPenaltyStyle> style = ParseLengthPenaltyStyle(text);
  if (style.ok()) return style;
  return absl::InvalidArgumentError(absl::StrCat(DecodingOptionName(DecodingOptionRow(Id::kLengthPenaltyStyle), terms),
                                                 ": ", style.status().message()));
}

}  // namespace tnmt

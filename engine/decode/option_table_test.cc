// The decoding-option table: every range accepts its bounds and refuses the values just
// outside them, with one message rendered in the engine's, the flags' and the request's terms;
// the rules between options likewise; every tnmt.v1.DecodingOptions field has a row of its kind.
#include "engine/decode/option_table.h"

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/tnmt/v1/translation.pb.h"

namespace tnmt {
namespace {

using Id = DecodingOptionId;
constexpr OptionTerms kAllTerms[] = {OptionTerms::kEngine, OptionTerms::kFlag, OptionTerms::kRequest};

// What a refusal says after the option's name ("NAME " or, in a request, "options.NAME: ").
std::string Problem(const DecodingOption& row, OptionTerms terms, const std::string& message) {
  const std::string name = DecodingOptionName(row, terms) + (terms == OptionTerms::kRequest ? ": " : " ");
  EXPECT_TRUE(absl::StartsWith(message, name)) << message;
  return absl::StartsWith(message, name) ? message.substr(name.size()) : message;
}

// The value one step beyond `bound` (toward `toward`): the next integer, or the next float.
double Beside(const DecodingOption& row, double bound, double toward) {
  if (row.kind() == OptionKind::kInt) return bound + (toward > bound ? 1 : -1);
  return std::nextafter(static_cast<float>(bound), static_cast<float>(toward));
}

// Checks that `value` is accepted or refused, refused with the same problem in every terms.
void ExpectRange(const DecodingOption& row, double value, bool accepted) {
  std::set<std::string> problems;
  for (OptionTerms terms : kAllTerms) {
    const absl::Status s = CheckDecodingOptionRange(row, value, terms);
    EXPECT_EQ(s.ok(), accepted) << row.field << " = " << value << ": " << s;
    if (s.ok()) continue;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    problems.insert(Problem(row, terms, std::string(s.message())));
  }
  if (accepted) return;
  ASSERT_EQ(problems.size(), 1u) << row.field << " = " << value;
  EXPECT_TRUE(absl::StartsWith(*problems.begin(), "must be ")) << *problems.begin();
}

TEST(OptionTableTest, RowsAreInIdOrderWithDistinctNames) {
  std::set<std::string> fields, flags, protos;
  for (size_t i = 0; i < DecodingOptionTable().size(); ++i) {
    const DecodingOption& row = DecodingOptionTable()[i];
    EXPECT_EQ(static_cast<size_t>(row.id), i) << row.field;
    EXPECT_TRUE(fields.insert(row.field).second) << row.field;
    if (*row.flag != '\0') {
      EXPECT_TRUE(flags.insert(row.flag).second) << row.flag;
    }
    if (*row.proto != '\0') {
      EXPECT_TRUE(protos.insert(row.proto).second) << row.proto;
    }
    EXPECT_EQ(row.range.has_value(), row.numeric()) << row.field << ": numeric options have a range";
    EXPECT_EQ(row.flag_group == FlagGroup::kNone, *row.flag == '\0') << row.field;
    EXPECT_EQ(row.help.empty(), *row.flag == '\0') << row.field << ": a flag has help";
  }
  EXPECT_EQ(DecodingOptionTable().size(), static_cast<size_t>(kNumDecodingOptions));
}

TEST(OptionTableTest, EveryProtoFieldHasARowOfItsKind) {
  const google::protobuf::Descriptor* d = tnmt::v1::DecodingOptions::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    const DecodingOption* row = FindDecodingOptionByProto(f->name());
    ASSERT_NE(row, nullptr) << "tnmt.v1.DecodingOptions." << f->name() << " has no row in the option table";
    OptionKind want = OptionKind::kInt;
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32: want = OptionKind::kInt; break;
      case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT: want = OptionKind::kFloat; break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL: want = OptionKind::kBool; break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64: want = OptionKind::kSeed; break;
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING: want = OptionKind::kStyle; break;
      default: ADD_FAILURE() << f->name() << ": a field type the table has no kind for";
    }
    EXPECT_EQ(row->kind(), want) << f->name();
  }
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (*row.proto != '\0') {
      EXPECT_NE(d->FindFieldByName(row.proto), nullptr) << row.proto << " is not a proto field";
    }
  }
}

TEST(OptionTableTest, RangesAcceptTheirBoundsAndRefuseJustOutside) {
  int bounds = 0;
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (!row.range) continue;
    const OptionRange& r = *row.range;
    for (const auto& [bound, open, outward] : {std::tuple{r.lo, r.lo_open, -INFINITY}, std::tuple{r.hi, r.hi_open, INFINITY}}) {
      if (std::isinf(bound)) continue;
      ++bounds;
      const double inward = -outward;
      ExpectRange(row, bound, !open);
      ExpectRange(row, open ? Beside(row, bound, inward) : Beside(row, bound, outward), open);
    }
    if (row.kind() == OptionKind::kFloat) ExpectRange(row, NAN, false);
  }
  EXPECT_GE(bounds, 18);
}

TEST(OptionTableTest, TheCurrentMessages) {
  const DecodingOption& beam = DecodingOptionRow(Id::kBeamSize);
  EXPECT_EQ(CheckDecodingOptionRange(beam, 99, OptionTerms::kFlag).message(), "--beam-size must be in [1, 64], got 99");
  EXPECT_EQ(CheckDecodingOptionRange(beam, 0, OptionTerms::kEngine).message(), "beam_size must be in [1, 64], got 0");
  EXPECT_EQ(CheckDecodingOptionRange(beam, 0, OptionTerms::kRequest).message(),
            "options.beam_size: must be in [1, 64], got 0");
  EXPECT_EQ(CheckDecodingOptionRange(DecodingOptionRow(Id::kRepetitionPenalty), 0, OptionTerms::kFlag).message(),
            "--repetition-penalty must be in (0, 100], got 0");
  EXPECT_EQ(CheckDecodingOptionRange(DecodingOptionRow(Id::kLengthPenalty), NAN, OptionTerms::kRequest).message(),
            "options.length_penalty: must be in [-10, 10], got nan");
  EXPECT_EQ(CheckDecodingOptionRange(DecodingOptionRow(Id::kSamplingTopk), -1, OptionTerms::kFlag).message(),
            "--sampling-topk must be >= 0, got -1");
  EXPECT_EQ(ParseLengthPenaltyStyleOption("wu", OptionTerms::kFlag).status().message().substr(0, 33),
            "--length-penalty-style: expected ");
  EXPECT_EQ(ParseLengthPenaltyStyleOption("length", OptionTerms::kRequest).value(), LengthPenaltyStyle::kLength);
}

// A rule's case: the options set, the model's layers, the option blamed (none: accepted) and
// the message in the engine's, the flags' and the request's terms (none: not compared).
struct RuleCase {
  std::vector<std::pair<Id, double>> set;
  int decoder_layers;
  std::optional<Id> blamed;
  std::vector<std::string> messages;
};

TEST(OptionTableTest, RulesBetweenOptionsInEachTerms) {
  const std::string beam = " (the hypotheses come from the beam)";
  const std::string only = " apply to sampling only: set ";
  const std::string layers = " is outside [0, 2) (the model's decoder layers)";
  const std::vector<RuleCase> cases = {
      {{{Id::kBeamSize, 2}, {Id::kNBest, 3}}, 0, Id::kNBest,
       {"n_best 3 exceeds beam_size 2" + beam, "--n-best 3 exceeds --beam-size 2" + beam,
        "options.n_best: 3 exceeds options.beam_size 2" + beam}},
      {{{Id::kBeamSize, 4}, {Id::kSamplingTopk, 5}}, 0, Id::kBeamSize,
       {"sampling needs beam_size 1, got 4 (sampling_topk 5)", "sampling needs --beam-size 1, got 4 (--sampling-topk 5)",
        "options.sampling needs beam_size 1, got 4 (sampling_topk 5)"}},
      {{{Id::kSamplingTemperature, 0.5}}, 0, Id::kSamplingTemperature,
       {"sampling_topp and sampling_temperature" + only + "sampling_topk (0: all tokens)",
        "--sampling-topp and --sampling-temperature" + only + "--sampling-topk (0: all tokens)",
        "options.sampling_topp and sampling_temperature" + only + "sampling_topk (0: all tokens)"}},
      {{{Id::kSamplingTemperature, 0.5}, {Id::kSamplingTopp, 0.5}}, 0, Id::kSamplingTopp, {}},
      {{{Id::kSamplingTopk, 0}, {Id::kSamplingTopp, 0.5}, {Id::kSamplingTemperature, 2}}, 0, std::nullopt, {}},
      {{{Id::kMaxLength, 5}, {Id::kMinLength, 6}}, 0, Id::kMinLength,
       {"min_length 6 is outside [0, 5] (max_length is 5)", "--min-length 6 is outside [0, 5] (max_length is 5)",
        "options.min_length: 6 is outside [0, 5] (options.max_length is 5)"}},
      {{{Id::kMaxLength, 0}, {Id::kMinLength, 6}}, 0, std::nullopt, {}},  // max_length 0: no maximum
      {{{Id::kAlignmentLayer, 2}}, 0, std::nullopt, {}},                      // the model's layers not known
      {{{Id::kAlignmentLayer, 1}}, 2, std::nullopt, {}},
      {{{Id::kAlignmentLayer, 2}}, 2, Id::kAlignmentLayer,
       {"alignment_layer 2" + layers, "--alignment-layer 2" + layers, "options.alignment_layer: 2" + layers}},
  };
  for (const RuleCase& c : cases) {
    DecodingOptionValues values;
    for (const auto& [id, v] : c.set) values.Set(id, v);
    std::vector<std::string> messages;
    for (OptionTerms terms : kAllTerms) {
      const std::optional<DecodingOptionRefusal> r = FindDecodingOptionRefusal(values, terms, {c.decoder_layers});
      EXPECT_EQ(r.has_value(), c.blamed.has_value()) << (r ? r->message : "accepted");
      if (!r || !c.blamed) continue;
      EXPECT_EQ(r->option, *c.blamed) << r->message;
      messages.push_back(r->message);
    }
    if (!c.messages.empty()) {
      EXPECT_EQ(messages, c.messages);
    }
  }
}

TEST(OptionTableTest, ValidateChecksEveryFieldThroughTheTable) {
  DecodeOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.alignment_layer = -1;  // the last layer
  EXPECT_TRUE(o.Validate().ok());
  o.alignment_layer = -2;
  EXPECT_EQ(o.Validate().message(), "alignment_layer must be >= 0, got -2");
  o = {};
  o.n_best = 5;
  EXPECT_EQ(ValidateDecodeOptions(o, OptionTerms::kFlag).message(),
            "--n-best 5 exceeds --beam-size 4 (the hypotheses come from the beam)");
  o = {};
  o.max_length = 10001;
  EXPECT_EQ(o.Validate().message(), "max_length must be in [0, 10000], got 10001");
  for (const DecodingOption& row : DecodingOptionTable()) {
    if (!row.range) continue;
    DecodeOptions bad;
    if (auto* m = std::get_if<int DecodeOptions::*>(&row.member)) bad.*(*m) = static_cast<int>(row.range->lo) - 1;
    if (auto* m = std::get_if<float DecodeOptions::*>(&row.member)) bad.*(*m) = NAN;
    if (row.id == Id::kAlignmentLayer) bad.alignment_layer = -2;  // -1 is "the last layer"
    EXPECT_EQ(bad.Validate().message(), CheckDecodingOptionRange(row, DecodeOptionValues(bad).Get(row.id).value_or(0),
                                                                 OptionTerms::kEngine).message())
        << row.field;
  }
}

}  // namespace
}  // namespace tnmt

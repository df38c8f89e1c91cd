// Request preparation; see request.h.
#include "server/request.h"
#include "server/status_mapping.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <google/protobuf/descriptor.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/decoding.h"

namespace tnmt::server {

std::string TextReason(const absl::Status& tokenize_error) {
  return absl::StrContains(tokenize_error.message(), "UTF-8") ? "INVALID_UTF8" : "INVALID_TEXT";
}

namespace {

// The request's numeric options as the option table checks them: each field it set (a field
// without presence: always), in the API's units (max_length and min_length exclude </s>), with
// the beam size and n_best that apply (beam_size unset: the model's, or 1 for sampling; n_best
// 0: 1).
DecodingOptionValues RequestValues(const tnmt::v1::DecodingOptions& o, int model_beam_size) {
  using google::protobuf::FieldDescriptor;
  DecodingOptionValues values;
  const google::protobuf::Reflection* reflection = o.GetReflection();
  const google::protobuf::Descriptor* descriptor = o.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* f = descriptor->field(i);
    const DecodingOption* row = FindDecodingOptionByProto(f->name());
    if (row == nullptr || (f->has_presence() && !reflection->HasField(o, f))) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT32) values.Set(row->id, reflection->GetInt32(o, f));
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) values.Set(row->id, reflection->GetFloat(o, f));
  }
  const bool sampling = o.has_sampling_topk() && o.sampling_topk() != 1;
  if (!o.has_beam_size()) values.Set(DecodingOptionId::kBeamSize, sampling ? 1 : model_beam_size);
  if (o.n_best() == 0) values.Set(DecodingOptionId::kNBest, 1);
  return values;
}

// max_length and min_length against the longest output this server gives: its
// --max-output-length, or less when the model has fewer positions. The error names the limit.
absl::Status CheckOutputLimit(const tnmt::v1::DecodingOptions& o, const ServiceLimits& limits, const ModelConfig& c) {
  const int max_output = std::min(limits.max_output_length, MaxPositions(c) - 1);
  const std::string limit_source = max_output == limits.max_output_length
                                       ? absl::StrCat("this server's limit of ", max_output, " tokens (--max-output-length)")
                                       : absl::StrCat("the model's limit of ", max_output, " tokens (its positions)");
  for (const auto& [id, value] : {std::pair{DecodingOptionId::kMaxLength, o.max_length()},
                                  std::pair{DecodingOptionId::kMinLength, o.min_length()}}) {
    if (value <= max_output) continue;
    return absl::InvalidArgumentError(absl::StrCat(DecodingOptionName(DecodingOptionRow(id), OptionTerms::kRequest),
                                                   ": ", value, " exceeds ", limit_source));
  }
  return absl::OkStatus();
}

// Every check of the request's options: the style's name, this server's output limit, then the
// option table's ranges and rules. A rule about several options names the one it refuses in a
// google.rpc.BadRequest field violation (a message "options.FIELD: ..." names its own).
absl::Status CheckRequestOptions(const tnmt::v1::DecodingOptions& o, const ServiceLimits& limits,
                                 const ModelConfig& c, int model_beam_size) {
  if (!o.length_penalty_style().empty()) {
    absl::Status s = ParseLengthPenaltyStyleOption(o.length_penalty_style(), OptionTerms::kRequest).status();
    if (!s.ok()) return s;
  }
  if (absl::Status s = CheckOutputLimit(o, limits, c); !s.ok()) return s;
  const std::optional<DecodingOptionRefusal> refused =
      FindDecodingOptionRefusal(RequestValues(o, model_beam_size), OptionTerms::kRequest, {c.decoder_layers});
  if (!refused) return absl::OkStatus();
  const std::string field = DecodingOptionName(DecodingOptionRow(refused->option), OptionTerms::kRequest);
  absl::Status s = absl::InvalidArgumentError(refused->message);
  return FieldOf(refused->message) == field ? s : WithFieldViolation(s, field);
}

// The checked request options over the model's defaults in `d` (the engine counts output
// tokens with </s>, the API without).
void ApplyRequestOptions(const tnmt::v1::DecodingOptions& o, DecodeOptions* d) {
  if (o.has_beam_size()) d->beam_size = o.beam_size();
  d->n_best = o.n_best() == 0 ? 1 : o.n_best();
  if (o.has_length_penalty()) d->length_penalty = o.length_penalty();
  if (!o.length_penalty_style().empty()) d->length_penalty_style = *ParseLengthPenaltyStyle(o.length_penalty_style());
  if (o.max_length() > 0) d->max_length = o.max_length() + 1;
  // Without max_length, a min_length beyond a text's default maximum (its length + the
  // offset) raises that maximum to min_length (MaxOutputLength): it is honoured, not capped.
  if (o.min_length() > 0) d->min_length = o.min_length() + 1;  // </s> is allowed from that position on
  d->no_repeat_ngram_size = o.no_repeat_ngram_size();
  if (o.has_repetition_penalty()) d->repetition_penalty = o.repetition_penalty();
  d->disable_unk = o.disable_unk();
  if (o.has_sampling_topk()) d->sampling_topk = o.sampling_topk();
  if (o.has_sampling_topp()) d->sampling_topp = o.sampling_topp();
  if (o.has_sampling_temperature()) d->sampling_temperature = o.sampling_temperature();
  if (d->sampling() && !o.has_beam_size()) d->beam_size = 1;  // sampling replaces the search
  d->return_alignments = o.return_alignments();
  if (o.has_alignment_layer()) d->alignment_layer = o.alignment_layer();
  d->return_token_scores = o.return_token_scores();
}

}  // namespace

absl::StatusOr<PreparedRequest> PrepareRequest(
    const ModelRegistry& registry, const ServiceLimits& limits, const std::string& model,
    const tnmt::v1::DecodingOptions& o, const google::protobuf::RepeatedPtrField<std::string>& texts,
    const google::protobuf::RepeatedPtrField<std::string>* target_prefixes) {
  PreparedRequest p;
  p.limits = limits;
  p.request_options = o;
  p.request_texts = &texts;
  p.request_prefixes = target_prefixes;
  p.model = model;
  if (p.model.empty()) {
    p.model = registry.default_model();
    if (p.model.empty()) {
      return absl::InvalidArgumentError("model: required (this server serves several models; see ListModels)");
    }
  }
  absl::StatusOr<std::shared_ptr<Scheduler>> scheduler = registry.Get(p.model);
  if (!scheduler.ok()) return scheduler.status();
  p.scheduler = *scheduler;
  const LoadedModel& m = *p.scheduler->model();

  DecodeOptions& d = p.options;
  d = DecodeOptions::FromConfig(m.config);
  d.use_shortlist = m.shortlist != nullptr;  // loaded with one: every request uses it
  if (absl::Status s = CheckRequestOptions(o, limits, m.config, d.beam_size); !s.ok()) return s;
  ApplyRequestOptions(o, &d);
  if (d.sampling()) {
    d.seed = o.seed();
    if (d.seed == 0) d.seed = DrawSeed();
    p.seed = d.seed;
  }
  const bool has_prefixes = target_prefixes != nullptr && !target_prefixes->empty();
  p.return_scores = o.return_scores();

  p.texts = texts.size();
  if (texts.empty()) return absl::InvalidArgumentError("texts: empty batch (send at least one text)");
  if (has_prefixes && target_prefixes->size() != texts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("target_prefixes: ", target_prefixes->size(), " for ", texts.size(),
                                                   " texts (give none, or one per text)"));
  }
  if (texts.size() > limits.max_sentences_per_request) {
    return WithReason(absl::ResourceExhaustedError(absl::StrCat("texts: ", texts.size(),
                                                                " texts exceed the limit of ",
                                                                limits.max_sentences_per_request, " per request")),
                      "TOO_MANY_TEXTS");
  }
  p.source_tokens.assign(texts.size(), 0);
  const int token_limit = std::min(limits.max_tokens_per_sentence, MaxPositions(m.config));
  for (int i = 0; i < texts.size(); ++i) {
    const std::string& t = texts[i];
    if (static_cast<int64_t>(t.size()) > limits.max_text_bytes) {
      return WithReason(absl::InvalidArgumentError(absl::StrCat("texts[", i, "]: ", t.size(),
                                                                  " bytes exceed the limit of ",
                                                                  limits.max_text_bytes)),
                        "TEXT_TOO_LONG");
    }
    absl::StatusOr<std::vector<int32_t>> ids = m.tokenizer->Encode(t);
    if (!ids.ok()) {
      return WithReason(absl::InvalidArgumentError(absl::StrCat("texts[", i, "]: ", ids.status().message())),
                        TextReason(ids.status()));
    }
    ids->push_back(m.config.eos_id);
    p.source_tokens[i] = static_cast<int>(ids->size());
    if (static_cast<int>(ids->size()) > token_limit) {
      return WithReason(absl::InvalidArgumentError(absl::StrCat("texts[", i, "]: ", ids->size(),
                                                                  " tokens exceed the limit of ", token_limit,
                                                                  " per text")),
                        "TEXT_TOO_LONG");
    }
    if (absl::StripAsciiWhitespace(t).empty()) {
      p.blank.push_back(i);
      continue;
    }
    std::vector<int32_t> prefix;
    if (has_prefixes && !(*target_prefixes)[i].empty()) {
      const std::string& pt = (*target_prefixes)[i];
      if (static_cast<int64_t>(pt.size()) > limits.max_text_bytes) {
        return WithReason(absl::InvalidArgumentError(absl::StrCat("target_prefixes[", i, "]: ", pt.size(),
                                                                    " bytes exceed the limit of ", limits.max_text_bytes)),
                          "TEXT_TOO_LONG");
      }
      absl::StatusOr<std::vector<int32_t>> pieces = m.tokenizer->EncodeTarget(pt);
      if (!pieces.ok()) {
        return WithReason(absl::InvalidArgumentError(absl::StrCat("target_prefixes[", i, "]: ", pieces.status().message())),
                          TextReason(pieces.status()));
      }
      const int max_out = MaxOutputLength(d, static_cast<int>(ids->size()), m.config);
      if (static_cast<int>(pieces->size()) >= max_out) {
        return WithReason(absl::InvalidArgumentError(absl::StrCat("target_prefixes[", i, "]: ", pieces->size(),
                                                                    " pieces leave no room within the maximum output length of ",
                                                                    max_out - 1, " tokens")),
                          "TEXT_TOO_LONG");
      }
      prefix = *std::move(pieces);
    }
    p.indices.push_back(i);
    p.ids.push_back(*std::move(ids));
    p.prefixes.push_back(std::move(prefix));
  }
  // The request's worst case: every hypothesis of every text running to its length limit.
  int64_t cost = 0;
  int longest = 0;
  for (const std::vector<int32_t>& ids : p.ids) {
    int max_out = MaxOutputLength(d, static_cast<int>(ids.size()), m.config);
    max_out = std::min(max_out, limits.max_output_length + 1);
    longest = std::max(longest, max_out);
    cost += static_cast<int64_t>(d.beam_size) * max_out;
  }
  if (cost > limits.max_request_cost) {
    return WithReason(absl::ResourceExhaustedError(absl::StrCat(
        "request cost ", cost, " hypothesis-steps (beam_size ", d.beam_size, " x ", p.ids.size(),
        " texts x up to ", longest, " output tokens) exceeds the limit of ", limits.max_request_cost,
        " per request: send fewer texts, a smaller beam_size or a smaller max_length")),
                      "REQUEST_TOO_COSTLY");
  }
  return p;
}

absl::Status SubmitRequest(const ModelRegistry& registry, PreparedRequest& p,
                           const std::function<SentenceTask(int)>& make_task) {
  for (int attempt = 0;; ++attempt) {
    std::vector<SentenceTask> tasks;
    for (size_t i = 0; i < p.indices.size(); ++i) {
      SentenceTask t = make_task(static_cast<int>(i));
      t.ids = p.ids[i];
      t.prefix = p.prefixes[i];
      t.stream = static_cast<uint64_t>(p.indices[i]);
      t.options = p.options;
      tasks.push_back(std::move(t));
    }
    absl::Status s = p.scheduler->Enqueue(std::move(tasks));
    if (!absl::IsUnavailable(s) || attempt > 0) return s;
    // A reload may have replaced the scheduler after PrepareRequest took it: prepare again
    // for the new generation (it may have another vocabulary) and queue there.
    absl::StatusOr<std::shared_ptr<Scheduler>> now = registry.Get(p.model);
    if (!now.ok() || *now == p.scheduler || p.request_texts == nullptr) return s;
    absl::StatusOr<PreparedRequest> again =
        PrepareRequest(registry, p.limits, p.model, p.request_options, *p.request_texts, p.request_prefixes);
    if (!again.ok()) return again.status();
    if (again->options.sampling()) again->options.seed = again->seed = p.seed;  // keep the seed reported
    if (again->indices != p.indices) return s;  // cannot happen: blank texts are found from the text alone
    p = *std::move(again);
  }
}

void FillTranslation(const SentenceResult& r, bool return_scores, tnmt::v1::Translation* out) {
  out->set_source_tokens(std::max(0, r.source_tokens - 1));  // the API excludes </s> (the engine counts it)
  for (const TextHypothesis& h : r.hypotheses) {
    tnmt::v1::Hypothesis* o = out->add_hypotheses();
    o->set_text(h.text);
    o->set_tokens(static_cast<int32_t>(h.ids.size()));
    if (return_scores) o->set_score(h.score);
    for (const std::string& piece : h.pieces) o->add_pieces(piece);
    for (float x : h.token_scores) o->add_token_scores(x);
    for (int32_t a : h.alignments) o->add_alignments(a);
  }
  for (const std::string& piece : r.source_pieces) out->add_source_pieces(piece);
}

void FillBlank(int n_best, int source_tokens, tnmt::v1::Translation* out) {
  out->set_source_tokens(std::max(0, source_tokens - 1));  // without </s>, as FillTranslation
  for (int i = 0; i < n_best; ++i) out->add_hypotheses();
}

}  // namespace tnmt::server

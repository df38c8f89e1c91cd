// Turning a request's model name, options and texts into scheduler work: every check a
// request can fail, each with the status code and a message naming the field, and the
// submission to the model's scheduler (retried once when a reload swapped it meanwhile).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tnmt/v1/translation.pb.h"
#include "server/model_registry.h"
#include "server/scheduler.h"

namespace tnmt::server {

struct ServiceLimits {
  int max_sentences_per_request = 256;  // texts per Translate call or stream message
  int max_tokens_per_sentence = 512;    // source pieces, </s> included
  int64_t max_text_bytes = 64 * 1024;   // one text, before tokenizing
  // Cost caps, so that one request cannot take the server: options.max_length at most this
  // (generated tokens, </s> excluded; beyond: INVALID_ARGUMENT), and beam_size x the longest
  // output each text may reach, summed over the request's texts ("hypothesis-steps", what the
  // KV cache and the batch rows scale with) at most max_request_cost (beyond:
  // RESOURCE_EXHAUSTED naming the numbers).
  int max_output_length = 1024;
  int64_t max_request_cost = 1 << 17;
};

struct PreparedRequest {
  std::string model;                    // resolved name
  std::shared_ptr<Scheduler> scheduler;
  DecodeOptions options;
  bool return_scores = false;
  int texts = 0;
  std::vector<int> blank;               // texts answered without decoding (only whitespace)
  std::vector<int> indices;             // texts to decode, with their pieces
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<int32_t>> prefixes;  // target prefix pieces, with ids (may be empty)
  std::vector<int> source_tokens;       // per text
  uint64_t seed = 0;                    // sampling: the seed used (the request's or drawn)
  // What PrepareRequest was given, so that SubmitRequest can prepare the request again for a
  // scheduler that a reload swapped in meanwhile (its model may tokenize differently). `texts`
  // must outlive SubmitRequest.
  ServiceLimits limits;
  tnmt::v1::DecodingOptions request_options;
  const google::protobuf::RepeatedPtrField<std::string>* request_texts = nullptr;
  const google::protobuf::RepeatedPtrField<std::string>* request_prefixes = nullptr;
};

// INVALID_ARGUMENT (bad option, invalid UTF-8, no texts, a text too long, a bad target
// prefix, several models and none named), RESOURCE_EXHAUSTED (too many texts, too costly),
// NOT_FOUND (unknown model), UNAVAILABLE (model not loaded, shutting down), UNIMPLEMENTED
// (an option the model's device does not run: prefixes, repetition penalty, alignments on a
// GPU). target_prefixes: null or empty for none, else one per text.
absl::StatusOr<PreparedRequest> PrepareRequest(const ModelRegistry& registry,
                                               const ServiceLimits& limits,
                                               const std::string& model,
                                               const tnmt::v1::DecodingOptions& options,
                                               const google::protobuf::RepeatedPtrField<std::string>& texts,
                                               const google::protobuf::RepeatedPtrField<std::string>* target_prefixes = nullptr);

// Queues one task per entry of p.indices; make_task(i) builds the task of p.indices[i]
// (options and ids are filled in here). All or nothing. If a reload replaced the scheduler
// after PrepareRequest, the request is prepared again for the new generation (its vocabulary
// and defaults may differ) and queued there.
absl::Status SubmitRequest(const ModelRegistry& registry, PreparedRequest& p,
                           const std::function<SentenceTask(int)>& make_task);

// The ErrorInfo reason of a text the tokenizer refused: INVALID_UTF8, else INVALID_TEXT.
std::string TextReason(const absl::Status& tokenize_error);

// Fills a Translation from a finished sentence.
void FillTranslation(const SentenceResult& r, bool return_scores, tnmt::v1::Translation* out);
// The answer for a blank text: n_best empty hypotheses.
void FillBlank(int n_best, int source_tokens, tnmt::v1::Translation* out);

}  // namespace tnmt::server

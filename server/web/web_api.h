// The web side of `tnmt serve` on its HTTP port: two self-contained pages and the JSON API they
// use. Translation goes through the server's own gRPC TranslationService over a loopback
// channel, so every validation, limit, metric and error code of the gRPC path applies
// unchanged; jobs are listed through the loopback TrainingService and their loss curves read
// from the JobStore.
//
//   GET  /                          the translation page (pages.h)
//   GET  /jobs                      the training-jobs page
//   GET  /api/models                {"models": [{name, state, default_beam_size, ...}]}
//   POST /api/translate             Content-Type: application/json (else 415)
//                                   {model, texts: [...], beam_size, n_best, length_penalty,
//                                    max_length, return_scores, timeout_ms}
//                                   -> {model, translations: [{hypotheses: [{text, score,
//                                       tokens}], source_tokens}], timing: {...}}
//   GET  /api/jobs                  ?page_size=&page_token=&state=&name_contains=
//                                   -> {jobs: [...], next_page_token}       (bearer token)
//   GET  /api/jobs/{id}             one job                                  (bearer token)
//   GET  /api/jobs/{id}/events      ?after_seq=N -> {job_id, events: [{seq, time_ms, kind,
//                                    data}], last_seq}: the job's "progress" and "validation"
//                                    events (data: the trainer's metrics record)  (bearer token)
//
// Errors are {"code": "<gRPC status code name>", "message": "..."} with the matching HTTP
// status (HttpStatusFor). The jobs endpoints need "Authorization: Bearer <token>" (the
// --jobs-token-file token; 401 otherwise) and answer 501 UNIMPLEMENTED on a server without
// the job service.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/tnmt/v1/training.grpc.pb.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "server/http_server.h"
#include "server/secret.h"
#include "server/jobs/job_store.h"

namespace tnmt::server::web {

struct WebOptions {
  // The server's own gRPC address for the loopback channel, e.g. "127.0.0.1:50051" (see
  // LoopbackTarget).
  std::string grpc_target;
  // When set, the loopback calls use this channel instead of grpc_target (the server passes
  // its in-process channel, which needs no TLS credentials of its own).
  std::shared_ptr<grpc::Channel> channel;
  // The training API's bearer token and the job store; both empty/null without a job service.
  std::string jobs_token;
  jobs::JobStore* job_store = nullptr;
  // Deadline of a translation when the request gives no timeout_ms, and the largest allowed.
  absl::Duration default_timeout = absl::Seconds(30);
  absl::Duration max_timeout = absl::Minutes(10);
  // Deadline of the other loopback calls.
  absl::Duration lookup_timeout = absl::Seconds(10);
};

// The loopback address of a gRPC server listening on host:port: 127.0.0.1 for a wildcard host
// ("", "0.0.0.0", "::", "[::]"), the host itself otherwise (bracketed if it is IPv6).
std::string LoopbackTarget(const std::string& host, int port);


// A JSON error reply {"code", "message"} with HttpStatusFor(code) (or `http_status` if > 0).
HttpResponse JsonError(grpc::StatusCode code, const std::string& message, int http_status = 0);

// For HttpServerOptions::error_formatter: JSON errors for /api/ paths (code from the HTTP
// status: 400 INVALID_ARGUMENT, 404 NOT_FOUND, 413 RESOURCE_EXHAUSTED, ...; 405, which no gRPC
// code means, METHOD_NOT_ALLOWED), text otherwise.
HttpResponse FormatHttpError(const HttpRequest& request, int status, const std::string& message);


// The JSON body of POST /api/translate as a TranslateRequest (return_scores defaults to true)
// and its deadline (timeout_ms, else `default_timeout`; at most `max_timeout`).
// INVALID_ARGUMENT naming the problem for a body that is not a JSON object, a field of the
// wrong type, an unknown field, or an integer out of range. The values themselves are left to
// the TranslationService to judge.
// The body of POST /api/translate: a tnmt.v1.TranslateRequest in the proto3 JSON mapping
// (field names as in the .proto or lowerCamelCase; unknown fields refused), except that texts
// and target_prefixes are JSON strings (not base64, though they are bytes on the wire).
absl::StatusOr<tnmt::v1::TranslateRequest> ParseTranslateRequest(absl::string_view body);
// The call's deadline: ?timeout_ms=N (1 to max_timeout), else default_timeout.
absl::StatusOr<absl::Duration> TimeoutParam(const HttpRequest& request, absl::Duration default_timeout,
                                            absl::Duration max_timeout);
// The reply body for a TranslateResponse: its proto3 JSON mapping (field names as in the
// .proto, every field printed).
std::string TranslateResponseToJson(const tnmt::v1::TranslateResponse& response);
// A message as the API's replies carry it (/api/models, /api/jobs, /api/jobs/{id}): the proto3
// JSON mapping with proto field names and every field printed, but a field with presence
// (such as a Job's loss) only when set.
std::string MessageToJson(const google::protobuf::Message& m);

class WebApi {
 public:
  explicit WebApi(WebOptions options);
  WebApi(const WebApi&) = delete;
  WebApi& operator=(const WebApi&) = delete;

  // Routes the pages and the API on `http` (before it starts).
  absl::Status Register(HttpServer* http);

  HttpResponse IndexPage(const HttpRequest& request) const;
  HttpResponse JobsPage(const HttpRequest& request) const;
  HttpResponse Models(const HttpRequest& request) const;
  HttpResponse Translate(const HttpRequest& request) const;
  HttpResponse ListJobs(const HttpRequest& request) const;
  // /api/jobs/{id} and /api/jobs/{id}/events.
  HttpResponse JobRoute(const HttpRequest& request) const;

 private:
  // OK, or the reply refusing the request: 501 without a job service, 401 for a missing,
  // malformed or wrong bearer token.
  bool Authorized(const HttpRequest& request, HttpResponse* refusal) const;
  HttpResponse GetJob(const HttpRequest& request, const std::string& id) const;
  HttpResponse Events(const HttpRequest& request, const std::string& id) const;

  const WebOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tnmt::v1::TranslationService::Stub> translation_;
  std::unique_ptr<tnmt::v1::TrainingService::Stub> training_;
};

}  // namespace tnmt::server::web

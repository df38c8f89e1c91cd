// WebApi; see web_api.h.
#include "server/web/web_api.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/core/json_limits.h"
#include "proto/enum_names.h"
#include "proto/google/rpc/error_details.pb.h"
#include "proto/google/rpc/status.pb.h"
#include "server/status_mapping.h"
#include "server/web/pages.h"

namespace tnmt::server::web {
namespace {

using nlohmann::json;

constexpr char kJson[] = "application/json; charset=utf-8";
constexpr char kHtml[] = "text/html; charset=utf-8";
constexpr char kNoJobService[] =
    "this server has no training-job service (start tnmt serve with --state-dir, --data-root "
    "and --jobs-token-file)";

// Never throws: invalid UTF-8 (which the model should not produce) is replaced.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse JsonReply(const json& j) {
  HttpResponse response{200, kJson, Dump(j)};
  response.headers = {{"Cache-Control", "no-store"}, {"X-Content-Type-Options", "nosniff"}};
  return response;
}

HttpResponse Page(const char* html) {
  HttpResponse response{200, kHtml, html};
  // Everything is inline; the pages talk only to this server.
  response.headers = {
      {"Cache-Control", "no-store"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'"},
  };
  return response;
}

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout);
}

HttpResponse FromGrpc(const grpc::Status& status) {
  HttpResponse response = JsonError(status.error_code(), status.error_message());
  // The google.rpc details of the gRPC error (ErrorInfo, RetryInfo, BadRequest), in their
  // proto3 JSON form: {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": ...}.
  google::rpc::Status details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) return response;
  json list = json::array();
  for (const google::protobuf::Any& any : details.details()) {
    std::string text;
    if (!google::protobuf::util::MessageToJsonString(any, &text).ok()) continue;
    list.push_back(json::parse(text, nullptr, /*allow_exceptions=*/false));
  }
  if (list.empty()) return response;
  json body = json::parse(response.body, nullptr, false);
  body["details"] = std::move(list);
  response.body = Dump(body);
  return response;
}

HttpResponse FromAbsl(const absl::Status& status) {
  // absl and gRPC share the canonical code numbers.
  return JsonError(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// The message of a nlohmann exception without its "[json.exception.parse_error.101] " tag.
std::string JsonMessage(const json::exception& e) {
  absl::string_view what = e.what();
  const size_t end = what.find("] ");
  if (absl::StartsWith(what, "[json.exception.") && end != absl::string_view::npos) {
    what.remove_prefix(end + 2);
  }
  return std::string(what);
}

const char* TypeName(const json& value) { return value.type_name(); }

}  // namespace

std::string LoopbackTarget(const std::string& host, int port) {
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    return absl::StrCat("127.0.0.1:", port);
  }
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

HttpResponse JsonError(grpc::StatusCode code, const std::string& message, int http_status) {
  HttpResponse response = JsonReply(json{{"code", CodeName(code)}, {"message", message}});
  response.status = http_status > 0 ? http_status : HttpStatusFor(code);
  if (response.status == 401) response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"tnmt\"");
  return response;
}

HttpResponse FormatHttpError(const HttpRequest& request, int status, const std::string& message) {
  if (!absl::StartsWith(request.path, "/api/")) {
    return HttpResponse{status, "text/plain; charset=utf-8", message};
  }
  if (status == 405) {  // an HTTP matter with no gRPC counterpart (UNIMPLEMENTED is 501)
    HttpResponse response = JsonReply(json{{"code", "METHOD_NOT_ALLOWED"}, {"message", message}});
    response.status = 405;
    return response;
  }
  return JsonError(GrpcCodeForHttpStatus(status), status == 404 ? absl::StrCat("no API route ", request.path) : message,
                   status);
}

absl::StatusOr<tnmt::v1::TranslateRequest> ParseTranslateRequest(absl::string_view body) {
  // The API's bodies nest 2 levels; the limit leaves room and keeps Dump() below from recursing
  // through a hostile depth.
  JsonLimits limits;
  limits.max_depth = 32;
  if (absl::Status s = CheckJsonLimits(body, "the request body", limits); !s.ok()) return s;
  // nlohmann::json takes a NUL byte for the end of the text, so `{...}<NUL>anything` would
  // parse; JSON text never holds one (strings must escape it as \u0000).
  if (const size_t nul = body.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: a NUL byte at byte ", nul));
  }
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", JsonMessage(e)));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body must be a JSON object, got ", TypeName(j)));
  }
  tnmt::v1::TranslateRequest request;
  // The body is a tnmt.v1.TranslateRequest in the proto3 JSON mapping, except that the texts
  // (bytes on the wire, for per-text UTF-8 errors) are JSON strings, not base64.
  std::vector<std::string> texts, prefixes;
  for (const char* key : {"texts", "target_prefixes", "targetPrefixes"}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    std::vector<std::string>& out = std::string(key) == "texts" ? texts : prefixes;
    if (!it->is_null()) {
      if (!it->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(key, " must be an array of strings, got ", TypeName(*it)));
      }
      for (size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(key, "[", i, "] must be a string, got ", TypeName((*it)[i])));
        }
        out.push_back((*it)[i].get<std::string>());
      }
    }
    j.erase(it);
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(Dump(j), &request, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the request body is not a tnmt.v1.TranslateRequest: ",
                                                   std::string(status.message()).substr(0, 300)));
  }
  for (std::string& t : texts) request.add_texts(std::move(t));
  for (std::string& p : prefixes) request.add_target_prefixes(std::move(p));
  return request;
}

absl::StatusOr<absl::Duration> TimeoutParam(const HttpRequest& request, absl::Duration default_timeout,
                                            absl::Duration max_timeout) {
  auto it = request.params.find("timeout_ms");
  if (it == request.params.end()) return default_timeout;
  int64_t ms = 0;
  if (!absl::SimpleAtoi(it->second, &ms) || ms < 1 || ms > absl::ToInt64Milliseconds(max_timeout)) {
    return absl::InvalidArgumentError(absl::StrCat("timeout_ms: \"", it->second.substr(0, 32), "\" is not in [1, ",
                                                   absl::ToInt64Milliseconds(max_timeout), "]"));
  }
  return absl::Milliseconds(ms);
}

std::string MessageToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string text;
  (void)google::protobuf::util::MessageToJsonString(m, &text, o);
  return text;
}

std::string TranslateResponseToJson(const tnmt::v1::TranslateResponse& response) {
  // Invalid UTF-8 in a text cannot reach here (the decoder writes pieces), but the JSON
  // printer would refuse it: replace it as the other replies do.
  tnmt::v1::TranslateResponse clean = response;
  for (auto& t : *clean.mutable_translations()) {
    for (auto& h : *t.mutable_hypotheses()) {
      const std::string quoted = json(h.text()).dump(-1, ' ', false, json::error_handler_t::replace);
      h.set_text(json::parse(quoted).get<std::string>());
    }
  }
  return MessageToJson(clean);
}

WebApi::WebApi(WebOptions options) : options_(std::move(options)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // the server's limits apply, not the channel's
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // loopback: never through $http_proxy
  channel_ = options_.channel != nullptr
                 ? options_.channel
                 : grpc::CreateCustomChannel(options_.grpc_target, grpc::InsecureChannelCredentials(), args);
  translation_ = tnmt::v1::TranslationService::NewStub(channel_);
  training_ = tnmt::v1::TrainingService::NewStub(channel_);
}

absl::Status WebApi::Register(HttpServer* http) {
  const auto bind = [this](HttpResponse (WebApi::*method)(const HttpRequest&) const) {
    return [this, method](const HttpRequest& request) { return (this->*method)(request); };
  };
  for (absl::Status s : {
           http->AddGetHandler("/", bind(&WebApi::IndexPage)),
           http->AddGetHandler("/jobs", bind(&WebApi::JobsPage)),
           http->AddGetHandler("/api/models", bind(&WebApi::Models)),
           http->AddPostHandler("/api/translate", bind(&WebApi::Translate)),
           http->AddGetHandler("/api/jobs", bind(&WebApi::ListJobs)),
           http->AddGetPrefixHandler("/api/jobs/", bind(&WebApi::JobRoute)),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

HttpResponse WebApi::IndexPage(const HttpRequest&) const { return Page(kIndexHtml); }

HttpResponse WebApi::JobsPage(const HttpRequest&) const { return Page(kJobsHtml); }

// The caller's "Authorization" header, passed on to the translation API (which checks it when
// the server has a translation token).
static void ForwardAuthorization(const HttpRequest& request, grpc::ClientContext* context) {
  const std::string header = request.Header("authorization");
  if (!header.empty()) context->AddMetadata("authorization", header);
}

HttpResponse WebApi::Models(const HttpRequest& request) const {
  // tnmt.v1.ListModelsResponse in the proto3 JSON mapping, every page merged into one.
  tnmt::v1::ListModelsResponse all;
  tnmt::v1::ListModelsRequest page;
  page.set_page_size(1000);
  do {
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.lookup_timeout));
    ForwardAuthorization(request, &context);
    tnmt::v1::ListModelsResponse response;
    const grpc::Status status = translation_->ListModels(&context, page, &response);
    if (!status.ok()) return FromGrpc(status);
    for (auto& m : *response.mutable_models()) *all.add_models() = std::move(m);
    page.set_page_token(response.next_page_token());
  } while (!page.page_token().empty());
  HttpResponse reply = JsonReply(json::object());
  reply.body = MessageToJson(all);
  return reply;
}

HttpResponse WebApi::Translate(const HttpRequest& request) const {
  // Only JSON: a browser cannot send that cross-origin without a CORS preflight (which this
  // server never grants), so other sites' pages cannot post translations through a visitor.
  const std::string content_type = request.Header("content-type");
  const absl::string_view media = absl::StripAsciiWhitespace(
      absl::string_view(content_type).substr(0, content_type.find(';')));
  if (!absl::EqualsIgnoreCase(media, "application/json")) {
    return JsonError(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("Content-Type must be application/json, got \"",
                                  content_type.substr(0, 64), "\""),
                     415);
  }
  absl::StatusOr<tnmt::v1::TranslateRequest> parsed = ParseTranslateRequest(request.body);
  if (!parsed.ok()) return FromAbsl(parsed.status());
  absl::StatusOr<absl::Duration> timeout = TimeoutParam(request, options_.default_timeout, options_.max_timeout);
  if (!timeout.ok()) return FromAbsl(timeout.status());
  grpc::ClientContext context;
  context.set_deadline(Deadline(*timeout));
  ForwardAuthorization(request, &context);
  tnmt::v1::TranslateResponse response;
  const grpc::Status status = translation_->Translate(&context, *parsed, &response);
  if (!status.ok()) return FromGrpc(status);
  HttpResponse reply = JsonReply(json::object());
  reply.body = TranslateResponseToJson(response);
  return reply;
}

bool WebApi::Authorized(const HttpRequest& request, HttpResponse* refusal) const {
  if (options_.job_store == nullptr || options_.jobs_token.empty()) {
    *refusal = JsonError(grpc::StatusCode::UNIMPLEMENTED, kNoJobService);
    return false;
  }
  const std::string header = request.Header("authorization");
  if (header.empty()) {
    *refusal = JsonError(grpc::StatusCode::UNAUTHENTICATED,
                         "this endpoint needs the header \"Authorization: Bearer <token>\" (the "
                         "token in the server's --jobs-token-file)");
    return false;
  }
  if (!SameSecret(header, absl::StrCat("Bearer ", options_.jobs_token))) {
    *refusal = JsonError(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
    return false;
  }
  return true;
}

HttpResponse WebApi::ListJobs(const HttpRequest& request) const {
  HttpResponse refusal;
  if (!Authorized(request, &refusal)) return refusal;
  tnmt::v1::ListJobsRequest list;
  for (const auto& [key, value] : request.params) {
    if (key == "page_size") {
      int size = 0;
      if (!absl::SimpleAtoi(value, &size) || size < 0) {
        return JsonError(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("page_size must be a non-negative integer, got \"",
                                      value.substr(0, 32), "\""));
      }
      list.set_page_size(size);
    } else if (key == "page_token") {
      list.set_page_token(value);
    } else if (key == "name_contains") {
      list.set_name_contains(value);
    } else if (key == "state") {
      tnmt::v1::JobState state;
      if (!tnmt::v1::ParseJobStateWord(value, &state)) {
        return JsonError(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("unknown job state \"", value.substr(0, 32), "\""));
      }
      list.add_states(state);
    }
  }
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.lookup_timeout));
  context.AddMetadata("authorization", request.Header("authorization"));
  tnmt::v1::ListJobsResponse response;
  const grpc::Status status = training_->ListJobs(&context, list, &response);
  if (!status.ok()) return FromGrpc(status);
  HttpResponse reply = JsonReply(json::object());
  reply.body = MessageToJson(response);
  return reply;
}

HttpResponse WebApi::JobRoute(const HttpRequest& request) const {
  const std::vector<std::string> parts = absl::StrSplit(request.subpath, '/');
  if (parts.size() == 1 && !parts[0].empty()) return GetJob(request, parts[0]);
  if (parts.size() == 2 && !parts[0].empty() && parts[1] == "events") return Events(request, parts[0]);
  return JsonError(grpc::StatusCode::NOT_FOUND,
                   absl::StrCat("no API route ", request.path,
                                " (expected /api/jobs/{id} or /api/jobs/{id}/events)"));
}

HttpResponse WebApi::GetJob(const HttpRequest& request, const std::string& id) const {
  HttpResponse refusal;
  if (!Authorized(request, &refusal)) return refusal;
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.lookup_timeout));
  context.AddMetadata("authorization", request.Header("authorization"));
  tnmt::v1::GetJobRequest get;
  get.set_id(id);
  tnmt::v1::Job job;
  const grpc::Status status = training_->GetJob(&context, get, &job);
  if (!status.ok()) return FromGrpc(status);
  HttpResponse reply = JsonReply(json::object());
  reply.body = MessageToJson(job);
  return reply;
}

HttpResponse WebApi::Events(const HttpRequest& request, const std::string& id) const {
  HttpResponse refusal;
  if (!Authorized(request, &refusal)) return refusal;
  int64_t after_seq = 0;
  if (auto it = request.params.find("after_seq"); it != request.params.end()) {
    if (!absl::SimpleAtoi(it->second, &after_seq) || after_seq < 0) {
      return JsonError(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("after_seq must be a non-negative integer, got \"",
                                    it->second.substr(0, 32), "\""));
    }
  }
  absl::StatusOr<std::vector<jobs::JobEvent>> events =
      options_.job_store->Events(id, after_seq, jobs::JobStore::kMaxEventsPerJob);
  if (!events.ok()) return FromAbsl(events.status());
  json out = json::array();
  int64_t last_seq = after_seq;
  for (const jobs::JobEvent& e : *events) {
    last_seq = std::max(last_seq, e.seq);
    if (e.kind != "progress" && e.kind != "validation") continue;
    json data = json::parse(e.json, nullptr, /*allow_exceptions=*/false);
    if (data.is_discarded()) data = nullptr;
    out.push_back({{"seq", e.seq}, {"time_ms", e.time_ms}, {"kind", e.kind}, {"data", std::move(data)}});
  }
  return JsonReply(json{{"job_id", id}, {"events", std::move(out)}, {"last_seq", last_seq}});
}

}  // namespace tnmt::server::web

// The web API's pieces without a running server: JSON request parsing (types, ranges, unknown
// fields, garbage), the reply format, gRPC -> HTTP status mapping, the loopback address, the
// error formatter, token checks, the jobs routes against a real JobStore (events filtered to
// the loss-curve kinds), an unreachable gRPC server, and the embedded pages.
#include "server/web/web_api.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "server/jobs/training_service.h"
#include "server/status_mapping.h"
#include "server/web/pages.h"

namespace tnmt::server::web {
namespace {

using nlohmann::json;

absl::StatusOr<tnmt::v1::TranslateRequest> Parse(const std::string& body) { return ParseTranslateRequest(body); }

void ExpectInvalid(const std::string& body, const std::string& mentions) {
  absl::StatusOr<tnmt::v1::TranslateRequest> parsed = Parse(body);
  ASSERT_FALSE(parsed.ok()) << body;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
  EXPECT_NE(parsed.status().message().find(mentions), absl::string_view::npos)
      << body << " -> " << parsed.status();
}

// The body is the gRPC message in the proto3 JSON mapping: the same fields, nesting and
// defaults (return_scores false unless asked for).
TEST(ParseTranslateRequest, TheGrpcMessageInProto3Json) {
  absl::StatusOr<tnmt::v1::TranslateRequest> r = Parse(
      R"({"model": "tiny", "texts": ["a b", "c"], "target_prefixes": ["Ein", ""],
          "options": {"beam_size": 4, "n_best": 2, "length_penalty": 0.6, "max_length": 20, "min_length": 3,
                      "no_repeat_ngram_size": 2, "repetition_penalty": 1.2, "disable_unk": true,
                      "length_penalty_style": "length", "return_token_scores": true,
                      "return_alignments": true, "alignment_layer": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model(), "tiny");
  ASSERT_EQ(r->texts_size(), 2);
  EXPECT_EQ(r->texts(0), "a b");
  ASSERT_EQ(r->target_prefixes_size(), 2);
  EXPECT_EQ(r->target_prefixes(0), "Ein");
  const tnmt::v1::DecodingOptions& o = r->options();
  EXPECT_TRUE(o.has_beam_size());
  EXPECT_EQ(o.beam_size(), 4);
  EXPECT_EQ(o.n_best(), 2);
  EXPECT_FLOAT_EQ(o.length_penalty(), 0.6f);
  EXPECT_EQ(o.max_length(), 20);
  EXPECT_EQ(o.min_length(), 3);
  EXPECT_EQ(o.no_repeat_ngram_size(), 2);
  EXPECT_FLOAT_EQ(o.repetition_penalty(), 1.2f);
  EXPECT_TRUE(o.disable_unk());
  EXPECT_EQ(o.length_penalty_style(), "length");
  EXPECT_TRUE(o.return_token_scores());
  EXPECT_TRUE(o.return_alignments());
  EXPECT_EQ(o.alignment_layer(), 1);
  EXPECT_FALSE(o.return_scores()) << "the gRPC default";
  // lowerCamelCase names, a 64-bit seed as a string, sampling.
  absl::StatusOr<tnmt::v1::TranslateRequest> camel = Parse(
      R"({"texts": ["x"], "targetPrefixes": ["y"],
          "options": {"samplingTopk": 0, "samplingTopp": 0.9, "seed": "18446744073709551615", "returnScores": true}})");
  ASSERT_TRUE(camel.ok()) << camel.status();
  EXPECT_TRUE(camel->options().has_sampling_topk());
  EXPECT_EQ(camel->options().sampling_topk(), 0);
  EXPECT_EQ(camel->options().seed(), 18446744073709551615ull);
  EXPECT_TRUE(camel->options().return_scores());
  EXPECT_EQ(camel->target_prefixes(0), "y");
  // Unset and null fields: the model's defaults.
  absl::StatusOr<tnmt::v1::TranslateRequest> defaults = Parse(R"({"texts": ["x"], "model": null, "options": {"beam_size": null}})");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_FALSE(defaults->options().has_beam_size());
  EXPECT_EQ(defaults->model(), "");
  // Values are the service's to judge: beam 0, no texts, n_best > beam all pass through.
  EXPECT_TRUE(Parse(R"({"texts": [], "options": {"beam_size": 0, "n_best": 99}})").ok());
  EXPECT_TRUE(Parse(R"({})").ok());
}

TEST(ParseTranslateRequest, RefusesGarbage) {
  ExpectInvalid("", "not valid JSON");
  ExpectInvalid("not json{", "not valid JSON");
  ExpectInvalid(R"({"texts": ["a"],})", "not valid JSON");
  ExpectInvalid("\"\xff\xfe\"", "not valid JSON");  // invalid UTF-8
  ExpectInvalid(R"({"texts": ["\ud800"]})", "not valid JSON");  // a lone surrogate
  // The JSON parser stops at a NUL byte; what follows it must not be ignored.
  ExpectInvalid(std::string("{\"texts\": [\"a\"]}\0{\"x\": 1}", 25), "a NUL byte at byte 16");
  ExpectInvalid(std::string("{\"texts\": [\"a\0b\"]}", 18), "a NUL byte at byte 13");
  ExpectInvalid(R"(["a", "b"])", "must be a JSON object, got array");
  ExpectInvalid("42", "must be a JSON object, got number");
  ExpectInvalid(R"({"texts": "a"})", "texts must be an array of strings, got string");
  ExpectInvalid(R"({"texts": ["a", 3]})", "texts[1] must be a string, got number");
  ExpectInvalid(R"({"texts": ["a"], "target_prefixes": "x"})", "target_prefixes must be an array of strings");
  ExpectInvalid(R"({"texts": ["a"], "target_prefixes": [1]})", "target_prefixes[0] must be a string");
  for (const char* body : {R"({"model": 7, "texts": ["a"]})", R"({"texts": ["a"], "options": {"beam_size": "four"}})",
                           R"({"texts": ["a"], "options": {"beam_size": 2.5}})",
                           R"({"texts": ["a"], "options": {"beam_size": true}})",
                           R"({"texts": ["a"], "options": {"n_best": 4294967297}})",
                           R"({"texts": ["a"], "options": {"length_penalty": "high"}})",
                           R"({"texts": ["a"], "options": {"disable_unk": 1}})",
                           R"({"texts": ["a"], "options": {"seed": -1}})",
                           R"({"texts": ["a"], "options": 3})",
                           R"({"texts": ["a"], "beam_size": 4})",
                           R"({"texts": ["a"], "options": {"beamsize": 4}})"}) {
    ExpectInvalid(body, "is not a tnmt.v1.TranslateRequest");
  }
  ExpectInvalid(R"({"texts": ["a"], "options": {"beamsize": 4}})", "beamsize");
  // Deep nesting is refused before parsing, naming the limit: printing a parsed value of that
  // depth (as the proto conversion does) would overflow the stack.
  ExpectInvalid(std::string(500000, '['), "the request body nests JSON arrays and objects deeper than 32 levels");
  ExpectInvalid(std::string(200000, '[') + std::string(200000, ']'), "deeper than 32 levels");
  ExpectInvalid(R"({"texts":["a"],"x":)" + std::string(60000, '[') + std::string(60000, ']') + "}",
                "deeper than 32 levels (the limit)");
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(Parse(R"({"texts":[")" + std::string(1000, '[') + R"("]})").ok());
}

TEST(TimeoutParam, QueryParameter) {
  HttpRequest r;
  EXPECT_EQ(*TimeoutParam(r, absl::Seconds(30), absl::Minutes(10)), absl::Seconds(30));
  r.params.emplace("timeout_ms", "1500");
  EXPECT_EQ(*TimeoutParam(r, absl::Seconds(30), absl::Minutes(10)), absl::Milliseconds(1500));
  for (const char* bad : {"0", "600001", "soon", "-5"}) {
    HttpRequest b;
    b.params.emplace("timeout_ms", bad);
    absl::StatusOr<absl::Duration> t = TimeoutParam(b, absl::Seconds(30), absl::Minutes(10));
    EXPECT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find("timeout_ms"), absl::string_view::npos) << bad;
  }
}

TEST(TranslateResponseToJson, Shape) {
  tnmt::v1::TranslateResponse response;
  response.set_model("tiny");
  tnmt::v1::Translation* t = response.add_translations();
  t->set_source_tokens(3);
  tnmt::v1::Hypothesis* h = t->add_hypotheses();
  h->set_text("der Mann \"rennt\" <b>");
  h->set_score(-0.5f);
  h->set_tokens(4);
  t->add_hypotheses()->set_text(std::string("bad \xff utf8"));
  response.mutable_timing()->mutable_total_time()->set_nanos(250000000);
  const json j = json::parse(TranslateResponseToJson(response));
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["translations"][0]["source_tokens"], 3);
  EXPECT_EQ(j["translations"][0]["hypotheses"][0]["text"], "der Mann \"rennt\" <b>");
  EXPECT_EQ(j["translations"][0]["hypotheses"][0]["score"], -0.5);
  EXPECT_EQ(j["translations"][0]["hypotheses"][0]["tokens"], 4);
  EXPECT_EQ(j["translations"][0]["hypotheses"][1]["text"], "bad \xEF\xBF\xBD utf8")
      << "invalid UTF-8 is replaced, never thrown on";
  EXPECT_EQ(j["timing"]["total_time"], "0.250s") << "a Duration in the proto3 JSON mapping";
  EXPECT_EQ(j["seed"], "0") << "every field, 64-bit integers as strings";
  EXPECT_EQ(j["translations"][0]["hypotheses"][0]["pieces"], json::array());
  // Pieces, token scores, alignments and the sampling seed when the request asked for them.
  h->add_pieces("\u2581der");
  h->add_token_scores(-0.25f);
  h->add_token_scores(-0.5f);
  h->add_alignments(2);
  t->add_source_pieces("\u2581the");
  response.set_seed(18446744073709551615ull);
  const json k = json::parse(TranslateResponseToJson(response));
  EXPECT_EQ(k["seed"], "18446744073709551615");
  EXPECT_EQ(k["translations"][0]["hypotheses"][0]["pieces"], json({"\u2581der"}));
  EXPECT_EQ(k["translations"][0]["hypotheses"][0]["token_scores"], json({-0.25, -0.5}));
  EXPECT_EQ(k["translations"][0]["hypotheses"][0]["alignments"], json({2}));
  EXPECT_EQ(k["translations"][0]["source_pieces"], json({"\u2581the"}));
}

TEST(WebApi, StatusMappingAndLoopback) {
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::INVALID_ARGUMENT), 400);
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::NOT_FOUND), 404);
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::RESOURCE_EXHAUSTED), 429);
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::UNAVAILABLE), 503);
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::UNAUTHENTICATED), 401);
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::DEADLINE_EXCEEDED), 504);
  EXPECT_EQ(HttpStatusFor(grpc::StatusCode::INTERNAL), 500);
  EXPECT_EQ(CodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");

  EXPECT_EQ(LoopbackTarget("0.0.0.0", 50051), "127.0.0.1:50051");
  EXPECT_EQ(LoopbackTarget("::", 7), "127.0.0.1:7");
  EXPECT_EQ(LoopbackTarget("", 7), "127.0.0.1:7");
  EXPECT_EQ(LoopbackTarget("127.0.0.1", 7), "127.0.0.1:7");
  EXPECT_EQ(LoopbackTarget("::1", 7), "[::1]:7");
  EXPECT_EQ(LoopbackTarget("serving.local", 7), "serving.local:7");

  HttpResponse error = JsonError(grpc::StatusCode::NOT_FOUND, "no model \"x\"");
  EXPECT_EQ(error.status, 404);
  EXPECT_EQ(error.content_type, "application/json; charset=utf-8");
  EXPECT_EQ(json::parse(error.body), (json{{"code", "NOT_FOUND"}, {"message", "no model \"x\""}}));

  HttpRequest api;
  api.path = "/api/translate";
  HttpResponse formatted = FormatHttpError(api, 413, "request body too large: the limit is 1 bytes");
  EXPECT_EQ(formatted.status, 413);
  EXPECT_EQ(json::parse(formatted.body)["code"], "RESOURCE_EXHAUSTED");
  // A wrong method is not UNIMPLEMENTED (which the API maps to 501).
  formatted = FormatHttpError(api, 405, "method GET not allowed for /api/translate (allowed: POST)");
  EXPECT_EQ(formatted.status, 405);
  EXPECT_EQ(json::parse(formatted.body),
            (json{{"code", "METHOD_NOT_ALLOWED"}, {"message", "method GET not allowed for /api/translate (allowed: POST)"}}));
  api.path = "/api/nope";
  EXPECT_EQ(json::parse(FormatHttpError(api, 404, "not found").body)["message"],
            "no API route /api/nope");
  HttpRequest page;
  page.path = "/nope";
  formatted = FormatHttpError(page, 404, "not found");
  EXPECT_EQ(formatted.body, "not found") << "outside /api/ errors stay plain text";

  EXPECT_TRUE(SameSecret("abc", "abc"));
  EXPECT_FALSE(SameSecret("abd", "abc"));
  EXPECT_FALSE(SameSecret("ab", "abc"));
  EXPECT_FALSE(SameSecret("abcd", "abc"));
  EXPECT_FALSE(SameSecret("", "abc"));
}

HttpRequest Get(const std::string& path, const std::string& subpath, const std::string& auth) {
  HttpRequest request;
  request.path = path;
  request.subpath = subpath;
  if (!auth.empty()) request.headers.emplace("authorization", auth);
  return request;
}

TEST(WebApi, WithoutAJobService) {
  WebOptions options;
  options.grpc_target = "127.0.0.1:1";
  WebApi api(options);
  for (const HttpResponse& r : {api.ListJobs(Get("/api/jobs", "", "Bearer x")),
                                api.JobRoute(Get("/api/jobs/job-000001/events", "job-000001/events", ""))}) {
    EXPECT_EQ(r.status, 501);
    EXPECT_EQ(json::parse(r.body)["code"], "UNIMPLEMENTED");
    EXPECT_NE(r.body.find("--state-dir"), std::string::npos) << r.body;
  }
}

TEST(WebApi, TranslateRefusesGarbageAndReportsAnUnreachableServer) {
  WebOptions options;
  options.grpc_target = "127.0.0.1:1";  // nothing listens there
  WebApi api(options);
  HttpRequest request;
  request.method = "POST";
  request.path = "/api/translate";
  request.body = R"({"texts": ["a"]})";
  HttpResponse r = api.Translate(request);
  EXPECT_EQ(r.status, 415) << "no Content-Type";
  request.headers.emplace("content-type", "text/plain");
  EXPECT_EQ(api.Translate(request).status, 415);
  request.headers.clear();
  request.headers.emplace("content-type", "Application/JSON; charset=utf-8");
  request.body = "{oops";
  r = api.Translate(request);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["code"], "INVALID_ARGUMENT");
  request.body = R"({"texts": ["a"]})";
  request.params.emplace("timeout_ms", "5000");
  r = api.Translate(request);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(json::parse(r.body)["code"], "UNAVAILABLE");
  r = api.Models(Get("/api/models", "", ""));
  EXPECT_EQ(r.status, 503) << r.body;
}

TEST(WebApi, JobEventsFromTheStore) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/web_api_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto store = jobs::JobStore::Open(dir + "/jobs.db");
  ASSERT_TRUE(store.ok()) << store.status();
  jobs::JobRecord record;
  record.name = "demo";
  auto job = (*store)->Insert(record, nullptr);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id;
  ASSERT_TRUE((*store)->AppendEvent(id, "state", R"({"state":"RUNNING"})").ok());
  ASSERT_TRUE((*store)->AppendEvent(id, "progress", R"({"event":"train","step":10,"loss":4.5})").ok());
  ASSERT_TRUE((*store)->AppendEvent(id, "validation", R"({"event":"validation","step":10,"dev_bleu":1.5})").ok());
  ASSERT_TRUE((*store)->AppendEvent(id, "checkpoint", R"({"step":10})").ok());
  ASSERT_TRUE((*store)->AppendEvent(id, "progress", "not json").ok());

  WebOptions options;
  options.grpc_target = "127.0.0.1:1";
  options.jobs_token = "0123456789abcdef0123";
  options.job_store = store->get();
  WebApi api(options);
  const std::string path = "/api/jobs/" + id + "/events";
  const std::string sub = id + "/events";
  const std::string bearer = "Bearer 0123456789abcdef0123";

  HttpResponse r = api.JobRoute(Get(path, sub, ""));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["code"], "UNAUTHENTICATED");
  bool challenge = false;
  for (const auto& [name, value] : r.headers) challenge |= name == "WWW-Authenticate";
  EXPECT_TRUE(challenge);
  EXPECT_EQ(api.JobRoute(Get(path, sub, "Bearer wrong")).status, 401);
  EXPECT_EQ(api.JobRoute(Get(path, sub, "0123456789abcdef0123")).status, 401) << "scheme required";
  EXPECT_EQ(api.ListJobs(Get("/api/jobs", "", "")).status, 401);

  r = api.JobRoute(Get(path, sub, bearer));
  ASSERT_EQ(r.status, 200) << r.body;
  const json events = json::parse(r.body);
  EXPECT_EQ(events["job_id"], id);
  ASSERT_EQ(events["events"].size(), 3u) << "progress and validation only: " << r.body;
  EXPECT_EQ(events["events"][0]["kind"], "progress");
  EXPECT_EQ(events["events"][0]["data"]["loss"], 4.5);
  EXPECT_EQ(events["events"][1]["data"]["dev_bleu"], 1.5);
  EXPECT_TRUE(events["events"][2]["data"].is_null()) << "an unparsable record keeps its place";
  const int64_t last = events["last_seq"];
  EXPECT_GE(last, events["events"][2]["seq"].get<int64_t>());

  HttpRequest after = Get(path, sub, bearer);
  after.params.emplace("after_seq", std::to_string(last));
  EXPECT_EQ(json::parse(api.JobRoute(after).body)["events"].size(), 0u);
  after.params.clear();
  after.params.emplace("after_seq", "-3");
  EXPECT_EQ(api.JobRoute(after).status, 400);

  r = api.JobRoute(Get("/api/jobs/job-999999/events", "job-999999/events", bearer));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["code"], "NOT_FOUND");
  r = api.JobRoute(Get("/api/jobs/x/y/z", "x/y/z", bearer));
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("expected /api/jobs/{id}"), std::string::npos);
  EXPECT_EQ(api.JobRoute(Get("/api/jobs/x/", "x/", bearer)).status, 404);
}

// A job's loss is absent from the API until the trainer's first progress report (a checkpoint
// can set its step before that), so the jobs page shows no loss instead of 0.0000; the page
// draws "—" for a job without one.
TEST(WebApi, LossOnlyOnceReported) {
  jobs::JobRecord record;
  record.id = "job-000001";
  record.step = 50;  // a checkpoint, no progress report yet
  json j = json::parse(MessageToJson(jobs::ToProto(record, false, "")));
  EXPECT_FALSE(j.contains("loss")) << j.dump();
  EXPECT_EQ(j["step"], "50") << "the other fields are still printed";
  record.loss = 4.25;
  j = json::parse(MessageToJson(jobs::ToProto(record, false, "")));
  EXPECT_EQ(j["loss"], 4.25) << j.dump();
  const std::string page(kJobsHtml);
  EXPECT_EQ(page.find("job.step > 0 ? fmt.num(job.loss"), std::string::npos) << "loss shown by its presence, not the step";
  EXPECT_NE(page.find("job.loss !== null ? fmt.num(job.loss, 4) : \"—\""), std::string::npos);
}

TEST(Pages, SelfContained) {
  for (const std::string& page : {std::string(kIndexHtml), std::string(kJobsHtml)}) {
    EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(page.find("</html>"), std::string::npos);
    // No external resources: the only absolute URL is the SVG namespace name.
    std::string rest = page;
    for (size_t at = 0; (at = rest.find("http", at)) != std::string::npos; ++at) {
      const std::string url = rest.substr(at, 30);
      if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
        EXPECT_EQ(url.rfind("http://www.w3.org/2000/svg", 0), 0u) << url;
      }
    }
    EXPECT_EQ(page.find("<script src"), std::string::npos);
    EXPECT_EQ(page.find("<link rel=\"stylesheet\""), std::string::npos);
  }
  EXPECT_NE(std::string(kIndexHtml).find("/api/translate"), std::string::npos);
  EXPECT_NE(std::string(kJobsHtml).find("loss-curve"), std::string::npos);
}

}  // namespace
}  // namespace tnmt::server::web

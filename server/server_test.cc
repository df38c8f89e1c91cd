// End to end over real gRPC on 127.0.0.1 with the tiny test model: Translate (batched reply
// equals the engine one sentence at a time), n-best, streaming, ListModels, health check and
// watch, reflection, readiness gating, the error matrix with status codes, a fuzz loop, queue
// overload, hot reload under load, and shutdown under load losing no accepted request.
#include "server/server.h"
#include "proto/google/rpc/error_details.pb.h"
#include "proto/google/rpc/status.pb.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <set>
#include <fstream>
#include <random>
#include <thread>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "engine/runtime/translator.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"

namespace tnmt::server {
namespace {

using tnmt::v1::TranslateRequest;
using tnmt::v1::TranslateResponse;
using tnmt::v1::TranslationService;

constexpr char kModelDir[] = "tests/golden/data/tiny";

const std::vector<std::string>& Sentences() {
  static const auto* s = new std::vector<std::string>{
      "Hello, world.", "A man is riding a bicycle down the street.", "Two dogs play in the snow.",
      "x", "The quick brown fox jumps over the lazy dog again and again and again.",
      "Ünïcödé wörks: 日本語のテキスト", "   ", "Short one.", ""};
  return *s;
}

class ServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<TranslationServer> StartServer(ServerOptions o = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    o.http_port = -1;
    if (o.models.empty()) o.models = {{"tiny", kModelDir}};
    auto s = TranslationServer::Start(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  static std::shared_ptr<grpc::Channel> Channel(const TranslationServer& s) {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(s.port()), grpc::InsecureChannelCredentials());
  }
  static grpc::Status Call(TranslationService::Stub& stub, const TranslateRequest& req,
                           TranslateResponse* resp, int deadline_ms = 30000) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    return stub.Translate(&ctx, req, resp);
  }
};

TEST_F(ServerTest, BatchedReplyEqualsTheEngineOneSentenceAtATime) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  TranslateRequest req;
  req.set_model("tiny");
  for (const auto& s : Sentences()) req.add_texts(s);
  req.mutable_options()->set_beam_size(4);
  req.mutable_options()->set_n_best(3);
  req.mutable_options()->set_return_scores(true);
  TranslateResponse resp;
  grpc::Status st = Call(*stub, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.translations_size(), static_cast<int>(Sentences().size()));
  EXPECT_EQ(resp.model(), "tiny");
  EXPECT_GT(resp.timing().total_time().seconds() * 1e9 + resp.timing().total_time().nanos(), 0);

  auto model = LoadModelDirectory(kModelDir);
  ASSERT_TRUE(model.ok());
  Translator translator(*model);
  TranslationOptions to;
  to.decode = DecodeOptions::FromConfig((*model)->config);
  to.decode.beam_size = 4;
  to.decode.n_best = 3;
  for (size_t i = 0; i < Sentences().size(); ++i) {
    auto one = translator.Translate({Sentences()[i]}, to);
    ASSERT_TRUE(one.ok() && (*one)[0].ok());
    const LineTranslation& want = *(*one)[0];
    const tnmt::v1::Translation& got = resp.translations(i);
    EXPECT_EQ(got.source_tokens(), want.source_tokens - 1) << i;  // the API excludes </s>
    ASSERT_EQ(got.hypotheses_size(), static_cast<int>(want.hypotheses.size())) << i;
    for (int h = 0; h < got.hypotheses_size(); ++h) {
      EXPECT_EQ(got.hypotheses(h).text(), want.hypotheses[h].text) << i << "/" << h;
      EXPECT_EQ(got.hypotheses(h).tokens(), static_cast<int>(want.hypotheses[h].ids.size()));
      EXPECT_NEAR(got.hypotheses(h).score(), want.hypotheses[h].score, 1e-4 + 1e-5 * std::fabs(want.hypotheses[h].score));
    }
  }
  // Without return_scores the scores are 0.
  req.mutable_options()->set_return_scores(false);
  ASSERT_TRUE(Call(*stub, req, &resp).ok());
  EXPECT_EQ(resp.translations(0).hypotheses(0).score(), 0.0f);
}

// The decoding options through the API: served results equal the engine's (the same prefix,
// rules, penalty and sampling seed and stream), with pieces, token scores and alignments.
TEST_F(ServerTest, DecodingOptionsServedEqualLocal) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  auto model = LoadModelDirectory(kModelDir);
  ASSERT_TRUE(model.ok());
  Translator translator(*model);
  const std::vector<std::string> texts = {"A man is riding a bicycle down the street.", "Two dogs play in the snow.",
                                          "Short one."};
  const std::vector<std::string> prefixes = {"Ein", "", "the"};
  struct Case {
    std::string what;
    std::function<void(tnmt::v1::DecodingOptions*)> api;
    std::function<void(DecodeOptions*)> local;
    bool with_prefixes;
  };
  const std::vector<Case> cases = {
      {"prefix, token scores, alignments", [](auto* o) { o->set_return_token_scores(true); o->set_return_alignments(true); o->set_alignment_layer(0); },
       [](DecodeOptions* o) { o->return_token_scores = true; o->return_alignments = true; o->alignment_layer = 0; }, true},
      {"rules and penalty", [](auto* o) { o->set_min_length(6); o->set_no_repeat_ngram_size(2); o->set_repetition_penalty(1.5f); o->set_disable_unk(true); },
       [](DecodeOptions* o) { o->min_length = 7; o->no_repeat_ngram_size = 2; o->repetition_penalty = 1.5f; o->disable_unk = true; }, false},
      {"sampling", [](auto* o) { o->set_sampling_topk(0); o->set_sampling_topp(0.9f); o->set_sampling_temperature(1.3f); o->set_seed(77); },
       [](DecodeOptions* o) { o->beam_size = 1; o->sampling_topk = 0; o->sampling_topp = 0.9f; o->sampling_temperature = 1.3f; o->seed = 77; }, true},
  };
  for (const Case& c : cases) {
    TranslateRequest req;
    for (const std::string& t : texts) req.add_texts(t);
    if (c.with_prefixes) {
      for (const std::string& p : prefixes) req.add_target_prefixes(p);
    }
    req.mutable_options()->set_return_scores(true);
    c.api(req.mutable_options());
    TranslateResponse resp;
    grpc::Status st = Call(*stub, req, &resp);
    ASSERT_TRUE(st.ok()) << c.what << ": " << st.error_message();
    TranslationOptions to;
    to.decode = DecodeOptions::FromConfig((*model)->config);
    c.local(&to.decode);
    auto local = translator.Translate(texts, to, nullptr, c.with_prefixes ? &prefixes : nullptr);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(resp.seed(), to.decode.sampling() ? 77u : 0u);
    for (size_t i = 0; i < texts.size(); ++i) {
      const LineTranslation& want = *(*local)[i];
      const tnmt::v1::Hypothesis& got = resp.translations(i).hypotheses(0);
      const std::string where = c.what + ", text " + std::to_string(i);
      EXPECT_EQ(got.text(), want.hypotheses[0].text) << where;
      EXPECT_NEAR(got.score(), want.hypotheses[0].score, 1e-5) << where;
      EXPECT_EQ(got.pieces_size(), to.decode.return_token_scores ? got.tokens() : 0) << where;
      EXPECT_EQ(std::vector<float>(got.token_scores().begin(), got.token_scores().end()), want.hypotheses[0].token_scores) << where;
      EXPECT_EQ(std::vector<int32_t>(got.alignments().begin(), got.alignments().end()), want.hypotheses[0].alignments) << where;
      if (to.decode.return_alignments) {
        EXPECT_EQ(resp.translations(i).source_pieces_size(), resp.translations(i).source_tokens()) << where;
        EXPECT_EQ(got.alignments_size(), got.tokens()) << where;
      }
      if (c.with_prefixes && !prefixes[i].empty() && !to.decode.sampling()) {
        EXPECT_EQ(got.text().rfind(prefixes[i], 0), 0u) << where << ": " << got.text();
      }
    }
  }
  // Sampling without a seed: the server draws one and reports it; sending it back reproduces
  // the translations.
  TranslateRequest req;
  for (const std::string& t : texts) req.add_texts(t);
  req.mutable_options()->set_sampling_topk(0);
  TranslateResponse first, again;
  ASSERT_TRUE(Call(*stub, req, &first).ok());
  EXPECT_NE(first.seed(), 0u);
  req.mutable_options()->set_seed(first.seed());
  ASSERT_TRUE(Call(*stub, req, &again).ok());
  EXPECT_EQ(again.seed(), first.seed());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(again.translations(i).hypotheses(0).text(), first.translations(i).hypotheses(0).text()) << i;
  }
}

TEST_F(ServerTest, StreamAnswersEveryTextOfEveryMessage) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  grpc::ClientContext ctx;
  auto stream = stub->TranslateStream(&ctx);
  std::set<std::pair<uint64_t, int>> want;
  for (uint64_t id = 1; id <= 5; ++id) {
    tnmt::v1::TranslateStreamRequest m;
    m.set_id(id);
    for (int i = 0; i < static_cast<int>(id); ++i) {
      m.add_texts(Sentences()[(id + i) % Sentences().size()]);
      want.insert({id, i});
    }
    ASSERT_TRUE(stream->Write(m));
  }
  stream->WritesDone();
  tnmt::v1::TranslateStreamResponse r;
  std::set<std::pair<uint64_t, int>> got;
  while (stream->Read(&r)) {
    EXPECT_TRUE(got.insert({r.id(), r.index()}).second) << "duplicate answer";
    EXPECT_EQ(r.translation().hypotheses_size(), 1);
  }
  grpc::Status st = stream->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(got, want);

  // A bad message ends the stream with its error, naming the message.
  grpc::ClientContext ctx2;
  auto bad = stub->TranslateStream(&ctx2);
  tnmt::v1::TranslateStreamRequest m;
  m.set_id(77);
  m.set_model("nope");
  m.add_texts("hi");
  bad->Write(m);
  bad->WritesDone();
  while (bad->Read(&r)) {
  }
  st = bad->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("77"), std::string::npos) << st.error_message();
}

TEST_F(ServerTest, ListModelsPages) {
  ServerOptions o;
  o.models = {{"c", kModelDir}, {"a", kModelDir}, {"b", kModelDir}};
  auto server = StartServer(o);
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  std::vector<std::string> names;
  tnmt::v1::ListModelsRequest req;
  req.set_page_size(2);
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    tnmt::v1::ListModelsResponse resp;
    ASSERT_TRUE(stub->ListModels(&ctx, req, &resp).ok());
    EXPECT_LE(resp.models_size(), 2);
    for (const auto& m : resp.models()) names.push_back(m.name());
    req.set_page_token(resp.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 5);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(pages, 2);
  for (auto [size, token, field] : {std::tuple<int, const char*, const char*>{-1, "", "page_size"},
                                    {1001, "", "page_size"},
                                    {0, "garbage", "page_token"}}) {
    grpc::ClientContext ctx;
    tnmt::v1::ListModelsRequest bad;
    bad.set_page_size(size);
    bad.set_page_token(token);
    tnmt::v1::ListModelsResponse resp;
    grpc::Status st = stub->ListModels(&ctx, bad, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_EQ(st.error_message().rfind(field, 0), 0u) << st.error_message();
  }
}

TEST_F(ServerTest, ListModelsHealthAndReflection) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto channel = Channel(*server);
  auto stub = TranslationService::NewStub(channel);
  grpc::ClientContext ctx;
  tnmt::v1::ListModelsResponse models;
  ASSERT_TRUE(stub->ListModels(&ctx, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).name(), "tiny");
  EXPECT_EQ(models.models(0).state(), tnmt::v1::MODEL_STATE_READY);
  EXPECT_EQ(models.models(0).generation(), 1u);
  EXPECT_EQ(models.models(0).device(), "cpu");
  EXPECT_GT(models.models(0).parameters(), 0);
  EXPECT_GT(models.models(0).load_time().seconds(), 1700000000);
  EXPECT_TRUE(models.next_page_token().empty());

  auto health = grpc::health::v1::Health::NewStub(channel);
  for (const char* service : {"", "tnmt.v1.TranslationService"}) {
    grpc::ClientContext hc;
    grpc::health::v1::HealthCheckRequest hr;
    hr.set_service(service);
    grpc::health::v1::HealthCheckResponse hs;
    ASSERT_TRUE(health->Check(&hc, hr, &hs).ok());
    EXPECT_EQ(hs.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  // Watch: SERVING now, NOT_SERVING once shutdown begins.
  grpc::ClientContext wc;
  auto watch = health->Watch(&wc, {});
  grpc::health::v1::HealthCheckResponse ws;
  ASSERT_TRUE(watch->Read(&ws));
  EXPECT_EQ(ws.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  // Reflection, through the generic stub and the reflection messages the library registers.
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  const auto* req_desc = pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionRequest");
  const auto* resp_desc = pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionResponse");
  ASSERT_NE(req_desc, nullptr);
  ASSERT_NE(resp_desc, nullptr);
  google::protobuf::DynamicMessageFactory factory;
  std::unique_ptr<google::protobuf::Message> rreq(factory.GetPrototype(req_desc)->New());
  rreq->GetReflection()->SetString(rreq.get(), req_desc->FindFieldByName("list_services"), "*");
  grpc::GenericStub generic(channel);
  grpc::ClientContext rc;
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(&rc, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::string bytes = rreq->SerializeAsString();
  grpc::Slice slice(bytes);
  call->Write(grpc::ByteBuffer(&slice, 1), reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer buf;
  call->Read(&buf, reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buf.Dump(&slices).ok());
  std::string reply;
  for (auto& s : slices) reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
  std::unique_ptr<google::protobuf::Message> rresp(factory.GetPrototype(resp_desc)->New());
  ASSERT_TRUE(rresp->ParseFromString(reply));
  const std::string text = rresp->DebugString();
  EXPECT_NE(text.find("tnmt.v1.TranslationService"), std::string::npos) << text;
  EXPECT_NE(text.find("grpc.health.v1.Health"), std::string::npos) << text;
  rc.TryCancel();
  grpc::Status fin;
  call->Finish(&fin, reinterpret_cast<void*>(5));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(5)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }

  std::thread stopper([&] { server->Shutdown(); });
  bool saw_not_serving = false;
  while (watch->Read(&ws)) {
    if (ws.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING) {
      saw_not_serving = true;
      break;
    }
  }
  wc.TryCancel();
  stopper.join();
  EXPECT_TRUE(saw_not_serving);
}

// grpc.health.v1.Health is the server's own: garbage is INVALID_ARGUMENT on Check and on Watch
// (gRPC's default service answered Watch with INTERNAL), an unknown service NOT_FOUND on Check
// and SERVICE_UNKNOWN on Watch, and shutdown ends Watch streams (NOT_SERVING, then UNAVAILABLE).
grpc::Status RawHealthCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                           const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(&ctx, "/grpc.health.v1.Health/" + method, &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(bytes);
  call->WriteLast(grpc::ByteBuffer(&slice, 1), grpc::WriteOptions(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

TEST_F(ServerTest, HealthRefusesGarbageAndEndsWatchesOnShutdown) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto channel = Channel(*server);
  for (const char* method : {"Check", "Watch"}) {
    const grpc::Status s = RawHealthCall(channel, method, std::string("\xff\xff\xff\xff\x0f garbage", 14));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("do not parse as grpc.health.v1.HealthCheckRequest"), std::string::npos)
        << s.error_message();
  }
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest unknown;
  unknown.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse r;
  {
    grpc::ClientContext c;
    EXPECT_EQ(health->Check(&c, unknown, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext c;
    auto w = health->Watch(&c, unknown);
    ASSERT_TRUE(w->Read(&r));
    EXPECT_EQ(r.status(), grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN);
    c.TryCancel();
    w->Finish();
  }
  grpc::ClientContext wc;
  wc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto watch = health->Watch(&wc, {});
  ASSERT_TRUE(watch->Read(&r));
  EXPECT_EQ(r.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread stopper([&] { server->Shutdown(); });
  std::vector<int> seen;
  while (watch->Read(&r)) seen.push_back(r.status());
  const grpc::Status end = watch->Finish();
  stopper.join();
  EXPECT_EQ(seen, std::vector<int>{grpc::health::v1::HealthCheckResponse::NOT_SERVING});
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE) << end.error_message();
}

TEST_F(ServerTest, NotReadyUntilLoadedAndUnavailableWhenTheModelFails) {
  ServerOptions o;
  o.models = {{"broken", "/nonexistent/model/dir"}};
  auto server = StartServer(o);
  EXPECT_FALSE(server->WaitForInitialLoad().ok());
  EXPECT_FALSE(server->ready());
  auto channel = Channel(*server);
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext hc;
  grpc::health::v1::HealthCheckResponse hs;
  ASSERT_TRUE(health->Check(&hc, {}, &hs).ok());
  EXPECT_EQ(hs.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto stub = TranslationService::NewStub(channel);
  TranslateRequest req;
  req.add_texts("hello");
  TranslateResponse resp;
  grpc::Status st = Call(*stub, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(st.error_message().find("/nonexistent/model/dir"), std::string::npos) << st.error_message();
  // A failed model says so (MODEL_FAILED) and asks for no retry: only a reload changes it.
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(st.error_details()));
  std::string reason;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    if (any.UnpackTo(&info)) reason = info.reason();
    EXPECT_FALSE(any.Is<google::rpc::RetryInfo>());
  }
  EXPECT_EQ(reason, "MODEL_FAILED");
}

// Raw calls through the generic stub: what a client that sends bytes gRPC cannot decode gets.
struct RawStream {
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  int next_tag = 1;
  bool Step(const std::function<void(void*)>& op) {
    void* want = reinterpret_cast<void*>(static_cast<intptr_t>(next_tag++));
    op(want);
    void* tag;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
      if (tag == want) return ok;
    }
    return false;
  }
  ~RawStream() {
    cq.Shutdown();
    void* tag;
    bool ok;
    while (cq.Next(&tag, &ok)) {
    }
  }
};

grpc::ByteBuffer Bytes(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

TEST_F(ServerTest, UndecodableMessagesAreInvalidArgument) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto channel = Channel(*server);
  grpc::GenericStub generic(channel);
  // Unary: the single byte 08 (a varint field without its value), and a model that is not UTF-8.
  tnmt::v1::TranslateRequest bad_utf8;
  bad_utf8.add_texts("fine");
  std::string wire = bad_utf8.SerializeAsString();
  wire += std::string("\x0a\x02\xff\xfe", 4);  // field 1 (model), 2 bytes of invalid UTF-8
  for (const std::string& bytes : {std::string("\x08", 1), wire}) {
    RawStream r;
    r.call = generic.PrepareCall(&r.ctx, "/tnmt.v1.TranslationService/Translate", &r.cq);
    ASSERT_TRUE(r.Step([&](void* t) { r.call->StartCall(t); }));
    ASSERT_TRUE(r.Step([&](void* t) { r.call->WriteLast(Bytes(bytes), grpc::WriteOptions(), t); }));
    grpc::Status st;
    ASSERT_TRUE(r.Step([&](void* t) { r.call->Finish(&st, t); }));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("do not parse as tnmt.v1.TranslateRequest"), std::string::npos)
        << st.error_message();
  }
  // Stream: [valid, undecodable, valid, valid] ends with the bad message's error, not OK.
  tnmt::v1::TranslateStreamRequest good;
  good.add_texts("Two dogs play in the snow.");
  RawStream r;
  r.call = generic.PrepareCall(&r.ctx, "/tnmt.v1.TranslationService/TranslateStream", &r.cq);
  ASSERT_TRUE(r.Step([&](void* t) { r.call->StartCall(t); }));
  for (const std::string& bytes : {good.SerializeAsString(), std::string("\x08", 1), good.SerializeAsString(),
                                   good.SerializeAsString()}) {
    if (!r.Step([&](void* t) { r.call->Write(Bytes(bytes), t); })) break;  // the server may end it first
  }
  r.Step([&](void* t) { r.call->WritesDone(t); });
  int responses = 0;
  grpc::ByteBuffer buf;
  while (r.Step([&](void* t) { r.call->Read(&buf, t); })) ++responses;
  grpc::Status st;
  ASSERT_TRUE(r.Step([&](void* t) { r.call->Finish(&st, t); }));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("request message 2"), std::string::npos) << st.error_message();
  EXPECT_EQ(responses, 1) << "the first message's text is answered before the error";
  // ListModels and Score parse their own requests too: INVALID_ARGUMENT naming the message
  // type, not gRPC's UNIMPLEMENTED with no message.
  for (const auto& [method, type] : {std::pair<std::string, std::string>{"ListModels", "tnmt.v1.ListModelsRequest"},
                                     {"Score", "tnmt.v1.ScoreRequest"}}) {
    RawStream u;
    u.call = generic.PrepareCall(&u.ctx, "/tnmt.v1.TranslationService/" + method, &u.cq);
    ASSERT_TRUE(u.Step([&](void* t) { u.call->StartCall(t); }));
    ASSERT_TRUE(u.Step([&](void* t) { u.call->WriteLast(Bytes(std::string("\x08", 1)), grpc::WriteOptions(), t); }));
    grpc::Status us;
    ASSERT_TRUE(u.Step([&](void* t) { u.call->Finish(&us, t); }));
    EXPECT_EQ(us.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << us.error_message();
    EXPECT_NE(us.error_message().find("do not parse as " + type), std::string::npos) << us.error_message();
  }
  // Stream: [two texts, undecodable]: both accepted texts are answered, then the error.
  {
    tnmt::v1::TranslateStreamRequest two;
    two.set_id(5);
    two.add_texts("Two dogs play in the snow.");
    two.add_texts("A man is riding a bicycle down the street.");
    RawStream r2;
    r2.call = generic.PrepareCall(&r2.ctx, "/tnmt.v1.TranslationService/TranslateStream", &r2.cq);
    ASSERT_TRUE(r2.Step([&](void* t) { r2.call->StartCall(t); }));
    ASSERT_TRUE(r2.Step([&](void* t) { r2.call->Write(Bytes(two.SerializeAsString()), t); }));
    r2.Step([&](void* t) { r2.call->Write(Bytes(std::string("\x08", 1)), t); });
    r2.Step([&](void* t) { r2.call->WritesDone(t); });
    std::set<int> answered;
    grpc::ByteBuffer b2;
    while (r2.Step([&](void* t) { r2.call->Read(&b2, t); })) {
      tnmt::v1::TranslateStreamResponse resp;
      std::vector<grpc::Slice> slices;
      ASSERT_TRUE(b2.Dump(&slices).ok());
      std::string wire;
      for (const grpc::Slice& sl : slices) wire.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      ASSERT_TRUE(resp.ParseFromString(wire));
      EXPECT_EQ(resp.id(), 5u);
      EXPECT_EQ(resp.translation().hypotheses_size(), 1);
      answered.insert(resp.index());
    }
    grpc::Status s2;
    ASSERT_TRUE(r2.Step([&](void* t) { r2.call->Finish(&s2, t); }));
    EXPECT_EQ(s2.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s2.error_message();
    EXPECT_NE(s2.error_message().find("request message 2"), std::string::npos) << s2.error_message();
    EXPECT_EQ(answered, (std::set<int>{0, 1})) << "the accepted texts are answered before the error";
  }
  // The server serves on.
  auto stub = TranslationService::NewStub(channel);
  TranslateRequest req;
  req.add_texts("Hello, world.");
  TranslateResponse resp;
  EXPECT_TRUE(Call(*stub, req, &resp).ok());
}

TEST_F(ServerTest, ErrorMatrix) {
  ServerOptions o;
  o.limits.max_sentences_per_request = 8;
  o.limits.max_tokens_per_sentence = 100;
  o.limits.max_text_bytes = 1000;
  o.limits.max_output_length = 200;
  o.limits.max_request_cost = 20000;
  o.max_message_bytes = 64 * 1024;
  auto server = StartServer(o);
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  struct Case {
    std::string what;
    std::function<void(TranslateRequest*)> edit;
    grpc::StatusCode code;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {"empty batch", [](TranslateRequest* r) { r->clear_texts(); }, grpc::INVALID_ARGUMENT, "texts"},
      {"invalid UTF-8", [](TranslateRequest* r) { r->add_texts(std::string("ok \xff\xfe bad")); }, grpc::INVALID_ARGUMENT, "texts[1]"},
      {"beam 0", [](TranslateRequest* r) { r->mutable_options()->set_beam_size(0); }, grpc::INVALID_ARGUMENT, "options.beam_size"},
      {"beam 1000", [](TranslateRequest* r) { r->mutable_options()->set_beam_size(1000); }, grpc::INVALID_ARGUMENT, "options.beam_size"},
      {"n_best > beam", [](TranslateRequest* r) { r->mutable_options()->set_beam_size(2); r->mutable_options()->set_n_best(3); }, grpc::INVALID_ARGUMENT, "options.n_best"},
      {"negative n_best", [](TranslateRequest* r) { r->mutable_options()->set_n_best(-1); }, grpc::INVALID_ARGUMENT, "options.n_best"},
      {"NaN length penalty", [](TranslateRequest* r) { r->mutable_options()->set_length_penalty(NAN); }, grpc::INVALID_ARGUMENT, "options.length_penalty"},
      {"negative max_length", [](TranslateRequest* r) { r->mutable_options()->set_max_length(-5); }, grpc::INVALID_ARGUMENT, "options.max_length"},
      {"unknown length penalty style", [](TranslateRequest* r) { r->mutable_options()->set_length_penalty_style("wu"); }, grpc::INVALID_ARGUMENT, "options.length_penalty_style: expected \"gnmt\""},
      {"huge max_length", [](TranslateRequest* r) { r->mutable_options()->set_max_length(1 << 30); }, grpc::INVALID_ARGUMENT, "options.max_length: 1073741824 exceeds this server's limit of 200 tokens (--max-output-length)"},
      {"max_length beyond the server's limit", [](TranslateRequest* r) { r->mutable_options()->set_max_length(201); }, grpc::INVALID_ARGUMENT, "limit of 200"},
      {"beam 64 x 4 texts x 150 tokens", [](TranslateRequest* r) {
         r->mutable_options()->set_beam_size(64);
         r->mutable_options()->set_max_length(150);
         for (int i = 0; i < 3; ++i) r->add_texts("a dog runs");
       }, grpc::RESOURCE_EXHAUSTED, "request cost 38656 hypothesis-steps (beam_size 64 x 4 texts x up to 151 output tokens)"},
      {"unknown model", [](TranslateRequest* r) { r->set_model("klingon"); }, grpc::NOT_FOUND, "klingon"},
      {"too many texts", [](TranslateRequest* r) { for (int i = 0; i < 8; ++i) r->add_texts("a"); }, grpc::RESOURCE_EXHAUSTED, "texts"},
      {"too many tokens", [](TranslateRequest* r) { std::string t; for (int i = 0; i < 220; ++i) t += "ab "; r->add_texts(t); }, grpc::INVALID_ARGUMENT, "texts[1]"},
      {"text too many bytes", [](TranslateRequest* r) { r->add_texts(std::string(5000, 'a')); }, grpc::INVALID_ARGUMENT, "texts[1]"},
      {"message too large", [](TranslateRequest* r) { r->add_texts(std::string(200 * 1024, 'a')); }, grpc::RESOURCE_EXHAUSTED, ""},
      {"min_length over max_length", [](TranslateRequest* r) { r->mutable_options()->set_max_length(5); r->mutable_options()->set_min_length(6); }, grpc::INVALID_ARGUMENT, "options.min_length: 6 is outside [0, 5] (options.max_length is 5)"},
      {"negative no_repeat_ngram_size", [](TranslateRequest* r) { r->mutable_options()->set_no_repeat_ngram_size(-2); }, grpc::INVALID_ARGUMENT, "options.no_repeat_ngram_size"},
      {"zero repetition_penalty", [](TranslateRequest* r) { r->mutable_options()->set_repetition_penalty(0); }, grpc::INVALID_ARGUMENT, "options.repetition_penalty"},
      {"sampling with beam 4", [](TranslateRequest* r) { r->mutable_options()->set_beam_size(4); r->mutable_options()->set_sampling_topk(5); }, grpc::INVALID_ARGUMENT, "options.sampling needs beam_size 1"},
      {"topp without sampling", [](TranslateRequest* r) { r->mutable_options()->set_sampling_topp(0.5f); }, grpc::INVALID_ARGUMENT, "apply to sampling only"},
      {"temperature 0", [](TranslateRequest* r) { r->mutable_options()->set_sampling_topk(0); r->mutable_options()->set_sampling_temperature(0); }, grpc::INVALID_ARGUMENT, "options.sampling_temperature"},
      {"alignment layer 7", [](TranslateRequest* r) { r->mutable_options()->set_return_alignments(true); r->mutable_options()->set_alignment_layer(7); }, grpc::INVALID_ARGUMENT, "options.alignment_layer: 7 is outside [0, 2)"},
      {"prefixes for some texts", [](TranslateRequest* r) { r->add_texts("two"); r->add_target_prefixes("x"); }, grpc::INVALID_ARGUMENT, "target_prefixes: 1 for 2 texts"},
      {"prefix not UTF-8", [](TranslateRequest* r) { r->add_target_prefixes(std::string("\xff")); }, grpc::INVALID_ARGUMENT, "target_prefixes[0]"},
      {"prefix too long", [](TranslateRequest* r) { r->mutable_options()->set_max_length(3); r->add_target_prefixes("a b c d e"); }, grpc::INVALID_ARGUMENT, "target_prefixes[0]: "},
  };
  for (const Case& c : cases) {
    TranslateRequest req;
    req.add_texts("fine");
    c.edit(&req);
    TranslateResponse resp;
    grpc::Status st = Call(*stub, req, &resp);
    EXPECT_EQ(st.error_code(), c.code) << c.what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.mentions), std::string::npos) << c.what << ": " << st.error_message();
    // Refusals of the request itself say why (google.rpc.ErrorInfo) and carry no RetryInfo:
    // sending the same request again cannot succeed.
    static const std::map<std::string, std::string> kReasons = {
        {"invalid UTF-8", "INVALID_UTF8"},
        {"beam 64 x 4 texts x 150 tokens", "REQUEST_TOO_COSTLY"},
        {"too many texts", "TOO_MANY_TEXTS"},
        {"too many tokens", "TEXT_TOO_LONG"},
        {"text too many bytes", "TEXT_TOO_LONG"},
        {"prefix not UTF-8", "INVALID_UTF8"},
        {"prefix too long", "TEXT_TOO_LONG"},
        {"unknown model", "UNKNOWN_MODEL"}};
    // INVALID_ARGUMENT names its field in a google.rpc.BadRequest field violation too.
    static const std::map<std::string, std::string> kFields = {
        {"invalid UTF-8", "texts[1]"},
        {"beam 1000", "options.beam_size"},
        {"n_best > beam", "options.n_best"},
        {"min_length over max_length", "options.min_length"},
        {"huge max_length", "options.max_length"},
        {"negative no_repeat_ngram_size", "options.no_repeat_ngram_size"},
        {"zero repetition_penalty", "options.repetition_penalty"},
        {"sampling with beam 4", "options.beam_size"},
        {"topp without sampling", "options.sampling_topp"},
        {"temperature 0", "options.sampling_temperature"},
        {"alignment layer 7", "options.alignment_layer"},
        {"prefixes for some texts", "target_prefixes"},
        {"prefix not UTF-8", "target_prefixes[0]"},
        {"too many tokens", "texts[1]"}};
    google::rpc::Status details;
    const bool has_details = !st.error_details().empty() && details.ParseFromString(st.error_details());
    std::string reason, field;
    bool retry = false;
    for (const google::protobuf::Any& any : details.details()) {
      google::rpc::ErrorInfo info;
      google::rpc::BadRequest bad;
      if (any.UnpackTo(&info)) reason = info.reason();
      if (any.UnpackTo(&bad) && bad.field_violations_size() == 1) field = bad.field_violations(0).field();
      retry = retry || any.Is<google::rpc::RetryInfo>();
    }
    if (auto f = kFields.find(c.what); f != kFields.end()) {
      EXPECT_TRUE(has_details) << c.what;
      EXPECT_EQ(field, f->second) << c.what;
    } else if (c.code != grpc::INVALID_ARGUMENT) {
      EXPECT_EQ(field, "") << c.what << ": a field violation only for INVALID_ARGUMENT";
    }
    auto want = kReasons.find(c.what);
    if (want == kReasons.end()) continue;
    EXPECT_TRUE(has_details) << c.what;
    EXPECT_FALSE(retry) << c.what << ": not retryable";
    EXPECT_EQ(reason, want->second) << c.what;
  }
  // A deadline that passes before the work is done: DEADLINE_EXCEEDED, and the server serves on.
  TranslateRequest slow;
  for (int i = 0; i < 7; ++i) slow.add_texts(Sentences()[4]);
  slow.mutable_options()->set_beam_size(16);
  TranslateResponse resp;
  EXPECT_EQ(Call(*stub, slow, &resp, 1).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  TranslateRequest ok;
  ok.add_texts("still serving");
  EXPECT_TRUE(Call(*stub, ok, &resp).ok());
}

// A request with more texts than the model's whole queue (--max-queue) could never be queued:
// INVALID_ARGUMENT naming the limit, with no RetryInfo (a QUEUE_FULL would ask for retries
// that cannot succeed).
TEST_F(ServerTest, MoreTextsThanTheQueueIsInvalidArgument) {
  ServerOptions o;
  o.scheduler.max_queue = 2;
  auto server = StartServer(o);
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  TranslateRequest req;
  for (int i = 0; i < 3; ++i) req.add_texts("a dog runs");
  TranslateResponse resp;
  grpc::Status st = Call(*stub, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("--max-queue"), std::string::npos) << st.error_message();
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(st.error_details()));
  std::string reason, field;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::BadRequest bad;
    if (any.UnpackTo(&info)) reason = info.reason();
    if (any.UnpackTo(&bad) && bad.field_violations_size() == 1) field = bad.field_violations(0).field();
    EXPECT_FALSE(any.Is<google::rpc::RetryInfo>()) << "not retryable";
  }
  EXPECT_EQ(reason, "TOO_MANY_TEXTS");
  EXPECT_EQ(field, "texts");
  req.mutable_texts()->RemoveLast();
  EXPECT_TRUE(Call(*stub, req, &resp).ok()) << "as many texts as the queue holds fit";
}

// min_length beyond a text's default maximum (its length + the offset, 50) is honoured, not
// capped at that maximum.
TEST_F(ServerTest, MinLengthBeyondTheDefaultMaximumIsHonoured) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  TranslateRequest req;
  req.add_texts("x");
  req.mutable_options()->set_beam_size(1);
  req.mutable_options()->set_min_length(60);
  TranslateResponse resp;
  grpc::Status st = Call(*stub, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.translations(0).hypotheses_size(), 1);
  EXPECT_GE(resp.translations(0).hypotheses(0).tokens(), 60);
}

// Score calls are counted in tnmt_requests_total and written to the request log, as the
// other calls.
TEST_F(ServerTest, ScoreIsCountedAndLogged) {
  const std::string log = ::testing::TempDir() + "/score_requests.jsonl";
  std::remove(log.c_str());
  ServerOptions o;
  o.request_log = log;
  auto server = StartServer(o);
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  tnmt::v1::ScoreRequest req;
  req.add_sources("a dog runs");
  req.add_targets("a dog runs");
  tnmt::v1::ScoreResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->Score(&ctx, req, &resp).ok());
  req.set_model("klingon");
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub->Score(&ctx2, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string metrics = server->metrics().Serialize();
  EXPECT_NE(metrics.find("tnmt_requests_total{code=\"OK\",method=\"Score\",model=\"tiny\"} 1"), std::string::npos)
      << metrics.substr(0, 3000);
  EXPECT_NE(metrics.find("code=\"NOT_FOUND\",method=\"Score\""), std::string::npos);
  server->Shutdown();
  std::ifstream in(log);
  std::string line, all;
  int score_lines = 0;
  while (std::getline(in, line)) {
    all += line + "\n";
    if (line.find("\"method\":\"Score\"") != std::string::npos) ++score_lines;
  }
  EXPECT_EQ(score_lines, 2) << all;
  EXPECT_NE(all.find("\"texts\":1"), std::string::npos) << all;
}

// A server with the training API and no model (`tnmt serve --state-dir ...` alone) serves that
// API: ready, health SERVING and /readyz 200, all three agreeing.
TEST_F(ServerTest, JobsOnlyServerIsReady) {
  const std::string dir = ::testing::TempDir() + "/jobs_only";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/token") << "0123456789abcdef0123\n";
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.http_port = 0;
  o.jobs.state_dir = dir + "/state";
  o.jobs.data_root = dir + "/data";
  o.jobs.token_file = dir + "/token";
  o.jobs.trainer_binary = "/bin/false";
  auto started = TranslationServer::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  TranslationServer& server = **started;
  ASSERT_TRUE(server.WaitForInitialLoad().ok());
  EXPECT_TRUE(server.ready());
  auto health = grpc::health::v1::Health::NewStub(Channel(server));
  for (const std::string service : {"", "tnmt.v1.TranslationService"}) {
    grpc::ClientContext hc;
    grpc::health::v1::HealthCheckRequest hreq;
    hreq.set_service(service);
    grpc::health::v1::HealthCheckResponse hs;
    ASSERT_TRUE(health->Check(&hc, hreq, &hs).ok());
    EXPECT_EQ(hs.status(), grpc::health::v1::HealthCheckResponse::SERVING) << "service \"" << service << "\"";
  }
  httplib::Client http("127.0.0.1", server.http_port());
  auto readyz = http.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 200) << readyz->body;
  server.Shutdown();
}

int64_t RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

TEST_F(ServerTest, FuzzedRequestsNeverBreakTheServer) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 60), small(-3, 70);
  int64_t rss_warm = 0;
  for (int iter = 0; iter < 450; ++iter) {
    if (iter == 150) rss_warm = RssKiB();
    TranslateRequest req;
    const int n = len(rng) % 5;
    for (int i = 0; i < n; ++i) {
      std::string t;
      for (int k = len(rng); k > 0; --k) t.push_back(static_cast<char>(byte(rng)));
      req.add_texts(t);
    }
    if (rng() % 2) req.mutable_options()->set_beam_size(small(rng));
    if (rng() % 2) req.mutable_options()->set_n_best(small(rng));
    if (rng() % 3 == 0) req.mutable_options()->set_length_penalty(static_cast<float>(small(rng)) / 3);
    if (rng() % 3 == 0) req.mutable_options()->set_max_length(small(rng));
    if (rng() % 7 == 0) req.set_model(std::string(1, static_cast<char>('a' + byte(rng) % 26)));
    TranslateResponse resp;
    grpc::Status st = Call(*stub, req, &resp);
    EXPECT_TRUE(st.ok() || st.error_code() == grpc::INVALID_ARGUMENT || st.error_code() == grpc::NOT_FOUND)
        << "iteration " << iter << ": " << st.error_code() << " " << st.error_message();
    if (st.ok()) {
      EXPECT_EQ(resp.translations_size(), n);
    }
  }
  // Memory stays flat: 300 more fuzzed requests after warm-up grow the process by < 16 MiB.
  EXPECT_LT(RssKiB() - rss_warm, 16 * 1024) << "RSS grew from " << rss_warm << " KiB";
  // Raw garbage bytes as a request message: a clean error, then business as usual.
  grpc::GenericStub generic(Channel(*server));
  for (int iter = 0; iter < 20; ++iter) {
    std::string junk;
    for (int k = len(rng) + 1; k > 0; --k) junk.push_back(static_cast<char>(byte(rng)));
    grpc::Slice slice(junk);
    grpc::ByteBuffer in(&slice, 1), out;
    grpc::ClientContext ctx;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status st;
    generic.UnaryCall(&ctx, "/tnmt.v1.TranslationService/Translate", grpc::StubOptions(), &in, &out,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> l(mu);
                        st = s;
                        done = true;
                        cv.notify_all();
                      });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    EXPECT_NE(st.error_code(), grpc::StatusCode::UNAVAILABLE) << "server died on garbage";
  }
  TranslateRequest ok;
  ok.add_texts("still serving");
  TranslateResponse resp;
  EXPECT_TRUE(Call(*stub, ok, &resp).ok());
}

// Runs `clients` threads sending requests until `stop`; counts status codes.
struct Load {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<grpc::StatusCode, int> codes;
  std::vector<std::string> exhausted_details;  // grpc-status-details-bin of each RESOURCE_EXHAUSTED
  std::vector<std::thread> threads;
  void Start(const TranslationServer& s, int clients, int beam = 2) {
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([this, &s, c, beam] {
        auto stub = TranslationService::NewStub(grpc::CreateChannel(
            "127.0.0.1:" + std::to_string(s.port()), grpc::InsecureChannelCredentials()));
        for (int i = 0; !stop; ++i) {
          TranslateRequest req;
          req.add_texts(Sentences()[(c + i) % 3]);
          req.add_texts(Sentences()[(c + i + 1) % 5]);
          req.mutable_options()->set_beam_size(beam);
          TranslateResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
          grpc::Status st = stub->Translate(&ctx, req, &resp);
          std::lock_guard<std::mutex> l(mu);
          ++codes[st.error_code()];
          if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) exhausted_details.push_back(st.error_details());
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) return;  // server gone
        }
      });
    }
  }
  void Join() {
    stop = true;
    for (auto& t : threads) t.join();
  }
  // Waits until `enough(codes)` holds for the calls finished so far, up to 60 s (a cap for a
  // loaded machine, not a duration the test depends on); false if it never did.
  template <typename F>
  bool WaitUntil(F enough) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (enough(codes)) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  int Count(grpc::StatusCode code) {
    std::lock_guard<std::mutex> l(mu);
    return codes[code];
  }
  // Overload was shed, not timed out: some calls OK, some RESOURCE_EXHAUSTED, nothing else, and
  // every refusal retryable (ExpectRetryableQueueFull).
  void ExpectShedWithRetryInfo() {
    EXPECT_GT(codes[grpc::StatusCode::OK], 0);
    EXPECT_GT(codes[grpc::StatusCode::RESOURCE_EXHAUSTED], 0);
    EXPECT_TRUE(OnlyOkOrResourceExhausted());
    ExpectRetryableQueueFull();
  }
  // Every RESOURCE_EXHAUSTED carried a google.rpc.Status with ErrorInfo{reason "QUEUE_FULL",
  // domain "tnmt.dev"} and a RetryInfo whose delay is positive and at most a minute.
  void ExpectRetryableQueueFull() {
    ASSERT_FALSE(exhausted_details.empty());
    for (const std::string& bytes : exhausted_details) {
      google::rpc::Status details;
      ASSERT_TRUE(details.ParseFromString(bytes)) << "no google.rpc.Status in the trailer";
      EXPECT_EQ(details.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      bool reason = false, retry = false;
      for (const google::protobuf::Any& any : details.details()) {
        google::rpc::ErrorInfo info;
        google::rpc::RetryInfo delay;
        if (any.UnpackTo(&info)) {
          reason = info.reason() == "QUEUE_FULL" && info.domain() == "tnmt.dev";
        } else if (any.UnpackTo(&delay)) {
          const double s = delay.retry_delay().seconds() + delay.retry_delay().nanos() * 1e-9;
          retry = s > 0 && s <= 60;
        }
      }
      EXPECT_TRUE(reason) << details.DebugString();
      EXPECT_TRUE(retry) << details.DebugString();
    }
  }
  // True when every call got OK or RESOURCE_EXHAUSTED (no timeouts, no other errors).
  bool OnlyOkOrResourceExhausted() {
    int total = 0;
    for (auto& [code, n] : codes) total += n;
    return codes[grpc::StatusCode::OK] + codes[grpc::StatusCode::RESOURCE_EXHAUSTED] == total;
  }
};

TEST_F(ServerTest, QueueMeasuredInSecondsShedsAtOnce) {
  // With a queue limit of 0.1 ms of work, once the rate is measured any request that finds
  // sentences waiting is refused at once with RESOURCE_EXHAUSTED naming the queued seconds;
  // the others succeed; nothing times out.
  ServerOptions o;
  o.scheduler.max_queue_seconds = 0.0001;
  auto server = StartServer(o);
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(Channel(*server));
  for (int i = 0; i < 40; ++i) {  // one client: nothing queues, and the rate gets measured
    TranslateRequest req;
    req.add_texts(Sentences()[i % 3]);
    TranslateResponse resp;
    ASSERT_TRUE(Call(*stub, req, &resp).ok());
  }
  Load load;
  load.Start(*server, 32);
  EXPECT_TRUE(load.WaitUntil([](std::map<grpc::StatusCode, int>& c) {
    return c[grpc::StatusCode::OK] > 0 && c[grpc::StatusCode::RESOURCE_EXHAUSTED] > 0;
  })) << "no call was shed within 60 s";
  load.Join();
  load.ExpectShedWithRetryInfo();
  TranslateRequest req;
  req.add_texts("after the load");
  TranslateResponse resp;
  EXPECT_TRUE(Call(*stub, req, &resp).ok());
}

TEST_F(ServerTest, SixtyFourClientsForThirtySecondsAllSucceed) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  Load load;
  load.Start(*server, 64);
  std::this_thread::sleep_for(std::chrono::seconds(30));
  load.Join();
  EXPECT_GT(load.codes[grpc::StatusCode::OK], 64);
  EXPECT_EQ(load.codes.size(), 1u) << "some request failed";
}

TEST_F(ServerTest, OverloadIsResourceExhaustedNotTimeouts) {
  ServerOptions o;
  o.scheduler.max_queue = 4;
  auto server = StartServer(o);
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  Load load;
  load.Start(*server, 16, 8);
  EXPECT_TRUE(load.WaitUntil([](std::map<grpc::StatusCode, int>& c) {
    return c[grpc::StatusCode::OK] > 0 && c[grpc::StatusCode::RESOURCE_EXHAUSTED] > 0;
  })) << "no call was shed within 60 s";
  load.Join();
  load.ExpectShedWithRetryInfo();
}

TEST_F(ServerTest, HotReloadUnderLoadFailsNothing) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  Load load;
  load.Start(*server, 8);
  // Each reload and the end come after 8 more calls succeeded, so every generation serves.
  const auto eight_more = [&load] {
    const int ok = load.Count(grpc::StatusCode::OK);
    return load.WaitUntil([ok](std::map<grpc::StatusCode, int>& c) { return c[grpc::StatusCode::OK] >= ok + 8; });
  };
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(eight_more());
    EXPECT_TRUE(server->Reload("tiny").ok());
  }
  EXPECT_TRUE(eight_more());
  load.Join();
  EXPECT_GT(load.codes[grpc::StatusCode::OK], 0);
  EXPECT_EQ(load.codes.size(), 1u) << "some request failed during reload";
  EXPECT_EQ(server->registry().List()[0].generation, 4u);
  EXPECT_NE(server->metrics().Serialize().find("tnmt_model_generation{model=\"tiny\"} 4"), std::string::npos);
}

TEST_F(ServerTest, ShutdownUnderLoadLosesNoAcceptedRequest) {
  auto server = StartServer();
  ASSERT_TRUE(server->WaitForInitialLoad().ok());
  Load load;
  load.Start(*server, 8);
  EXPECT_TRUE(load.WaitUntil([](std::map<grpc::StatusCode, int>& c) { return c[grpc::StatusCode::OK] >= 8; }));
  server->Shutdown();
  load.Join();
  EXPECT_GT(load.codes[grpc::StatusCode::OK], 0);
  for (const auto& [code, n] : load.codes) {
    // Refused after shutdown began (never accepted) is UNAVAILABLE; nothing else may fail.
    EXPECT_TRUE(code == grpc::StatusCode::OK || code == grpc::StatusCode::UNAVAILABLE)
        << n << " requests ended with code " << code;
  }
}

}  // namespace
}  // namespace tnmt::server

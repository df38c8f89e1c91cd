// The generated tnmt.v1 and grpc.health.v1 libraries: both link into one binary with gRPC
// (no duplicate descriptor registrations), carry the documented schema (field presence,
// streaming shapes), and talk over a real in-process gRPC server, including to gRPC's built-in
// health service through our copy of health.proto.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"

namespace {

using google::protobuf::DescriptorPool;

TEST(ProtoSchema, FilesRegisteredUnderTheirImportPaths) {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  ASSERT_NE(pool->FindFileByName("tnmt/v1/translation.proto"), nullptr);
  ASSERT_NE(pool->FindFileByName("grpc/health/v1/health.proto"), nullptr);

  const auto* service = pool->FindServiceByName("tnmt.v1.TranslationService");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(service->method_count(), 4);
  const auto* score = service->FindMethodByName("Score");
  ASSERT_NE(score, nullptr);
  EXPECT_FALSE(score->client_streaming() || score->server_streaming());
  const auto* stream = service->FindMethodByName("TranslateStream");
  ASSERT_NE(stream, nullptr);
  EXPECT_TRUE(stream->client_streaming());
  EXPECT_TRUE(stream->server_streaming());
  const auto* translate = service->FindMethodByName("Translate");
  ASSERT_NE(translate, nullptr);
  EXPECT_FALSE(translate->client_streaming() || translate->server_streaming());

  const auto* health = pool->FindServiceByName("grpc.health.v1.Health");
  ASSERT_NE(health, nullptr);
  EXPECT_TRUE(health->FindMethodByName("Watch")->server_streaming());
}

TEST(ProtoSchema, LengthPenaltyHasPresence) {
  tnmt::v1::DecodingOptions options;
  EXPECT_FALSE(options.has_length_penalty());
  options.set_length_penalty(0.0f);
  EXPECT_TRUE(options.has_length_penalty());

  tnmt::v1::DecodingOptions parsed;
  ASSERT_TRUE(parsed.ParseFromString(options.SerializeAsString()));
  EXPECT_TRUE(parsed.has_length_penalty()) << "an explicit 0 must survive the wire";
  EXPECT_EQ(parsed.length_penalty(), 0.0f);

  tnmt::v1::DecodingOptions unset;
  ASSERT_TRUE(parsed.ParseFromString(unset.SerializeAsString()));
  EXPECT_FALSE(parsed.has_length_penalty());
}

TEST(ProtoSchema, RequestRoundTrip) {
  tnmt::v1::TranslateRequest request;
  request.set_model("en-de");
  request.add_texts("Hello world.");
  request.add_texts("Zwei");
  request.mutable_options()->set_beam_size(4);
  request.mutable_options()->set_n_best(2);
  request.mutable_options()->set_return_scores(true);

  tnmt::v1::TranslateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.SerializeAsString()));
  EXPECT_EQ(parsed.model(), "en-de");
  ASSERT_EQ(parsed.texts_size(), 2);
  EXPECT_EQ(parsed.texts(1), "Zwei");
  EXPECT_EQ(parsed.options().beam_size(), 4);
  EXPECT_EQ(parsed.options().n_best(), 2);
  EXPECT_TRUE(parsed.options().return_scores());
  EXPECT_EQ(parsed.options().max_length(), 0);
}

std::string Reversed(const std::string& s) { return std::string(s.rbegin(), s.rend()); }

// A stand-in service: "translates" by reversing each text; streams answer in reverse order.
class ReversingService final : public tnmt::v1::TranslationService::Service {
 public:
  grpc::Status Translate(grpc::ServerContext*, const tnmt::v1::TranslateRequest* request,
                         tnmt::v1::TranslateResponse* response) override {
    if (request->texts().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no texts");
    }
    response->set_model(request->model());
    for (const std::string& text : request->texts()) {
      auto* hypothesis = response->add_translations()->add_hypotheses();
      hypothesis->set_text(Reversed(text));
      hypothesis->set_tokens(static_cast<int>(text.size()));
    }
    response->mutable_timing()->mutable_total_time()->set_nanos(500000000);
    return grpc::Status::OK;
  }

  grpc::Status TranslateStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<tnmt::v1::TranslateStreamResponse,
                               tnmt::v1::TranslateStreamRequest>* stream) override {
    tnmt::v1::TranslateStreamRequest request;
    while (stream->Read(&request)) {
      for (int i = request.texts_size() - 1; i >= 0; --i) {
        tnmt::v1::TranslateStreamResponse response;
        response.set_id(request.id());
        response.set_index(i);
        response.mutable_translation()->add_hypotheses()->set_text(Reversed(request.texts(i)));
        if (!stream->Write(response)) return grpc::Status(grpc::StatusCode::CANCELLED, "");
      }
    }
    return grpc::Status::OK;
  }
};

class ProtoServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  ReversingService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ProtoServerTest, UnaryTranslate) {
  auto stub = tnmt::v1::TranslationService::NewStub(channel_);
  tnmt::v1::TranslateRequest request;
  request.set_model("m");
  request.add_texts("abc");
  request.add_texts("xy");
  tnmt::v1::TranslateResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->Translate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model(), "m");
  ASSERT_EQ(response.translations_size(), 2);
  EXPECT_EQ(response.translations(0).hypotheses(0).text(), "cba");
  EXPECT_EQ(response.translations(1).hypotheses(0).text(), "yx");
  EXPECT_EQ(response.timing().total_time().nanos(), 500000000);

  grpc::ClientContext empty_context;
  tnmt::v1::TranslateRequest empty;
  status = stub->Translate(&empty_context, empty, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ProtoServerTest, StreamMatchesRepliesById) {
  auto stub = tnmt::v1::TranslationService::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = stub->TranslateStream(&context);
  tnmt::v1::TranslateStreamRequest request;
  request.set_id(7);
  request.add_texts("ab");
  request.add_texts("cd");
  ASSERT_TRUE(stream->Write(request));
  request.Clear();
  request.set_id(8);
  request.add_texts("ef");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->WritesDone());

  std::vector<std::string> got;
  tnmt::v1::TranslateStreamResponse response;
  while (stream->Read(&response)) {
    got.push_back(std::to_string(response.id()) + ":" + std::to_string(response.index()) + ":" +
                  response.translation().hypotheses(0).text());
  }
  grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got, (std::vector<std::string>{"7:1:dc", "7:0:ba", "8:0:fe"}));
}

TEST_F(ProtoServerTest, BuiltInHealthServiceSpeaksOurHealthProto) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  {
    grpc::ClientContext context;
    grpc::Status status = stub->Check(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  {
    request.set_service("no.such.Service");
    grpc::ClientContext context;
    grpc::Status status = stub->Check(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    request.set_service("");
    grpc::ClientContext context;
    auto watch = stub->Watch(&context, request);
    ASSERT_TRUE(watch->Read(&response));
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    context.TryCancel();
    while (watch->Read(&response)) {
    }
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
}

}  // namespace

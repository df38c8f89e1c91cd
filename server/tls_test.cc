// The gRPC port's transport security and admission, end to end on 127.0.0.1 with the tiny test
// model: TLS with certificates made by /usr/bin/openssl at test time (plaintext refused, the
// CA checked), mutual TLS (no client certificate refused), certificates replaced on disk and
// served to new connections, wrong files refused at start naming the file, the translation
// API's bearer token (gRPC and the HTTP API's /api/translate), compressed requests refused
// before they are inflated, and the cap on concurrent streams per connection.
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "server/server.h"
#include "server/tls.h"

namespace tnmt::server {
namespace {

namespace fs = std::filesystem;
using tnmt::v1::TranslationService;

constexpr char kModelDir[] = "tests/golden/data/tiny";

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A CA and certificates it signed, in a fresh directory: <name>.pem and <name>.key.
class Pki {
 public:
  explicit Pki(const std::string& tag) {
    dir_ = fs::path(std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp") /
           absl::StrCat("pki-", tag, "-", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Run(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tnmt-test-ca-", tag, " -keyout ",
                     Key("ca"), " -out ", Pem("ca")));
  }
  // A certificate for `cn`, valid for localhost and 127.0.0.1, signed by this CA.
  void Issue(const std::string& name, const std::string& cn) {
    const std::string ext = (dir_ / (name + ".ext")).string();
    std::ofstream(ext) << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
    Run(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=", cn, " -keyout ", Key(name), " -out ",
                     (dir_ / (name + ".csr")).string()));
    Run(absl::StrCat("openssl x509 -req -days 2 -in ", (dir_ / (name + ".csr")).string(), " -CA ", Pem("ca"),
                     " -CAkey ", Key("ca"), " -CAcreateserial -extfile ", ext, " -out ", Pem(name)));
  }
  std::string Pem(const std::string& name) const { return (dir_ / (name + ".pem")).string(); }
  std::string Key(const std::string& name) const { return (dir_ / (name + ".key")).string(); }
  const fs::path& dir() const { return dir_; }

 private:
  static void Run(const std::string& command) {
    ASSERT_EQ(std::system((command + " 2>/dev/null").c_str()), 0) << command;
  }
  fs::path dir_;
};

bool HaveOpenssl() { return fs::exists("/usr/bin/openssl"); }

ServerOptions Options() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.http_port = -1;
  o.models = {{"tiny", kModelDir}};
  return o;
}

std::shared_ptr<grpc::Channel> TlsChannel(int port, const std::string& ca_pem, const std::string& cert_pem = "",
                                          const std::string& key_pem = "") {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  ssl.pem_cert_chain = cert_pem;
  ssl.pem_private_key = key_pem;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a fresh connection per channel
  return grpc::CreateCustomChannel(absl::StrCat("localhost:", port), grpc::SslCredentials(ssl), args);
}

grpc::Status ListModels(const std::shared_ptr<grpc::Channel>& channel, const std::string& token = "") {
  auto stub = TranslationService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  tnmt::v1::ListModelsResponse resp;
  return stub->ListModels(&ctx, tnmt::v1::ListModelsRequest(), &resp);
}

TEST(CheckTlsFiles, NamesTheFileAndTheProblem) {
  if (!HaveOpenssl()) GTEST_SKIP() << "SKIPPED: no /usr/bin/openssl to make certificates";
  Pki pki("check");
  pki.Issue("server", "localhost");
  pki.Issue("other", "localhost");
  EXPECT_TRUE(CheckTlsFiles({}).ok());
  EXPECT_TRUE(CheckTlsFiles({pki.Pem("server"), pki.Key("server"), pki.Pem("ca")}).ok());
  auto message = [](const TlsFiles& f) { return std::string(CheckTlsFiles(f).message()); };
  EXPECT_EQ(message({pki.Pem("server"), "", ""}), "--tls-cert needs --tls-key (the certificate's private key)");
  EXPECT_EQ(message({"", pki.Key("server"), ""}),
            "--tls-key and --tls-client-ca need --tls-cert (the server's certificate)");
  EXPECT_EQ(message({pki.Pem("server"), pki.Key("other"), ""}),
            absl::StrCat("--tls-key ", pki.Key("other"), ": does not match the certificate in --tls-cert ",
                         pki.Pem("server")));
  EXPECT_EQ(CheckTlsFiles({"/nonexistent/cert.pem", pki.Key("server"), ""}).code(), absl::StatusCode::kNotFound);
  const std::string garbage = (pki.dir() / "garbage.pem").string();
  std::ofstream(garbage) << "not a certificate\n";
  EXPECT_NE(message({garbage, pki.Key("server"), ""}).find(absl::StrCat("--tls-cert ", garbage, ": not a PEM certificate")),
            std::string::npos);
  EXPECT_NE(message({pki.Pem("server"), garbage, ""}).find("not an unencrypted PEM private key"), std::string::npos);
  EXPECT_NE(message({pki.Pem("server"), pki.Key("server"), garbage}).find("--tls-client-ca"), std::string::npos);
  // The server refuses to start on a wrong file, before binding.
  ServerOptions o = Options();
  o.tls = {pki.Pem("server"), pki.Key("other"), ""};
  auto s = TranslationServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("does not match"), absl::string_view::npos) << s.status();
}

TEST(GrpcTls, ServesTlsOnlyAndChecksTheCa) {
  if (!HaveOpenssl()) GTEST_SKIP() << "SKIPPED: no /usr/bin/openssl to make certificates";
  Pki pki("tls");
  pki.Issue("server", "localhost");
  Pki stranger("stranger");
  ServerOptions o = Options();
  o.tls = {pki.Pem("server"), pki.Key("server"), ""};
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_TRUE(ListModels(TlsChannel(port, Read(pki.Pem("ca")))).ok());
  // Plaintext to the TLS port, and a client that trusts another CA, are refused.
  const grpc::Status plain = ListModels(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  EXPECT_EQ(ListModels(TlsChannel(port, Read(stranger.Pem("ca")))).error_code(), grpc::StatusCode::UNAVAILABLE);
  // Health answers over TLS too.
  auto health = grpc::health::v1::Health::NewStub(TlsChannel(port, Read(pki.Pem("ca"))));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckResponse hr;
  EXPECT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &hr).ok());
}

TEST(GrpcTls, MutualTlsNeedsAClientCertificateFromTheCa) {
  if (!HaveOpenssl()) GTEST_SKIP() << "SKIPPED: no /usr/bin/openssl to make certificates";
  Pki pki("mtls");
  pki.Issue("server", "localhost");
  pki.Issue("client", "a-client");
  Pki stranger("mtls-stranger");
  stranger.Issue("client", "someone-else");
  ServerOptions o = Options();
  o.tls = {pki.Pem("server"), pki.Key("server"), pki.Pem("ca")};
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const std::string ca = Read(pki.Pem("ca"));
  EXPECT_TRUE(ListModels(TlsChannel(port, ca, Read(pki.Pem("client")), Read(pki.Key("client")))).ok());
  EXPECT_FALSE(ListModels(TlsChannel(port, ca)).ok()) << "no client certificate";
  EXPECT_FALSE(ListModels(TlsChannel(port, ca, Read(stranger.Pem("client")), Read(stranger.Key("client")))).ok())
      << "a client certificate from another CA";
}

TEST(GrpcTls, ReplacedCertificatesReachNewConnections) {
  if (!HaveOpenssl()) GTEST_SKIP() << "SKIPPED: no /usr/bin/openssl to make certificates";
  Pki first("reload-a");
  first.Issue("server", "localhost");
  Pki second("reload-b");
  second.Issue("server", "localhost");
  const fs::path live = first.dir() / "live";
  fs::create_directories(live);
  fs::copy_file(first.Pem("server"), live / "cert.pem");
  fs::copy_file(first.Key("server"), live / "key.pem");
  ServerOptions o = Options();
  o.tls = {(live / "cert.pem").string(), (live / "key.pem").string(), ""};
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_TRUE(ListModels(TlsChannel(port, Read(first.Pem("ca")))).ok());
  // Replace both files (each by rename, as certificate tools do) and wait for the watcher.
  fs::copy_file(second.Pem("server"), live / "cert.new");
  fs::copy_file(second.Key("server"), live / "key.new");
  fs::rename(live / "key.new", live / "key.pem");
  fs::rename(live / "cert.new", live / "cert.pem");
  bool switched = false;
  for (int i = 0; i < 100 && !switched; ++i) {  // up to 20 s; kTlsRefreshSeconds is 1
    switched = ListModels(TlsChannel(port, Read(second.Pem("ca")))).ok();
    if (!switched) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(switched) << "new connections still get the old certificate";
  EXPECT_FALSE(ListModels(TlsChannel(port, Read(first.Pem("ca")))).ok()) << "the old certificate is still served";
}

TEST(GrpcAdmission, TranslationTokenOnGrpcAndHttp) {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp");
  const std::string token_file = (dir / "api-token").string();
  std::ofstream(token_file) << "  0123456789abcdef-token\n";
  ServerOptions o = Options();
  o.http_port = 0;
  o.api_token_file = token_file;
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitForInitialLoad().ok());
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials());
  const grpc::Status none = ListModels(channel);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("authorization: Bearer <token>"), std::string::npos) << none.error_message();
  EXPECT_EQ(ListModels(channel, "0123456789abcdef-wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ListModels(channel, "0123456789abcdef-token").ok());
  {
    auto stub = TranslationService::NewStub(channel);
    tnmt::v1::TranslateRequest req;
    req.add_texts("Hello, world.");
    for (const std::string token : {"", "0123456789abcdef-token"}) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
      tnmt::v1::TranslateResponse resp;
      const grpc::Status s = stub->Translate(&ctx, req, &resp);
      EXPECT_EQ(s.error_code(), token.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::OK)
          << s.error_message();
    }
    grpc::ClientContext ctx;  // a stream without the token ends with the error
    auto stream = stub->TranslateStream(&ctx);
    stream->WritesDone();
    tnmt::v1::TranslateStreamResponse r;
    while (stream->Read(&r)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // Health needs no token (probes).
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext hctx;
  grpc::health::v1::HealthCheckResponse hr;
  EXPECT_TRUE(health->Check(&hctx, grpc::health::v1::HealthCheckRequest(), &hr).ok());
  // The HTTP API passes the caller's Authorization header on.
  httplib::Client http("127.0.0.1", (*server)->http_port());
  http.set_read_timeout(30, 0);
  auto refused = http.Post("/api/translate", R"({"texts": ["Hello."]})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401) << refused->body;
  auto accepted = http.Post("/api/translate", {{"Authorization", "Bearer 0123456789abcdef-token"}},
                            R"({"texts": ["Hello."]})", "application/json");
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->status, 200) << accepted->body;
  // A short token is a start-up error.
  std::ofstream(token_file) << "short\n";
  auto bad = TranslationServer::Start(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--api-token-file"), absl::string_view::npos) << bad.status();
}

TEST(GrpcAdmission, CompressedRequestsAreRefused) {
  auto server = TranslationServer::Start(Options());
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  // 64 MiB of one letter: 64 KiB gzipped, 16 times the 4 MiB message limit once inflated.
  tnmt::v1::TranslateRequest req;
  req.add_texts(std::string(64 << 20, 'a'));
  for (grpc_compression_algorithm algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.set_compression_algorithm(algorithm);
    tnmt::v1::TranslateResponse resp;
    const grpc::Status s = stub->Translate(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
    EXPECT_NE(s.error_message().find("disabled"), std::string::npos) << s.error_message();
  }
  // Uncompressed calls still work.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  tnmt::v1::TranslateRequest small;
  small.add_texts("Hello, world.");
  tnmt::v1::TranslateResponse resp;
  EXPECT_TRUE(stub->Translate(&ctx, small, &resp).ok());
}

TEST(GrpcAdmission, StreamsPerConnectionAreCapped) {
  ServerOptions o = Options();
  o.max_streams_per_connection = 8;
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitForInitialLoad().ok());
  auto stub = TranslationService::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  // 20 streams opened on one connection, each held open after its first answer: the server
  // lets 8 run; the others wait in the transport until one of them ends.
  constexpr int kStreams = 20;
  std::atomic<int> answered{0}, finished_ok{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      auto stream = stub->TranslateStream(&ctx);
      tnmt::v1::TranslateStreamRequest req;
      req.add_texts("Hello, world.");
      tnmt::v1::TranslateStreamResponse r;
      if (stream->Write(req) && stream->Read(&r)) ++answered;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      stream->WritesDone();
      while (stream->Read(&r)) {
      }
      if (stream->Finish().ok()) ++finished_ok;
    });
  }
  for (int i = 0; i < 600 && answered < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // room for a ninth, if one were let in
  EXPECT_EQ(answered.load(), 8);
  release = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answered.load(), kStreams);
  EXPECT_EQ(finished_ok.load(), kStreams);
}

TEST(GrpcAdmission, CallsPerPeerAreCapped) {
  ServerOptions o = Options();
  o.max_calls_per_peer = 2;
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitForInitialLoad().ok());
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());
  // Two streams held open on two connections of the same address: a third call is refused at
  // once, on any connection; once one stream ends, calls are accepted again.
  auto stream_on = [&](std::shared_ptr<grpc::Channel> channel, grpc::ClientContext* ctx,
                       std::unique_ptr<TranslationService::Stub>* stub) {
    *stub = TranslationService::NewStub(channel);
    auto stream = (*stub)->TranslateStream(ctx);
    tnmt::v1::TranslateStreamRequest req;
    req.add_texts("Hello, world.");
    tnmt::v1::TranslateStreamResponse r;
    EXPECT_TRUE(stream->Write(req) && stream->Read(&r));
    return stream;
  };
  auto fresh = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  };
  grpc::ClientContext c1, c2;
  std::unique_ptr<TranslationService::Stub> s1, s2;
  auto first = stream_on(fresh(), &c1, &s1);
  auto second = stream_on(fresh(), &c2, &s2);
  auto stub = TranslationService::NewStub(fresh());
  tnmt::v1::TranslateRequest req;
  req.add_texts("Hello, world.");
  {
    grpc::ClientContext ctx;
    tnmt::v1::TranslateResponse resp;
    const grpc::Status s = stub->Translate(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("already has 2 calls running (--max-calls-per-peer)"), std::string::npos)
        << s.error_message();
  }
  first->WritesDone();
  tnmt::v1::TranslateStreamResponse r;
  while (first->Read(&r)) {
  }
  EXPECT_TRUE(first->Finish().ok());
  // The server counts the stream out when its reactor is done, a moment after the client saw
  // the end: a refusal in that window is retried.
  grpc::Status accepted;
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    tnmt::v1::TranslateResponse resp;
    accepted = stub->Translate(&ctx, req, &resp);
    if (accepted.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(accepted.ok()) << accepted.error_message();
  second->WritesDone();
  while (second->Read(&r)) {
  }
  EXPECT_TRUE(second->Finish().ok());
}

TEST(GrpcAdmission, TheHttpApiIsNotOnePeer) {
  ServerOptions o = Options();
  o.http_port = 0;
  o.max_calls_per_peer = 1;
  auto server = TranslationServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitForInitialLoad().ok());
  // Eight web translations at once, each forced to 400 tokens so that they overlap, all pass
  // though they share the in-process channel.
  std::atomic<int> ok{0}, ready{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      httplib::Client http("127.0.0.1", (*server)->http_port());
      http.set_read_timeout(60, 0);
      ++ready;
      while (ready < 8) std::this_thread::yield();
      auto r = http.Post("/api/translate",
                         R"({"texts": ["Hello, world."], "options": {"min_length": 400, "max_length": 400}})",
                         "application/json");
      if (r && r->status == 200) {
        ++ok;
      } else {
        ADD_FAILURE() << (r ? r->body : "no reply");
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), 8);
}

}  // namespace
}  // namespace tnmt::server

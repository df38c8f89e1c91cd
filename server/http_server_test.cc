// HttpServer end to end on 127.0.0.1 with an ephemeral port, through httplib's client:
// /metrics (content type, body from ServerMetrics), /healthz, /readyz following the readiness
// callback and the stopping state, added handlers with query parameters, 404s, a busy port.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/metrics.h"

namespace tnmt {
namespace {

HttpServerOptions Loopback(int port = 0) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.threads = 2;
  return options;
}

// GET (or HEAD) path; status -1 if there was no response at all.
struct Reply {
  int status = -1;
  std::string content_type;
  std::string body;
};

Reply Fetch(int port, const std::string& path, bool head = false) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  httplib::Result result = head ? client.Head(path.c_str()) : client.Get(path.c_str());
  Reply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.content_type = result->get_header_value("Content-Type");
  reply.body = result->body;
  return reply;
}

TEST(HttpServer, MetricsHealthAndReadiness) {
  ServerMetrics metrics;
  metrics.RequestStarted();
  metrics.RequestDone("en-de", "Translate", "OK", 0.01);
  std::atomic<bool> ready{false};
  HttpServer server(
      Loopback(), [&metrics] { return metrics.Serialize(); },
      [&ready] {
        return ready ? absl::OkStatus() : absl::UnavailableError("model en-de is loading");
      });
  ASSERT_EQ(server.port(), 0);
  ASSERT_TRUE(server.Start().ok());
  const int port = server.port();
  ASSERT_GT(port, 0);

  Reply reply = Fetch(port, "/metrics");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(reply.body.find("# TYPE tnmt_requests_total counter\n"), std::string::npos);
  EXPECT_NE(reply.body.find(
                "tnmt_requests_total{code=\"OK\",method=\"Translate\",model=\"en-de\"} 1\n"),
            std::string::npos)
      << reply.body;
  metrics.RequestStarted();
  EXPECT_NE(Fetch(port, "/metrics").body.find("tnmt_inflight_requests 1\n"), std::string::npos)
      << "each scrape must serialize afresh";

  reply = Fetch(port, "/healthz");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "ok");

  reply = Fetch(port, "/readyz");
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "model en-de is loading");
  ready = true;
  reply = Fetch(port, "/readyz");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "ready");

  reply = Fetch(port, "/healthz", /*head=*/true);
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "");

  EXPECT_EQ(Fetch(port, "/nope").status, 404);
  EXPECT_EQ(Fetch(port, "/metrics/").status, 404) << "paths match exactly";

  server.SetStopping();
  reply = Fetch(port, "/healthz");
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "stopping");
  reply = Fetch(port, "/readyz");
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "stopping");
  EXPECT_EQ(Fetch(port, "/metrics").status, 200) << "still scrapable while draining";

  server.Stop();
  EXPECT_EQ(Fetch(port, "/healthz").status, -1) << "nothing listens after Stop";
  server.Stop();  // idempotent
  EXPECT_EQ(server.Start().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HttpServer, NoCallbacksMeansNoMetricsAndAlwaysReady) {
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(Fetch(server.port(), "/metrics").status, 404);
  EXPECT_EQ(Fetch(server.port(), "/readyz").status, 200);
}

TEST(HttpServer, AddedGetHandlers) {
  HttpServer server(Loopback(), [] { return std::string("x 1\n"); }, nullptr);
  ASSERT_TRUE(server
                  .AddGetHandler("/echo",
                                 [](const HttpRequest& request) {
                                   HttpResponse response;
                                   response.status = 201;
                                   response.content_type = "application/json";
                                   auto [begin, end] = request.params.equal_range("q");
                                   for (auto it = begin; it != end; ++it) {
                                     response.body += it->second + ";";
                                   }
                                   response.body += request.path;
                                   return response;
                                 })
                  .ok());
  EXPECT_EQ(server.AddGetHandler("/echo", nullptr).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(server.AddGetHandler("/metrics", nullptr).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(server.AddGetHandler("echo", nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.AddGetHandler("/late", nullptr).code(),
            absl::StatusCode::kFailedPrecondition);

  Reply reply = Fetch(server.port(), "/echo?q=a%20b&q=c&r=d");
  EXPECT_EQ(reply.status, 201);
  EXPECT_EQ(reply.content_type, "application/json");
  EXPECT_EQ(reply.body, "a b;c;/echo");
}

TEST(HttpServer, BusyPortFailsWithReason) {
  HttpServer first(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(first.Start().ok());
  HttpServer second(Loopback(first.port()), nullptr, nullptr);
  const absl::Status status = second.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("127.0.0.1:" + std::to_string(first.port())),
            absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("Address already in use"), absl::string_view::npos) << status;
  EXPECT_EQ(second.port(), 0);
  EXPECT_EQ(Fetch(first.port(), "/healthz").status, 200) << "the first server is unaffected";
}

TEST(HttpServer, StopRightAfterStartDoesNotHang) {
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    HttpServer server(Loopback(), nullptr, nullptr);
    ASSERT_TRUE(server.Start().ok());
    server.Stop();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(10));
}

TEST(HttpServer, DestructorStops) {
  int port = 0;
  {
    HttpServer server(Loopback(), nullptr, nullptr);
    ASSERT_TRUE(server.Start().ok());
    port = server.port();
    EXPECT_EQ(Fetch(port, "/healthz").status, 200);
  }
  EXPECT_EQ(Fetch(port, "/healthz").status, -1);
}

}  // namespace
}  // namespace tnmt

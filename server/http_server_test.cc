// HttpServer end to end on 127.0.0.1 with an ephemeral port, through httplib's client:
// /metrics (content type, body from ServerMetrics), /healthz, /readyz following the readiness
// callback and the stopping state, added handlers with query parameters, 404s, a busy port;
// POST handlers with their bodies, the body cap (413, also for chunked bodies), prefix routes,
// 405 with Allow, headers both ways, the error formatter, a throwing handler, a malformed
// request.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

struct PostReply {
  int status = -1;
  std::string content_type;
  std::string body;
  std::string allow;
};

PostReply Send(int port, const std::string& method, const std::string& path,
               const std::string& body = "", const httplib::Headers& headers = {}) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  client.set_write_timeout(std::chrono::seconds(5));
  httplib::Result result =
      method == "POST"   ? client.Post(path.c_str(), headers, body, "application/json")
      : method == "PUT"  ? client.Put(path.c_str(), headers, body, "application/json")
      : method == "DELETE" ? client.Delete(path.c_str(), headers)
                           : client.Get(path.c_str(), headers);
  PostReply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.content_type = result->get_header_value("Content-Type");
  reply.body = result->body;
  reply.allow = result->get_header_value("Allow");
  return reply;
}

// Writes `request` on a fresh connection (then half-closes it when `half_close`) and reads until
// the server closes it (or 5 s).
std::string RawExchange(int port, const std::string& request, bool half_close = false) {
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  if (sock < 0) return "socket failed";
  timeval timeout{5, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(sock);
    return "connect failed";
  }
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = send(sock, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early
    sent += n;
  }
  if (half_close) shutdown(sock, SHUT_WR);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = read(sock, buffer, sizeof(buffer))) > 0;) answer.append(buffer, n);
  close(sock);
  return answer;
}

HttpResponse Echo(const HttpRequest& request) {
  HttpResponse response;
  response.body = request.method + " " + request.path + " [" + request.subpath + "] " + request.body;
  return response;
}

TEST(HttpServer, PostHandlersGetTheBodyAndMethodsAreChecked) {
  HttpServer server(Loopback(), [] { return std::string("x 1\n"); }, nullptr);
  ASSERT_TRUE(server
                  .AddPostHandler("/api/echo",
                                  [](const HttpRequest& request) {
                                    HttpResponse response = Echo(request);
                                    response.status = 202;
                                    response.content_type = "application/json";
                                    response.headers.emplace_back("X-Seen-Token",
                                                                  request.Header("AUTHORIZATION"));
                                    return response;
                                  })
                  .ok());
  ASSERT_TRUE(server.AddGetHandler("/both", Echo).ok());
  ASSERT_TRUE(server.AddPostHandler("/both", Echo).ok()) << "GET and POST may share a path";
  EXPECT_EQ(server.AddPostHandler("/both", Echo).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(server.AddPostHandler("nope", Echo).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.AddPostHandler("/empty", nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.AddGetHandler("/empty", nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.AddPostHandler("/late", Echo).code(), absl::StatusCode::kFailedPrecondition);
  const int port = server.port();

  httplib::Client client("127.0.0.1", port);
  httplib::Result result =
      client.Post("/api/echo", {{"authorization", "Bearer abc"}}, R"({"a": 1})", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 202);
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(result->body, R"(POST /api/echo [] {"a": 1})");
  EXPECT_EQ(result->get_header_value("X-Seen-Token"), "Bearer abc")
      << "request headers are found in any case; extra response headers are sent";

  EXPECT_EQ(Send(port, "GET", "/both").body, "GET /both [] ");
  EXPECT_EQ(Send(port, "POST", "/both", "hi").body, "POST /both [] hi");

  PostReply reply = Send(port, "GET", "/api/echo");
  EXPECT_EQ(reply.status, 405);
  EXPECT_EQ(reply.allow, "POST");
  EXPECT_NE(reply.body.find("GET not allowed"), std::string::npos) << reply.body;
  reply = Send(port, "POST", "/metrics", "x");
  EXPECT_EQ(reply.status, 405);
  EXPECT_EQ(reply.allow, "GET, HEAD");
  EXPECT_EQ(Send(port, "PUT", "/both", "x").status, 405);
  EXPECT_EQ(Send(port, "DELETE", "/metrics").status, 405);
  EXPECT_EQ(Send(port, "POST", "/nope", "x").status, 404);
  EXPECT_EQ(Send(port, "PUT", "/nope", "x").status, 404);
  EXPECT_EQ(Fetch(port, "/healthz").status, 200) << "GET routes are unaffected";
}

TEST(HttpServer, BodiesOverTheCapAre413) {
  HttpServerOptions options = Loopback();
  options.max_body_bytes = 1000;
  std::atomic<int> calls{0};
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server
                  .AddPostHandler("/in",
                                  [&calls](const HttpRequest& request) {
                                    ++calls;
                                    return HttpResponse{200, "text/plain",
                                                        std::to_string(request.body.size())};
                                  })
                  .ok());
  ASSERT_TRUE(server.Start().ok());
  const int port = server.port();

  PostReply reply = Send(port, "POST", "/in", std::string(1000, 'x'));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "1000") << "exactly the limit is accepted";
  reply = Send(port, "POST", "/in", std::string(1001, 'x'));
  EXPECT_EQ(reply.status, 413);
  EXPECT_EQ(reply.body, "request body too large: the limit is 1000 bytes");
  reply = Send(port, "POST", "/in", std::string(5 << 20, 'x'));
  EXPECT_EQ(reply.status, 413) << "a much larger body is refused too, not read";

  // Chunked: no Content-Length, so the limit is applied while reading.
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(5));
  httplib::Result result = client.Post(
      "/in",
      [](size_t offset, httplib::DataSink& sink) {
        if (offset >= 4000) {
          sink.done();
          return true;
        }
        const std::string chunk(500, 'y');
        return sink.write(chunk.data(), chunk.size());
      },
      "text/plain");
  if (result) {  // the server may also close the connection while the client still writes
    EXPECT_EQ(result->status, 413);
  }
  // Chunked on a raw socket, followed by a second request on the same connection: the reply
  // is 413 with "Connection: close", and the rest of the body is never taken for a request.
  std::string chunked = "POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 5; ++i) chunked += "1f4\r\n" + std::string(500, 'z') + "\r\n";
  chunked += "0\r\n\r\nGET /in HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string answer = RawExchange(port, chunked);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("HTTP/1.1", 1), std::string::npos) << "one reply only: " << answer;
  EXPECT_EQ(calls, 1) << "the handler never sees an oversize body";
  EXPECT_EQ(Send(port, "POST", "/in", "ok").body, "2") << "the server keeps serving";
}

// The connection layer: a client that half-closes after its request still gets the reply;
// pipelined requests are all answered, in order; an oversized Content-Length is refused at once
// (before any body is sent) with one Connection header; chunked bodies and 100-continue work;
// garbage gets 400 and the connection closes.
int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(HttpServer, ConnectionsHalfClosePipeliningAndLimits) {
  HttpServerOptions options = Loopback();
  options.max_body_bytes = 1000;
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server.AddGetHandler("/a", Echo).ok());
  ASSERT_TRUE(server.AddPostHandler("/a", Echo).ok());
  ASSERT_TRUE(server.Start().ok());
  const int port = server.port();

  std::string answer = RawExchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", /*half_close=*/true);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << "half-closed: " << answer;
  EXPECT_NE(answer.find("\r\n\r\nok"), std::string::npos) << answer;

  answer = RawExchange(port,
                       "GET /a?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                       "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                       "GET /a%20b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(Count(answer, "HTTP/1.1 "), 3) << answer;
  const size_t first = answer.find("GET /a []"), second = answer.find("POST /a [] hello"),
               third = answer.find("HTTP/1.1 404");
  EXPECT_TRUE(first != std::string::npos && second != std::string::npos && third != std::string::npos &&
              first < second && second < third)
      << "pipelined replies in order: " << answer;

  answer = RawExchange(port, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", /*half_close=*/true);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413 Payload Too Large\r\n", 0), 0u) << answer;
  EXPECT_EQ(Count(answer, "Connection:"), 1) << answer;

  answer = RawExchange(port,
                       "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                       "3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nX-Trailer: 1\r\n\r\n");
  EXPECT_NE(answer.find("POST /a [] abcdefg"), std::string::npos) << answer;

  answer = RawExchange(port,
                       "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
                       "Connection: close\r\n\r\nhi");
  EXPECT_EQ(answer.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK", 0), 0u) << answer;

  answer = RawExchange(port, "BLAH\r\n\r\nGET /a HTTP/1.1\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_EQ(Count(answer, "HTTP/1.1 "), 1) << "a malformed request ends the connection: " << answer;

  answer = RawExchange(port, "GET /a HTTP/1.1\r\nX: " + std::string(70 << 10, 'y') + "\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 200);

  answer = RawExchange(port, "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(answer.find("Content-Length: 2\r\n"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("\r\n\r\nok"), std::string::npos) << "HEAD has no body: " << answer;
}

TEST(HttpServer, PrefixRoutes) {
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.AddGetPrefixHandler("/api/jobs/", Echo).ok());
  ASSERT_TRUE(server.AddGetPrefixHandler("/api/jobs/special/", [](const HttpRequest& request) {
                      return HttpResponse{200, "text/plain", "special " + request.subpath};
                    }).ok());
  ASSERT_TRUE(server.AddGetHandler("/api/jobs/fixed", [](const HttpRequest&) {
                      return HttpResponse{200, "text/plain", "exact"};
                    }).ok());
  ASSERT_TRUE(server.AddPostPrefixHandler("/api/jobs/", Echo).ok());
  EXPECT_EQ(server.AddGetPrefixHandler("/api/jobs/", Echo).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(server.AddGetPrefixHandler("/api/jobs", Echo).code(),
            absl::StatusCode::kInvalidArgument)
      << "a prefix ends with '/'";
  EXPECT_EQ(server.AddGetPrefixHandler("api/", Echo).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.AddGetPrefixHandler("/x/", nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.AddGetPrefixHandler("/late/", Echo).code(),
            absl::StatusCode::kFailedPrecondition);
  const int port = server.port();

  EXPECT_EQ(Fetch(port, "/api/jobs/job-000001/events?after=3").body,
            "GET /api/jobs/job-000001/events [job-000001/events] ");
  EXPECT_EQ(Send(port, "POST", "/api/jobs/job-1/cancel", "b").body,
            "POST /api/jobs/job-1/cancel [job-1/cancel] b");
  EXPECT_EQ(Fetch(port, "/api/jobs/special/x").body, "special x") << "the longest prefix wins";
  EXPECT_EQ(Fetch(port, "/api/jobs/fixed").body, "exact") << "an exact route wins";
  EXPECT_EQ(Fetch(port, "/api/jobs/").status, 404) << "the prefix alone is not served";
  EXPECT_EQ(Fetch(port, "/api/jobs").status, 404);
  EXPECT_EQ(Fetch(port, "/api/jobsx/1").status, 404);
  EXPECT_EQ(Send(port, "POST", "/api/jobs/fixed", "x").status, 405)
      << "the exact route decides the methods of its path";
}

TEST(HttpServer, ErrorFormatterAndFailingHandlers) {
  HttpServerOptions options = Loopback();
  options.max_body_bytes = 10;
  options.error_formatter = [](const HttpRequest& request, int status, const std::string& message) {
    return HttpResponse{status, "application/json",
                        "{\"status\":" + std::to_string(status) + ",\"message\":\"" + message +
                            "\",\"path\":\"" + request.path + "\"}"};
  };
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server.AddGetHandler("/throws", [](const HttpRequest&) -> HttpResponse {
                      throw std::runtime_error("boom");
                    }).ok());
  ASSERT_TRUE(server.AddGetHandler("/empty-error", [](const HttpRequest&) {
                      return HttpResponse{503, "text/plain", ""};
                    }).ok());
  ASSERT_TRUE(server.AddGetHandler("/own-error", [](const HttpRequest&) {
                      return HttpResponse{418, "text/plain", "teapot"};
                    }).ok());
  ASSERT_TRUE(server.AddPostHandler("/in", Echo).ok());
  ASSERT_TRUE(server.Start().ok());
  const int port = server.port();

  Reply reply = Fetch(port, "/nope");
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(reply.content_type, "application/json");
  EXPECT_EQ(reply.body, R"({"status":404,"message":"not found","path":"/nope"})");
  PostReply post = Send(port, "POST", "/in", std::string(11, 'x'));
  EXPECT_EQ(post.status, 413);
  EXPECT_EQ(post.body,
            R"({"status":413,"message":"request body too large: the limit is 10 bytes","path":"/in"})");
  post = Send(port, "GET", "/in");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.content_type, "application/json");
  EXPECT_EQ(post.allow, "POST");
  reply = Fetch(port, "/throws");
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.body, R"({"status":500,"message":"internal error: boom","path":"/throws"})");
  reply = Fetch(port, "/empty-error");
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, R"({"status":503,"message":"unavailable","path":"/empty-error"})");
  reply = Fetch(port, "/own-error");
  EXPECT_EQ(reply.status, 418);
  EXPECT_EQ(reply.body, "teapot") << "a handler's own error body is kept";
  EXPECT_EQ(Fetch(port, "/healthz").body, "ok") << "built-in replies are unaffected";

  // A malformed request line, on a raw socket.
  const std::string answer = RawExchange(port, "NOT-A-METHOD / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find(R"("message":"bad request")"), std::string::npos) << answer;
}

TEST(HttpServer, SlowClientsDoNotBlockProbes) {
  // 40 slowloris connections (a request line, then a header line every 250 ms, for 2 s) and 40
  // idle ones: /healthz and /metrics still answer at once. Bounded: 80 sockets, a few seconds.
  HttpServerOptions options = Loopback();
  options.threads = 256;
  HttpServer server(options, [] { return std::string("tnmt_up 1\n"); }, nullptr);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> socks;
  auto open_socket = [&]() {
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server.port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socks.push_back(sock);
    return sock;
  };
  std::vector<int> slow;
  for (int i = 0; i < 40; ++i) {
    const int s = open_socket();
    const std::string start = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    send(s, start.data(), start.size(), MSG_NOSIGNAL);
    slow.push_back(s);
  }
  for (int i = 0; i < 40; ++i) open_socket();  // idle: never send anything
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int probes = 0;
  for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
    for (int s : slow) {
      const std::string line = "X-Slow-" + std::to_string(round) + ": 1\r\n";
      send(s, line.data(), line.size(), MSG_NOSIGNAL);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const Reply health = Fetch(server.port(), "/healthz");
    const Reply metrics = Fetch(server.port(), "/metrics");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(health.status, 200) << "round " << round;
    EXPECT_EQ(metrics.status, 200) << "round " << round;
    EXPECT_LT(seconds, 1.0) << "round " << round;
    ++probes;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_GE(probes, 3);
  for (int s : socks) close(s);
  server.Stop();
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

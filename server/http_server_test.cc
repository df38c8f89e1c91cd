// HttpServer end to end on 127.0.0.1 with an ephemeral port, through httplib's client and raw
// sockets: /metrics (content type, body from ServerMetrics), /healthz, /readyz following the
// readiness callback and the stopping state, added handlers with query parameters, 404s, a busy
// port; POST handlers with their bodies, the body cap (413, also for chunked bodies), prefix
// routes, 405 with Allow, headers both ways, the error formatter, a throwing handler, a
// malformed request; the strict framing rules (request-smuggling shapes, chunk sizes that would
// wrap the cap, a CRLF split across reads, absolute-form targets, Host), the pipelining limit's
// closing reply, the total request deadline, the connection cap, running out of descriptors,
// probes under 10,000 idle and 300 trickling connections and beside slow handlers, the worker
// queue bound; HTTPS, plaintext on the HTTPS port, mutual TLS and ReloadTls with certificates
// made by the openssl command line.
#include "server/http_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// A connection on 127.0.0.1:port with a 5 s receive timeout; -1 on failure.
int Connect(int port) {
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  if (sock < 0) return -1;
  timeval timeout{5, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(sock);
    return -1;
  }
  return sock;
}

void SendAll(int sock, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(sock, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += n;
  }
}

// Reads until the server closes the connection (or the 5 s receive timeout).
std::string ReadToEnd(int sock) {
  std::string answer;
  char buffer[16384];
  for (ssize_t n; (n = read(sock, buffer, sizeof(buffer))) > 0;) answer.append(buffer, n);
  return answer;
}

// Writes `request` on a fresh connection (then half-closes it when `half_close`) and reads until
// the server closes it (or 5 s).
std::string RawExchange(int port, const std::string& request, bool half_close = false) {
  const int sock = Connect(port);
  if (sock < 0) return "connect failed";
  SendAll(sock, request);  // stops early if the server closes
  if (half_close) shutdown(sock, SHUT_WR);
  std::string answer = ReadToEnd(sock);
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

// --- Strict framing: the shapes of request smuggling and the limits that must not wrap. ---

TEST(HttpServer, SmugglingShapesAreRefusedAndCloseTheConnection) {
  HttpServerOptions options = Loopback();
  std::atomic<int> calls{0};
  HttpServer server(options, nullptr, nullptr);
  const auto counted = [&calls](const HttpRequest& request) {
    ++calls;
    return Echo(request);
  };
  ASSERT_TRUE(server.AddPostHandler("/a", counted).ok());
  ASSERT_TRUE(server.AddGetHandler("/a", counted).ok());
  ASSERT_TRUE(server.Start().ok());
  const std::string next = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";  // must never be answered
  struct Case {
    const char* what;
    std::string request;
    int status;
  };
  const std::vector<Case> cases = {
      {"duplicate Content-Length, equal", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400},
      {"duplicate Content-Length, different", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabc", 400},
      {"Content-Length list", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc", 400},
      {"space before the colon", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc", 400},
      {"space before the colon, other header", "GET /a HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n", 400},
      {"obs-fold SP", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", 400},
      {"obs-fold HTAB", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\t3\r\n\r\nabc", 400},
      {"bare LF everywhere", "GET /a HTTP/1.1\nHost: x\n\n", 400},
      {"bare LF in one header", "GET /a HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n", 400},
      {"bare LF ending the head", "GET /a HTTP/1.1\r\nHost: x\r\n\n", 400},
      {"Transfer-Encoding gzip", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 501},
      {"Transfer-Encoding identity", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\nabc", 501},
      {"Transfer-Encoding gzip, chunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
      {"Transfer-Encoding chunked twice", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
      {"Transfer-Encoding by substring", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
      {"Transfer-Encoding empty", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n", 400},
      {"Transfer-Encoding and Content-Length", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400},
      {"Content-Length and Transfer-Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", 400},
      {"Transfer-Encoding in HTTP/1.0", "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 400},
      {"Content-Length +3", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", 400},
      {"Content-Length 0x3", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc", 400},
      {"Content-Length -1", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\nabc", 400},
      {"Content-Length 3 3", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3 3\r\n\r\nabc", 400},
      {"Content-Length past 64 bits", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551619\r\n\r\nabc", 400},
      {"chunk size past 64 bits", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n", 400},
      {"no Host in HTTP/1.1", "GET /a HTTP/1.1\r\nX-A: 1\r\n\r\n", 400},
      {"two Host headers", "GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
      {"two Host headers in HTTP/1.0", "GET /a HTTP/1.0\r\nHost: x\r\nHost: y\r\n\r\n", 400},
      {"HTTP/1.2", "GET /a HTTP/1.2\r\nHost: x\r\n\r\n", 400},
      {"two spaces in the request line", "GET  /a HTTP/1.1\r\nHost: x\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    const std::string answer = RawExchange(server.port(), c.request + next);
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(c.status) + " ", 0), 0u) << c.what << ": " << answer;
    EXPECT_NE(answer.find("Connection: close\r\n"), std::string::npos) << c.what << ": " << answer;
    EXPECT_EQ(Count(answer, "HTTP/1.1 "), 1) << c.what << ": one reply, then the connection closes: " << answer;
  }
  EXPECT_EQ(calls, 0) << "no refused request reaches a handler";

  // What stays accepted: OWS around values, a leading empty line, HTTP/1.0 without Host,
  // "Chunked" in any case, leading zeros in Content-Length.
  std::string answer = RawExchange(server.port(),
                                   "\r\nPOST /a HTTP/1.1\r\nHost:x\r\nContent-Length: \t003 \r\n\r\nabc"
                                   "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  Chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n"
                                   "GET /a HTTP/1.0\r\n\r\n");
  EXPECT_EQ(Count(answer, "HTTP/1.1 200 OK"), 3) << answer;
  EXPECT_NE(answer.find("POST /a [] abc"), std::string::npos) << answer;
  EXPECT_NE(answer.find("POST /a [] de"), std::string::npos) << answer;
  EXPECT_EQ(calls, 3);
}

TEST(HttpServer, BodiesUpToTheDefaultCapArrive) {
  // 1 MiB, larger than the connection's read buffer: by Content-Length, in one chunk, and in
  // many small chunks.
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.AddPostHandler("/in", [](const HttpRequest& request) {
                      const bool same = request.body.find_first_not_of('z') == std::string::npos;
                      return HttpResponse{200, "text/plain", std::to_string(request.body.size()) + (same ? " z" : " ?")};
                    }).ok());
  ASSERT_TRUE(server.Start().ok());
  const std::string body(1 << 20, 'z');
  EXPECT_EQ(Send(server.port(), "POST", "/in", body).body, "1048576 z");
  EXPECT_EQ(Send(server.port(), "POST", "/in", body + "z").status, 413);
  std::string answer = RawExchange(server.port(),
                                   "POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                   "100000\r\n" + body + "\r\n0\r\n\r\n");
  EXPECT_NE(answer.find("\r\n\r\n1048576 z"), std::string::npos) << answer.substr(0, 300);
  std::string chunked = "POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  for (int i = 0; i < 1024; ++i) chunked += "400\r\n" + std::string(1024, 'z') + "\r\n";
  answer = RawExchange(server.port(), chunked + "0\r\n\r\n");
  EXPECT_NE(answer.find("\r\n\r\n1048576 z"), std::string::npos) << answer.substr(0, 300);
}

TEST(HttpServer, ChunkSizesCannotWrapTheBodyCap) {
  HttpServerOptions options = Loopback();
  options.max_body_bytes = 1000;
  std::atomic<int> calls{0};
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server.AddPostHandler("/in", [&calls](const HttpRequest& request) {
                      ++calls;
                      return Echo(request);
                    }).ok());
  ASSERT_TRUE(server.Start().ok());
  // A 1-byte chunk, then a chunk of 2^64-1 bytes: 1 + (2^64-1) wraps to 0 in a naive check.
  const int sock = Connect(server.port());
  ASSERT_GE(sock, 0);
  const auto t0 = std::chrono::steady_clock::now();
  SendAll(sock, "POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\n");
  std::thread more([sock] {
    const std::string junk(64 << 10, 'j');
    for (int i = 0; i < 32; ++i) SendAll(sock, junk);  // the server must not buffer this
  });
  std::string answer;
  char buffer[4096];
  const ssize_t n = read(sock, buffer, sizeof(buffer));
  if (n > 0) answer.assign(buffer, n);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  shutdown(sock, SHUT_RDWR);
  more.join();
  close(sock);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  EXPECT_LT(seconds, 2.0) << "refused when the chunk size arrives, not after reading it";
  // Chunk sizes that add up past the cap, each below it.
  answer = RawExchange(server.port(),
                       "POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "1f4\r\n" + std::string(500, 'a') + "\r\n1f5\r\n" + std::string(501, 'b') + "\r\n0\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer.substr(0, 200);
  EXPECT_EQ(calls, 0);
}

TEST(HttpServer, ChunkCrLfSplitAcrossReads) {
  // The CR after a chunk's data ends the first 16 KiB the server reads; its LF arrives later.
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.AddPostHandler("/in", [](const HttpRequest& request) {
                      return HttpResponse{200, "text/plain", std::to_string(request.body.size())};
                    }).ok());
  ASSERT_TRUE(server.Start().ok());
  const std::string head = "POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const size_t data = 16384 - head.size() - 6 - 1;  // "XXXX\r\n" + data + "\r" = 16 KiB in all
  char size_line[16];
  snprintf(size_line, sizeof(size_line), "%04zx\r\n", data);
  const std::string first = head + size_line + std::string(data, 'c') + "\r";
  ASSERT_EQ(first.size(), 16384u);
  const int sock = Connect(server.port());
  ASSERT_GE(sock, 0);
  SendAll(sock, first);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  SendAll(sock, "\n0\r\n\r\n");
  const std::string answer = ReadToEnd(sock);
  close(sock);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK", 0), 0u) << answer;
  EXPECT_NE(answer.find("\r\n\r\n" + std::to_string(data)), std::string::npos) << answer;
}

TEST(HttpServer, ThePipelinedReplyBeforeTheCloseSaysSo) {
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.Start().ok());
  std::string requests;
  for (int i = 0; i < 1001; ++i) requests += "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string answer = RawExchange(server.port(), requests);
  EXPECT_EQ(Count(answer, "HTTP/1.1 200 OK"), 1000) << "a connection serves 1000 requests";
  EXPECT_EQ(Count(answer, "Connection: close\r\n"), 1);
  const size_t last = answer.rfind("HTTP/1.1 200 OK");
  ASSERT_NE(last, std::string::npos);
  EXPECT_NE(answer.find("Connection: close\r\n", last), std::string::npos)
      << "the last reply announces the close: " << answer.substr(last);
}

TEST(HttpServer, AbsoluteFormTargetsAreServedByPath) {
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.AddGetHandler("/a", [](const HttpRequest& request) {
                      auto it = request.params.find("q");
                      return HttpResponse{200, "text/plain",
                                          request.path + " q=" + (it == request.params.end() ? "" : it->second)};
                    }).ok());
  ASSERT_TRUE(server.AddGetHandler("/", [](const HttpRequest& request) {
                      return HttpResponse{200, "text/plain", "root " + request.path};
                    }).ok());
  ASSERT_TRUE(server.Start().ok());
  std::string answer = RawExchange(server.port(),
                                   "GET http://example.com/healthz HTTP/1.1\r\nHost: example.com\r\n\r\n"
                                   "GET HTTP://example.com:8080/a?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"
                                   "GET http://example.com HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(Count(answer, "HTTP/1.1 200 OK"), 3) << answer;
  EXPECT_NE(answer.find("\r\n\r\nok"), std::string::npos) << answer;
  EXPECT_NE(answer.find("/a q=1"), std::string::npos) << answer;
  EXPECT_NE(answer.find("root /"), std::string::npos) << answer;
  answer = RawExchange(server.port(), "GET example.com/healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
}

// --- Many connections: the cap, deadlines, probes under load, the worker pool. ---

// Raises the soft limit on open files to the hard one; returns the limit now in force.
rlim_t RaiseFileLimit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

// GET `path` on a fresh raw connection with "Connection: close": the status (-1: none within
// 5 s) and how long the whole exchange took. Uses poll, so descriptors above 1024 work.
struct Probe {
  int status = -1;
  double seconds = 0;
};
Probe ProbeGet(int port, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  Probe probe;
  const int sock = Connect(port);
  if (sock >= 0) {
    const std::string answer = [&] {
      SendAll(sock, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      return ReadToEnd(sock);
    }();
    close(sock);
    if (answer.rfind("HTTP/1.1 ", 0) == 0) probe.status = std::atoi(answer.c_str() + 9);
  }
  probe.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return probe;
}

// Opens `n` connections to `port` that send nothing; stops early if descriptors run out.
std::vector<int> OpenIdle(int port, int n) {
  std::vector<int> socks;
  for (int i = 0; i < n; ++i) {
    const int sock = Connect(port);
    if (sock < 0) break;
    socks.push_back(sock);
  }
  return socks;
}

TEST(HttpServer, ProbesAnswerUnderTenThousandIdleConnections) {
  // Each connection costs two descriptors in this process (client and server side) while the
  // server holds it; max_connections (4096 by default) bounds the server's share.
  const rlim_t limit = RaiseFileLimit();
  HttpServer server(Loopback(), [] { return std::string("tnmt_up 1\n"); }, nullptr);
  ASSERT_TRUE(server.Start().ok());
  const int wanted = 10000;
  const int n = static_cast<int>(std::min<rlim_t>(wanted, limit > 4096 + 300 ? limit - 4096 - 300 : 0));
  if (n < wanted) std::printf("RLIMIT_NOFILE %ju allows only %d idle connections\n", static_cast<uintmax_t>(limit), n);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> idle = OpenIdle(server.port(), n);
  std::printf("opened %zu idle connections in %.2f s\n", idle.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(static_cast<int>(idle.size()), n);
  double worst = 0;
  for (int i = 0; i < 5; ++i) {
    for (const char* path : {"/healthz", "/metrics"}) {
      const Probe probe = ProbeGet(server.port(), path);
      EXPECT_EQ(probe.status, 200) << path;
      EXPECT_LT(probe.seconds, 1.0) << path;
      worst = std::max(worst, probe.seconds);
    }
  }
  std::printf("under %zu idle connections: slowest /healthz or /metrics %.1f ms\n", idle.size(), worst * 1e3);
  for (int sock : idle) close(sock);
}

TEST(HttpServer, ProbesAnswerUnderThreeHundredTricklingConnections) {
  RaiseFileLimit();
  HttpServer server(Loopback(), [] { return std::string("tnmt_up 1\n"); }, nullptr);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> slow = OpenIdle(server.port(), 300);
  ASSERT_EQ(slow.size(), 300u);
  for (int sock : slow) SendAll(sock, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  double worst = 0;
  int probes = 0;
  for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
    for (int sock : slow) SendAll(sock, round % 2 == 0 ? "X" : ": 1\r\n");  // a byte or a few every 100 ms
    if (round % 2 == 0) {
      for (const char* path : {"/healthz", "/metrics"}) {
        const Probe probe = ProbeGet(server.port(), path);
        EXPECT_EQ(probe.status, 200) << path << " round " << round;
        EXPECT_LT(probe.seconds, 1.0) << path << " round " << round;
        worst = std::max(worst, probe.seconds);
        ++probes;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(probes, 10);
  std::printf("under 300 trickling connections: slowest of %d /healthz or /metrics %.1f ms\n", probes, worst * 1e3);
  for (int sock : slow) close(sock);
}

TEST(HttpServer, TricklingRequestsMeetATotalDeadline) {
  HttpServerOptions options = Loopback();
  options.request_timeout = absl::Seconds(1);
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server.AddPostHandler("/in", Echo).ok());
  ASSERT_TRUE(server.Start().ok());
  // A head that never ends, one byte every 100 ms; then a body that never ends.
  for (const std::string& start : {std::string("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "),
                                  std::string("POST /in HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")}) {
    const int sock = Connect(server.port());
    ASSERT_GE(sock, 0);
    const auto t0 = std::chrono::steady_clock::now();
    SendAll(sock, start);
    std::atomic<bool> done{false};
    std::thread trickle([&] {
      while (!done) {
        SendAll(sock, "y");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    std::string answer;
    char buffer[4096];
    const ssize_t n = read(sock, buffer, sizeof(buffer));
    if (n > 0) answer.assign(buffer, n);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done = true;
    trickle.join();
    close(sock);
    EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << start << answer;
    EXPECT_GT(seconds, 0.9);
    EXPECT_LT(seconds, 2.5) << "the deadline covers the whole request, however steadily it trickles";
  }
}

TEST(HttpServer, ConnectionsPerClientAddressAreCapped) {
  HttpServerOptions options = Loopback();
  options.max_connections_per_peer = 3;
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server.Start().ok());
  // Three idle connections from 127.0.0.1 are its share: a fourth is closed unanswered.
  std::vector<int> idle = OpenIdle(server.port(), 3);
  ASSERT_EQ(idle.size(), 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int extra = Connect(server.port());
  ASSERT_GE(extra, 0);
  SendAll(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ReadToEnd(extra), "") << "a fourth connection from the same address was served";
  close(extra);
  // Once one of them is gone, the address may connect again (its slot frees when the server
  // has seen the close: retried for a while).
  close(idle.back());
  idle.pop_back();
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = ProbeGet(server.port(), "/healthz").status;
  }
  EXPECT_EQ(status, 200);
  for (int sock : idle) close(sock);
}

TEST(HttpServer, AtTheConnectionCapTheOldestIdleConnectionMakesRoom) {
  HttpServerOptions options = Loopback();
  options.max_connections = 8;
  options.threads = 1;
  std::atomic<bool> release{false};
  HttpServer server(options, nullptr, nullptr);
  ASSERT_TRUE(server.AddGetHandler("/slow", [&release](const HttpRequest&) {
                      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
                      return HttpResponse{200, "text/plain", "slow done"};
                    }).ok());
  ASSERT_TRUE(server.Start().ok());
  // The oldest connection has a handler running: it is never the one closed.
  const int busy = Connect(server.port());
  ASSERT_GE(busy, 0);
  SendAll(busy, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<int> idle = OpenIdle(server.port(), 7);
  ASSERT_EQ(idle.size(), 7u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Each probe at the cap closes the oldest idle connection (the probe itself is gone once
  // answered, so the next one finds the server at the cap again after one more idle connection).
  for (int round = 0; round < 3; ++round) {
    if (round > 0) idle.push_back(Connect(server.port()));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const Probe probe = ProbeGet(server.port(), "/healthz");
    EXPECT_EQ(probe.status, 200);
    EXPECT_LT(probe.seconds, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (size_t i = 0; i < idle.size(); ++i) {
      pollfd p{idle[i], POLLIN, 0};
      char byte;
      const bool closed = poll(&p, 1, 0) == 1 && recv(idle[i], &byte, 1, MSG_DONTWAIT) == 0;
      EXPECT_EQ(closed, static_cast<int>(i) <= round) << "round " << round << ", idle connection " << i;
    }
  }
  release = true;
  EXPECT_NE(ReadToEnd(busy).find("slow done"), std::string::npos) << "the busy connection is served";
  close(busy);
  for (int sock : idle) close(sock);
}

TEST(HttpServer, SlowHandlersRunOnWorkersAndTheirQueueIsBounded) {
  HttpServerOptions options = Loopback();
  options.threads = 1;
  options.max_queued_requests = 1;
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  HttpServer server(options, [] { return std::string("tnmt_up 1\n"); }, nullptr);
  ASSERT_TRUE(server.AddGetHandler("/slow", [&](const HttpRequest&) {
                      ++started;
                      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
                      return HttpResponse{200, "text/plain", "slow done"};
                    }).ok());
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> slow;
  for (int i = 0; i < 2; ++i) {  // one runs, one waits in the queue
    slow.push_back(Connect(server.port()));
    SendAll(slow.back(), "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  }
  while (started == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    const Probe probe = ProbeGet(server.port(), path);
    EXPECT_EQ(probe.status, 200) << path;
    EXPECT_LT(probe.seconds, 1.0) << path << " must not wait behind a slow handler";
  }
  const std::string refused = RawExchange(server.port(), "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;
  release = true;
  for (int sock : slow) {
    EXPECT_NE(ReadToEnd(sock).find("slow done"), std::string::npos);
    close(sock);
  }
  EXPECT_EQ(started, 2);
}

TEST(HttpServer, OutOfDescriptorsTheOldestIdleConnectionMakesRoom) {
  RaiseFileLimit();
  HttpServer server(Loopback(), nullptr, nullptr);
  ASSERT_TRUE(server.Start().ok());
  std::vector<int> idle = OpenIdle(server.port(), 20);
  ASSERT_EQ(idle.size(), 20u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted
  // Leave this process exactly one free descriptor: the probe's own socket. The server's
  // accept then fails with EMFILE until it closes an idle connection.
  int highest = 0;
  for (int fd = 0; fd < 65536; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) highest = fd;
  }
  rlimit saved{};
  getrlimit(RLIMIT_NOFILE, &saved);
  rlimit tight = saved;
  tight.rlim_cur = highest + 2;  // descriptors are allocated lowest first; fill the holes
  std::vector<int> fillers;
  setrlimit(RLIMIT_NOFILE, &tight);
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  close(fillers.back());  // one free
  fillers.pop_back();
  const Probe probe = ProbeGet(server.port(), "/healthz");
  setrlimit(RLIMIT_NOFILE, &saved);
  for (int fd : fillers) close(fd);
  EXPECT_EQ(probe.status, 200);
  EXPECT_LT(probe.seconds, 1.0);
  pollfd p{idle[0], POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 1000), 1);
  char byte;
  EXPECT_EQ(recv(idle[0], &byte, 1, MSG_DONTWAIT), 0) << "the oldest idle connection was closed for it";
  for (int sock : idle) close(sock);
}

// --- TLS: certificates made at test time with the openssl command line. ---

class HttpServerTls : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/openssl to make test certificates";
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/http_tls_XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
    ASSERT_TRUE(Sh("printf 'basicConstraints=CA:FALSE\\nsubjectAltName=IP:127.0.0.1,DNS:localhost\\n"
                   "extendedKeyUsage=serverAuth\\n' > server.ext && "
                   "printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > client.ext"));
    ASSERT_TRUE(MakeCa("ca"));
    ASSERT_TRUE(MakeCa("other-ca"));
    ASSERT_TRUE(MakeCert("server1", "ca", "server.ext", 4097));
    ASSERT_TRUE(MakeCert("server2", "ca", "server.ext", 8194));
    ASSERT_TRUE(MakeCert("client", "ca", "client.ext", 77));
    ASSERT_TRUE(MakeCert("stranger", "other-ca", "client.ext", 78));
    ASSERT_TRUE(Sh("cp server1.pem cert.pem && cp server1.key key.pem"));
  }

  bool Sh(const std::string& command) {
    return std::system(("cd '" + dir_ + "' && (" + command + ") >/dev/null 2>&1").c_str()) == 0;
  }
  bool MakeCa(const std::string& name) {
    return Sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name +
              ".key -out " + name + ".pem -days 2 -subj /CN=" + name);
  }
  bool MakeCert(const std::string& name, const std::string& ca, const std::string& ext, int serial) {
    return Sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name + ".key -out " +
              name + ".csr -subj /CN=" + name + " && openssl x509 -req -in " + name + ".csr -CA " + ca +
              ".pem -CAkey " + ca + ".key -set_serial " + std::to_string(serial) + " -days 2 -extfile " + ext +
              " -out " + name + ".pem");
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  HttpServerOptions TlsOptions(bool mutual) const {
    HttpServerOptions options = Loopback();
    options.tls_cert_file = Path("cert.pem");
    options.tls_key_file = Path("key.pem");
    if (mutual) options.tls_client_ca_file = Path("ca.pem");
    return options;
  }

  // GET over HTTPS, verifying the server against our CA, optionally with a client certificate.
  Reply HttpsGet(int port, const std::string& path, const std::string& client = "") const {
    std::unique_ptr<httplib::SSLClient> https =
        client.empty() ? std::make_unique<httplib::SSLClient>("127.0.0.1", port)
                       : std::make_unique<httplib::SSLClient>("127.0.0.1", port, Path(client + ".pem"),
                                                              Path(client + ".key"));
    https->set_ca_cert_path(Path("ca.pem").c_str());
    https->enable_server_certificate_verification(true);
    https->set_connection_timeout(std::chrono::seconds(5));
    https->set_read_timeout(std::chrono::seconds(5));
    httplib::Result result = https->Get(path.c_str());
    Reply reply;
    if (!result) return reply;
    reply.status = result->status;
    reply.body = result->body;
    return reply;
  }

  // The serial number and subject of the certificate the server presents ("" if no handshake).
  static std::string ServedCertificate(int port) {
    std::string out;
    SSL_CTX* context = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nullptr);
    const int sock = Connect(port);
    SSL* ssl = SSL_new(context);
    SSL_set_fd(ssl, sock);
    if (sock >= 0 && SSL_connect(ssl) == 1) {
      if (X509* cert = SSL_get1_peer_certificate(ssl)) {
        char subject[256];
        X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
        out = "serial=" + std::to_string(ASN1_INTEGER_get(X509_get_serialNumber(cert))) + " subject=" + subject;
        X509_free(cert);
      }
      SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    SSL_CTX_free(context);
    if (sock >= 0) close(sock);
    return out;
  }

  std::string dir_;
};

TEST_F(HttpServerTls, HttpsOnlyOnATlsPort) {
  HttpServer server(TlsOptions(/*mutual=*/false), [] { return std::string("tnmt_up 1\n"); }, nullptr);
  ASSERT_TRUE(server.Start().ok());
  Reply reply = HttpsGet(server.port(), "/healthz");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "ok");
  EXPECT_EQ(HttpsGet(server.port(), "/metrics").body, "tnmt_up 1\n");
  // Plaintext HTTP to the TLS port: a plaintext refusal, never the route.
  const std::string answer = RawExchange(server.port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("HTTPS"), std::string::npos) << answer;
  EXPECT_EQ(answer.find("\r\n\r\nok"), std::string::npos) << answer;
  EXPECT_EQ(Fetch(server.port(), "/healthz").status, 400);
  EXPECT_EQ(ServedCertificate(server.port()), "serial=4097 subject=/CN=server1");
}

TEST_F(HttpServerTls, MutualTlsNeedsAClientCertificateFromTheCa) {
  HttpServer server(TlsOptions(/*mutual=*/true), nullptr, nullptr);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(HttpsGet(server.port(), "/healthz").status, -1) << "no client certificate";
  EXPECT_EQ(HttpsGet(server.port(), "/healthz", "stranger").status, -1) << "a certificate from another CA";
  const Reply reply = HttpsGet(server.port(), "/healthz", "client");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "ok");
}

TEST_F(HttpServerTls, ReloadTlsSwapsTheCertificateOrKeepsTheOldOne) {
  HttpServer server(TlsOptions(/*mutual=*/false), nullptr, nullptr);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(ServedCertificate(server.port()), "serial=4097 subject=/CN=server1");
  ASSERT_TRUE(Sh("cp server2.pem cert.pem && cp server2.key key.pem"));
  ASSERT_TRUE(server.ReloadTls().ok());
  EXPECT_EQ(ServedCertificate(server.port()), "serial=8194 subject=/CN=server2");
  EXPECT_EQ(HttpsGet(server.port(), "/healthz").status, 200);

  // A broken certificate file: an error naming it, and the server keeps its certificate.
  ASSERT_TRUE(Sh("echo 'not a certificate' > cert.pem"));
  absl::Status status = server.ReloadTls();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("tls_cert_file " + Path("cert.pem")), absl::string_view::npos) << status;
  EXPECT_EQ(ServedCertificate(server.port()), "serial=8194 subject=/CN=server2");
  EXPECT_EQ(HttpsGet(server.port(), "/healthz").status, 200);
  // A key that does not belong to the certificate.
  ASSERT_TRUE(Sh("cp server1.pem cert.pem && cp server2.key key.pem"));
  status = server.ReloadTls();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("tls_key_file " + Path("key.pem")), absl::string_view::npos) << status;
  // A file that is gone.
  ASSERT_TRUE(Sh("rm key.pem"));
  status = server.ReloadTls();
  EXPECT_NE(status.message().find(Path("key.pem")), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("No such file"), absl::string_view::npos) << status;
  EXPECT_EQ(ServedCertificate(server.port()), "serial=8194 subject=/CN=server2");

  HttpServer plain(Loopback(), nullptr, nullptr);
  EXPECT_EQ(plain.ReloadTls().code(), absl::StatusCode::kFailedPrecondition);
  HttpServerOptions half = Loopback();
  half.tls_cert_file = Path("server1.pem");
  HttpServer incomplete(half, nullptr, nullptr);
  EXPECT_EQ(incomplete.Start().code(), absl::StatusCode::kInvalidArgument);
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

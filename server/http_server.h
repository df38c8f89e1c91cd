// HttpServer: the translation server's plain-HTTP side (HTTP/1.1), for monitoring and
// orchestration next to the gRPC port, and for the web page and its JSON API.
//
// Routes (HEAD is answered like GET without a body):
//   GET /metrics  200, "text/plain; version=0.0.4; charset=utf-8", body from the metrics
//                 callback (404 if none was given)
//   GET /healthz  200 "ok" while running; 503 "stopping" once SetStopping() or Stop() was called
//   GET /readyz   200 "ready" when the readiness callback returns OK (or there is none); else
//                 503 with the status message; 503 "stopping" once stopping
//   further routes registered before Start():
//     AddGetHandler / AddPostHandler: one exact path (GET and POST may share a path);
//     AddGetPrefixHandler / AddPostPrefixHandler: every longer path under a prefix ending in
//       '/' (e.g. "/api/jobs/" serves "/api/jobs/job-000001/events"; HttpRequest::subpath is
//       the rest). An exact route wins over a prefix, a longer prefix over a shorter one.
//   A path that no route serves: 404. A routed path asked with a method it has no handler
//   for (e.g. POST /metrics, PUT anything): 405 with an "Allow" header.
//
// Request bodies (POST) are read into HttpRequest::body up to options.max_body_bytes; a larger
// one (by Content-Length, or while reading a chunked body) is refused with 413 without being
// read into memory.
//
// The server's own error replies (404, 405, 413, 400 for a malformed request, 500 for a
// handler that threw) have the message as a text/plain body, unless options.error_formatter
// is set, which then builds them (e.g. JSON for an API). An error status a handler returns
// with an empty body also gets the formatted message; a handler's non-empty body is kept.
//
// Lifecycle: construct, Add*Handler..., Start() (binds synchronously, then serves on its own
// threads), optionally SetStopping() while the rest of the server drains, Stop() (also run by
// the destructor). Start, Stop and Add*Handler are for one controlling thread; callbacks
// and handlers run on the server's worker threads, concurrently, and must be thread-safe.
//
// Connections: keep-alive (idle ones closed after 2 s) and pipelined requests; a request head
// must arrive within 10 s of its first byte and a body at most 10 s between parts (else 408);
// heads over 64 KiB get 431, targets over 8 KiB 414, a malformed request 400, all closing the
// connection. A client that half-closes after its request still gets the reply. The listening
// socket does not set SO_REUSEPORT, so a second server on a port already in use fails to start
// instead of silently sharing the port.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tnmt {

class HttpConnections;  // http_server.cc

struct HttpRequest {
  std::string path;
  // Decoded query parameters (?a=1&a=2 gives two entries for "a").
  std::multimap<std::string, std::string> params;
  // "GET", "HEAD", "POST", ...
  std::string method = "GET";
  // Request headers, names lower-cased (see Header()).
  std::multimap<std::string, std::string> headers;
  // The request body (POST), at most HttpServerOptions::max_body_bytes.
  std::string body;
  // For a prefix route, the part of `path` after the prefix (never empty); "" otherwise.
  std::string subpath;

  // The first value of header `name` (any case), or "" if absent.
  std::string Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Further response headers (e.g. {"Cache-Control", "no-store"}).
  std::vector<std::pair<std::string, std::string>> headers;
};

struct HttpServerOptions {
  // Address to listen on: "0.0.0.0" (all IPv4 interfaces), "127.0.0.1", "::", a host name.
  std::string host = "0.0.0.0";
  // Port to listen on; 0 lets the kernel pick a free one (see HttpServer::port()).
  int port = 0;
  // Connections served at once, each on a thread of its own, started when the connection is
  // accepted (none are kept idle). A connection holds its thread while its request arrives (a
  // slow client for as long as it keeps sending, up to the read timeout between bytes), while
  // its handler runs and for up to 2 s of keep-alive idleness; so this is how many slow or idle
  // clients the server absorbs before new connections, health probes included, have to wait.
  int threads = 4;
  // Largest request body accepted; larger: 413.
  size_t max_body_bytes = 1 << 20;
  // Builds the server's own error replies from the request, the HTTP status and a message
  // (e.g. "not found"). Empty: a text/plain body holding the message.
  std::function<HttpResponse(const HttpRequest&, int status, const std::string& message)>
      error_formatter;
};

class HttpServer {
 public:
  // Returns the /metrics body in the Prometheus text format.
  using MetricsCallback = std::function<std::string()>;
  // OK when the server is ready for traffic; otherwise the reason, shown by /readyz.
  using ReadinessCallback = std::function<absl::Status()>;
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  using GetHandler = Handler;
  using PostHandler = Handler;

  // Either callback may be empty: no /metrics, respectively always ready.
  HttpServer(HttpServerOptions options, MetricsCallback metrics, ReadinessCallback readiness);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves `handler` for GET (and HEAD) `path` (exact match, e.g. "/" or "/status"). Only
  // before Start(); FailedPrecondition after, AlreadyExists for a path already routed for GET
  // (including the built-in ones), InvalidArgument if `path` does not start with '/' or the
  // handler is empty.
  absl::Status AddGetHandler(const std::string& path, GetHandler handler);
  // Serves `handler` for POST `path` (exact match); the handler gets the body. As
  // AddGetHandler otherwise (AlreadyExists for a path already routed for POST).
  absl::Status AddPostHandler(const std::string& path, PostHandler handler);
  // Serves every path that starts with `prefix` and is longer than it, for GET (and HEAD),
  // respectively POST. `prefix` must start and end with '/'. Errors as above (AlreadyExists
  // for a prefix already routed for the method).
  absl::Status AddGetPrefixHandler(const std::string& prefix, GetHandler handler);
  absl::Status AddPostPrefixHandler(const std::string& prefix, PostHandler handler);

  // Binds host:port and starts serving on a background thread. Unavailable with the
  // system's reason (e.g. "... cannot listen on 0.0.0.0:9100: Address already in use") if the
  // address cannot be bound, InvalidArgument if the host does not resolve,
  // FailedPrecondition if already started. Not restartable after Stop().
  absl::Status Start();

  // The bound port after a successful Start(); 0 before.
  int port() const { return port_; }

  // From now on /healthz and /readyz answer 503 "stopping"; /metrics and other routes keep
  // working. Thread-safe; idempotent.
  void SetStopping();

  // Stops accepting connections, waits for in-flight requests and joins the threads.
  // Idempotent; a no-op if never started.
  void Stop();

 private:
  struct Routes {
    Handler get;
    Handler post;
  };
  enum class Method { kGet, kPost };
  absl::Status Add(std::map<std::string, Routes>& table, Method method, const std::string& path,
                   bool prefix, Handler handler);
  // Finds the route and calls its handler (the request's subpath is set for a prefix route).
  HttpResponse Route(HttpRequest& request) const;
  // The reply to an error the server itself detected (options_.error_formatter or text).
  HttpResponse Error(const HttpRequest& request, int status, const std::string& message) const;

  const HttpServerOptions options_;
  const MetricsCallback metrics_;
  const ReadinessCallback readiness_;
  std::map<std::string, Routes> exact_;     // fixed once started
  std::map<std::string, Routes> prefixes_;  // fixed once started
  // Reads, answers and closes one accepted connection (keep-alive: several requests).
  void Serve(int fd);

  int listen_fd_ = -1;
  std::unique_ptr<HttpConnections> connections_;
  std::thread thread_;  // the listener
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stop_{false};
  int port_ = 0;
  bool started_ = false;
};

}  // namespace tnmt

// HttpServer: the translation server's plain-HTTP side (cpp-httplib), for monitoring and
// orchestration next to the gRPC port.
//
// Routes (GET; HEAD is answered like GET without a body):
//   /metrics  200, "text/plain; version=0.0.4; charset=utf-8", body from the metrics callback
//             (404 if none was given)
//   /healthz  200 "ok" while running; 503 "stopping" once SetStopping() or Stop() was called
//   /readyz   200 "ready" when the readiness callback returns OK (or there is none); else 503
//             with the status message; 503 "stopping" once stopping
//   further exact paths registered with AddGetHandler before Start(); anything else: 404.
//
// Lifecycle: construct, AddGetHandler..., Start() (binds synchronously, then serves on its own
// threads), optionally SetStopping() while the rest of the server drains, Stop() (also run by
// the destructor). Start, Stop and AddGetHandler are for one controlling thread; callbacks
// and handlers run on the server's worker threads, concurrently, and must be thread-safe.
//
// Unlike httplib's default, the listening socket does not set SO_REUSEPORT, so a second
// server on a port already in use fails to start instead of silently sharing the port.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tnmt {

struct HttpServerOptions {
  // Address to listen on: "0.0.0.0" (all IPv4 interfaces), "127.0.0.1", "::", a host name.
  std::string host = "0.0.0.0";
  // Port to listen on; 0 lets the kernel pick a free one (see HttpServer::port()).
  int port = 0;
  // Worker threads handling connections. Each keep-alive connection holds one for up to 5 s
  // of idleness, so this bounds concurrent scrapers/probes, not throughput.
  int threads = 4;
};

struct HttpRequest {
  std::string path;
  // Decoded query parameters (?a=1&a=2 gives two entries for "a").
  std::multimap<std::string, std::string> params;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  // Returns the /metrics body in the Prometheus text format.
  using MetricsCallback = std::function<std::string()>;
  // OK when the server is ready for traffic; otherwise the reason, shown by /readyz.
  using ReadinessCallback = std::function<absl::Status()>;
  using GetHandler = std::function<HttpResponse(const HttpRequest&)>;

  // Either callback may be empty: no /metrics, respectively always ready.
  HttpServer(HttpServerOptions options, MetricsCallback metrics, ReadinessCallback readiness);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves `handler` for GET `path` (exact match, e.g. "/" or "/status"). Only before
  // Start(); FailedPrecondition after, AlreadyExists for a path already routed (including
  // the built-in ones), InvalidArgument if `path` does not start with '/'.
  absl::Status AddGetHandler(const std::string& path, GetHandler handler);

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
  HttpResponse Route(const HttpRequest& request) const;

  const HttpServerOptions options_;
  const MetricsCallback metrics_;
  const ReadinessCallback readiness_;
  std::map<std::string, GetHandler> handlers_;  // fixed once started
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> listener_exited_{false};
  int port_ = 0;
  bool started_ = false;
};

}  // namespace tnmt

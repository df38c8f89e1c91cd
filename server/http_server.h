// HttpServer: the translation server's HTTP side (HTTP/1.1, optionally over TLS), for
// monitoring and orchestration next to the gRPC port, and for the web page and its JSON API.
// The transport is Boost.Beast over Boost.Asio (OpenSSL for TLS); routing is our own.
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
//   for (e.g. POST /metrics, PUT anything): 405 with an "Allow" header. Targets in origin form
//   ("/healthz?x=1") and absolute form ("http://host/healthz") are routed by their path.
//
// Threads: `io_threads` threads do all network I/O, parsing and TLS for every connection
// (asynchronously: an idle or slow connection holds no thread) and answer the built-in routes
// (/healthz, /readyz, /metrics) themselves. Added handlers run on a separate pool of `threads`
// workers with a queue of at most `max_queued_requests`; a request that finds the queue full
// gets 503 with "Retry-After: 1". So slow handlers (a translation takes seconds) never delay
// the probes or the metrics scrape.
//
// Requests are parsed strictly; anything that two HTTP implementations could frame
// differently is refused with 400 and the connection closed: bare LF line endings, obs-fold
// (a header line starting with SP or HTAB), whitespace before a header's colon, a Content-Length
// that is not exactly 1*DIGIT (no sign, no hex, no list, no overflow) or that appears twice,
// Transfer-Encoding together with Content-Length or in an HTTP/1.0 request, an empty
// Transfer-Encoding, a missing or repeated Host in HTTP/1.1 (at most one in HTTP/1.0), a method
// other than GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, a version other than HTTP/1.0 and
// HTTP/1.1, a malformed chunked body (chunk sizes are bounded by the body cap and cannot
// overflow). A Transfer-Encoding other than exactly "chunked" is refused with 501 (closing).
//
// Limits, each closing the connection after its reply: a request head (request line and
// headers) over 64 KiB gets 431; a target over 8 KiB 414; a body over max_body_bytes 413 (by
// Content-Length before any of it is read, or while reading a chunked body, never buffering
// past the cap); a request whose head and body are not complete within request_timeout of its
// first byte (of the connection's accept, for its first request) 408, however steadily the
// client trickles. A reply must be taken by the client within 10 s. After a refusal the server
// reads and drops what the client is still sending for up to 2 s so that the client sees the
// reply instead of a reset.
//
// Connections: keep-alive (idle ones closed after keep_alive_timeout) and pipelining (replies
// in order; after 1000 requests a connection is closed, and that 1000th reply, like every reply
// after which the server closes, carries "Connection: close"). A client that half-closes after
// its request still gets the reply. At most max_connections are open at once: a new connection
// at the cap closes the open one that has waited longest for (the rest of) a request, i.e. the
// oldest idle, trickling or lingering connection; connections whose handler runs or whose reply
// is being written are never closed for another (if all are such, the new connection is closed
// at once; the worker queue's bound keeps them few). If the process runs out of file descriptors,
// accepting does the same (closes the oldest such connection and tries again 10 ms later; with
// none to close, new connections wait in the kernel's listen backlog and are retried every
// 100 ms). Start() raises the soft RLIMIT_NOFILE to the hard limit so that the cap, not the
// descriptor limit, is normally what binds.
//
// TLS: with tls_cert_file and tls_key_file set the port speaks only HTTPS (TLS 1.2 or 1.3): a
// plaintext request gets a plaintext 400 naming the problem and the connection closes. With
// tls_client_ca_file also set, clients must present a certificate signed by that CA (mutual
// TLS); the handshake fails otherwise. ReloadTls() re-reads the three files (for SIGHUP):
// connections accepted afterwards use the new certificate, open ones keep theirs.
//
// The server's own error replies (400, 404, 405, 408, 413, 414, 431, 500 for a handler that
// threw, 501, 503) have the message as a text/plain body, unless options.error_formatter is
// set, which then builds them (e.g. JSON for an API). An error status a handler returns with
// an empty body also gets the formatted message; a handler's non-empty body is kept.
//
// Lifecycle: construct, Add*Handler..., Start() (binds synchronously, then serves on its own
// threads), optionally SetStopping() while the rest of the server drains, Stop() (also run by
// the destructor). Start, Stop and Add*Handler are for one controlling thread; ReloadTls and
// SetStopping may be called from any thread; callbacks and handlers run on the server's
// threads, concurrently, and must be thread-safe. The listening socket does not set
// SO_REUSEPORT, so a second server on a port already in use fails to start instead of silently
// sharing the port.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tnmt {

class HttpTransport;  // http_server.cc

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
  // Worker threads for the added handlers (at least 1). The built-in routes do not use them.
  int threads = 4;
  // Requests waiting for a free worker beyond `threads` running ones; a request that finds
  // this queue full is answered 503 at once.
  size_t max_queued_requests = 1024;
  // Threads for network I/O, parsing, TLS and the built-in routes (at least 1).
  int io_threads = 2;
  // Connections open at once; a new one at the cap closes the oldest idle or unfinished one
  // (see the header comment). Each costs a file descriptor, a read buffer of at most 80 KiB
  // and, while it lasts, its request body.
  size_t max_connections = 4096;
  // Connections one client address may have open at once; a further one from it is closed as
  // soon as it is accepted, without a reply. 0: no limit (behind a proxy every connection has
  // the proxy's address).
  size_t max_connections_per_peer = 0;
  // A request's head and body must both have arrived within this long of its first byte (of
  // the connection's accept for a connection's first request, TLS handshake included); else 408.
  absl::Duration request_timeout = absl::Seconds(10);
  // A keep-alive connection with no request for this long is closed (silently).
  absl::Duration keep_alive_timeout = absl::Seconds(2);
  // Largest request body accepted; larger: 413.
  size_t max_body_bytes = 1 << 20;
  // HTTPS: the server's certificate chain and private key (PEM files). Both set: the port
  // speaks only TLS; both empty: only plaintext HTTP; one alone: Start() fails.
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM file of the CA(s) whose client certificates are accepted. Set (with the two above):
  // every client must present such a certificate (mutual TLS). Empty: no client certificates.
  std::string tls_client_ca_file;
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

  // Binds host:port and starts serving on background threads. Unavailable with the
  // system's reason (e.g. "... cannot listen on 0.0.0.0:9100: Address already in use") if the
  // address cannot be bound, InvalidArgument if the host does not resolve or the TLS options
  // are incomplete or their files unusable (named as by ReloadTls), FailedPrecondition if
  // already started. Not restartable after Stop().
  absl::Status Start();

  // The bound port after a successful Start(); 0 before.
  int port() const { return port_; }

  // Re-reads tls_cert_file, tls_key_file and tls_client_ca_file; connections accepted from now
  // on use them. On an error (a file missing or unreadable, not PEM, a key that does not match
  // the certificate) the certificate in use is kept and the status names the file and the
  // problem. FailedPrecondition if the server has no TLS options. Thread-safe; valid before
  // and after Start().
  absl::Status ReloadTls();

  // From now on /healthz and /readyz answer 503 "stopping"; /metrics and other routes keep
  // working. Thread-safe; idempotent.
  void SetStopping();

  // Stops accepting connections, closes idle ones, waits for requests in progress (those
  // still arriving, within request_timeout; handlers running or queued) to be answered, and
  // joins the threads. Idempotent; a no-op if never started.
  void Stop();

 private:
  friend class HttpTransport;
  struct Routes {
    Handler get;
    Handler post;
    bool built_in = false;  // answered on the I/O threads
  };
  enum class Method { kGet, kPost };
  absl::Status Add(std::map<std::string, Routes>& table, Method method, const std::string& path,
                   bool prefix, Handler handler);
  // The handler for the request (its subpath set for a prefix route), or null with the 404/405
  // reply in *error. *built_in tells whether it is one of the built-in routes.
  const Handler* Find(HttpRequest& request, HttpResponse* error, bool* built_in) const;
  // Runs a handler found by Find: a thrown exception becomes 500, an error status with an
  // empty body gets the formatted message.
  HttpResponse Call(const Handler& handler, const HttpRequest& request) const;
  // The reply to an error the server itself detected (options_.error_formatter or text).
  HttpResponse Error(const HttpRequest& request, int status, const std::string& message) const;

  const HttpServerOptions options_;
  const MetricsCallback metrics_;
  const ReadinessCallback readiness_;
  std::map<std::string, Routes> exact_;     // fixed once started
  std::map<std::string, Routes> prefixes_;  // fixed once started

  std::unique_ptr<HttpTransport> transport_;  // the listener, connections, threads and TLS
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  bool started_ = false;
};

}  // namespace tnmt

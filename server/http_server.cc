// HttpServer: routing (exact paths, then prefixes, so 404s, 405s and HEAD behave the same for
// built-in and added handlers) over an HTTP/1.1 transport built on Boost.Beast and Asio:
// a listener, asynchronous connections on `io_threads` threads (one strand each), strict
// request-head checks of our own ahead of Beast's parser, Beast's parser for the body (chunked
// decoding, body cap), deadlines through beast::tcp_stream, TLS through asio::ssl (OpenSSL),
// a worker pool for the added handlers, and a registry of open connections for the
// connection cap and for Stop().
#include "server/http_server.h"

#include <openssl/ssl.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tnmt {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;

namespace {

constexpr char kTextPlain[] = "text/plain; charset=utf-8";
constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxTargetBytes = 8 << 10;
// The connection's read buffer: a whole head plus some of what follows it (pipelined requests,
// the start of a body). Beast's body reads and chunk headers stay within it too.
constexpr size_t kBufferBytes = kMaxHeadBytes + (16 << 10);
constexpr int kMaxRequestsPerConnection = 1000;
// A reply must be taken by the client within this long.
constexpr auto kWriteTimeout = std::chrono::seconds(10);
// After refusing a request and closing, what the client still sends is read and dropped for up
// to this long / this much, so that it sees the refusal instead of a reset.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 64 << 20;
// Accepting when the process is out of file descriptors: the pause before trying again, after
// closing a connection to make room, respectively with none to close.
constexpr auto kAcceptRetryShed = std::chrono::milliseconds(10);
constexpr auto kAcceptRetryIdle = std::chrono::milliseconds(100);

HttpResponse Text(int status, std::string body) {
  return HttpResponse{status, kTextPlain, std::move(body)};
}

// A short reason for an error status.
std::string StatusText(int status) {
  switch (status) {
    case 400: return "bad request";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 408: return "request timeout";
    case 413: return "request body too large";
    case 414: return "URI too long";
    case 429: return "too many requests";
    case 431: return "request head too large";
    case 500: return "internal error";
    case 501: return "not implemented";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return absl::StrCat("HTTP ", status);
  }
}

// The standard reason phrase of a status line.
const char* Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  auto it = headers.find(absl::AsciiStrToLower(name));
  return it == headers.end() ? std::string() : it->second;
}

absl::Status HttpServer::Add(std::map<std::string, Routes>& table, Method method,
                             const std::string& path, bool prefix, Handler handler) {
  const char* what = prefix ? (method == Method::kGet ? "AddGetPrefixHandler" : "AddPostPrefixHandler")
                            : (method == Method::kGet ? "AddGetHandler" : "AddPostHandler");
  if (started_) return absl::FailedPreconditionError(absl::StrCat("HttpServer: ", what, " after Start"));
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("HttpServer: path must start with '/': \"", path, "\""));
  }
  if (prefix && path.back() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("HttpServer: a path prefix must end with '/': \"", path, "\""));
  }
  auto it = table.find(path);
  if (it != table.end() && (method == Method::kGet ? it->second.get : it->second.post)) {
    return absl::AlreadyExistsError(absl::StrCat("HttpServer: ", prefix ? "prefix " : "", path,
                                                 " is already routed for ",
                                                 method == Method::kGet ? "GET" : "POST"));
  }
  if (!handler) {
    return absl::InvalidArgumentError(absl::StrCat("HttpServer: empty handler for ", path));
  }
  Routes& routes = table[path];
  (method == Method::kGet ? routes.get : routes.post) = std::move(handler);
  return absl::OkStatus();
}

absl::Status HttpServer::AddGetHandler(const std::string& path, GetHandler handler) {
  return Add(exact_, Method::kGet, path, /*prefix=*/false, std::move(handler));
}

absl::Status HttpServer::AddPostHandler(const std::string& path, PostHandler handler) {
  return Add(exact_, Method::kPost, path, /*prefix=*/false, std::move(handler));
}

absl::Status HttpServer::AddGetPrefixHandler(const std::string& prefix, GetHandler handler) {
  return Add(prefixes_, Method::kGet, prefix, /*prefix=*/true, std::move(handler));
}

absl::Status HttpServer::AddPostPrefixHandler(const std::string& prefix, PostHandler handler) {
  return Add(prefixes_, Method::kPost, prefix, /*prefix=*/true, std::move(handler));
}

HttpResponse HttpServer::Error(const HttpRequest& request, int status,
                               const std::string& message) const {
  if (options_.error_formatter) return options_.error_formatter(request, status, message);
  return Text(status, message);
}

const HttpServer::Handler* HttpServer::Find(HttpRequest& request, HttpResponse* error,
                                            bool* built_in) const {
  *built_in = false;
  const Routes* routes = nullptr;
  auto exact = exact_.find(request.path);
  if (exact != exact_.end()) {
    routes = &exact->second;
  } else {
    // The longest prefix that leaves something of the path.
    size_t best = 0;
    for (const auto& [prefix, r] : prefixes_) {
      if (request.path.size() > prefix.size() && prefix.size() > best &&
          absl::StartsWith(request.path, prefix)) {
        best = prefix.size();
        routes = &r;
      }
    }
    if (routes != nullptr) request.subpath = request.path.substr(best);
  }
  if (routes == nullptr) {
    *error = Error(request, 404, "not found");
    return nullptr;
  }
  const Handler* handler = nullptr;
  if (request.method == "GET" || request.method == "HEAD") {
    handler = &routes->get;
    *built_in = routes->built_in;
  } else if (request.method == "POST") {
    handler = &routes->post;
  }
  if (handler == nullptr || !*handler) {
    std::vector<std::string> allow;
    if (routes->get) allow.insert(allow.end(), {"GET", "HEAD"});
    if (routes->post) allow.push_back("POST");
    *error = Error(request, 405,
                   absl::StrCat("method ", request.method, " not allowed for ", request.path,
                                " (allowed: ", absl::StrJoin(allow, ", "), ")"));
    error->headers.emplace_back("Allow", absl::StrJoin(allow, ", "));
    *built_in = false;
    return nullptr;
  }
  return handler;
}

HttpResponse HttpServer::Call(const Handler& handler, const HttpRequest& request) const {
  HttpResponse response;
  try {
    response = handler(request);
  } catch (const std::exception& e) {
    return Error(request, 500, absl::StrCat("internal error: ", e.what()));
  } catch (...) {
    return Error(request, 500, "internal error");
  }
  if (response.status >= 400 && response.body.empty()) {
    HttpResponse error = Error(request, response.status, StatusText(response.status));
    error.headers.insert(error.headers.end(), response.headers.begin(), response.headers.end());
    return error;
  }
  return response;
}

namespace {

// %XX decoding; `plus` also turns '+' into a space (query strings). Malformed escapes are kept.
std::string Decode(absl::string_view in, bool plus) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%' && i + 2 < in.size() && absl::ascii_isxdigit(in[i + 1]) && absl::ascii_isxdigit(in[i + 2])) {
      int v = 0;
      for (int j = 1; j <= 2; ++j) {
        const char h = absl::ascii_tolower(in[i + j]);
        v = v * 16 + (h >= 'a' ? h - 'a' + 10 : h - '0');
      }
      out.push_back(static_cast<char>(v));
      i += 2;
    } else if (c == '+' && plus) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// RFC 9110 tchar: the characters of a method or a header name.
bool IsTokenChar(unsigned char c) {
  return absl::ascii_isalnum(c) || absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

// 1*DIGIT into *value; false for anything else (sign, hex, spaces, a list, empty) or a value
// that does not fit 64 bits.
bool ParseDecimal(absl::string_view text, uint64_t* value) {
  if (text.empty()) return false;
  uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *value = v;
  return true;
}

// Whether a comma-separated header value lists `token` (case-insensitive), e.g. Connection.
bool ListHas(absl::string_view list, absl::string_view token) {
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(item), token)) return true;
  }
  return false;
}

// The outcome of checking a request head: status 0 when it may be served, else the error reply's
// status and message (the connection then closes).
struct HeadProblem {
  int status = 0;
  std::string message;
};

// What the checks learn about a request's framing.
struct Framing {
  bool http10 = false;
  bool chunked = false;
  uint64_t content_length = 0;
  bool close = false;         // the client asked to close after this reply
  bool expect_continue = false;
};

// Parses and checks a complete request head (request line, header lines, the empty line; CRLF
// line endings already verified) into *request and *framing. Strict on purpose: whatever two
// HTTP implementations could frame differently is refused, before Beast's parser sees the
// bytes.
HeadProblem CheckHead(absl::string_view head, HttpRequest* request, Framing* framing) {
  const size_t eol = head.find("\r\n");
  const absl::string_view line = head.substr(0, eol);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  static const char* const kMethods[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
  if (parts.size() != 3 || parts[1].empty() ||
      std::none_of(std::begin(kMethods), std::end(kMethods), [&](const char* m) { return parts[0] == m; })) {
    return {400, "bad request"};
  }
  request->method = std::string(parts[0]);
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") return {400, "bad request: unsupported HTTP version"};
  framing->http10 = parts[2] == "HTTP/1.0";
  absl::string_view target = parts[1];
  if (target.size() > kMaxTargetBytes) return {414, StatusText(414)};
  for (const char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return {400, "bad request: control character in the target"};
  }
  // Absolute form (a proxy-style target): served by its path, the authority is ignored.
  bool absolute = false;
  for (absl::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() && absl::EqualsIgnoreCase(target.substr(0, scheme.size()), scheme)) {
      target.remove_prefix(scheme.size());
      const size_t path_start = target.find_first_of("/?#");
      target = path_start == absl::string_view::npos ? absl::string_view() : target.substr(path_start);
      absolute = true;
      break;
    }
  }
  if (!absolute && target[0] != '/' && !(target == "*" && request->method == "OPTIONS")) {
    return {400, "bad request: malformed target"};
  }
  target = target.substr(0, target.find('#'));
  const size_t q = target.find('?');
  request->path = Decode(target.substr(0, q), /*plus=*/false);
  if (request->path.empty()) request->path = "/";
  if (q != absl::string_view::npos) {
    for (absl::string_view kv : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      request->params.emplace(Decode(kv.substr(0, eq), true),
                              eq == absl::string_view::npos ? std::string() : Decode(kv.substr(eq + 1), true));
    }
  }

  // Header lines: name ":" OWS value OWS, one per line.
  int hosts = 0, lengths = 0;
  std::vector<absl::string_view> codings;
  absl::string_view rest = head.substr(eol + 2);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    const absl::string_view field = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    if (field.empty()) break;  // the empty line ending the head
    if (field[0] == ' ' || field[0] == '\t') return {400, "bad request: obsolete line folding"};
    const size_t colon = field.find(':');
    if (colon == absl::string_view::npos || colon == 0) return {400, "bad request: malformed header line"};
    const absl::string_view name = field.substr(0, colon);
    for (const char c : name) {
      if (c == ' ' || c == '\t') return {400, "bad request: whitespace in a header name"};
      if (!IsTokenChar(static_cast<unsigned char>(c))) return {400, "bad request: malformed header name"};
    }
    const absl::string_view value = absl::StripAsciiWhitespace(field.substr(colon + 1));
    for (const char c : value) {
      const unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && u != '\t') || u == 0x7f) return {400, "bad request: control character in a header value"};
    }
    std::string lower = absl::AsciiStrToLower(name);
    if (lower == "host") {
      ++hosts;
    } else if (lower == "content-length") {
      ++lengths;
      if (!ParseDecimal(value, &framing->content_length)) return {400, "bad request: malformed Content-Length"};
    } else if (lower == "transfer-encoding") {
      for (absl::string_view coding : absl::StrSplit(value, ',')) {
        codings.push_back(absl::StripAsciiWhitespace(coding));
      }
    }
    request->headers.emplace(std::move(lower), std::string(value));
  }
  if (hosts > 1) return {400, "bad request: more than one Host header"};
  if (hosts == 0 && !framing->http10) return {400, "bad request: no Host header"};
  if (lengths > 1) return {400, "bad request: more than one Content-Length header"};
  if (request->headers.count("transfer-encoding") > 0) {
    if (lengths > 0) return {400, "bad request: both Transfer-Encoding and Content-Length"};
    if (framing->http10) return {400, "bad request: Transfer-Encoding in an HTTP/1.0 request"};
    if (codings.empty() || std::any_of(codings.begin(), codings.end(),
                                       [](absl::string_view c) { return c.empty(); })) {
      return {400, "bad request: malformed Transfer-Encoding"};
    }
    if (codings.size() != 1 || !absl::EqualsIgnoreCase(codings[0], "chunked")) {
      return {501, absl::StrCat("transfer coding \"", absl::StrJoin(codings, ", "),
                                "\" is not supported (only \"chunked\")")};
    }
    framing->chunked = true;
  }
  const std::string connection = request->Header("connection");
  framing->close = framing->http10 ? !ListHas(connection, "keep-alive") : ListHas(connection, "close");
  framing->expect_continue = !framing->http10 && absl::EqualsIgnoreCase(request->Header("expect"), "100-continue");
  return {};
}

}  // namespace

namespace {

// Builds a TLS server context from the options' PEM files; errors name the file.
absl::StatusOr<std::shared_ptr<ssl::context>> LoadTls(const HttpServerOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty() ||
      (options.tls_cert_file.empty() && !options.tls_client_ca_file.empty())) {
    return absl::InvalidArgumentError(
        "HTTP server: TLS needs both tls_cert_file and tls_key_file (tls_client_ca_file only with them)");
  }
  for (const auto& [option, path] : {std::pair<const char*, const std::string&>{"tls_cert_file", options.tls_cert_file},
                                     {"tls_key_file", options.tls_key_file},
                                     {"tls_client_ca_file", options.tls_client_ca_file}}) {
    if (path.empty()) continue;
    std::ifstream in(path);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("HTTP server: ", option, " ", path, ": cannot read: ", std::strerror(errno)));
    }
  }
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  boost::system::error_code ec;
  const auto failed = [&](const char* option, const std::string& path) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP server: ", option, " ", path, ": ", ec.message()));
  };
  if (context->use_certificate_chain_file(options.tls_cert_file, ec); ec) {
    return failed("tls_cert_file", options.tls_cert_file);
  }
  if (context->use_private_key_file(options.tls_key_file, ssl::context::pem, ec); ec) {
    return failed("tls_key_file", options.tls_key_file);
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP server: tls_key_file ", options.tls_key_file,
                                                    " does not match the certificate in tls_cert_file ",
                                                    options.tls_cert_file));
  }
  if (!options.tls_client_ca_file.empty()) {
    if (context->load_verify_file(options.tls_client_ca_file, ec); ec) {
      return failed("tls_client_ca_file", options.tls_client_ca_file);
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.tls_client_ca_file.c_str());
    if (names == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("HTTP server: tls_client_ca_file ", options.tls_client_ca_file,
                                                     ": no CA certificate in it"));
    }
    SSL_CTX_set_client_CA_list(context->native_handle(), names);
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  static const unsigned char kSessionContext[] = "tnmt-http";
  SSL_CTX_set_session_id_context(context->native_handle(), kSessionContext, sizeof(kSessionContext) - 1);
  return context;
}

// Added handlers run here: `threads` workers and a bounded queue.
class WorkerPool {
 public:
  WorkerPool(size_t threads, size_t queue) : pool_(threads), capacity_(threads + queue) {}
  // Runs fn on a worker; false (fn dropped) when `threads` run and `queue` wait already.
  bool Submit(std::function<void()> fn) {
    if (pending_.fetch_add(1) >= capacity_) {
      --pending_;
      return false;
    }
    asio::post(pool_, [this, fn = std::move(fn)] {
      fn();
      --pending_;
    });
    return true;
  }
  void Join() { pool_.join(); }

 private:
  asio::thread_pool pool_;
  const size_t capacity_;
  std::atomic<size_t> pending_{0};
};

}  // namespace

// One accepted connection, as the registry sees it. The state says whether the connection may
// be closed to make room (the cap, running out of descriptors) or by Stop().
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  enum class State {
    kIdle,     // waiting for the first byte of a request (or the TLS handshake)
    kReading,  // a request is arriving
    kBusy,     // its handler runs or its reply is being written: never closed for another
    kClosing,  // lingering after a refusal
    kShed,     // closed by the registry; the connection's handlers only wind down
  };
  HttpConnection(HttpTransport* transport, uint64_t id) : transport_(transport), id_(id) {}
  virtual ~HttpConnection();
  uint64_t id() const { return id_; }

  // Atomically claims the connection for closing if it waits for a request or lingers after
  // its last reply (or, with `reading_too`, is still receiving a request). True: the caller
  // must then call Close().
  bool Claim(bool reading_too) {
    State s = state_.load();
    while (s == State::kIdle || s == State::kClosing || (reading_too && s == State::kReading)) {
      if (state_.compare_exchange_weak(s, State::kShed)) return true;
    }
    return false;
  }
  // Closes the socket on the connection's strand (pending operations end).
  virtual void Close() = 0;
  // Closes the connection if Claim(false) succeeds (Stop()).
  virtual void CloseIfIdle() = 0;

 protected:
  // Moves to `to` unless the registry claimed the connection (then false: wind down).
  bool Enter(State to) {
    State s = state_.load();
    while (s != State::kShed) {
      if (state_.compare_exchange_weak(s, to)) return true;
    }
    return false;
  }
  bool shed() const { return state_.load() == State::kShed; }

  HttpTransport* const transport_;
  const uint64_t id_;
  std::atomic<State> state_{State::kIdle};
};

// The listener, the I/O threads, the worker pool, the registry of open connections and the TLS
// context in use.
class HttpTransport {
 public:
  explicit HttpTransport(HttpServer* server) : server_(server), options_(server->options_) {}
  ~HttpTransport() { Stop(); }

  absl::Status ReloadTls() {
    const HttpServerOptions& o = options_;
    if (o.tls_cert_file.empty() && o.tls_key_file.empty() && o.tls_client_ca_file.empty()) {
      return absl::FailedPreconditionError("HTTP server: no TLS certificate configured");
    }
    absl::StatusOr<std::shared_ptr<ssl::context>> context = LoadTls(o);
    if (!context.ok()) return context.status();
    std::lock_guard<std::mutex> lock(tls_mu_);
    tls_ = *std::move(context);
    return absl::OkStatus();
  }

  // Binds and starts the threads; the bound port in *port.
  absl::Status Start(int* port);
  void Stop();

  // The server's routing, for the connections.
  const HttpServer::Handler* Find(HttpRequest& request, HttpResponse* error, bool* built_in) const {
    return server_->Find(request, error, built_in);
  }
  HttpResponse Call(const HttpServer::Handler& handler, const HttpRequest& request) const {
    return server_->Call(handler, request);
  }
  HttpResponse Error(const HttpRequest& request, int status, const std::string& message) const {
    return server_->Error(request, status, message);
  }
  const HttpServerOptions& options() const { return options_; }
  bool stopping() const { return stop_.load(); }
  bool Submit(std::function<void()> fn) { return workers_->Submit(std::move(fn)); }

  // Registers a new connection, closing the oldest idle or unfinished one while at the cap;
  // false if every open connection is busy.
  // false also if `peer` (the client's address; "" when not counted) already has
  // max_connections_per_peer open.
  bool Admit(const std::shared_ptr<HttpConnection>& connection, const std::string& peer) {
    std::vector<std::shared_ptr<HttpConnection>> seen;  // released after the lock
    std::lock_guard<std::mutex> lock(mu_);
    if (!peer.empty()) {
      auto it = peer_connections_.find(peer);
      if (it != peer_connections_.end() && it->second >= options_.max_connections_per_peer) return false;
    }
    while (open_.size() >= std::max<size_t>(options_.max_connections, 1)) {
      if (!ShedOldestLocked(&seen)) return false;
    }
    open_.emplace(connection->id(), connection);
    if (!peer.empty()) {
      ++peer_connections_[peer];
      peer_of_.emplace(connection->id(), peer);
    }
    return true;
  }
  void Created() {
    std::lock_guard<std::mutex> lock(mu_);
    ++live_;
  }
  void Destroyed(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(id);
    if (auto p = peer_of_.find(id); p != peer_of_.end()) {
      auto it = peer_connections_.find(p->second);
      if (it != peer_connections_.end() && --it->second == 0) peer_connections_.erase(it);
      peer_of_.erase(p);
    }
    --live_;
    all_closed_.notify_all();
  }
  size_t open_connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_.size();
  }

 private:
  // Closes the oldest connection that waits for (the rest of) a request or lingers. The
  // connections looked at go to *seen, to be released after mu_ (a last reference destroys the
  // connection, which takes mu_).
  bool ShedOldestLocked(std::vector<std::shared_ptr<HttpConnection>>* seen) {
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      std::shared_ptr<HttpConnection> c = it->second.lock();
      if (c == nullptr) {  // being destroyed: its slot is free already
        open_.erase(it);
        return true;
      }
      seen->push_back(c);
      if (c->Claim(/*reading_too=*/true)) {
        open_.erase(it);
        c->Close();
        return true;
      }
    }
    return false;
  }
  void Accept();
  void OnAccept(const boost::system::error_code& ec, tcp::socket socket);

  HttpServer* const server_;
  const HttpServerOptions& options_;
  asio::io_context io_;  // run by io_threads threads (no concurrency hint: they share it)
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  asio::strand<asio::io_context::executor_type> accept_strand_{io_.get_executor()};
  tcp::acceptor acceptor_{accept_strand_};
  asio::steady_timer accept_retry_{accept_strand_};
  std::vector<std::thread> threads_;
  std::unique_ptr<WorkerPool> workers_;
  std::atomic<bool> stop_{false};
  bool started_ = false;
  uint64_t next_id_ = 0;  // on the accept strand

  std::mutex tls_mu_;
  std::shared_ptr<ssl::context> tls_;  // null: plaintext

  std::mutex mu_;
  std::condition_variable all_closed_;
  std::map<uint64_t, std::weak_ptr<HttpConnection>> open_;  // in accept order
  // With max_connections_per_peer: admitted connections per client address, and each one's address.
  std::map<std::string, size_t> peer_connections_;
  std::map<uint64_t, std::string> peer_of_;
  size_t live_ = 0;  // connection objects not yet destroyed (open_ omits shed ones)
};

HttpConnection::~HttpConnection() { transport_->Destroyed(id_); }

namespace {

template <class Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, beast::tcp_stream>;

// One connection: Stream is beast::tcp_stream (HTTP) or beast::ssl_stream<beast::tcp_stream>
// (HTTPS). Everything runs on the connection's strand (the stream's executor) except the
// added handlers, which run on the worker pool while the connection waits.
template <class Stream>
class Session : public HttpConnection {
 public:
  using Clock = std::chrono::steady_clock;

  Session(HttpTransport* transport, uint64_t id, tcp::socket socket,
          std::shared_ptr<ssl::context> tls)
      : HttpConnection(transport, id), stream_(MakeStream(std::move(socket), tls.get())), tls_(std::move(tls)),
        options_(transport->options()) {
    transport_->Created();
  }

  void Start() {
    deadline_ = Clock::now() + ToChrono(options_.request_timeout);
    beast::error_code ec;
    Tcp().socket().set_option(tcp::no_delay(true), ec);
    asio::dispatch(stream_.get_executor(), [self = Self()] {
      if constexpr (kIsTls<Stream>) {
        self->DetectTls();
      } else {
        self->NextRequest();
      }
    });
  }

  void Close() override {
    asio::post(stream_.get_executor(), [self = Self()] { self->CloseNow(); });
  }

  void CloseIfIdle() override {
    asio::post(stream_.get_executor(), [self = Self()] {
      if (self->Claim(/*reading_too=*/false)) self->CloseNow();
    });
  }

 private:
  static Stream MakeStream(tcp::socket socket, ssl::context* tls) {
    if constexpr (kIsTls<Stream>) {
      return Stream(beast::tcp_stream(std::move(socket)), *tls);
    } else {
      (void)tls;
      return Stream(std::move(socket));
    }
  }
  static Clock::duration ToChrono(absl::Duration d) {
    return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
  }
  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  void CloseNow() {
    beast::error_code ec;
    deadline_timer_.cancel();
    Tcp().socket().shutdown(tcp::socket::shutdown_both, ec);
    Tcp().close();
  }

  // HTTPS port: a TLS handshake, or a plaintext request that gets a plaintext refusal.
  void DetectTls() {
    Tcp().expires_at(deadline_);
    beast::async_detect_ssl(Tcp(), buffer_, [self = Self()](beast::error_code ec, bool tls) {
      if (self->shed()) return;
      if (ec) return self->CloseNow();
      if (!self->Enter(State::kReading)) return;
      if (!tls) return self->RefusePlaintext();
      if constexpr (kIsTls<Stream>) {
        self->stream_.async_handshake(ssl::stream_base::server, self->buffer_.data(),
                                      [self](beast::error_code ec, size_t used) {
                                        if (self->shed()) return;
                                        if (ec) return self->CloseNow();
                                        self->buffer_.consume(used);
                                        self->tls_active_ = true;
                                        self->NextRequest();
                                      });
      }
    });
  }

  void RefusePlaintext() {
    static const std::string kReply = [] {
      const std::string body = "this port speaks HTTPS only\n";
      return absl::StrCat("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n",
                          "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
    }();
    if (!Enter(State::kBusy)) return;
    Tcp().expires_after(kWriteTimeout);
    asio::async_write(Tcp(), asio::buffer(kReply), [self = Self()](beast::error_code ec, size_t) {
      if (self->shed()) return;
      if (ec) return self->CloseNow();
      self->Linger();
    });
  }

  // Waits for the next request (its first byte, unless pipelined bytes are buffered).
  void NextRequest() {
    request_ = HttpRequest();
    framing_ = Framing();
    parser_.reset();
    scanned_ = 0;
    if (buffer_.size() == 0) {
      if (transport_->stopping()) return CloseNow();
      if (!Enter(State::kIdle)) return;
      // The first request has request_timeout from the accept; later ones keep_alive_timeout
      // to start.
      idle_deadline_ = served_ == 0 ? deadline_ : Clock::now() + ToChrono(options_.keep_alive_timeout);
      return Read();
    }
    if (!Enter(State::kReading)) return;
    if (served_ > 0) deadline_ = Clock::now() + ToChrono(options_.request_timeout);
    ParseHead();
  }

  // Request deadlines are our own timer, not the stream's: Beast closes a stream whose
  // timeout expires, and a 408 must still be written. The timer cancels the pending read.
  void ArmDeadline(Clock::time_point when) {
    timed_out_ = false;
    Tcp().expires_never();
    deadline_timer_.expires_at(when);
    deadline_timer_.async_wait([self = Self()](beast::error_code ec) {
      if (ec || self->shed()) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->Tcp().socket().cancel(ignored);
    });
  }
  bool TimedOut(const beast::error_code& ec) const {
    return ec == beast::error::timeout || (ec == asio::error::operation_aborted && timed_out_);
  }

  void Read() {
    const bool idle = state_.load() == State::kIdle;
    ArmDeadline(idle ? idle_deadline_ : deadline_);
    const size_t room = buffer_.max_size() - buffer_.size();
    const size_t want = std::min<size_t>(room, buffer_.size() == 0 ? 2048 : 16384);
    stream_.async_read_some(buffer_.prepare(want), [self = Self()](beast::error_code ec, size_t n) {
      self->OnRead(ec, n);
    });
  }

  void OnRead(beast::error_code ec, size_t n) {
    if (shed()) return;
    const bool idle = state_.load() == State::kIdle;
    if (TimedOut(ec)) {
      // A request that did not arrive in time; a keep-alive connection that stays idle just ends.
      if (!idle || served_ == 0) return Refuse(408, StatusText(408));
      return CloseNow();
    }
    if (ec) return CloseNow();
    buffer_.commit(n);
    if (idle) {
      if (!Enter(State::kReading)) return;
      if (served_ > 0) deadline_ = Clock::now() + ToChrono(options_.request_timeout);
    }
    ParseHead();
  }

  // Looks for the end of the head in what has arrived; CRLF only, at most kMaxHeadBytes.
  void ParseHead() {
    // Empty lines before a request line are skipped (RFC 9112 2.2).
    while (buffer_.size() >= 2 && absl::StartsWith(Buffered(), "\r\n")) {
      buffer_.consume(2);
      scanned_ = 0;
    }
    const absl::string_view data = Buffered();
    for (size_t i = scanned_; i < data.size(); ++i) {
      if (data[i] != '\n') continue;
      if (i == 0 || data[i - 1] != '\r') return Refuse(400, "bad request: bare LF line ending");
      if (i >= 3 && data[i - 2] == '\n' && data[i - 3] == '\r') {
        if (i + 1 > kMaxHeadBytes) return Refuse(431, "request head too large");
        return OnHead(i + 1);
      }
    }
    scanned_ = data.size();
    if (data.size() >= kMaxHeadBytes) return Refuse(431, "request head too large");
    Read();
  }

  absl::string_view Buffered() const {
    return absl::string_view(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  }

  void OnHead(size_t head_bytes) {
    const HeadProblem problem = CheckHead(Buffered().substr(0, head_bytes), &request_, &framing_);
    if (problem.status != 0) return Refuse(problem.status, problem.message);
    // Beast parses the checked head once more and then frames and decodes the body.
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(kMaxHeadBytes + 1));
    // Set before the head: Beast then refuses a larger Content-Length at once (a limit of
    // boost::none would refuse every Content-Length in Beast 1.74) and caps chunked bodies.
    parser_->body_limit(static_cast<std::uint64_t>(options_.max_body_bytes));
    beast::error_code ec;
    const size_t used = parser_->put(asio::buffer(buffer_.data().data(), head_bytes), ec);
    if (ec == http::error::body_limit) return Refuse(413, TooLarge());
    if (ec || used != head_bytes || !parser_->is_header_done()) {
      return Refuse(400, absl::StrCat("bad request: ", ec ? ec.message() : "incomplete head"));
    }
    buffer_.consume(head_bytes);
    if (parser_->is_done()) return Dispatch();
    if (framing_.expect_continue) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      Tcp().expires_after(kWriteTimeout);
      return asio::async_write(stream_, asio::buffer(kContinue), [self = Self()](beast::error_code ec, size_t) {
        if (self->shed()) return;
        if (ec) return self->CloseNow();
        self->ReadBody();
      });
    }
    ReadBody();
  }

  std::string TooLarge() const {
    return absl::StrCat("request body too large: the limit is ", options_.max_body_bytes, " bytes");
  }

  void ReadBody() {
    ArmDeadline(deadline_);
    http::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (self->shed()) return;
      if (ec == http::error::body_limit) return self->Refuse(413, self->TooLarge());
      if (self->TimedOut(ec)) return self->Refuse(408, "the request body did not arrive in time");
      if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
          ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
        return self->CloseNow();
      }
      if (ec) return self->Refuse(400, absl::StrCat("bad request: malformed body: ", ec.message()));
      self->request_.body = std::move(self->parser_->get().body());
      self->Dispatch();
    });
  }

  void Dispatch() {
    deadline_timer_.cancel();
    ++served_;
    close_after_ = framing_.close || served_ >= kMaxRequestsPerConnection || transport_->stopping();
    HttpResponse error;
    bool built_in = false;
    const HttpServer::Handler* handler = transport_->Find(request_, &error, &built_in);
    if (handler == nullptr) return Reply(std::move(error));
    if (built_in) return Reply(transport_->Call(*handler, request_));
    if (!Enter(State::kBusy)) return;
    Tcp().expires_never();
    const bool queued = transport_->Submit([self = Self(), handler] {
      HttpResponse response = self->transport_->Call(*handler, self->request_);
      asio::post(self->stream_.get_executor(),
                 [self, response = std::move(response)]() mutable { self->Reply(std::move(response)); });
    });
    if (!queued) {
      HttpResponse busy = transport_->Error(request_, 503, "server busy: every handler thread is taken, try again");
      busy.headers.emplace_back("Retry-After", "1");
      Reply(std::move(busy));
    }
  }

  // An error the server detected while reading: reply, then close.
  void Refuse(int status, const std::string& message) {
    close_after_ = true;
    Reply(transport_->Error(request_, status, message));
  }

  void Reply(HttpResponse response) {
    if (!Enter(State::kBusy)) return;
    deadline_timer_.cancel();
    reply_.emplace();
    http::response<http::string_body>& r = *reply_;
    if (response.status < 100 || response.status > 999) response.status = 500;
    r.version(11);
    r.result(static_cast<unsigned>(response.status));
    r.reason(Reason(response.status));
    bool has_connection = false;
    for (const auto& [name, value] : response.headers) {
      if (absl::EqualsIgnoreCase(name, "Content-Length")) continue;
      if (absl::EqualsIgnoreCase(name, "Connection")) {
        has_connection = true;
        if (ListHas(value, "close")) close_after_ = true;
      }
      r.insert(name, value);
    }
    if (!response.content_type.empty()) r.set(http::field::content_type, response.content_type);
    r.set(http::field::content_length, std::to_string(response.body.size()));
    if (!has_connection) {
      if (close_after_) {
        r.set(http::field::connection, "close");
      } else {
        if (framing_.http10) r.set(http::field::connection, "keep-alive");
        r.set(http::field::keep_alive,
              absl::StrCat("timeout=", std::max<int64_t>(1, absl::ToInt64Seconds(options_.keep_alive_timeout))));
      }
    }
    if (request_.method != "HEAD") r.body() = std::move(response.body);
    Tcp().expires_after(kWriteTimeout);
    http::async_write(stream_, r, [self = Self()](beast::error_code ec, size_t) {
      if (self->shed()) return;
      self->reply_.reset();
      if (ec) return self->CloseNow();
      if (self->close_after_) return self->Linger();
      self->NextRequest();
    });
  }

  // The close after a reply that announced it. TLS: close_notify both ways (bounded). Plain
  // TCP: a lingering close: no more writes, and what the client still sends is dropped for a
  // bounded time, so that it reads the reply (a refusal, or the last of several pipelined
  // ones) instead of a connection reset.
  void Linger() {
    if (!Enter(State::kClosing)) return;
    if constexpr (kIsTls<Stream>) {
      if (tls_active_) {
        Tcp().expires_after(kLinger);
        return stream_.async_shutdown([self = Self()](beast::error_code) {
          if (!self->shed()) self->CloseNow();
        });
      }
    }
    beast::error_code ignored;
    Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Tcp().expires_after(kLinger);
    Drain();
  }

  void Drain() {
    Tcp().async_read_some(asio::buffer(sink_), [self = Self()](beast::error_code ec, size_t n) {
      if (self->shed()) return;
      self->drained_ += n;
      if (ec || self->drained_ > kLingerBytes) return self->CloseNow();
      self->Drain();
    });
  }

  Stream stream_;
  const std::shared_ptr<ssl::context> tls_;  // outlives the stream's SSL object
  const HttpServerOptions& options_;
  beast::flat_buffer buffer_{kBufferBytes};
  size_t scanned_ = 0;  // bytes of buffer_ known to hold no end of the head
  Clock::time_point deadline_;       // the request's head and body
  Clock::time_point idle_deadline_;  // waiting for a request to start
  asio::steady_timer deadline_timer_{stream_.get_executor()};
  bool timed_out_ = false;  // deadline_timer_ cancelled the pending read
  HttpRequest request_;
  Framing framing_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> reply_;
  int served_ = 0;
  bool close_after_ = false;
  bool tls_active_ = false;
  size_t drained_ = 0;
  char sink_[4096];
};

using PlainSession = Session<beast::tcp_stream>;
using TlsSession = Session<beast::ssl_stream<beast::tcp_stream>>;

// Raises the soft limit on open files to the hard one, so that max_connections binds first.
void RaiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

absl::Status HttpTransport::Start(int* port) {
  const HttpServerOptions& o = options_;
  if (!o.tls_cert_file.empty() || !o.tls_key_file.empty() || !o.tls_client_ca_file.empty()) {
    if (absl::Status s = ReloadTls(); !s.ok()) return s;
  }
  RaiseFileLimit();
  const std::string where = absl::StrCat("HTTP server cannot listen on ", o.host, ":", o.port);
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  const tcp::resolver::results_type endpoints =
      resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(where, ": ", ec.message()));
  std::string reason = "no usable address";
  bool bound = false;
  for (const auto& entry : endpoints) {
    acceptor_.close(ec);
    // SO_REUSEADDR (restart while old connections linger) but never SO_REUSEPORT: a second
    // server on a busy port must fail.
    acceptor_.open(entry.endpoint().protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(entry.endpoint(), ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) {
      bound = true;
      break;
    }
    reason = ec.message();
  }
  if (!bound) {
    acceptor_.close(ec);
    return absl::UnavailableError(absl::StrCat(where, ": ", reason));
  }
  *port = acceptor_.local_endpoint(ec).port();
  started_ = true;
  workers_ = std::make_unique<WorkerPool>(std::max(1, o.threads), o.max_queued_requests);
  work_.emplace(io_.get_executor());
  asio::post(accept_strand_, [this] { Accept(); });
  for (int i = 0; i < std::max(1, o.io_threads); ++i) threads_.emplace_back([this] { io_.run(); });
  return absl::OkStatus();
}

void HttpTransport::Accept() {
  if (stop_) return;
  acceptor_.async_accept(asio::make_strand(io_), asio::bind_executor(accept_strand_,
                             [this](const boost::system::error_code& ec, tcp::socket socket) {
                               OnAccept(ec, std::move(socket));
                             }));
}

void HttpTransport::OnAccept(const boost::system::error_code& ec, tcp::socket socket) {
  if (stop_ || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of file descriptors: close the oldest idle or unfinished connection and try again
    // shortly; with none to close, new connections wait in the listen backlog. Other errors (a
    // connection reset before it was taken) just move on.
    auto pause = std::chrono::milliseconds(0);
    if (ec == asio::error::no_descriptors || ec.value() == ENFILE || ec == asio::error::no_buffer_space ||
        ec == asio::error::no_memory) {
      std::vector<std::shared_ptr<HttpConnection>> seen;  // released after the lock
      std::lock_guard<std::mutex> lock(mu_);
      pause = ShedOldestLocked(&seen) ? kAcceptRetryShed : kAcceptRetryIdle;
    }
    accept_retry_.expires_after(pause);
    accept_retry_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) Accept();
    });
    return;
  }
  std::shared_ptr<ssl::context> tls;
  {
    std::lock_guard<std::mutex> lock(tls_mu_);
    tls = tls_;
  }
  const uint64_t id = next_id_++;
  std::string peer;
  if (options_.max_connections_per_peer > 0) {
    boost::system::error_code endpoint_error;
    const tcp::endpoint remote = socket.remote_endpoint(endpoint_error);
    if (!endpoint_error) peer = remote.address().to_string();
  }
  if (tls != nullptr) {
    auto session = std::make_shared<TlsSession>(this, id, std::move(socket), std::move(tls));
    if (Admit(session, peer)) session->Start();
  } else {
    auto session = std::make_shared<PlainSession>(this, id, std::move(socket), nullptr);
    if (Admit(session, peer)) session->Start();
  }
  // Not admitted (every open connection busy, or the client's address at its cap): dropping
  // the session closes the socket.
  Accept();
}

void HttpTransport::Stop() {
  if (!started_) return;
  started_ = false;
  stop_ = true;
  std::promise<void> closed;
  asio::post(accept_strand_, [this, &closed] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
    closed.set_value();
  });
  closed.get_future().wait();
  // Idle and lingering connections close now; the others after their current request.
  std::vector<std::shared_ptr<HttpConnection>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, weak] : open_) {
      if (std::shared_ptr<HttpConnection> c = weak.lock()) open.push_back(std::move(c));
    }
  }
  for (const auto& c : open) c->CloseIfIdle();
  open.clear();
  {
    std::unique_lock<std::mutex> lock(mu_);
    all_closed_.wait(lock, [this] { return live_ == 0; });
  }
  workers_->Join();
  work_.reset();
  io_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

HttpServer::HttpServer(HttpServerOptions options, MetricsCallback metrics,
                       ReadinessCallback readiness)
    : options_(std::move(options)), metrics_(std::move(metrics)),
      readiness_(std::move(readiness)) {
  Routes& healthz = exact_["/healthz"];
  healthz.built_in = true;
  healthz.get = [this](const HttpRequest&) {
    return stopping_ ? Text(503, "stopping") : Text(200, "ok");
  };
  Routes& readyz = exact_["/readyz"];
  readyz.built_in = true;
  readyz.get = [this](const HttpRequest&) {
    if (stopping_) return Text(503, "stopping");
    if (!readiness_) return Text(200, "ready");
    const absl::Status status = readiness_();
    if (status.ok()) return Text(200, "ready");
    return Text(503, status.message().empty() ? status.ToString()
                                              : std::string(status.message()));
  };
  if (metrics_) {
    Routes& metrics_route = exact_["/metrics"];
    metrics_route.built_in = true;
    metrics_route.get = [this](const HttpRequest&) {
      return HttpResponse{200, kPrometheusText, metrics_()};
    };
  }
  transport_ = std::make_unique<HttpTransport>(this);
}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer: already started");
  int port = 0;
  if (absl::Status s = transport_->Start(&port); !s.ok()) return s;
  port_ = port;
  started_ = true;
  return absl::OkStatus();
}

absl::Status HttpServer::ReloadTls() { return transport_->ReloadTls(); }

void HttpServer::SetStopping() { stopping_ = true; }

void HttpServer::Stop() {
  SetStopping();
  transport_->Stop();
}

}  // namespace tnmt

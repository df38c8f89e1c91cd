// HttpServer: our own HTTP/1.1 transport (a listener thread, a thread per connection up to
// HttpServerOptions::threads, buffered reads with deadlines, keep-alive and pipelining) under
// our own routing tables (exact paths, then prefixes), so routing, 404s, 405s and HEAD behave
// the same for built-in and added handlers.
#include "server/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tnmt {
namespace {

constexpr char kTextPlain[] = "text/plain; charset=utf-8";
constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

// An idle keep-alive connection is closed after this long.
constexpr int64_t kKeepAliveMs = 2000;
// A request's head (request line and headers) must arrive within this long of its first byte,
// and each part of a body within this long of the previous one; a reply must be taken by the
// client within this long per write. Slow clients are cut off instead of holding a thread.
constexpr int64_t kReadTimeoutMs = 10000;
constexpr int64_t kWriteTimeoutMs = 10000;
constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr size_t kMaxTargetBytes = 8 << 10;
constexpr int kMaxRequestsPerConnection = 1000;
// After refusing a request and closing, what the client still sends is read and dropped for up
// to this long / this much, so that it sees the refusal.
constexpr int64_t kLingerMs = 2000;
constexpr int64_t kLingerBytes = 64 << 20;

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
    case 500: return "internal error";
    case 501: return "not implemented";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return absl::StrCat("HTTP ", status);
  }
}

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  auto it = headers.find(absl::AsciiStrToLower(name));
  return it == headers.end() ? std::string() : it->second;
}

HttpServer::HttpServer(HttpServerOptions options, MetricsCallback metrics,
                       ReadinessCallback readiness)
    : options_(std::move(options)), metrics_(std::move(metrics)),
      readiness_(std::move(readiness)) {
  exact_["/healthz"].get = [this](const HttpRequest&) {
    return stopping_ ? Text(503, "stopping") : Text(200, "ok");
  };
  exact_["/readyz"].get = [this](const HttpRequest&) {
    if (stopping_) return Text(503, "stopping");
    if (!readiness_) return Text(200, "ready");
    const absl::Status status = readiness_();
    if (status.ok()) return Text(200, "ready");
    return Text(503, status.message().empty() ? status.ToString()
                                              : std::string(status.message()));
  };
  if (metrics_) {
    exact_["/metrics"].get = [this](const HttpRequest&) {
      return HttpResponse{200, kPrometheusText, metrics_()};
    };
  }
}

HttpServer::~HttpServer() { Stop(); }

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

HttpResponse HttpServer::Route(HttpRequest& request) const {
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
  if (routes == nullptr) return Error(request, 404, "not found");
  const Handler* handler = nullptr;
  if (request.method == "GET" || request.method == "HEAD") {
    handler = &routes->get;
  } else if (request.method == "POST") {
    handler = &routes->post;
  }
  if (handler == nullptr || !*handler) {
    std::vector<std::string> allow;
    if (routes->get) allow.insert(allow.end(), {"GET", "HEAD"});
    if (routes->post) allow.push_back("POST");
    HttpResponse response = Error(
        request, 405,
        absl::StrCat("method ", request.method, " not allowed for ", request.path, " (allowed: ",
                     absl::StrJoin(allow, ", "), ")"));
    response.headers.emplace_back("Allow", absl::StrJoin(allow, ", "));
    return response;
  }
  HttpResponse response;
  try {
    response = (*handler)(request);
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

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

// Buffered reads from a connection with deadlines; `stop` ends waits for a next request.
class Reader {
 public:
  enum Result { kOk, kClosed, kTimeout, kError, kTooLarge };
  Reader(int fd, const std::atomic<bool>* stop) : fd_(fd), stop_(stop) {}

  bool buffered() const { return pos_ < buf_.size(); }

  // The next request's head (through the empty line), waiting up to `idle_ms` for its first
  // byte (cut short by `stop`) and kReadTimeoutMs for the rest.
  Result ReadHead(std::string* head, int64_t idle_ms) {
    int64_t deadline = NowMs() + idle_ms;
    bool started = buffered();
    if (started) deadline = NowMs() + kReadTimeoutMs;
    while (true) {
      const size_t end = buf_.find("\r\n\r\n", pos_);
      if (end != std::string::npos) {
        if (end + 4 - pos_ > kMaxHeadBytes) return kTooLarge;
        head->assign(buf_, pos_, end + 4 - pos_);
        pos_ = end + 4;
        return kOk;
      }
      if (buf_.size() - pos_ > kMaxHeadBytes) return kTooLarge;
      const Result r = Fill(deadline, /*stoppable=*/!started);
      if (r != kOk) return r == kClosed && started ? kError : r;
      if (!started) {
        started = true;
        deadline = NowMs() + kReadTimeoutMs;
      }
    }
  }

  // Exactly n bytes appended to *out.
  Result Read(size_t n, std::string* out) {
    while (buf_.size() - pos_ < n) {
      const size_t have = buf_.size() - pos_;
      out->append(buf_, pos_, have);
      n -= have;
      pos_ = buf_.size();
      const Result r = Fill(NowMs() + kReadTimeoutMs, false);
      if (r != kOk) return r == kClosed ? kError : r;
    }
    out->append(buf_, pos_, n);
    pos_ += n;
    return kOk;
  }

  // One CRLF-terminated line (without the CRLF), at most `max` bytes.
  Result Line(std::string* line, size_t max) {
    while (true) {
      const size_t end = buf_.find("\r\n", pos_);
      if (end != std::string::npos) {
        if (end - pos_ > max) return kTooLarge;
        line->assign(buf_, pos_, end - pos_);
        pos_ = end + 2;
        return kOk;
      }
      if (buf_.size() - pos_ > max) return kTooLarge;
      const Result r = Fill(NowMs() + kReadTimeoutMs, false);
      if (r != kOk) return r == kClosed ? kError : r;
    }
  }

 private:
  Result Fill(int64_t deadline, bool stoppable) {
    if (pos_ > 0 && pos_ == buf_.size()) {
      buf_.clear();
      pos_ = 0;
    } else if (pos_ > (64 << 10)) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    while (true) {
      if (stoppable && stop_->load()) return kClosed;
      const int64_t left = deadline - NowMs();
      if (left <= 0) return kTimeout;
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return kError;
      if (n == 0) continue;
      char chunk[16384];
      const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got < 0) return kError;
      if (got == 0) return kClosed;
      buf_.append(chunk, static_cast<size_t>(got));
      return kOk;
    }
  }

  const int fd_;
  const std::atomic<bool>* const stop_;
  std::string buf_;
  size_t pos_ = 0;
};

// Writes all of `data`, each wait bounded by kWriteTimeoutMs. False if the client went away.
bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(kWriteTimeoutMs)) <= 0) return false;
  }
  return true;
}

}  // namespace

// Connections served on threads started on demand, up to `max` at once; beyond, accepted
// connections wait (the kernel's backlog and this queue) for a thread to finish one. A slow or
// idle client holds only its own thread, for at most the timeouts above.
class HttpConnections {
 public:
  explicit HttpConnections(size_t max) : max_(max) {}
  ~HttpConnections() { Wait(); }

  void Add(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ >= max_) {
      waiting_.push_back(std::move(fn));
      return;
    }
    ++running_;
    std::thread([this, first = std::move(fn)]() mutable { Run(std::move(first)); }).detach();
  }

  // Until every accepted connection was served.
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return running_ == 0 && waiting_.empty(); });
  }

 private:
  void Run(std::function<void()> fn) {
    while (true) {
      fn();
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) {
        if (--running_ == 0) idle_.notify_all();
        return;  // touches nothing of this object after unlocking
      }
      fn = std::move(waiting_.front());
      waiting_.pop_front();
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable idle_;
  size_t running_ = 0;
  std::deque<std::function<void()>> waiting_;
};

void HttpServer::Serve(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A client that stops reading cannot hold the thread in send(): it returns after this long
  // without progress (then WriteAll gives up after one more wait).
  timeval send_timeout{static_cast<time_t>(kWriteTimeoutMs / 1000), 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  Reader reader(fd, &stop_);
  bool refused = false;  // the connection ends on an error reply (see the lingering close below)
  for (int served = 0; served < kMaxRequestsPerConnection; ++served) {
    std::string head;
    const Reader::Result got = reader.ReadHead(&head, served == 0 ? kReadTimeoutMs : kKeepAliveMs);
    HttpRequest request;
    // A reply and whether the connection ends after it.
    auto reply = [&](HttpResponse response, bool close) {
      if (close && response.status >= 400) refused = true;
      std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status), "\r\n");
      bool has_connection = false;
      for (const auto& [name, value] : response.headers) {
        if (absl::EqualsIgnoreCase(name, "Content-Length")) continue;
        if (absl::EqualsIgnoreCase(name, "Connection")) {
          has_connection = true;
          if (absl::EqualsIgnoreCase(value, "close")) close = true;
        }
        absl::StrAppend(&out, name, ": ", value, "\r\n");
      }
      if (!response.content_type.empty()) absl::StrAppend(&out, "Content-Type: ", response.content_type, "\r\n");
      absl::StrAppend(&out, "Content-Length: ", response.body.size(), "\r\n");
      if (!has_connection) absl::StrAppend(&out, close ? "Connection: close\r\n" : "Keep-Alive: timeout=2\r\n");
      out += "\r\n";
      if (request.method != "HEAD") out += response.body;
      return WriteAll(fd, out) && !close;
    };
    if (got == Reader::kClosed || got == Reader::kError) break;
    if (got == Reader::kTimeout) {
      if (served == 0 || reader.buffered()) reply(Error(request, 408, StatusText(408)), true);
      break;
    }
    if (got == Reader::kTooLarge) {
      reply(Error(request, 431, "request head too large"), true);
      break;
    }
    // Request line.
    const size_t eol = head.find("\r\n");
    const std::vector<absl::string_view> parts = absl::StrSplit(absl::string_view(head).substr(0, eol), ' ');
    static const char* const kMethods[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    if (parts.size() != 3 || parts[1].empty() || !(parts[2] == "HTTP/1.1" || parts[2] == "HTTP/1.0") ||
        std::none_of(std::begin(kMethods), std::end(kMethods), [&](const char* m) { return parts[0] == m; })) {
      reply(Error(request, 400, StatusText(400)), true);
      break;
    }
    request.method = std::string(parts[0]);
    const bool http10 = parts[2] == "HTTP/1.0";
    if (parts[1].size() > kMaxTargetBytes) {
      reply(Error(request, 414, StatusText(414)), true);
      break;
    }
    absl::string_view target = parts[1];
    const size_t q = target.find('?');
    request.path = Decode(target.substr(0, q), /*plus=*/false);
    if (q != absl::string_view::npos) {
      for (absl::string_view kv : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        request.params.emplace(Decode(kv.substr(0, eq), true),
                               eq == absl::string_view::npos ? std::string() : Decode(kv.substr(eq + 1), true));
      }
    }
    // Headers.
    bool bad_header = false;
    for (absl::string_view line : absl::StrSplit(absl::string_view(head).substr(eol + 2), "\r\n", absl::SkipEmpty())) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos || colon == 0) {
        bad_header = true;
        break;
      }
      request.headers.emplace(absl::AsciiStrToLower(line.substr(0, colon)),
                              std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
    }
    if (bad_header) {
      reply(Error(request, 400, "malformed header line"), true);
      break;
    }
    const std::string connection = absl::AsciiStrToLower(request.Header("connection"));
    bool close = http10 ? connection != "keep-alive" : connection == "close";
    // Body: chunked or Content-Length, at most max_body_bytes.
    const bool chunked = absl::StrContains(absl::AsciiStrToLower(request.Header("transfer-encoding")), "chunked");
    const std::string length_header = request.Header("content-length");
    uint64_t length = 0;
    if (!length_header.empty() && (chunked || !absl::SimpleAtoi(length_header, &length))) {
      reply(Error(request, 400, chunked ? "both Content-Length and chunked Transfer-Encoding"
                                        : "malformed Content-Length"), true);
      break;
    }
    if (length > options_.max_body_bytes) {
      // Refused before reading it; the unread body leaves the connection unusable.
      reply(Error(request, 413, absl::StrCat("request body too large: the limit is ", options_.max_body_bytes,
                                             " bytes")), true);
      break;
    }
    if ((chunked || length > 0) && absl::EqualsIgnoreCase(request.Header("expect"), "100-continue")) {
      if (!WriteAll(fd, "HTTP/1.1 100 Continue\r\n\r\n")) break;
    }
    Reader::Result body = Reader::kOk;
    if (chunked) {
      while (true) {
        std::string size_line;
        body = reader.Line(&size_line, 1024);
        if (body != Reader::kOk) break;
        uint64_t size = 0;
        const absl::string_view hex = absl::string_view(size_line).substr(0, size_line.find(';'));
        if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(hex), &size)) {
          body = Reader::kError;
          break;
        }
        if (size == 0) {  // trailers, then the empty line
          std::string trailer;
          do {
            body = reader.Line(&trailer, 8192);
          } while (body == Reader::kOk && !trailer.empty());
          break;
        }
        if (request.body.size() + size > options_.max_body_bytes) {
          body = Reader::kTooLarge;
          break;
        }
        body = reader.Read(size, &request.body);
        std::string crlf;
        if (body == Reader::kOk) body = reader.Line(&crlf, 0);
        if (body != Reader::kOk) break;
      }
    } else if (length > 0) {
      body = reader.Read(static_cast<size_t>(length), &request.body);
    }
    if (body == Reader::kTooLarge) {
      request.body.clear();
      reply(Error(request, 413, absl::StrCat("request body too large: the limit is ", options_.max_body_bytes,
                                             " bytes")), true);
      break;
    }
    if (body == Reader::kTimeout) {
      reply(Error(request, 408, "the request body did not arrive in time"), true);
      break;
    }
    if (body != Reader::kOk) {
      if (body == Reader::kError && chunked) reply(Error(request, 400, "malformed chunked body"), true);
      break;
    }
    if (stop_.load()) close = true;
    if (!reply(Route(request), close)) break;
  }
  ::shutdown(fd, SHUT_WR);
  if (refused) {
    // Lingering close: take (and drop) what the client is still sending, for a bounded time,
    // so that it can finish writing and read the refusal instead of getting a reset.
    const int64_t until = NowMs() + kLingerMs;
    char sink[16384];
    for (int64_t left = kLingerMs, taken = 0; left > 0 && taken < kLingerBytes; left = until - NowMs()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      const ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
      if (n <= 0) break;
      taken += n;
    }
  }
  ::close(fd);
}

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer: already started");
  const std::string where = absl::StrCat("HTTP server cannot listen on ", options_.host, ":", options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(options_.port);
  if (int rc = getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &result); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", gai_strerror(rc)));
  }
  std::string reason = "no usable address";
  int fd = -1;
  for (addrinfo* a = result; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    int yes = 1;
    // SO_REUSEADDR (restart while old connections linger) but never SO_REUSEPORT: a second
    // server on a busy port must fail.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      reason = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(result);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(where, ": ", reason));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  listen_fd_ = fd;
  connections_ = std::make_unique<HttpConnections>(options_.threads > 0 ? options_.threads : 1);
  started_ = true;
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, 100);
      if (n <= 0) continue;
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        // Out of descriptors (EMFILE) or a connection reset before it was taken: the listening
        // socket stays readable, so pause instead of spinning.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      connections_->Add([this, client] { Serve(client); });
    }
  });
  return absl::OkStatus();
}

void HttpServer::SetStopping() { stopping_ = true; }

void HttpServer::Stop() {
  SetStopping();
  if (!thread_.joinable()) return;
  // No new connections; idle keep-alive connections close at once, requests in progress are
  // answered.
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
  listen_fd_ = -1;
  connections_->Wait();
}

}  // namespace tnmt

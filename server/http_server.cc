// HttpServer on cpp-httplib: catch-all routes for every method dispatch through our own tables
// (exact paths, then prefixes), so routing, 404s, 405s and HEAD behave the same for built-in
// and added handlers.
#include "server/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tnmt {
namespace {

constexpr char kTextPlain[] = "text/plain; charset=utf-8";
constexpr char kPrometheusText[] = "text/plain; version=0.0.4; charset=utf-8";

// An idle keep-alive connection holds a worker this long; Stop() may wait for it.
constexpr time_t kKeepAliveSeconds = 2;

// httplib reports only that binding failed. Repeats the steps it takes (resolve, socket,
// SO_REUSEADDR, bind, listen) to find out why. Returns InvalidArgument for an unresolvable
// host, Unavailable otherwise.
absl::Status BindFailure(const std::string& host, int port) {
  const std::string where = absl::StrCat("HTTP server cannot listen on ", host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", gai_strerror(rc)));
  }
  std::string reason = "unknown reason";
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    int sock = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (sock < 0) {
      reason = std::strerror(errno);
      continue;
    }
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(sock, a->ai_addr, a->ai_addrlen) != 0 || listen(sock, 1) != 0) {
      reason = std::strerror(errno);
    }
    close(sock);
  }
  freeaddrinfo(result);
  return absl::UnavailableError(absl::StrCat(where, ": ", reason));
}

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

// Our view of an httplib request (the body only when asked).
HttpRequest Convert(const httplib::Request& req, bool with_body) {
  HttpRequest request;
  request.path = req.path;
  request.params = std::multimap<std::string, std::string>(req.params.begin(), req.params.end());
  request.method = req.method;
  for (const auto& [name, value] : req.headers) {
    request.headers.emplace(absl::AsciiStrToLower(name), value);
  }
  if (with_body) request.body = req.body;
  return request;
}

void Apply(const HttpResponse& response, httplib::Response& res) {
  res.status = response.status;
  for (const auto& [name, value] : response.headers) res.set_header(name, value);
  res.set_content(response.body, response.content_type);
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

// httplib's connection queue: a thread per connection, up to `max` at once, instead of
// httplib's fixed pool. With the fixed pool (8 threads), eight clients sending a header line a
// second, or a few dozen idle sockets, held every worker and /healthz, /readyz and /metrics went
// unanswered for as long as they kept at it. Threads are started on demand and end with their
// connection, or serve the connections waiting beyond `max`.
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max) : max_(max) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ >= max_) {
      waiting_.push_back(std::move(fn));
      return;
    }
    ++running_;
    std::thread([this, first = std::move(fn)]() mutable { Run(std::move(first)); }).detach();
  }

  // Waits until every accepted connection was served (httplib calls it once it stopped accepting).
  void shutdown() override {
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

}  // namespace

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer: already started");
  auto server = std::make_unique<httplib::Server>();
  const size_t threads = options_.threads > 0 ? options_.threads : 1;
  server->new_task_queue = [threads] { return new ConnectionThreads(threads); };
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->set_keep_alive_timeout(kKeepAliveSeconds);
  // httplib applies its payload limit only to a declared Content-Length (skipping such a body
  // unread into memory); a chunked or compressed body would grow without bound. So methods
  // with a body read it themselves through a content reader that stops at the limit.
  server->set_payload_max_length(options_.max_body_bytes);
  const auto dispatch = [this](const httplib::Request& req, httplib::Response& res) {
    HttpRequest request = Convert(req, /*with_body=*/false);
    Apply(Route(request), res);
  };
  const auto dispatch_with_body = [this](const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& content_reader) {
    HttpRequest request = Convert(req, /*with_body=*/false);
    bool too_large = false;
    const bool read = content_reader([&](const char* data, size_t length) {
      if (request.body.size() + length > options_.max_body_bytes) {
        too_large = true;
        return false;
      }
      request.body.append(data, length);
      return true;
    });
    if (!read) {
      // The rest of the body may still be unread: this connection cannot carry another request.
      too_large = too_large || res.status == 413;
      request.body.clear();
      HttpResponse response = Error(
          request, too_large ? 413 : 400,
          too_large ? absl::StrCat("request body too large: the limit is ",
                                   options_.max_body_bytes, " bytes")
                    : "cannot read the request body");
      response.headers.emplace_back("Connection", "close");
      Apply(response, res);
      return;
    }
    Apply(Route(request), res);
  };
  server->Get(".*", dispatch);
  server->Options(".*", dispatch);
  server->Post(".*", dispatch_with_body);
  server->Put(".*", dispatch_with_body);
  server->Patch(".*", dispatch_with_body);
  server->Delete(".*", dispatch_with_body);
  // httplib's own refusals (a malformed request, a URI too long) come here with an empty
  // body; our routes' replies have one and are kept.
  server->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const std::string message =
            res.status == 413 ? absl::StrCat("request body too large: the limit is ",
                                             options_.max_body_bytes, " bytes")
                              : StatusText(res.status);
        Apply(Error(Convert(req, /*with_body=*/false), res.status, message), res);
        return httplib::Server::HandlerResponse::Handled;
      }));

  int port = -1;
  if (options_.port == 0) {
    port = server->bind_to_any_port(options_.host);
  } else if (server->bind_to_port(options_.host, options_.port)) {
    port = options_.port;
  }
  if (port <= 0) return BindFailure(options_.host, options_.port);

  server_ = std::move(server);
  port_ = port;
  started_ = true;
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listener_exited_ = true;
  });
  return absl::OkStatus();
}

void HttpServer::SetStopping() { stopping_ = true; }

void HttpServer::Stop() {
  SetStopping();
  if (!thread_.joinable()) return;
  // httplib's stop() does nothing until the listener thread has marked itself running.
  while (!listener_exited_ && !server_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  thread_.join();
}

}  // namespace tnmt

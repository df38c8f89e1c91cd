// HttpServer on cpp-httplib: one catch-all GET route dispatches on the exact path through our
// own table, so routing, 404s and HEAD behave the same for built-in and added handlers.
#include "server/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

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

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, MetricsCallback metrics,
                       ReadinessCallback readiness)
    : options_(std::move(options)), metrics_(std::move(metrics)),
      readiness_(std::move(readiness)) {
  handlers_["/healthz"] = [this](const HttpRequest&) {
    return stopping_ ? Text(503, "stopping") : Text(200, "ok");
  };
  handlers_["/readyz"] = [this](const HttpRequest&) {
    if (stopping_) return Text(503, "stopping");
    if (!readiness_) return Text(200, "ready");
    const absl::Status status = readiness_();
    if (status.ok()) return Text(200, "ready");
    return Text(503, status.message().empty() ? status.ToString()
                                              : std::string(status.message()));
  };
  if (metrics_) {
    handlers_["/metrics"] = [this](const HttpRequest&) {
      return HttpResponse{200, kPrometheusText, metrics_()};
    };
  }
}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::AddGetHandler(const std::string& path, GetHandler handler) {
  if (started_) {
    return absl::FailedPreconditionError("HttpServer: AddGetHandler after Start");
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("HttpServer: path must start with '/': \"", path, "\""));
  }
  if (!handlers_.emplace(path, std::move(handler)).second) {
    return absl::AlreadyExistsError(absl::StrCat("HttpServer: ", path, " is already routed"));
  }
  return absl::OkStatus();
}

HttpResponse HttpServer::Route(const HttpRequest& request) const {
  auto it = handlers_.find(request.path);
  if (it == handlers_.end()) return Text(404, "not found");
  return it->second(request);
}

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer: already started");
  auto server = std::make_unique<httplib::Server>();
  const size_t threads = options_.threads > 0 ? options_.threads : 1;
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->set_keep_alive_timeout(kKeepAliveSeconds);
  server->Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
    HttpRequest request{req.path, req.params};
    HttpResponse response = Route(request);
    res.status = response.status;
    res.set_content(response.body, response.content_type);
  });

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

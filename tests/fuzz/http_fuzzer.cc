// libFuzzer target for the HTTP request path: tnmt::HttpServer (server/http_server.h) through
// its public API only, over real loopback TCP connections.
//
// One server per process, on 127.0.0.1 with a kernel-chosen port: POST /echo answers the body
// length, GET /hello a fixed text, plus the built-in /healthz, /readyz and /metrics. Limits are
// set low (4 KiB bodies, 2 s per request) so their refusals are reachable with small inputs.
// For each input (raw bytes, at most -max_len): open a connection, send the bytes, half-close,
// read until the server closes or kReadTimeout passes. Properties:
//   - the reply is empty because the connection closed (EOF or reset), or it starts with a
//     well-formed status line "HTTP/1.1 DDD " and, when its head is complete, a head whose lines
//     end in CRLF and are "name: value";
//   - the server neither stays silent past kReadTimeout with the connection open, nor stops
//     accepting connections;
//   - every kHealthEvery inputs, GET /healthz on a fresh connection answers 200 (the server
//     survived whatever came before).
// Built with clang's -fsanitize=fuzzer,address,undefined by tests/fuzz/bazel-fuzz.sh; the
// server's I/O and worker threads are instrumented too, so a sanitizer report on any of them
// fails the run.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/http_server.h"

namespace {

constexpr int kReadTimeoutMs = 10000;  // well over the server's request_timeout (2 s)
constexpr size_t kMaxReply = 256 << 10;   // bytes of reply kept for the checks
constexpr uint64_t kHealthEvery = 100;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "http_fuzzer: property violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

tnmt::HttpServer* StartServer() {
  tnmt::HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  options.io_threads = 2;
  options.max_connections = 256;
  options.max_body_bytes = 4096;
  options.request_timeout = absl::Seconds(2);
  options.keep_alive_timeout = absl::Seconds(1);
  auto* server = new tnmt::HttpServer(
      options, [] { return std::string("# TYPE fuzz_up gauge\nfuzz_up 1\n"); },
      [] { return absl::OkStatus(); });
  absl::Status s = server->AddPostHandler("/echo", [](const tnmt::HttpRequest& request) {
    tnmt::HttpResponse response;
    response.body = absl::StrCat(request.body.size(), "\n");
    return response;
  });
  if (s.ok()) {
    s = server->AddGetHandler("/hello", [](const tnmt::HttpRequest&) {
      tnmt::HttpResponse response;
      response.body = "hello\n";
      return response;
    });
  }
  if (s.ok()) s = server->Start();
  if (!s.ok()) Fail("the HTTP server does not start: " + s.ToString());
  return server;  // lives for the whole process: the fuzzer exits without destructors
}

int Connect(int port) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) Fail(absl::StrCat("socket: ", std::strerror(errno)));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    const int err = errno;
    ::close(fd);
    // Out of local ports (connections in TIME_WAIT) or a full backlog: wait and retry.
    if (err != EADDRNOTAVAIL && err != EAGAIN && err != EINTR && err != ETIMEDOUT) {
      Fail(absl::StrCat("connect to the server on port ", port, ": ", std::strerror(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Fail("cannot connect to the server (no local port free for 2 s)");
}

// Closes with a reset so the client side keeps no TIME_WAIT entry per input.
void CloseAbortively(int fd) {
  linger lin{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lin, sizeof lin);
  ::close(fd);
}

void SendAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the server closed early (e.g. after refusing the head): fine
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

struct Reply {
  std::string bytes;
  bool closed = false;  // EOF or reset seen (else the timeout passed)
};

Reply ReadReply(int fd, int timeout_ms) {
  Reply reply;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[16384];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return reply;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return reply;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      reply.closed = true;
      return reply;
    }
    if (reply.bytes.size() < kMaxReply) reply.bytes.append(buffer, static_cast<size_t>(n));
  }
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// "" when `reply` (non-empty) starts with a well-formed response head, else what is wrong.
std::string CheckHead(const std::string& reply) {
  if (reply.size() < 13) {
    return "a reply of " + std::to_string(reply.size()) + " bytes is too short for a status line";
  }
  if (reply.compare(0, 9, "HTTP/1.1 ") != 0 || !IsDigit(reply[9]) || !IsDigit(reply[10]) ||
      !IsDigit(reply[11]) || reply[12] != ' ' || reply[9] < '1' || reply[9] > '5') {
    return "the reply does not start with \"HTTP/1.1 DDD \"";
  }
  const size_t end = reply.find("\r\n\r\n");
  if (end == std::string::npos) return "";  // the head is cut off at kMaxReply or by a close
  size_t line = reply.find("\r\n") + 2;
  while (line < end + 2) {
    const size_t eol = reply.find("\r\n", line);
    const std::string header = reply.substr(line, eol - line);
    const size_t colon = header.find(':');
    if (colon == std::string::npos || colon == 0 || header.find('\n') != std::string::npos ||
        header.find('\r') != std::string::npos) {
      return "a malformed header line in the reply: \"" + header.substr(0, 80) + "\"";
    }
    line = eol + 2;
  }
  return "";
}

void CheckHealthy(int port, uint64_t inputs) {
  static const char kProbe[] = "GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
  const int fd = Connect(port);
  SendAll(fd, reinterpret_cast<const uint8_t*>(kProbe), sizeof kProbe - 1);
  const Reply reply = ReadReply(fd, kReadTimeoutMs);
  CloseAbortively(fd);
  if (reply.bytes.compare(0, 13, "HTTP/1.1 200 ") != 0) {
    Fail(absl::StrCat("GET /healthz after ", inputs, " inputs did not answer 200 (got ",
                      reply.bytes.size(), " bytes: \"", reply.bytes.substr(0, 60),
                      "\"); the input that broke it ran at most ", kHealthEvery, " inputs earlier"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tnmt::HttpServer* const server = StartServer();
  static uint64_t inputs = 0;
  const int port = server->port();

  const int fd = Connect(port);
  SendAll(fd, data, size);
  ::shutdown(fd, SHUT_WR);
  const Reply reply = ReadReply(fd, kReadTimeoutMs);
  CloseAbortively(fd);
  if (!reply.bytes.empty()) {
    if (const std::string problem = CheckHead(reply.bytes); !problem.empty()) {
      Fail(problem + "; reply starts \"" + reply.bytes.substr(0, 120) + "\"");
    }
  } else if (!reply.closed) {
    Fail(absl::StrCat("no reply and no close within ", kReadTimeoutMs, " ms of the half-close"));
  }
  if (++inputs % kHealthEvery == 0) CheckHealthy(port, inputs);
  return 0;
}

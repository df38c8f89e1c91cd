// serve_load: a closed-loop gRPC load generator for tnmt.v1.TranslationService (`tnmt serve`).
// A benchmark and test driver, not a test: it reports what happened and sets its exit status
// from the gRPC status codes it got.
//
// N clients, each its own thread, send Translate requests back to back (a client sends its next
// request as soon as the previous one is answered) until --seconds have passed, or each client
// has sent --requests requests, or the --stop-file exists. The clients share --channels channels
// (connections), assigned round robin.
//
// Report (plain text, or one JSON line with --json):
//   requests sent, OK, failures by gRPC status code name (with up to 5 distinct messages and the
//   slowest latency of each code: a slow failure was in flight, a fast one refused), plus
//   BAD_RESPONSE for an OK response whose translations do not match the request's texts;
//   throughput over the wall time from the first request to the last answer: OK requests/s,
//   sentences/s (texts of OK requests) and tokens/s (generated target tokens: Hypothesis.tokens
//   of the best hypothesis of each translation, end-of-sentence excluded);
//   latency of OK requests, client-side, p50/p90/p99/max (nearest rank), in milliseconds.
//
// Exit status: 0 if every request got OK, or failed only with a code listed in --allow-codes
// (e.g. UNAVAILABLE for requests refused once a server began shutting down); 1 otherwise,
// and 1 if the target could not be reached; 2 for bad flags.
//
// --bad-fraction F: that share of each client's requests (spread evenly) is replaced by a bad
// one, taking turns among: a text that is not UTF-8, a text of 20,000 words, an unknown model,
// beam_size 1000, and 16 texts with beam 64 and max_length 4000 (more than any server cost limit
// allows). Bad requests are tallied apart, by kind and status code ("bad" in the JSON): they
// do not count as OK requests or failures, and one answered OK is a BAD_RESPONSE failure (the
// server accepted what it must refuse).
//
// --tls, --tls-ca, --tls-cert/--tls-key, --tls-server-name and --token-file connect as the tnmt
// client commands do (tools/tnmt/connection.h).
//
// --health: no load; one grpc.health.v1.Health/Check for --health-service (default "", the
// whole server); prints the serving status (SERVING, NOT_SERVING, ...) and exits 0 only if it is
// SERVING, 1 otherwise (an RPC error prints "ERROR <CODE>: message").
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "server/status_mapping.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/connection.h"

namespace tnmt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A BAD_RESPONSE is an OK status with a response that does not answer the request.
constexpr char kBadResponse[] = "BAD_RESPONSE";

const std::vector<std::string>& DefaultTexts() {
  static const std::vector<std::string> texts = {
      "The house is red.",
      "Where is the train station?",
      "I would like a cup of coffee, please.",
      "The weather is nice today.",
      "She reads a book every week.",
      "We are going to the cinema tonight.",
      "How much does this ticket cost?",
      "My brother lives in a small town near the sea.",
      "The meeting starts at nine o'clock.",
      "Can you help me with my luggage?",
      "The children are playing in the garden.",
      "This restaurant serves excellent fish.",
      "He forgot his umbrella at the office.",
      "Please close the window, it is cold.",
      "The museum is closed on Mondays.",
      "Our flight was delayed by two hours.",
      "I have never seen such a beautiful sunset.",
      "The doctor will see you in ten minutes.",
      "They bought a new car last year.",
      "Do you know a good hotel in the city centre?",
      "The dog sleeps under the table.",
      "It has been raining since yesterday morning.",
      "Thank you very much for your help.",
      "The shop opens at eight and closes at six.",
      "My phone battery is almost empty.",
      "The river flows through the old town.",
      "We need more time to finish the project.",
      "Could you speak a little more slowly?",
      "The library has thousands of old books.",
      "Tomorrow we will visit our grandparents.",
      "Good morning!",
      "Yes.",
  };
  return texts;
}

// A gRPC code's name, as the server writes it (server/status_mapping.h).
std::string CodeName(int code) { return server::CodeName(static_cast<grpc::StatusCode>(code)); }

bool FileExists(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

struct Flags {
  std::string target;
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // from the TLS flags (tools/tnmt/connection.h)
  std::string tls_server_name;
  std::string token;  // --token-file: the translation API's bearer token
  int clients = 1;
  int channels = 1;
  double seconds = 10;
  int requests = 0;  // per client; > 0 replaces --seconds
  int texts_per_request = 1;
  std::string input;
  int beam_size = 0;    // 0: the model's default (unset in the request)
  int max_length = 0;   // 0: the model's default
  int deadline_ms = 30000;  // 0: none
  double connect_timeout_s = 10;
  std::string model;
  bool json = false;
  bool health = false;
  std::string health_service;
  std::string stop_file;
  bool stop_on_unavailable = false;
  std::set<std::string> allowed_codes;
  double bad_fraction = 0;
};

// The kinds of bad request --bad-fraction sends, in turn.
const char* const kBadKinds[] = {"invalid_utf8", "text_too_long", "unknown_model", "beam_too_large",
                                 "cost_too_high"};
constexpr int kNumBadKinds = sizeof(kBadKinds) / sizeof(kBadKinds[0]);

void MakeBad(int kind, const std::string& good_text, tnmt::v1::TranslateRequest* r) {
  r->clear_texts();
  r->add_texts(good_text);
  switch (kind) {
    case 0:
      r->set_texts(0, std::string("bad \xff\xfe bytes ") + good_text);
      break;
    case 1: {
      std::string huge;
      for (int i = 0; i < 20000; ++i) huge += "word ";
      r->set_texts(0, huge);
      break;
    }
    case 2:
      r->set_model("no-such-model");
      break;
    case 3:
      r->mutable_options()->set_beam_size(1000);
      break;
    default:
      for (int i = 1; i < 16; ++i) r->add_texts(good_text);
      r->mutable_options()->set_beam_size(64);
      // Within the server's default --max-output-length (1024), so the refusal is the cost:
      // 16 texts x beam 64 x 1001 steps, over the default quota of 131072.
      r->mutable_options()->set_max_length(1000);
      break;
  }
}

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr, "serve_load: %s\n", error.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  cli::Args args("serve_load",
                 "Closed-loop load on tnmt.v1.TranslationService (Translate), or one health check\n"
                 "(--health). See bench/serve_load.cc for what is reported and the exit status.");
  Flags f;
  args.AddString("target", "localhost:50051", "server address, host:port");
  args.AddInt("clients", f.clients, "concurrent closed-loop clients (one thread each)");
  args.AddInt("channels", f.channels, "gRPC channels (connections) the clients share, round robin");
  args.AddFloat("seconds", static_cast<float>(f.seconds), "how long to send requests (unless --requests)");
  args.AddInt("requests", f.requests, "requests per client; > 0 replaces --seconds");
  args.AddInt("texts-per-request", f.texts_per_request, "texts in each Translate request");
  args.AddString("input", "", "sentences, one per line (default: ~30 built-in English sentences)");
  args.AddInt("beam-size", f.beam_size, "DecodingOptions.beam_size (0: the model's default)");
  args.AddInt("max-length", f.max_length, "DecodingOptions.max_length (0: the model's default)");
  args.AddInt("deadline-ms", f.deadline_ms, "per-request deadline in ms (0: none)");
  args.AddFloat("connect-timeout", static_cast<float>(f.connect_timeout_s), "seconds to wait for the connection");
  args.AddString("model", "", "TranslateRequest.model (default: the server's default model)");
  args.AddBool("json", false, "print one JSON line instead of the text report");
  args.AddBool("health", false, "only run one grpc.health.v1.Health/Check and print the status");
  args.AddString("health-service", "", "service name for --health (\"\": the whole server)");
  args.AddString("stop-file", "", "stop sending new requests once this file exists");
  args.AddBool("stop-on-unavailable", false, "a client stops after its first UNAVAILABLE (as one that fails over to another replica)");
  args.AddString("allow-codes", "", "comma-separated status codes that do not fail the run (e.g. UNAVAILABLE)");
  cli::AddTlsFlags(&args);
  cli::AddApiTokenFlag(&args);
  args.AddFloat("bad-fraction", 0, "share of requests replaced by bad ones (see bench/serve_load.cc), 0 to 1");
  const absl::Status parsed = args.Parse(argc, argv, 1);
  if (!parsed.ok()) Usage(std::string(parsed.message()));
  if (args.help_requested()) {
    std::printf("%s", args.Help().c_str());
    std::exit(0);
  }
  f.target = args.GetString("target");
  {
    grpc::ChannelArguments unused;
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = cli::TlsCredentialsFromFlags(args, &unused);
    if (!credentials.ok()) Usage(std::string(credentials.status().message()));
    f.credentials = *credentials;
    f.tls_server_name = args.GetString("tls-server-name");
    absl::StatusOr<std::string> token = cli::ApiTokenFromFlags(args);
    if (!token.ok()) Usage(std::string(token.status().message()));
    f.token = *token;
  }
  f.clients = args.GetInt("clients");
  f.channels = args.GetInt("channels");
  f.seconds = args.GetFloat("seconds");
  f.requests = args.GetInt("requests");
  f.texts_per_request = args.GetInt("texts-per-request");
  f.input = args.GetString("input");
  f.beam_size = args.GetInt("beam-size");
  f.max_length = args.GetInt("max-length");
  f.deadline_ms = args.GetInt("deadline-ms");
  f.connect_timeout_s = args.GetFloat("connect-timeout");
  f.model = args.GetString("model");
  f.json = args.GetBool("json");
  f.health = args.GetBool("health");
  f.health_service = args.GetString("health-service");
  f.stop_file = args.GetString("stop-file");
  f.stop_on_unavailable = args.GetBool("stop-on-unavailable");
  f.bad_fraction = args.GetFloat("bad-fraction");
  if (f.target.empty()) Usage("--target must be host:port");
  if (f.clients < 1) Usage("--clients must be >= 1");
  if (f.channels < 1) Usage("--channels must be >= 1");
  if (f.requests < 0) Usage("--requests must be >= 0");
  if (f.requests == 0 && !(f.seconds > 0)) Usage("--seconds must be > 0 (or give --requests)");
  if (f.texts_per_request < 1) Usage("--texts-per-request must be >= 1");
  if (!(f.bad_fraction >= 0 && f.bad_fraction <= 1)) Usage("--bad-fraction must be in [0, 1]");
  if (f.beam_size < 0) Usage("--beam-size must be >= 0");
  if (f.max_length < 0) Usage("--max-length must be >= 0");
  if (f.deadline_ms < 0) Usage("--deadline-ms must be >= 0");
  if (!(f.connect_timeout_s > 0)) Usage("--connect-timeout must be > 0");
  std::string codes = args.GetString("allow-codes");
  size_t start = 0;
  while (start <= codes.size()) {
    size_t comma = codes.find(',', start);
    if (comma == std::string::npos) comma = codes.size();
    std::string code = codes.substr(start, comma - start);
    code.erase(0, code.find_first_not_of(" \t"));
    code.erase(code.find_last_not_of(" \t") + 1);
    if (!code.empty()) {
      std::transform(code.begin(), code.end(), code.begin(), [](unsigned char c) { return std::toupper(c); });
      bool known = code == kBadResponse;
      for (int i = 0; i <= 16; ++i) known = known || CodeName(i) == code;
      if (!known) Usage("--allow-codes: unknown status code \"" + code + "\" (use names like UNAVAILABLE)");
      f.allowed_codes.insert(code);
    }
    start = comma + 1;
  }
  return f;
}

std::vector<std::string> ReadTexts(const std::string& path) {
  if (path.empty()) return DefaultTexts();
  std::ifstream in(path);
  if (!in) Usage("cannot read --input " + path);
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) Usage("--input " + path + " has no non-empty line");
  return texts;
}

std::shared_ptr<grpc::Channel> MakeChannel(const Flags& f, int index) {
  grpc::ChannelArguments ca;
  // Separate connections per channel: without these, channels with equal arguments share one.
  ca.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ca.SetInt("tnmt.serve_load.channel", index);
  ca.SetMaxReceiveMessageSize(64 << 20);
  if (!f.tls_server_name.empty()) ca.SetSslTargetNameOverride(f.tls_server_name);
  return grpc::CreateCustomChannel(f.target, f.credentials, ca);
}

bool Connect(const std::vector<std::shared_ptr<grpc::Channel>>& channels, double timeout_s) {
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (const auto& ch : channels) {
    if (!ch->WaitForConnected(deadline)) return false;
  }
  return true;
}

int Health(const Flags& f) {
  auto channel = MakeChannel(f, 0);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(f.connect_timeout_s * 1000)));
  ctx.set_wait_for_ready(true);  // a server still starting up is waited for, not an error
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(f.health_service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, request, &response);
  if (!s.ok()) {
    std::printf("ERROR %s: %s\n", CodeName(s.error_code()).c_str(), s.error_message().c_str());
    return 1;
  }
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

constexpr size_t kMessages = 5;

void AddMessage(std::vector<std::string>* messages, const std::string& m) {
  if (messages->size() < kMessages && std::find(messages->begin(), messages->end(), m) == messages->end()) {
    messages->push_back(m);
  }
}

// One client's tallies; merged after the run.
struct Tally {
  int64_t sent = 0, ok = 0, sentences = 0, tokens = 0;
  std::map<std::string, int64_t> failures;
  std::map<std::string, std::vector<std::string>> messages;  // up to kMessages distinct per code
  std::map<std::string, double> failure_max_ms;  // slowest failure per code
  std::vector<double> latency_ms;  // OK requests
  std::map<std::string, std::map<std::string, int64_t>> bad;  // kind -> code -> count
};

void Client(const Flags& f, int id, tnmt::v1::TranslationService::Stub* stub,
            const std::vector<std::string>& texts, const std::atomic<bool>& stop, Tally* t) {
  // Each client starts at its own place in the sentence list and walks through it.
  size_t next = (static_cast<size_t>(id) * 7) % texts.size();
  for (int i = 0; f.requests == 0 || i < f.requests; ++i) {
    if (stop.load(std::memory_order_relaxed)) break;
    tnmt::v1::TranslateRequest request;
    request.set_model(f.model);
    for (int j = 0; j < f.texts_per_request; ++j) {
      request.add_texts(texts[next]);
      next = (next + 1) % texts.size();
    }
    if (f.beam_size > 0) request.mutable_options()->set_beam_size(f.beam_size);
    if (f.max_length > 0) request.mutable_options()->set_max_length(f.max_length);
    // Request i is bad when the running count of bad ones (i * fraction) steps up.
    const bool bad = f.bad_fraction > 0 && std::floor((i + 1) * f.bad_fraction) > std::floor(i * f.bad_fraction);
    const int bad_kind = bad ? static_cast<int>(std::floor(i * f.bad_fraction) + id) % kNumBadKinds : -1;
    if (bad) MakeBad(bad_kind, request.texts(0), &request);
    tnmt::v1::TranslateResponse response;
    grpc::ClientContext ctx;
    if (!f.token.empty()) ctx.AddMetadata("authorization", "Bearer " + f.token);
    if (f.deadline_ms > 0) {
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(f.deadline_ms));
    }
    const auto t0 = Clock::now();
    const grpc::Status s = stub->Translate(&ctx, request, &response);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ++t->sent;
    std::string code = CodeName(s.error_code());
    std::string message = s.error_message();
    if (bad) {
      ++t->bad[kBadKinds[bad_kind]][code];
      if (!s.ok()) continue;
      code = kBadResponse;
      message = std::string("a bad request (") + kBadKinds[bad_kind] + ") was answered OK";
    }
    if (s.ok() && !bad) {
      if (response.translations_size() != request.texts_size()) {
        code = kBadResponse;
        message = std::to_string(response.translations_size()) + " translations for " +
                  std::to_string(request.texts_size()) + " texts";
      } else {
        for (const auto& tr : response.translations()) {
          if (tr.hypotheses_size() == 0) {
            code = kBadResponse;
            message = "a translation without hypotheses";
          }
        }
      }
    }
    if (code == "OK") {
      ++t->ok;
      t->sentences += response.translations_size();
      for (const auto& tr : response.translations()) t->tokens += tr.hypotheses(0).tokens();
      t->latency_ms.push_back(ms);
    } else {
      ++t->failures[code];
      AddMessage(&t->messages[code], message);
      double& slowest = t->failure_max_ms[code];
      slowest = std::max(slowest, ms);
      // A draining server refuses with UNAVAILABLE; a real client moves to another replica.
      if (f.stop_on_unavailable && code == "UNAVAILABLE") break;
    }
  }
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

int Run(const Flags& f) {
  const std::vector<std::string> texts = ReadTexts(f.input);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::min(f.channels, f.clients); ++i) channels.push_back(MakeChannel(f, i));
  if (!Connect(channels, f.connect_timeout_s)) {
    std::fprintf(stderr, "serve_load: cannot connect to %s within %.0f s\n", f.target.c_str(), f.connect_timeout_s);
    return 1;
  }
  std::vector<std::unique_ptr<tnmt::v1::TranslationService::Stub>> stubs;
  for (const auto& ch : channels) stubs.push_back(tnmt::v1::TranslationService::NewStub(ch));

  std::atomic<bool> stop{false};
  std::vector<Tally> tallies(f.clients);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < f.clients; ++c) {
    threads.emplace_back(Client, std::cref(f), c, stubs[c % stubs.size()].get(), std::cref(texts),
                         std::cref(stop), &tallies[c]);
  }
  // The clock and the stop file, checked every 20 ms; the clients check `stop` before each request.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const auto end = start + std::chrono::milliseconds(static_cast<int64_t>(f.seconds * 1000));
    while (!done) {
      if ((f.requests == 0 && Clock::now() >= end) || FileExists(f.stop_file)) {
        stop = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  done = true;
  watcher.join();

  Tally all;
  for (Tally& t : tallies) {
    all.sent += t.sent;
    all.ok += t.ok;
    all.sentences += t.sentences;
    all.tokens += t.tokens;
    for (const auto& [code, n] : t.failures) all.failures[code] += n;
    for (const auto& [code, ms] : t.messages) {
      for (const auto& m : ms) AddMessage(&all.messages[code], m);
    }
    for (const auto& [code, ms] : t.failure_max_ms) {
      all.failure_max_ms[code] = std::max(all.failure_max_ms[code], ms);
    }
    all.latency_ms.insert(all.latency_ms.end(), t.latency_ms.begin(), t.latency_ms.end());
    for (const auto& [kind, codes] : t.bad) {
      for (const auto& [code, n] : codes) all.bad[kind][code] += n;
    }
  }
  std::sort(all.latency_ms.begin(), all.latency_ms.end());
  int64_t failed = 0, failed_not_allowed = 0;
  for (const auto& [code, n] : all.failures) {
    failed += n;
    if (!f.allowed_codes.count(code)) failed_not_allowed += n;
  }
  const int exit_code = failed_not_allowed == 0 ? 0 : 1;
  const double mean = all.latency_ms.empty() ? 0
      : std::accumulate(all.latency_ms.begin(), all.latency_ms.end(), 0.0) / all.latency_ms.size();
  const double rps = wall > 0 ? all.ok / wall : 0, sps = wall > 0 ? all.sentences / wall : 0,
               tps = wall > 0 ? all.tokens / wall : 0;
  const double p50 = Percentile(all.latency_ms, 50), p90 = Percentile(all.latency_ms, 90),
               p99 = Percentile(all.latency_ms, 99), pmax = all.latency_ms.empty() ? 0 : all.latency_ms.back();

  if (f.json) {
    nlohmann::json j;
    j["target"] = f.target;
    j["model"] = f.model;
    j["clients"] = f.clients;
    j["channels"] = static_cast<int>(channels.size());
    j["texts_per_request"] = f.texts_per_request;
    j["beam_size"] = f.beam_size;
    j["wall_seconds"] = wall;
    j["requests"] = all.sent;
    j["ok"] = all.ok;
    j["failed"] = failed;
    j["failures"] = nlohmann::json::object();
    for (const auto& [code, n] : all.failures) j["failures"][code] = n;
    j["errors"] = nlohmann::json::object();
    for (const auto& [code, ms] : all.messages) j["errors"][code] = ms;
    j["failure_max_ms"] = nlohmann::json::object();
    for (const auto& [code, ms] : all.failure_max_ms) j["failure_max_ms"][code] = ms;
    j["sentences"] = all.sentences;
    j["tokens"] = all.tokens;
    j["requests_per_s"] = rps;
    j["sentences_per_s"] = sps;
    j["tokens_per_s"] = tps;
    j["latency_ms"] = {{"mean", mean}, {"p50", p50}, {"p90", p90}, {"p99", p99}, {"max", pmax}};
    j["bad"] = nlohmann::json::object();
    for (const auto& [kind, codes] : all.bad) {
      for (const auto& [code, n] : codes) j["bad"][kind][code] = n;
    }
    j["exit"] = exit_code;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("target %s, %d client(s) on %zu channel(s), %d text(s)/request, %.1f s\n", f.target.c_str(),
                f.clients, channels.size(), f.texts_per_request, wall);
    std::printf("requests: %lld sent, %lld OK, %lld failed\n", static_cast<long long>(all.sent),
                static_cast<long long>(all.ok), static_cast<long long>(failed));
    for (const auto& [code, n] : all.failures) {
      std::printf("  %-20s %lld%s  slowest %.1f ms  message: %s\n", code.c_str(), static_cast<long long>(n),
                  f.allowed_codes.count(code) ? " (allowed)" : "", all.failure_max_ms[code],
                  all.messages[code].front().c_str());
      for (size_t i = 1; i < all.messages[code].size(); ++i) {
        std::printf("  %-20s also: %s\n", "", all.messages[code][i].c_str());
      }
    }
    for (const auto& [kind, codes] : all.bad) {
      std::printf("  bad %-16s", kind.c_str());
      for (const auto& [code, n] : codes) std::printf(" %s %lld", code.c_str(), static_cast<long long>(n));
      std::printf("\n");
    }
    std::printf("throughput: %.2f requests/s, %.2f sentences/s, %.1f tokens/s (OK requests)\n", rps, sps, tps);
    std::printf("latency ms (OK requests): p50 %.1f  p90 %.1f  p99 %.1f  max %.1f  mean %.1f\n", p50, p90, p99,
                pmax, mean);
  }
  return exit_code;
}

}  // namespace
}  // namespace tnmt::bench

int main(int argc, char** argv) {
  const tnmt::bench::Flags f = tnmt::bench::ParseFlags(argc, argv);
  return f.health ? tnmt::bench::Health(f) : tnmt::bench::Run(f);
}

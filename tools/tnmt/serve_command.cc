// `tnmt serve`; see serve_command.h. Flags (or a JSON --config with the same keys, spelled with
// '-' or '_') configure the server; signals drive its lifecycle: SIGTERM/SIGINT drain and exit
// 0, SIGHUP reloads every model from its directory without failing requests. A model directory
// that does not exist stops the start (exit 2) unless --on-missing-model=wait.
#include "tools/tnmt/serve_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/runtime/placement.h"
#include "engine/runtime/compute.h"
#include "server/server.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/config_file.h"
#include "tools/tnmt/version.h"

namespace tnmt::cli {

namespace {

int Fail(const std::string& message) {
  std::cerr << "tnmt serve: " << message << "\n";
  return 2;
}

void Log(const std::string& message) { std::cerr << "tnmt serve: " << message << std::endl; }

// The bundled demo model: next to the binary's install prefix, or under the working
// directory (a source checkout).
std::string FindDemoModel() {
  std::vector<std::filesystem::path> candidates;
  if (const char* home = std::getenv("TNMT_HOME")) candidates.emplace_back(std::filesystem::path(home) / "models/demo");
  std::error_code ec;
  const auto exe = std::filesystem::canonical("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share/tnmt/models/demo");
  candidates.emplace_back("models/demo");
  for (const auto& c : candidates) {
    if (std::filesystem::exists(c / "config.json")) return c.string();
  }
  return "";
}

// The serve flag that `--max-tokens` once named (pieces per text; `tnmt train --max-tokens` is
// tokens per batch). The old name is still accepted, with a warning.
constexpr char kMaxInputLength[] = "max-input-length";
constexpr char kDeprecatedMaxTokens[] = "max-tokens";

// --config FILE: a JSON object whose keys are flag names (spelled with '-' or '_'), plus
// "models": {name: dir}. Each key is applied as its flag; an error names the file and the key
// as the file spells it. The command line is parsed afterwards, so flags override the file.
absl::Status ApplyConfigFile(const std::string& path, Args* args) {
  std::map<std::string, std::string> written;
  absl::StatusOr<nlohmann::json> j = ReadConfigFile(path, '-', &written);
  if (!j.ok()) return j.status();
  for (auto& [key, value] : j->items()) {
    const std::string& as_written = written.at(key);
    std::string flag = key, arg;
    if (key == "models" && value.is_object()) {  // {"name": "dir", ...}
      std::string list;
      for (auto& [name, dir] : value.items()) {
        if (!dir.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": \"", as_written, "\".", name, " must be a directory string"));
        }
        absl::StrAppend(&list, list.empty() ? "" : ",", name, "=", dir.get<std::string>());
      }
      flag = "model";
      arg = "--model=" + list;
    } else {
      if (key == kDeprecatedMaxTokens) {
        Log(absl::StrCat(path, ": \"", as_written, "\" is deprecated: use \"", kMaxInputLength, "\" (pieces per text)"));
        flag = kMaxInputLength;
      }
      if (value.is_string()) {
        arg = absl::StrCat("--", flag, "=", value.get<std::string>());
      } else if (value.is_boolean()) {
        arg = absl::StrCat("--", flag, "=", value.get<bool>() ? "true" : "false");
      } else if (value.is_number()) {
        arg = absl::StrCat("--", flag, "=", value.dump());
      } else {
        return absl::InvalidArgumentError(absl::StrCat(path, ": \"", as_written, "\" must be a string, number or boolean"));
      }
    }
    char program[] = "tnmt";
    std::vector<char*> argv = {program, program, arg.data()};
    absl::Status s = args->Parse(static_cast<int>(argv.size()), argv.data(), 2);
    if (s.ok()) continue;
    std::string message(s.message());
    if (absl::StartsWith(message, "unknown flag")) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key \"", as_written,
                                                     "\" (the keys are the flags of tnmt serve --help, without --)"));
    }
    // "--port expects an integer, got ..." -> "FILE: \"port\" expects an integer, got ..."
    const std::string prefix = absl::StrCat("--", flag, " ");
    if (absl::StartsWith(message, prefix)) message = message.substr(prefix.size());
    return absl::InvalidArgumentError(absl::StrCat(path, ": \"", as_written, "\" ", message));
  }
  return absl::OkStatus();
}

// Whether argv[first..) gives `flag` (as --flag V or --flag=V).
bool OnCommandLine(int argc, char** argv, int first, const std::string& flag) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--" + flag || absl::StartsWith(a, "--" + flag + "=")) return true;
  }
  return false;
}

// A model directory that cannot be loaded because it is not there: "" when it looks loadable.
std::string MissingModel(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return "no such directory";
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec)) return "no config.json (not a model directory)";
  return "";
}

// A model directory that Hugging Face's save_pretrained wrote (OPUS-MT's layout) rather than
// tnmt: how to convert it; "" for anything else.
std::string HfMarianHint(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  if (!in) return "";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.contains("format") || j.value("model_type", nlohmann::json()) != "marian") return "";
  return absl::StrCat("looks like a Hugging Face Marian directory, not a tnmt model: convert it with `tnmt import "
                      "--from hf-marian ", dir, " --output MODEL_DIR` and serve MODEL_DIR");
}

}  // namespace

int ServeCommand(int argc, char** argv) {
  // Signals are taken synchronously by the main thread (sigwait below). Block them before any
  // other thread exists (the BLAS and compute pools start in SetBlasThreads) so every thread
  // inherits the mask and none can be killed by a signal's default action.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Args args("tnmt serve",
            "Serves translation over gRPC (tnmt.v1.TranslationService, grpc.health.v1.Health,\n"
            "reflection; with --state-dir also tnmt.v1.TrainingService) and HTTP (the web page /,\n"
            "/jobs, its JSON API /api/..., /metrics, /healthz, /readyz). SIGTERM drains and exits 0;\n"
            "SIGHUP reloads every model from its directory (and reopens --request-log and the TLS files).");
  args.AddString("config", "", "JSON file with any of these flags as keys, '-' or '_' (\"models\": {name: dir})");
  args.AddString("model", "", "models: DIR (named after its last component), or NAME=DIR[,NAME=DIR...]",
                 "the bundled demo model, named demo");
  args.AddString("on-missing-model", "exit",
                 "a --model directory that does not exist: exit (status 2, at start-up) or wait (serve "
                 "without it, not ready, until a SIGHUP reload finds it)");
  const server::ServerOptions defaults;
  args.AddString("host", defaults.host, "address to listen on");
  args.AddInt("port", defaults.port, "gRPC port, 0-65535 (0: any free port)");
  args.AddInt("http-port", defaults.http_port, "HTTP port for the web pages, /metrics, /healthz, /readyz, 0-65535 (0: any; -1: off)");
  args.AddInt("threads", 0, "compute threads shared by all models; 0: all cores");
  args.AddString("device", "cpu", "where models compute: cpu, cuda or cuda:N (CUDA builds)");
  args.AddString("dtype", "", "GPU precision: float16, bfloat16 or float32", "float16 on cuda");
  args.AddString("model-devices", "", "per-model placement: NAME=DEVICE[,NAME=DEVICE...] (DEVICE as --device)");
  args.AddString("model-shortlists", "", "per-model vocabulary shortlist: NAME=FILE[,NAME=FILE...] (`tnmt shortlist` builds it; CPU models; every request to NAME uses it: faster, changes outputs)");
  args.AddString("compute-type", "float32", "CPU models: float32, or int8 (linears quantized at load; faster, scores differ slightly)");
  args.AddString("model-compute-types", "", "per-model compute type: NAME=TYPE[,NAME=TYPE...] (TYPE as --compute-type)");
  args.AddInt("max-batch-rows", defaults.scheduler.max_batch_rows, "hypotheses (sentences x beam) decoded per step");
  args.AddInt("max-batch-tokens", defaults.scheduler.max_batch_tokens, "source tokens encoded per admission, padding included");
  args.AddInt("max-queue", defaults.scheduler.max_queue, "sentences waiting per model; beyond: RESOURCE_EXHAUSTED (a request with more texts than this: INVALID_ARGUMENT)");
  args.AddFloat("max-queue-seconds", defaults.scheduler.max_queue_seconds, "work queued per model, in seconds at the measured sentences/s, beyond which new requests get RESOURCE_EXHAUSTED at once (also a request that would start after its deadline); 0: no limit");
  args.AddInt("max-queue-delay-ms", static_cast<int>(absl::ToInt64Milliseconds(defaults.scheduler.max_queue_delay)), "how long an idle model waits to fill a batch");
  args.AddBool("continuous-batching", defaults.scheduler.continuous, "admit sentences into a running decode between steps");
  args.AddInt("max-sentences", defaults.limits.max_sentences_per_request, "texts per request; beyond: RESOURCE_EXHAUSTED");
  args.AddInt(kMaxInputLength, defaults.limits.max_tokens_per_sentence, "source pieces per text, </s> included; beyond: INVALID_ARGUMENT");
  args.AddInt(kDeprecatedMaxTokens, defaults.limits.max_tokens_per_sentence, "deprecated name of --max-input-length", "as --max-input-length");
  args.AddInt("max-text-bytes", static_cast<int>(defaults.limits.max_text_bytes), "bytes per text; beyond: INVALID_ARGUMENT");
  args.AddInt("max-output-length", defaults.limits.max_output_length, "largest max_length a request may ask for (tokens); beyond: INVALID_ARGUMENT");
  args.AddInt("max-request-cost", static_cast<int>(defaults.limits.max_request_cost), "beam_size x the longest output each text may reach, summed over a request's texts; beyond: RESOURCE_EXHAUSTED");
  args.AddInt("max-message-bytes", defaults.max_message_bytes, "largest gRPC request message; beyond: RESOURCE_EXHAUSTED");
  args.AddString("tls-cert", "", "PEM certificate chain: gRPC and HTTP speak TLS only (needs --tls-key); replaced files are served to new connections (HTTP on SIGHUP, gRPC within a second)", "off: plaintext");
  args.AddString("tls-key", "", "PEM private key of --tls-cert (unencrypted)");
  args.AddString("tls-client-ca", "", "PEM CA certificates: clients must present a certificate signed by one (mutual TLS)", "off");
  args.AddString("api-token-file", "", "file holding a bearer token that every translation call must carry (gRPC metadata or HTTP header \"authorization: Bearer <token>\"; health and metrics need none)", "none");
  args.AddInt("max-streams-per-connection", defaults.max_streams_per_connection, "gRPC calls one client connection may have running at once; more wait for a free one");
  args.AddInt("max-http-connections-per-peer", defaults.max_http_connections_per_peer, "HTTP connections one client address may have open at once; a further one is closed unanswered (0: no limit; keep 0 behind a proxy)");
  args.AddInt("max-calls-per-peer", defaults.max_calls_per_peer, "translation calls one client address may have running at once; beyond: RESOURCE_EXHAUSTED (0: no limit; keep 0 behind a proxy or ingress, whose address every call has)");
  args.AddInt("grace-seconds", static_cast<int>(absl::ToInt64Seconds(defaults.grace_period)), "on SIGTERM, time for in-flight requests to finish");
  args.AddString("ready-file", "", "written with the gRPC and HTTP ports once ready (for scripts)");
  args.AddString("state-dir", "", "enables tnmt.v1.TrainingService: job store, job work and published models");
  args.AddString("data-root", "", "training jobs may only read data under this directory");
  args.AddString("jobs-token-file", "", "file holding the bearer token the training API requires");
  args.AddInt("max-running-jobs", defaults.jobs.max_running_jobs, "training jobs running at once per device");
  args.AddInt("max-unfinished-jobs", defaults.jobs.max_unfinished_jobs, "queued + running jobs; beyond: RESOURCE_EXHAUSTED");
  args.AddString("request-log", "", "append one JSON line per finished call (time, method, model, peer, texts, code, seconds) to this file; - for stderr; reopened on SIGHUP", "off");
  args.AddInt("job-threads", 0, "compute threads per training job when its spec gives none; 0: half the cores");

  // A --config file's values come first, so the command line overrides them.
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    std::string path;
    if (a.rfind("--config=", 0) == 0) path = a.substr(9);
    if (a == "--config" && i + 1 < argc) path = argv[i + 1];
    if (path.empty()) continue;
    if (absl::Status s = ApplyConfigFile(path, &args); !s.ok()) return Fail(std::string(s.message()));
    break;
  }
  if (absl::Status s = args.Parse(argc, argv, 2); !s.ok()) return Fail(std::string(s.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  int max_input_length = args.GetInt(kMaxInputLength);
  if (OnCommandLine(argc, argv, 2, kDeprecatedMaxTokens)) {
    if (OnCommandLine(argc, argv, 2, kMaxInputLength)) {
      return Fail("give --max-input-length only (--max-tokens is its deprecated name)");
    }
    Log("--max-tokens is deprecated: use --max-input-length (source pieces per text)");
    max_input_length = args.GetInt(kDeprecatedMaxTokens);
  }
  if (max_input_length < 1) return Fail(absl::StrCat("--max-input-length must be positive, got ", max_input_length));
  const std::string on_missing = args.GetString("on-missing-model");
  if (on_missing != "exit" && on_missing != "wait") {
    return Fail(absl::StrCat("--on-missing-model must be exit or wait, got \"", on_missing, "\""));
  }

  server::ServerOptions o;
  o.version = kVersion;
  o.tls.cert_file = args.GetString("tls-cert");
  o.tls.key_file = args.GetString("tls-key");
  o.tls.client_ca_file = args.GetString("tls-client-ca");
  o.api_token_file = args.GetString("api-token-file");
  o.max_streams_per_connection = args.GetInt("max-streams-per-connection");
  o.max_calls_per_peer = args.GetInt("max-calls-per-peer");
  o.max_http_connections_per_peer = args.GetInt("max-http-connections-per-peer");
  if (o.max_http_connections_per_peer < 0) {
    return Fail(absl::StrCat("--max-http-connections-per-peer must be 0 or more, got ", o.max_http_connections_per_peer));
  }
  if (o.max_calls_per_peer < 0) return Fail(absl::StrCat("--max-calls-per-peer must be 0 or more, got ", o.max_calls_per_peer));
  if (o.max_streams_per_connection < 1) {
    return Fail(absl::StrCat("--max-streams-per-connection must be at least 1, got ", o.max_streams_per_connection));
  }
  o.request_log = args.GetString("request-log");
  absl::StatusOr<Placement> device =
      Placement::Parse(args.GetString("device"), args.GetString("dtype"), args.GetString("compute-type"));
  if (!device.ok()) return Fail(std::string(device.status().message()));
  o.device = *device;
  o.host = args.GetString("host");
  o.port = args.GetInt("port");
  o.http_port = args.GetInt("http-port");
  if (o.port < 0 || o.port > 65535) return Fail(absl::StrCat("--port must be in [0, 65535] (0: any free port), got ", o.port));
  if (o.http_port < -1 || o.http_port > 65535) {
    return Fail(absl::StrCat("--http-port must be in [0, 65535] (0: any free port) or -1 (off), got ", o.http_port));
  }
  std::string models = args.GetString("model");
  const bool jobs = !args.GetString("state-dir").empty();
  if (models.empty()) {
    models = FindDemoModel();
    if (models.empty() && !jobs) return Fail("no --model given and no bundled demo model found (models/demo)");
    if (!models.empty()) models = "demo=" + models;
  }
  for (absl::string_view item : absl::StrSplit(models, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> nd = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (nd.second.empty()) {  // a bare directory: named after its last component
      nd.second = nd.first;
      nd.first = std::filesystem::path(nd.second).lexically_normal().filename().string();
      if (nd.first.empty()) nd.first = std::filesystem::path(nd.second).lexically_normal().parent_path().filename().string();
    }
    o.models.push_back(nd);
  }
  for (const auto& [name, dir] : o.models) {
    if (const std::string hint = HfMarianHint(dir); !hint.empty()) {
      return Fail(absl::StrCat("model \"", name, "\": ", dir, ": ", hint));
    }
  }
  if (on_missing == "exit") {
    for (const auto& [name, dir] : o.models) {
      const std::string missing = MissingModel(dir);
      if (!missing.empty()) {
        return Fail(absl::StrCat("model \"", name, "\": ", dir, ": ", missing,
                                 " (--on-missing-model=wait starts without it)"));
      }
    }
  }
  for (absl::string_view item : absl::StrSplit(args.GetString("model-devices"), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> nd = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const bool known = std::any_of(o.models.begin(), o.models.end(),
                                   [&](const auto& m) { return m.first == nd.first; });
    if (!known) return Fail(absl::StrCat("--model-devices ", item, ": no model named \"", nd.first, "\""));
    if (o.model_devices.count(nd.first)) return Fail(absl::StrCat("--model-devices: ", nd.first, " given twice"));
    absl::StatusOr<Placement> p = Placement::Parse(nd.second, args.GetString("dtype"));
    if (!p.ok()) return Fail(absl::StrCat("--model-devices ", item, ": ", p.status().message()));
    if (p->device == Device::kCpu) p->int8 = o.device.int8;  // --compute-type is for CPU models
    o.model_devices[nd.first] = *p;
  }
  for (absl::string_view item : absl::StrSplit(args.GetString("model-shortlists"), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> nf = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const bool known = std::any_of(o.models.begin(), o.models.end(),
                                   [&](const auto& m) { return m.first == nf.first; });
    if (!known) return Fail(absl::StrCat("--model-shortlists ", item, ": no model named \"", nf.first, "\""));
    if (nf.second.empty()) return Fail(absl::StrCat("--model-shortlists ", item, ": expected NAME=FILE"));
    if (o.model_shortlists.count(nf.first)) return Fail(absl::StrCat("--model-shortlists: ", nf.first, " given twice"));
    o.model_shortlists[nf.first] = nf.second;
  }
  std::set<std::string> typed;
  for (absl::string_view item : absl::StrSplit(args.GetString("model-compute-types"), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> nt = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const bool known = std::any_of(o.models.begin(), o.models.end(),
                                   [&](const auto& m) { return m.first == nt.first; });
    if (!known) return Fail(absl::StrCat("--model-compute-types ", item, ": no model named \"", nt.first, "\""));
    if (!typed.insert(nt.first).second) return Fail(absl::StrCat("--model-compute-types: ", nt.first, " given twice"));
    Placement base = o.model_devices.count(nt.first) ? o.model_devices[nt.first] : o.device;
    const std::string device = base.device == Device::kCpu ? "cpu" : absl::StrCat("cuda:", base.index);
    absl::StatusOr<Placement> p = Placement::Parse(device, args.GetString("dtype"), nt.second);
    if (!p.ok()) return Fail(absl::StrCat("--model-compute-types ", item, ": ", p.status().message()));
    o.model_devices[nt.first] = *p;
  }
  o.scheduler.max_batch_rows = args.GetInt("max-batch-rows");
  o.scheduler.max_batch_tokens = args.GetInt("max-batch-tokens");
  o.scheduler.max_queue = args.GetInt("max-queue");
  o.scheduler.max_queue_delay = absl::Milliseconds(args.GetInt("max-queue-delay-ms"));
  o.scheduler.continuous = args.GetBool("continuous-batching");
  o.scheduler.max_queue_seconds = args.GetFloat("max-queue-seconds");
  if (!(o.scheduler.max_queue_seconds >= 0)) return Fail("--max-queue-seconds must be >= 0");
  o.limits.max_sentences_per_request = args.GetInt("max-sentences");
  o.limits.max_tokens_per_sentence = max_input_length;
  o.limits.max_text_bytes = args.GetInt("max-text-bytes");
  o.limits.max_output_length = args.GetInt("max-output-length");
  o.limits.max_request_cost = args.GetInt("max-request-cost");
  o.max_message_bytes = args.GetInt("max-message-bytes");
  o.grace_period = absl::Seconds(args.GetInt("grace-seconds"));
  for (const char* flag : {"max-batch-rows", "max-batch-tokens", "max-queue", "max-sentences",
                           "max-text-bytes", "max-message-bytes", "max-output-length", "max-request-cost"}) {
    if (args.GetInt(flag) < 1) {
      return Fail(absl::StrCat("--", flag, " must be positive, got ", args.GetInt(flag)));
    }
  }
  if (args.GetInt("max-queue-delay-ms") < 0 || args.GetInt("grace-seconds") < 0) {
    return Fail("--max-queue-delay-ms and --grace-seconds must be >= 0");
  }
  if (jobs) {
    o.jobs.state_dir = args.GetString("state-dir");
    o.jobs.data_root = args.GetString("data-root");
    o.jobs.token_file = args.GetString("jobs-token-file");
    o.jobs.max_running_jobs = args.GetInt("max-running-jobs");
    o.jobs.max_unfinished_jobs = args.GetInt("max-unfinished-jobs");
    o.jobs.job_threads = args.GetInt("job-threads");
    if (o.jobs.job_threads == 0) o.jobs.job_threads = std::max(1u, std::thread::hardware_concurrency() / 2);
    std::error_code ec;
    o.jobs.trainer_binary = std::filesystem::canonical("/proc/self/exe", ec).string();
    for (const char* flag : {"max-running-jobs", "max-unfinished-jobs"}) {
      if (args.GetInt(flag) < 1) return Fail(absl::StrCat("--", flag, " must be positive, got ", args.GetInt(flag)));
    }
    if (o.jobs.job_threads < 0) return Fail("--job-threads must be >= 0");
  }
  int threads = args.GetInt("threads");
  if (threads < 0) return Fail("--threads must be >= 0");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  SetCpuThreads(threads);

  absl::StatusOr<std::unique_ptr<server::TranslationServer>> server = server::TranslationServer::Start(o);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  server::TranslationServer& srv = **server;
  Log(absl::StrCat("gRPC on ", o.host, ":", srv.port(), ", ",
                   srv.http_port() >= 0 ? absl::StrCat("HTTP on ", o.host, ":", srv.http_port()) : "HTTP off",
                   "; loading ", srv.registry().List().size(), " model(s)"));
  std::thread loaded([&srv, ready_file = args.GetString("ready-file")] {
    absl::Status s = srv.WaitForInitialLoad();
    if (!s.ok()) {
      Log(absl::StrCat("not ready: ", s.message()));
      return;
    }
    Log("ready");
    if (!ready_file.empty()) {
      std::ofstream(ready_file + ".tmp") << srv.port() << " " << srv.http_port() << "\n";
      std::filesystem::rename(ready_file + ".tmp", ready_file);
    }
  });
  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      Log("SIGHUP: reloading models");
      absl::Status s = srv.Reload("");
      Log(s.ok() ? "reload done" : absl::StrCat("reload failed (previous generation keeps serving): ", s.message()));
      if (absl::Status t = srv.ReloadTls(); !t.ok()) {
        Log(absl::StrCat("TLS reload failed (the previous certificates stay in use): ", t.message()));
      }
      continue;
    }
    Log(absl::StrCat(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": draining (grace ", args.GetInt("grace-seconds"), " s)"));
    break;
  }
  srv.Shutdown();
  loaded.join();
  Log("stopped");
  return 0;
}

}  // namespace tnmt::cli

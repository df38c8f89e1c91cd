// TranslationServer: the whole `tnmt serve` process minus flag parsing and signals. gRPC
// (tnmt.v1.TranslationService, grpc.health.v1.Health, reflection) on one port, HTTP
// (/metrics, /healthz, /readyz, and the web pages / and /jobs with their JSON API under /api/,
// see server/web/web_api.h) on another, models loaded in the background: the server
// reports NOT_SERVING / 503 until every model is loaded and has translated a warm-up sentence
// (a server with the training API and no model is ready, SERVING / 200, once it listens).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/runtime/placement.h"
#include "server/health_service.h"
#include "server/http_server.h"
#include "server/jobs/job_runner.h"
#include "server/jobs/job_store.h"
#include "server/jobs/training_service.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request_log.h"
#include "server/tls.h"
#include "server/translation_service.h"
#include "server/web/web_api.h"

namespace tnmt::server {

// The training-job service (tnmt.v1.TrainingService); off unless state_dir is set.
struct JobsServerOptions {
  std::string state_dir;        // jobs.db, jobs/<id>/, models/<name>/
  std::string data_root;        // job specs may only read under here (required with state_dir)
  std::string token_file;       // bearer token (required with state_dir)
  std::string trainer_binary;   // the tnmt executable that runs `tnmt train`
  int max_running_jobs = jobs::RunnerOptions{}.max_running_jobs;  // per device
  int max_unfinished_jobs = jobs::TrainingServiceOptions{}.max_unfinished_jobs;
  int job_threads = 1;          // trainer threads when a spec gives none
  size_t max_spec_bytes = 64 << 10;
};

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;       // gRPC; 0 picks a free port
  int http_port = 8080;   // HTTP; 0 picks a free port; -1 disables HTTP
  std::vector<std::pair<std::string, std::string>> models;  // (name, directory)
  Placement device;                            // where models compute (also published ones)
  std::map<std::string, Placement> model_devices;  // per-model overrides of `device`
  // Per-model vocabulary shortlist files (CPU models): every request to the model uses it.
  std::map<std::string, std::string> model_shortlists;
  SchedulerOptions scheduler;
  ServiceLimits limits;
  int max_message_bytes = 4 << 20;  // largest request message; bigger: RESOURCE_EXHAUSTED
  // TLS on both ports (see server/tls.h); all empty: plaintext.
  TlsFiles tls;
  // File holding a bearer token that every TranslationService call must carry as metadata
  // "authorization: Bearer <token>" (also /api/translate and /api/models); "": none needed.
  std::string api_token_file;
  // HTTP/2 streams one gRPC connection may have open at once; more wait for a free one.
  int max_streams_per_connection = 100;
  // Translation calls one client address may have running at once (0: no limit; behind a
  // proxy or ingress every call comes from its address).
  int max_calls_per_peer = 0;
  // HTTP connections one client address may have open at once (0: no limit).
  int max_http_connections_per_peer = 0;
  absl::Duration grace_period = absl::Seconds(30);  // drain time on Shutdown
  std::string version = "dev";
  std::string request_log;  // --request-log: JSON line per finished call ("-": stderr; "": none)
  JobsServerOptions jobs;
};

class TranslationServer {
 public:
  // Binds both ports and starts serving; models load on a background thread.
  static absl::StatusOr<std::unique_ptr<TranslationServer>> Start(ServerOptions options);
  ~TranslationServer();  // Shutdown()

  int port() const { return port_; }
  int http_port() const { return http_ != nullptr ? http_->port() : -1; }
  // Blocks until the initial loads finished; their first error, if any.
  absl::Status WaitForInitialLoad();
  bool ready() const;

  // Re-reads the TLS files (SIGHUP): the HTTP side serves them to new connections at once;
  // the gRPC side watches them (tls.h). On error the previous certificates stay in use.
  absl::Status ReloadTls();

  // Reloads one model (or all, if name is empty) from its directory, with no failed request.
  absl::Status Reload(const std::string& name);

  // Health NOT_SERVING and /readyz 503; stops accepting calls; lets in-flight calls finish
  // within the grace period (then cancels them); finishes queued work; stops HTTP. Idempotent.
  void Shutdown();

  ServerMetrics& metrics() { return *metrics_; }
  jobs::JobStore* job_store() { return job_store_.get(); }  // null without --state-dir
  ModelRegistry& registry() { return *registry_; }

 private:
  explicit TranslationServer(ServerOptions options) : options_(std::move(options)) {}
  void SetServing(bool serving);
  // Every model is loaded, or there is none and the training API is what the server serves.
  bool ModelsReady() const;
  absl::Status StartJobs();  // before the gRPC server is built
  absl::Status PublishModel(const std::string& name, const std::string& dir);
  std::string MetricsText();  // /metrics, with the job counts refreshed

  const ServerOptions options_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<RequestLog> request_log_;
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<TranslationServiceImpl> service_;
  std::unique_ptr<HealthService> health_;  // grpc.health.v1.Health (outlives grpc_)
  std::unique_ptr<jobs::JobStore> job_store_;
  std::unique_ptr<jobs::JobRunner> job_runner_;
  std::unique_ptr<jobs::TrainingServiceImpl> training_;
  std::unique_ptr<grpc::Server> grpc_;
  std::string jobs_token_;  // the training API's bearer token; "" without --state-dir
  std::unique_ptr<web::WebApi> web_;  // the HTTP side's pages and API (outlives http_)
  std::unique_ptr<HttpServer> http_;
  std::thread loader_;
  absl::Status load_status_;
  std::atomic<bool> loaded_{false};
  std::atomic<bool> stopping_{false};
  std::mutex shutdown_mu_;
  int port_ = 0;
};

}  // namespace tnmt::server

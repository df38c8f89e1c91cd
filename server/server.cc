// TranslationServer; see server.h.
#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/core/status_macros.h"

namespace tnmt::server {

namespace {
constexpr char kServiceName[] = "tnmt.v1.TranslationService";

// A bearer token from a file (surrounding whitespace dropped), at least 16 characters.
absl::StatusOr<std::string> ReadToken(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, " ", path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": the token must have at least 16 characters"));
  }
  return token;
}
}  // namespace

absl::StatusOr<std::unique_ptr<TranslationServer>> TranslationServer::Start(ServerOptions options) {
  if (options.models.empty() && options.jobs.state_dir.empty()) {
    return absl::InvalidArgumentError("no model to serve");
  }
  TNMT_RETURN_IF_ERROR(CheckTlsFiles(options.tls));
  if (options.max_streams_per_connection < 1) {
    return absl::InvalidArgumentError("max_streams_per_connection must be at least 1");
  }
  std::unique_ptr<TranslationServer> s(new TranslationServer(std::move(options)));
  const ServerOptions& o = s->options_;
  ServerMetricsOptions mo;
  mo.version = o.version;
  s->metrics_ = std::make_unique<ServerMetrics>(mo);
  s->registry_ = std::make_unique<ModelRegistry>(o.scheduler, s->metrics_.get());
  for (const auto& [name, dir] : o.models) {
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("model directory ", dir, " has an empty name"));
    auto device = o.model_devices.find(name);
    auto shortlist = o.model_shortlists.find(name);
    if (!s->registry_->Add(name, dir, device == o.model_devices.end() ? o.device : device->second,
                           shortlist == o.model_shortlists.end() ? "" : shortlist->second)) {
      return absl::InvalidArgumentError(absl::StrCat("model name \"", name, "\" given twice"));
    }
  }
  // One configured model is the default for requests that name none, also after training
  // jobs publish more models next to it.
  if (o.models.size() == 1) s->registry_->SetDefault(o.models.begin()->first);
  if (!o.request_log.empty()) {
    absl::StatusOr<std::unique_ptr<RequestLog>> log = RequestLog::Open(o.request_log);
    if (!log.ok()) return log.status();
    s->request_log_ = *std::move(log);
  }
  s->service_ = std::make_unique<TranslationServiceImpl>(s->registry_.get(), s->metrics_.get(), o.limits,
                                                         s->request_log_.get());
  s->service_->LimitCallsPerPeer(o.max_calls_per_peer);
  if (!o.api_token_file.empty()) {
    TNMT_ASSIGN_OR_RETURN(std::string token, ReadToken("--api-token-file", o.api_token_file));
    s->service_->RequireToken(std::move(token));
  }
  if (!o.jobs.state_dir.empty()) TNMT_RETURN_IF_ERROR(s->StartJobs());

  // Health: the whole server ("") and the translation service; the training service is not a
  // separate health entry (it is up whenever the server is).
  s->health_ = std::make_unique<HealthService>(std::vector<std::string>{kServiceName});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host, ":", o.port);
  builder.AddListeningPort(address, GrpcServerCredentials(o.tls), &s->port_);
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->health_.get());
  if (s->training_ != nullptr) builder.RegisterService(s->training_.get());
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind a port that is already
  // served and then split the clients between the two; a busy port must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  // gRPC inflates a compressed message whole before the size limit applies, so a small gzip
  // bomb would cost its full size in memory: compressed requests are refused (UNIMPLEMENTED,
  // "Compression algorithm ... is disabled"), replies are never compressed.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, o.max_streams_per_connection);
  builder.SetMaxSendMessageSize(std::max(o.max_message_bytes, 64 << 20));
  s->grpc_ = builder.BuildAndStart();
  if (s->grpc_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", address,
                                               " (address already in use, or not available on this machine)"));
  }
  s->SetServing(false);

  if (o.http_port >= 0) {
    HttpServerOptions ho;
    ho.host = o.host;
    ho.port = o.http_port;
    // Web translations hold a worker for as long as they take; the probes and the metrics
    // scrape are answered on the I/O threads and never wait for one.
    ho.threads = 32;
    ho.max_connections_per_peer = static_cast<size_t>(o.max_http_connections_per_peer);
    ho.tls_cert_file = o.tls.cert_file;
    ho.tls_key_file = o.tls.key_file;
    ho.tls_client_ca_file = o.tls.client_ca_file;
    ho.error_formatter = web::FormatHttpError;
    TranslationServer* self = s.get();
    s->http_ = std::make_unique<HttpServer>(
        ho, [self] { return self->MetricsText(); },
        [self]() -> absl::Status {
          if (self->ready()) return absl::OkStatus();
          for (const ModelStatus& m : self->registry_->List()) {
            absl::Status s = self->registry_->Get(m.name).status();
            if (!s.ok()) return s;
          }
          return absl::UnavailableError(self->stopping_ ? "shutting down" : "warming up");
        });
    // The web pages and their API: translation through our own gRPC port (so its validation,
    // limits and metrics apply), jobs through the TrainingService and the job store.
    web::WebOptions wo;
    wo.grpc_target = web::LoopbackTarget(o.host, s->port_);
    {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);  // the server's limits apply, not the channel's
      args.SetMaxSendMessageSize(-1);
      wo.channel = s->grpc_->InProcessChannel(args);
    }
    wo.jobs_token = s->jobs_token_;
    wo.job_store = s->job_store_.get();
    s->web_ = std::make_unique<web::WebApi>(wo);
    if (absl::Status st = s->web_->Register(s->http_.get()); !st.ok()) {
      s->grpc_->Shutdown();
      return st;
    }
    if (absl::Status st = s->http_->Start(); !st.ok()) {
      s->grpc_->Shutdown();
      return st;
    }
  }
  if (s->job_runner_ != nullptr) {
    if (absl::Status st = s->job_runner_->Start(); !st.ok()) {
      s->grpc_->Shutdown();
      if (s->http_ != nullptr) s->http_->Stop();
      return st;
    }
  }
  TranslationServer* self = s.get();
  s->loader_ = std::thread([self] {
    self->load_status_ = self->registry_->LoadAll();
    self->loaded_ = true;
    if (self->ModelsReady() && !self->stopping_) self->SetServing(true);
  });
  return s;
}

absl::Status TranslationServer::StartJobs() {
  const JobsServerOptions& j = options_.jobs;
  if (j.data_root.empty()) return absl::InvalidArgumentError("--data-root is required with --state-dir");
  if (j.token_file.empty()) {
    return absl::InvalidArgumentError("--jobs-token-file is required with --state-dir (the training API needs a token)");
  }
  if (j.trainer_binary.empty()) return absl::InvalidArgumentError("no trainer binary for training jobs");
  TNMT_ASSIGN_OR_RETURN(const std::string token, ReadToken("--jobs-token-file", j.token_file));
  std::error_code ec;
  std::filesystem::create_directories(j.state_dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("--state-dir ", j.state_dir, ": ", ec.message()));
  if (!std::filesystem::is_directory(j.data_root, ec)) {
    return absl::NotFoundError(absl::StrCat("--data-root ", j.data_root, ": not a directory"));
  }
  TNMT_ASSIGN_OR_RETURN(job_store_, jobs::JobStore::Open(j.state_dir + "/jobs.db"));
  jobs::RunnerOptions ro;
  ro.state_dir = j.state_dir;
  ro.data_root = j.data_root;
  ro.trainer_binary = j.trainer_binary;
  ro.max_running_jobs = j.max_running_jobs;
  ro.default_threads = j.job_threads;
  ro.cancel_grace = options_.grace_period;
  job_runner_ = std::make_unique<jobs::JobRunner>(
      ro, job_store_.get(), [this](const std::string& name, const std::string& dir) { return PublishModel(name, dir); });
  jobs::TrainingServiceOptions to;
  to.token = token;
  jobs_token_ = token;
  to.max_unfinished_jobs = j.max_unfinished_jobs;
  to.policy.data_root = j.data_root;
  to.policy.cuda_available = CudaDevicesAvailable() > 0;
  to.policy.max_spec_bytes = j.max_spec_bytes;
  for (const auto& [name, dir] : options_.models) to.policy.reserved_models.push_back(name);
  training_ = std::make_unique<jobs::TrainingServiceImpl>(to, job_store_.get(), job_runner_.get());
  // Models published by earlier jobs are served again (the newest job of a name wins; they
  // all share the name's directory).
  auto done = job_store_->ListByState({tnmt::v1::JOB_STATE_SUCCEEDED});
  if (!done.ok()) return done.status();
  for (const jobs::JobRecord& job : *done) {
    if (!job.published_model.empty()) {
      registry_->Add(job.published_model, job_runner_->ModelDir(job.published_model), options_.device);
    }
  }
  return absl::OkStatus();
}

absl::Status TranslationServer::PublishModel(const std::string& name, const std::string& dir) {
  if (stopping_) return absl::UnavailableError("server is shutting down");
  if (!registry_->Add(name, dir, options_.device)) {
    for (const ModelStatus& m : registry_->List()) {
      if (m.name == name && m.path != dir) {
        return absl::AlreadyExistsError(absl::StrCat("model \"", name, "\" is already served from ", m.path));
      }
    }
  }
  absl::Status s = registry_->Load(name);
  if (ModelsReady() && loaded_ && !stopping_) SetServing(true);
  return s;
}

std::string TranslationServer::MetricsText() {
  if (job_store_ != nullptr) {  // job counts are read from the store at scrape time
    for (jobs::JobState state : jobs::kAllJobStates) {
      const int64_t n = job_store_->CountInStates({state});
      if (n >= 0) metrics_->SetTrainingJobs(jobs::JobStateName(state), n);
    }
  }
  return metrics_->Serialize();
}

TranslationServer::~TranslationServer() { Shutdown(); }

absl::Status TranslationServer::WaitForInitialLoad() {
  if (loader_.joinable()) loader_.join();
  return load_status_;
}

bool TranslationServer::ready() const {
  return loaded_ && !stopping_ && ModelsReady();
}

// A server with the training API and no model yet (--state-dir, no --model) serves what it
// has, that API, and is ready: its log, /readyz and health agree.
bool TranslationServer::ModelsReady() const {
  return registry_->AllReady() || (training_ != nullptr && registry_->List().empty());
}

void TranslationServer::SetServing(bool serving) {
  if (health_ != nullptr) health_->SetServing(serving);
}

absl::Status TranslationServer::ReloadTls() {
  if (!options_.tls.enabled()) return absl::OkStatus();
  // The gRPC side watches the files itself; a bad set is reported here either way.
  TNMT_RETURN_IF_ERROR(CheckTlsFiles(options_.tls));
  if (http_ != nullptr) return http_->ReloadTls();
  return absl::OkStatus();
}

absl::Status TranslationServer::Reload(const std::string& name) {
  if (stopping_) return absl::UnavailableError("server is shutting down");
  if (name.empty() && request_log_ != nullptr) {
    // A full reload (SIGHUP) also reopens the request log, for log rotation.
    if (absl::Status r = request_log_->Reopen(); !r.ok()) std::fprintf(stderr, "tnmt serve: %s\n", std::string(r.message()).c_str());
  }
  absl::Status s = name.empty() ? registry_->LoadAll() : registry_->Load(name);
  if (ModelsReady() && !stopping_) SetServing(true);
  return s;
}

void TranslationServer::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (grpc_ == nullptr) return;
  stopping_ = true;
  SetServing(false);
  if (http_ != nullptr) http_->SetStopping();
  if (loader_.joinable()) loader_.join();
  // Phase 1: new calls are refused with UNAVAILABLE while the accepted ones finish (within the
  // grace period). Phase 2: the transport stops; whatever is still running is cancelled at
  // the deadline.
  const absl::Time deadline = absl::Now() + options_.grace_period;
  service_->StopAccepting();
  if (training_ != nullptr) training_->StopAccepting();
  // Running training jobs checkpoint and go back to the queue; the next start resumes them.
  if (job_runner_ != nullptr) job_runner_->Stop();
  service_->WaitIdle(deadline);
  health_->Shutdown();  // Watch streams: NOT_SERVING was sent above; now they end
  // Calls still running now outlived the grace period; calls the transport had not yet handed
  // to us get a moment to be refused.
  grpc_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Milliseconds(500))));
  registry_->DrainAll();
  grpc_->Wait();
  if (http_ != nullptr) http_->Stop();
  grpc_.reset();
}

}  // namespace tnmt::server

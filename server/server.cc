// TranslationServer; see server.h.
#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

namespace tnmt::server {

namespace {
constexpr char kServiceName[] = "tnmt.v1.TranslationService";
}  // namespace

absl::StatusOr<std::unique_ptr<TranslationServer>> TranslationServer::Start(ServerOptions options) {
  if (options.models.empty()) return absl::InvalidArgumentError("no model to serve");
  std::unique_ptr<TranslationServer> s(new TranslationServer(std::move(options)));
  const ServerOptions& o = s->options_;
  ServerMetricsOptions mo;
  mo.version = o.version;
  s->metrics_ = std::make_unique<ServerMetrics>(mo);
  s->registry_ = std::make_unique<ModelRegistry>(o.scheduler, s->metrics_.get());
  for (const auto& [name, dir] : o.models) {
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("model directory ", dir, " has an empty name"));
    if (!s->registry_->Add(name, dir)) {
      return absl::InvalidArgumentError(absl::StrCat("model name \"", name, "\" given twice"));
    }
  }
  s->service_ = std::make_unique<TranslationServiceImpl>(s->registry_.get(), s->metrics_.get(), o.limits);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host, ":", o.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(std::max(o.max_message_bytes, 64 << 20));
  s->grpc_ = builder.BuildAndStart();
  if (s->grpc_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", address,
                                               " (address in use or not available)"));
  }
  s->SetServing(false);

  if (o.http_port >= 0) {
    HttpServerOptions ho;
    ho.host = o.host;
    ho.port = o.http_port;
    TranslationServer* self = s.get();
    s->http_ = std::make_unique<HttpServer>(
        ho, [self] { return self->metrics_->Serialize(); },
        [self]() -> absl::Status {
          if (self->ready()) return absl::OkStatus();
          for (const ModelStatus& m : self->registry_->List()) {
            absl::Status s = self->registry_->Get(m.name).status();
            if (!s.ok()) return s;
          }
          return absl::UnavailableError(self->stopping_ ? "shutting down" : "warming up");
        });
    if (absl::Status st = s->http_->Start(); !st.ok()) {
      s->grpc_->Shutdown();
      return st;
    }
  }
  TranslationServer* self = s.get();
  s->loader_ = std::thread([self] {
    self->load_status_ = self->registry_->LoadAll();
    self->loaded_ = true;
    if (self->registry_->AllReady() && !self->stopping_) self->SetServing(true);
  });
  return s;
}

TranslationServer::~TranslationServer() { Shutdown(); }

absl::Status TranslationServer::WaitForInitialLoad() {
  if (loader_.joinable()) loader_.join();
  return load_status_;
}

bool TranslationServer::ready() const {
  return loaded_ && !stopping_ && registry_->AllReady();
}

void TranslationServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = grpc_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  health->SetServingStatus(kServiceName, serving);
}

absl::Status TranslationServer::Reload(const std::string& name) {
  if (stopping_) return absl::UnavailableError("server is shutting down");
  absl::Status s = name.empty() ? registry_->LoadAll() : registry_->Load(name);
  if (registry_->AllReady() && !stopping_) SetServing(true);
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
  service_->WaitIdle(deadline);
  // Calls still running now outlived the grace period; calls the transport had not yet handed
  // to us get a moment to be refused.
  grpc_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Milliseconds(500))));
  registry_->DrainAll();
  grpc_->Wait();
  if (http_ != nullptr) http_->Stop();
  grpc_.reset();
}

}  // namespace tnmt::server

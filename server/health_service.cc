// grpc.health.v1.Health; see health_service.h.
#include "server/health_service.h"
#include "server/status_mapping.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/raw_message.h"

namespace tnmt::server {

namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;


grpc::ByteBuffer Response(HealthCheckResponse::ServingStatus status) {
  HealthCheckResponse r;
  r.set_status(status);
  return Serialize(r);
}

}  // namespace

// One Watch stream: writes the watched service's status when it starts and whenever it
// changes (only the latest one if changes come faster than the client reads), until the client
// cancels or the service shuts down.
class HealthService::Watcher final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  Watcher(HealthService* owner, std::string service) : owner_(owner), service_(std::move(service)) {}

  const std::string& service() const { return service_; }

  void Push(Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || finishing_) return;
    if (has_pending_ ? pending_ == status : (sent_any_ && last_ == status)) return;
    pending_ = status;
    has_pending_ = true;
    if (!writing_) WriteNextLocked();
  }

  // Ends the stream with `status` once the writes already queued are out.
  void End(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || finishing_) return;
    finishing_ = true;
    end_ = std::move(status);
    if (!writing_ && !has_pending_) FinishLocked(end_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client went away
      if (!finished_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the stream"));
      return;
    }
    if (has_pending_) {
      WriteNextLocked();
    } else if (finishing_ && !finished_) {
      FinishLocked(end_);
    }
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    // A write in flight completes with ok == false and finishes the stream there.
    if (!writing_ && !finished_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the stream"));
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(owner_->mu_);
      owner_->watchers_.erase(this);
    }
    delete this;
  }

 private:
  void WriteNextLocked() {
    has_pending_ = false;
    last_ = pending_;
    sent_any_ = true;
    buffer_ = Response(pending_);
    writing_ = true;
    StartWrite(&buffer_);
  }
  void FinishLocked(const grpc::Status& status) {
    finished_ = true;
    Finish(status);
  }

  HealthService* const owner_;
  const std::string service_;
  std::mutex mu_;
  grpc::ByteBuffer buffer_;
  bool writing_ = false, has_pending_ = false, sent_any_ = false, finishing_ = false, finished_ = false;
  Status pending_ = HealthCheckResponse::UNKNOWN, last_ = HealthCheckResponse::UNKNOWN;
  grpc::Status end_;
};

HealthService::HealthService(std::vector<std::string> services) {
  status_[""] = HealthCheckResponse::NOT_SERVING;
  for (std::string& s : services) status_[std::move(s)] = HealthCheckResponse::NOT_SERVING;
}

HealthService::~HealthService() { Shutdown(); }

HealthService::Status HealthService::StatusOf(const std::string& service) const {
  auto it = status_.find(service);
  return it == status_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::SetServing(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  for (auto& [name, status] : status_) status = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  for (Watcher* w : watchers_) w->Push(StatusOf(w->service()));
}

void HealthService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, status] : status_) status = HealthCheckResponse::NOT_SERVING;
  for (Watcher* w : watchers_) {
    w->Push(StatusOf(w->service()));
    w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
  }
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  HealthCheckRequest r;
  if (absl::Status parsed = ParseMessage(*request, &r, "request"); !parsed.ok()) {
    reactor->Finish(ToGrpcStatus(parsed));
    return reactor;
  }
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status = StatusOf(r.service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown service \"", r.service().substr(0, 128),
                                                                           r.service().size() > 128 ? "...\"" : "\"")));
    return reactor;
  }
  *response = Response(status);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* HealthService::Watch(grpc::CallbackServerContext*,
                                                                  const grpc::ByteBuffer* request) {
  HealthCheckRequest r;
  absl::Status parsed = ParseMessage(*request, &r, "request");
  auto* w = new Watcher(this, parsed.ok() ? r.service() : "");
  if (!parsed.ok()) {
    w->End(ToGrpcStatus(parsed));
    return w;
  }
  std::lock_guard<std::mutex> lock(mu_);
  w->Push(StatusOf(w->service()));
  if (shut_down_) {
    w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
  } else {
    watchers_.insert(w);
  }
  return w;
}

}  // namespace tnmt::server

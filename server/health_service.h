// grpc.health.v1.Health (Check and Watch), tnmt's own instead of gRPC's default service:
// requests are parsed here, so a message that does not decode is INVALID_ARGUMENT on both
// methods (gRPC's default answered Watch with INTERNAL), and a server shutting down ends its
// Watch streams (NOT_SERVING, then UNAVAILABLE) instead of holding them open.
// Services: "" (the whole server) and the ones given to the constructor; any other name is
// NOT_FOUND on Check and SERVICE_UNKNOWN on Watch, as the health protocol specifies.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace tnmt::server {

using HealthServiceBase = grpc::health::v1::Health::WithRawCallbackMethod_Check<
    grpc::health::v1::Health::WithRawCallbackMethod_Watch<grpc::health::v1::Health::Service>>;

class HealthService final : public HealthServiceBase {
 public:
  explicit HealthService(std::vector<std::string> services);
  ~HealthService() override;

  // Sets every known service (the whole server included) to SERVING or NOT_SERVING and tells
  // the watchers. Ignored after Shutdown.
  void SetServing(bool serving);
  // NOT_SERVING for good; open Watch streams get it and then end with UNAVAILABLE.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request) override;

 private:
  class Watcher;
  friend class Watcher;
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  Status StatusOf(const std::string& service) const;  // mu_ held

  mutable std::mutex mu_;
  std::map<std::string, Status> status_;
  bool shut_down_ = false;
  std::set<Watcher*> watchers_;
};

}  // namespace tnmt::server

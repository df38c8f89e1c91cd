// tnmt.v1.TranslationService over gRPC's callback API. Requests are validated (each problem
// is INVALID_ARGUMENT naming the field), tokenized on the gRPC thread, and their sentences
// queued on the model's Scheduler; replies are assembled in request order. Nothing here
// blocks a gRPC thread on decoding.
#pragma once

#include <string>

#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request.h"

namespace tnmt::server {

class TranslationServiceImpl final : public tnmt::v1::TranslationService::CallbackService {
 public:
  TranslationServiceImpl(ModelRegistry* registry, ServerMetrics* metrics, ServiceLimits limits)
      : registry_(registry), metrics_(metrics), limits_(limits) {}

  grpc::ServerUnaryReactor* Translate(grpc::CallbackServerContext* context,
                                      const tnmt::v1::TranslateRequest* request,
                                      tnmt::v1::TranslateResponse* response) override;
  grpc::ServerBidiReactor<tnmt::v1::TranslateStreamRequest, tnmt::v1::TranslateStreamResponse>*
  TranslateStream(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const tnmt::v1::ListModelsRequest* request,
                                       tnmt::v1::ListModelsResponse* response) override;

 private:
  ModelRegistry* const registry_;
  ServerMetrics* const metrics_;
  const ServiceLimits limits_;
};

}  // namespace tnmt::server

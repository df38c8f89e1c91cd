// tnmt.v1.TranslationService over gRPC's callback API. Requests are validated (each problem
// is INVALID_ARGUMENT naming the field), tokenized on the gRPC thread, and their sentences
// queued on the model's Scheduler; replies are assembled in request order. Nothing here
// blocks a gRPC thread on decoding.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "absl/time/time.h"

#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/request.h"
#include "server/request_log.h"

namespace tnmt::server {

// Translate and TranslateStream take their messages as raw bytes and parse them here, so that
// an undecodable message is INVALID_ARGUMENT naming the message (gRPC's generated code answered
// UNIMPLEMENTED with no message, uncounted; in a stream it ended the reads as if the client had
// half-closed, and the call finished OK with the later messages silently lost).
// ListModels and Score too, for the same reason.
using TranslationServiceBase = tnmt::v1::TranslationService::WithRawCallbackMethod_Translate<
    tnmt::v1::TranslationService::WithRawCallbackMethod_TranslateStream<
        tnmt::v1::TranslationService::WithRawCallbackMethod_ListModels<
            tnmt::v1::TranslationService::WithRawCallbackMethod_Score<tnmt::v1::TranslationService::Service>>>>;

class TranslationServiceImpl final : public TranslationServiceBase {
 public:
  // request_log: where each finished call is logged (may be null: no log).
  TranslationServiceImpl(ModelRegistry* registry, ServerMetrics* metrics, ServiceLimits limits,
                         RequestLog* request_log = nullptr)
      : registry_(registry), metrics_(metrics), limits_(limits), request_log_(request_log) {}
  RequestLog* request_log() const { return request_log_; }

  // request: a serialized tnmt.v1.TranslateRequest; response: the TranslateResponse.
  grpc::ServerUnaryReactor* Translate(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // Reads serialized TranslateStreamRequests, writes serialized TranslateStreamResponses.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* TranslateStream(
      grpc::CallbackServerContext* context) override;
  // request: a serialized tnmt.v1.ListModelsRequest; response: the ListModelsResponse.
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // Forced decoding under the model's compute lock, between its decode steps. request: a
  // serialized tnmt.v1.ScoreRequest; response: the ScoreResponse. Counted in the metrics and
  // written to the request log as every other call.
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;

  // From now on every call must carry metadata "authorization: Bearer <token>"; set before the
  // server starts (not thread-safe against running calls).
  void RequireToken(std::string token) { token_ = std::move(token); }
  // OK without a token, or when the call carries the right one; else UNAUTHENTICATED.
  absl::Status Authorize(const grpc::ServerContextBase& context) const;

  // First phase of a drain: from now on new calls are refused with UNAVAILABLE (clients see
  // a clean refusal instead of a call cut off by the transport shutting down).
  void StopAccepting() { accepting_ = false; }
  // Waits until no accepted call is in flight, or until `deadline`; true if idle.
  bool WaitIdle(absl::Time deadline);

  // At most n calls running at once per client address (0: no limit); set before the server
  // starts. Behind a proxy every call has the proxy's address: leave it off there.
  void LimitCallsPerPeer(int n) { max_calls_per_peer_ = n; }

  // Counts accepted calls: a call object calls Enter when created (not OK: refuse the call
  // with that status: UNAVAILABLE while draining, RESOURCE_EXHAUSTED for a peer at its limit)
  // and, if it entered, Leave with the `peer` Enter set when done.
  absl::Status Enter(const grpc::ServerContextBase& context, std::string* peer);
  void Leave(const std::string& peer);

 private:
  // model: set to the model the request was for, once known.
  absl::Status DoScore(const tnmt::v1::ScoreRequest& request, tnmt::v1::ScoreResponse* response, std::string* model);
  absl::Status DoListModels(const tnmt::v1::ListModelsRequest& request, tnmt::v1::ListModelsResponse* response);
  std::string token_;  // "": no token required
  std::atomic<bool> accepting_{true};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
  int inflight_ = 0;
  int max_calls_per_peer_ = 0;
  std::map<std::string, int> peer_calls_;  // running calls per client address (with a limit)
  absl::Time last_activity_ = absl::InfinitePast();  // last call finished or refused
  ModelRegistry* const registry_;
  ServerMetrics* const metrics_;
  const ServiceLimits limits_;
  RequestLog* const request_log_;
};

}  // namespace tnmt::server

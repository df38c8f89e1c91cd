// ServerMetrics: the translation server's Prometheus metrics, owned in one prometheus-cpp
// registry and exposed in the text format by Serialize() (served on /metrics by HttpServer).
//
// Names follow Prometheus conventions: base units (seconds), `_total` on counters, and labels
// of low cardinality only. Every method is thread-safe and cheap (a hash lookup under a
// reader lock, then atomic updates); series are created on first use of a label value.
//
// Label contract (callers must keep it, or a client could create unbounded series):
//   model   a configured model name; "" for a request that named no known model. Beyond
//           ServerMetricsOptions::max_models distinct names, further ones are recorded as
//           "other".
//   method  the RPC's method name: "Translate", "TranslateStream", "ListModels", "Score".
//   code    the gRPC status code name: "OK", "INVALID_ARGUMENT", ... (absl::StatusCode and
//           grpc::StatusCode share numbering and names; the int overload converts).
//
// Series:
//   tnmt_requests_total{model,method,code}          counter   finished RPCs
//   tnmt_request_duration_seconds{model,method}     histogram RPC latency (a stream: lifetime)
//   tnmt_inflight_requests                          gauge     RPCs started and not yet done
//   tnmt_queue_duration_seconds{model}              histogram time a sentence waited to decode
//   tnmt_compute_duration_seconds{model}            histogram decode time (per batch or per
//                                                             sentence: the caller decides)
//   tnmt_encode_duration_seconds{model}             histogram encoder time per admission (the
//                                                             sentences admitted together)
//   tnmt_batch_sentences{model}                     histogram sentences per decoded batch
//   tnmt_batch_tokens{model}                        histogram source tokens per decoded batch
//   tnmt_sentences_total{model}                     counter   sentences translated
//   tnmt_source_tokens_total{model}                 counter   source tokens translated
//   tnmt_generated_tokens_total{model}              counter   target tokens generated
//   tnmt_queue_length{model}                        gauge     sentences waiting to decode
//   tnmt_model_loaded{model}                        gauge     1 while a generation serves
//   tnmt_model_generation{model}                    gauge     serving generation (0: none)
//   tnmt_model_load_failures_total{model}           counter   failed loads and reloads
//   tnmt_build_info{version,compiler}               gauge     always 1
//   process_start_time_seconds                      gauge     Unix time ServerMetrics was
//                                                             constructed (server start)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace tnmt {

struct ServerMetricsOptions {
  // Value of tnmt_build_info's version label.
  std::string version = "dev";
  // Most distinct model label values; names seen after that are recorded as "other".
  int max_models = 32;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(ServerMetricsOptions options = {});
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // RPCs. Call RequestStarted when an RPC begins and exactly one RequestDone when it ends
  // (they move tnmt_inflight_requests); `seconds` is the RPC's wall time.
  void RequestStarted();
  void RequestDone(std::string_view model, std::string_view method, std::string_view code,
                   double seconds);
  // `code`: a numeric gRPC/absl status code (0 = OK); unknown numbers count as "UNKNOWN".
  void RequestDone(std::string_view model, std::string_view method, int code, double seconds);

  // Scheduling and decoding.
  void SetQueueLength(std::string_view model, int64_t sentences);
  void ObserveQueueWait(std::string_view model, double seconds);
  void ObserveCompute(std::string_view model, double seconds);
  void ObserveEncode(std::string_view model, double seconds);
  void BatchDone(std::string_view model, int sentences, int source_tokens);
  void SentenceDone(std::string_view model, int source_tokens, int generated_tokens);

  // Model lifecycle. ModelLoaded: `generation` now serves (loaded = 1). ModelUnloaded: none
  // serves (loaded = 0, generation = 0). ModelLoadFailed: a load or reload failed (the
  // previous generation, if any, keeps serving; call ModelUnloaded if it does not).
  void ModelLoaded(std::string_view model, uint64_t generation);
  void ModelUnloaded(std::string_view model);
  void ModelLoadFailed(std::string_view model);

  // Training jobs (tnmt serve --state-dir): how many jobs are in `state` (QUEUED, RUNNING, ...).
  void SetTrainingJobs(std::string_view state, int64_t jobs);

  // Every series in the Prometheus text exposition format (version 0.0.4).
  std::string Serialize() const;

  // The underlying registry, for metrics owned elsewhere. Lives as long as this object.
  prometheus::Registry& registry() { return *registry_; }

 private:
  struct ModelSeries;
  struct RequestSeries;

  // Series for `model` (or "other" past the cap), created on first use.
  ModelSeries& Model(std::string_view model);
  RequestSeries& Request(std::string_view model, std::string_view method, std::string_view code);

  const ServerMetricsOptions options_;
  std::unique_ptr<prometheus::Registry> registry_;

  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* request_duration_;
  prometheus::Family<prometheus::Histogram>* queue_duration_;
  prometheus::Family<prometheus::Histogram>* compute_duration_;
  prometheus::Family<prometheus::Histogram>* encode_duration_;
  prometheus::Family<prometheus::Histogram>* batch_sentences_;
  prometheus::Family<prometheus::Histogram>* batch_tokens_;
  prometheus::Family<prometheus::Counter>* sentences_;
  prometheus::Family<prometheus::Counter>* source_tokens_;
  prometheus::Family<prometheus::Counter>* generated_tokens_;
  prometheus::Family<prometheus::Gauge>* queue_length_;
  prometheus::Family<prometheus::Gauge>* model_loaded_;
  prometheus::Family<prometheus::Gauge>* model_generation_;
  prometheus::Family<prometheus::Counter>* load_failures_;
  prometheus::Family<prometheus::Gauge>* training_jobs_;
  prometheus::Gauge* inflight_;
  // process_*: refreshed from /proc on every Serialize.
  void UpdateProcessMetrics() const;
  prometheus::Counter* cpu_seconds_;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* open_fds_;
  mutable absl::Mutex process_mu_;
  mutable double cpu_seconds_counted_ ABSL_GUARDED_BY(process_mu_) = 0;

  absl::Mutex mu_;
  // Keyed by model label; at most max_models entries.
  absl::flat_hash_map<std::string, std::unique_ptr<ModelSeries>> models_ ABSL_GUARDED_BY(mu_);
  // The "other" series, for names past the cap; created when first needed.
  std::unique_ptr<ModelSeries> other_ ABSL_GUARDED_BY(mu_);
  // Keyed by model label, method and code joined with '\0'.
  absl::flat_hash_map<std::string, std::unique_ptr<RequestSeries>> requests_by_key_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tnmt

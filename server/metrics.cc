// ServerMetrics: families are registered once in the constructor; per-label series are
// created on first use and cached, so the hot path is one map lookup under a reader lock.
#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tnmt {
namespace {

constexpr std::string_view kOtherModel = "other";

// Debian's Abseil is built with its own absl::string_view, distinct from std::string_view.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Latency: 1 ms to 60 s, roughly 1-2.5-5 per decade.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *buckets;
}

// Sentences per batch: powers of two, 1 to 512.
const prometheus::Histogram::BucketBoundaries& SentenceBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  return *buckets;
}

// Tokens per batch: powers of two, 16 to 32768.
const prometheus::Histogram::BucketBoundaries& TokenBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  return *buckets;
}

std::string CompilerName() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

struct ServerMetrics::ModelSeries {
  std::string label;
  prometheus::Histogram* queue_duration;
  prometheus::Histogram* compute_duration;
  prometheus::Histogram* encode_duration;
  prometheus::Histogram* batch_sentences;
  prometheus::Histogram* batch_tokens;
  prometheus::Counter* sentences;
  prometheus::Counter* source_tokens;
  prometheus::Counter* generated_tokens;
  prometheus::Gauge* queue_length;
  prometheus::Gauge* loaded;
  prometheus::Gauge* generation;
  prometheus::Counter* load_failures;
};

struct ServerMetrics::RequestSeries {
  prometheus::Counter* count;
  prometheus::Histogram* duration;
};

ServerMetrics::ServerMetrics(ServerMetricsOptions options)
    : options_(std::move(options)), registry_(std::make_unique<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  requests_ = &prometheus::BuildCounter()
                   .Name("tnmt_requests_total")
                   .Help("Finished RPCs, by model, method and gRPC status code.")
                   .Register(r);
  request_duration_ = &prometheus::BuildHistogram()
                           .Name("tnmt_request_duration_seconds")
                           .Help("RPC wall time (a stream: its whole lifetime).")
                           .Register(r);
  queue_duration_ = &prometheus::BuildHistogram()
                         .Name("tnmt_queue_duration_seconds")
                         .Help("Time a sentence waited before it started decoding.")
                         .Register(r);
  compute_duration_ = &prometheus::BuildHistogram()
                           .Name("tnmt_compute_duration_seconds")
                           .Help("Decoding wall time per observation (batch or sentence).")
                           .Register(r);
  encode_duration_ = &prometheus::BuildHistogram()
                          .Name("tnmt_encode_duration_seconds")
                          .Help("Encoder wall time per admission (the sentences admitted together).")
                          .Register(r);
  batch_sentences_ = &prometheus::BuildHistogram()
                          .Name("tnmt_batch_sentences")
                          .Help("Sentences per decoded batch.")
                          .Register(r);
  batch_tokens_ = &prometheus::BuildHistogram()
                       .Name("tnmt_batch_tokens")
                       .Help("Source tokens per decoded batch.")
                       .Register(r);
  sentences_ = &prometheus::BuildCounter()
                    .Name("tnmt_sentences_total")
                    .Help("Sentences translated.")
                    .Register(r);
  source_tokens_ = &prometheus::BuildCounter()
                        .Name("tnmt_source_tokens_total")
                        .Help("Source subword tokens of translated sentences.")
                        .Register(r);
  generated_tokens_ = &prometheus::BuildCounter()
                           .Name("tnmt_generated_tokens_total")
                           .Help("Target subword tokens generated (best hypothesis).")
                           .Register(r);
  queue_length_ = &prometheus::BuildGauge()
                       .Name("tnmt_queue_length")
                       .Help("Sentences waiting to be decoded.")
                       .Register(r);
  model_loaded_ = &prometheus::BuildGauge()
                       .Name("tnmt_model_loaded")
                       .Help("1 while a generation of the model is serving, else 0.")
                       .Register(r);
  model_generation_ = &prometheus::BuildGauge()
                           .Name("tnmt_model_generation")
                           .Help("Serving generation of the model (0: none).")
                           .Register(r);
  load_failures_ = &prometheus::BuildCounter()
                        .Name("tnmt_model_load_failures_total")
                        .Help("Failed model loads and reloads.")
                        .Register(r);
  training_jobs_ = &prometheus::BuildGauge()
                        .Name("tnmt_training_jobs")
                        .Help("Training jobs by state (only with --state-dir).")
                        .Register(r);
  inflight_ = &prometheus::BuildGauge()
                   .Name("tnmt_inflight_requests")
                   .Help("RPCs started and not yet finished.")
                   .Register(r)
                   .Add({});
  prometheus::BuildGauge()
      .Name("tnmt_build_info")
      .Help("Always 1; the labels describe the build.")
      .Register(r)
      .Add({{"version", options_.version}, {"compiler", CompilerName()}})
      .Set(1);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  prometheus::BuildGauge()
      .Name("process_start_time_seconds")
      .Help("Start time of the process since the Unix epoch, in seconds.")
      .Register(r)
      .Add({})
      .Set(std::chrono::duration<double>(now).count());
  cpu_seconds_ = &prometheus::BuildCounter()
                      .Name("process_cpu_seconds_total")
                      .Help("User and system CPU time spent by the process, in seconds.")
                      .Register(r)
                      .Add({});
  resident_bytes_ = &prometheus::BuildGauge()
                         .Name("process_resident_memory_bytes")
                         .Help("Resident memory size of the process, in bytes.")
                         .Register(r)
                         .Add({});
  open_fds_ = &prometheus::BuildGauge()
                   .Name("process_open_fds")
                   .Help("Open file descriptors of the process.")
                   .Register(r)
                   .Add({});
}

void ServerMetrics::UpdateProcessMetrics() const {
  // /proc/self/stat: utime and stime (clock ticks) are fields 14 and 15, counted from the
  // first one; the command name (field 2) may contain spaces, so count after its ')'.
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  double cpu = -1;
  const size_t paren = line.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(line.substr(paren + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && (fields >> field); ++i) {
      if (i == 14) utime = std::strtod(field.c_str(), nullptr);
      if (i == 15) stime = std::strtod(field.c_str(), nullptr);
    }
    cpu = (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  {
    absl::MutexLock lock(&process_mu_);
    if (cpu > cpu_seconds_counted_) {
      cpu_seconds_->Increment(cpu - cpu_seconds_counted_);
      cpu_seconds_counted_ = cpu;
    }
  }
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  if (statm >> pages_total >> pages_resident) {
    resident_bytes_->Set(static_cast<double>(pages_resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)));
  }
  int fds = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(dir)) fds += e->d_name[0] != '.';
    ::closedir(dir);
    open_fds_->Set(fds - 1);  // not counting the descriptor reading the directory
  }
}

ServerMetrics::~ServerMetrics() = default;

ServerMetrics::ModelSeries& ServerMetrics::Model(std::string_view model) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = models_.find(Absl(model));
    if (it != models_.end()) return *it->second;
    if (other_ != nullptr && static_cast<int>(models_.size()) >= options_.max_models) {
      return *other_;
    }
  }
  absl::MutexLock lock(&mu_);
  auto it = models_.find(Absl(model));
  if (it != models_.end()) return *it->second;
  std::unique_ptr<ModelSeries>* slot;
  std::string label;
  if (static_cast<int>(models_.size()) < options_.max_models) {
    label = std::string(model);
    slot = &models_[label];
  } else {
    if (other_ != nullptr) return *other_;
    label = std::string(kOtherModel);
    slot = &other_;
  }
  const prometheus::Labels labels = {{"model", label}};
  auto series = std::make_unique<ModelSeries>();
  series->label = label;
  series->queue_duration = &queue_duration_->Add(labels, LatencyBuckets());
  series->compute_duration = &compute_duration_->Add(labels, LatencyBuckets());
  series->encode_duration = &encode_duration_->Add(labels, LatencyBuckets());
  series->batch_sentences = &batch_sentences_->Add(labels, SentenceBuckets());
  series->batch_tokens = &batch_tokens_->Add(labels, TokenBuckets());
  series->sentences = &sentences_->Add(labels);
  series->source_tokens = &source_tokens_->Add(labels);
  series->generated_tokens = &generated_tokens_->Add(labels);
  series->queue_length = &queue_length_->Add(labels);
  series->loaded = &model_loaded_->Add(labels);
  series->generation = &model_generation_->Add(labels);
  series->load_failures = &load_failures_->Add(labels);
  *slot = std::move(series);
  return **slot;
}

ServerMetrics::RequestSeries& ServerMetrics::Request(std::string_view model,
                                                     std::string_view method,
                                                     std::string_view code) {
  // A call that resolved no model (ListModels, an unknown or missing name) is labelled "" and
  // creates no per-model series: a tnmt_model_loaded{model=""} 0 would fire the documented
  // min(tnmt_model_loaded) == 0 alert forever.
  const std::string label = model.empty() ? std::string() : Model(model).label;
  const absl::string_view separator("\0", 1);
  const std::string key = absl::StrCat(label, separator, Absl(method), separator, Absl(code));
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = requests_by_key_.find(key);
    if (it != requests_by_key_.end()) return *it->second;
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<RequestSeries>& slot = requests_by_key_[key];
  if (slot == nullptr) {
    slot = std::make_unique<RequestSeries>();
    slot->count = &requests_->Add(
        {{"model", label}, {"method", std::string(method)}, {"code", std::string(code)}});
    // Family::Add returns the existing histogram for labels it already has.
    slot->duration = &request_duration_->Add({{"model", label}, {"method", std::string(method)}},
                                             LatencyBuckets());
  }
  return *slot;
}

void ServerMetrics::RequestStarted() { inflight_->Increment(); }

void ServerMetrics::RequestDone(std::string_view model, std::string_view method,
                                std::string_view code, double seconds) {
  RequestSeries& series = Request(model, method, code);
  series.count->Increment();
  series.duration->Observe(seconds);
  inflight_->Decrement();
}

void ServerMetrics::RequestDone(std::string_view model, std::string_view method, int code,
                                double seconds) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  if (name.empty()) name = "UNKNOWN";
  RequestDone(model, method, std::string_view(name), seconds);
}

void ServerMetrics::SetQueueLength(std::string_view model, int64_t sentences) {
  Model(model).queue_length->Set(static_cast<double>(sentences));
}

void ServerMetrics::ObserveQueueWait(std::string_view model, double seconds) {
  Model(model).queue_duration->Observe(seconds);
}

void ServerMetrics::ObserveCompute(std::string_view model, double seconds) {
  Model(model).compute_duration->Observe(seconds);
}

void ServerMetrics::ObserveEncode(std::string_view model, double seconds) {
  Model(model).encode_duration->Observe(seconds);
}

void ServerMetrics::BatchDone(std::string_view model, int sentences, int source_tokens) {
  ModelSeries& series = Model(model);
  series.batch_sentences->Observe(sentences);
  series.batch_tokens->Observe(source_tokens);
}

void ServerMetrics::SentenceDone(std::string_view model, int source_tokens,
                                 int generated_tokens) {
  ModelSeries& series = Model(model);
  series.sentences->Increment();
  series.source_tokens->Increment(source_tokens);
  series.generated_tokens->Increment(generated_tokens);
}

void ServerMetrics::ModelLoaded(std::string_view model, uint64_t generation) {
  ModelSeries& series = Model(model);
  series.generation->Set(static_cast<double>(generation));
  series.loaded->Set(1);
}

void ServerMetrics::ModelUnloaded(std::string_view model) {
  ModelSeries& series = Model(model);
  series.loaded->Set(0);
  series.generation->Set(0);
}

void ServerMetrics::ModelLoadFailed(std::string_view model) {
  Model(model).load_failures->Increment();
}

void ServerMetrics::SetTrainingJobs(std::string_view state, int64_t jobs) {
  // States are a fixed set of names, so the label's values stay bounded.
  training_jobs_->Add({{"state", std::string(state)}}).Set(static_cast<double>(jobs));
}

std::string ServerMetrics::Serialize() const {
  UpdateProcessMetrics();
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace tnmt

// ModelRegistry; see model_registry.h.
#include "server/model_registry.h"
#include "server/status_mapping.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/quote.h"

namespace tnmt::server {

namespace {

// Translates one real sentence through a fresh scheduler: proves the model decodes and
// touches every buffer before traffic arrives.
absl::Status WarmUp(Scheduler& scheduler) {
  const LoadedModel& m = *scheduler.model();
  absl::StatusOr<std::vector<int32_t>> ids = m.tokenizer->Encode("Hello, world.");
  if (!ids.ok()) return ids.status();
  ids->push_back(m.config.eos_id);
  std::promise<SentenceResult> promise;
  SentenceTask task;
  task.ids = *std::move(ids);
  task.options = DecodeOptions::FromConfig(m.config);
  task.options.use_shortlist = m.shortlist != nullptr;
  task.counted = false;
  task.done = [&promise](SentenceResult r) { promise.set_value(std::move(r)); };
  std::vector<SentenceTask> tasks;
  tasks.push_back(std::move(task));
  if (absl::Status s = scheduler.Enqueue(std::move(tasks)); !s.ok()) return s;
  SentenceResult r = promise.get_future().get();
  if (!r.status.ok()) return r.status;
  if (r.hypotheses.empty()) return absl::InternalError("warm-up translation produced no hypothesis");
  return absl::OkStatus();
}

}  // namespace

ModelRegistry::ModelRegistry(SchedulerOptions options, ServerMetrics* metrics)
    : options_(options), metrics_(metrics) {}

ModelRegistry::~ModelRegistry() { DrainAll(); }

bool ModelRegistry::Add(const std::string& name, const std::string& path,
                        const Placement& placement, const std::string& shortlist) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FindLocked(name) != nullptr) return false;
  auto e = std::make_unique<Entry>();
  e->status.name = name;
  e->status.path = path;
  e->status.placement = placement;
  e->status.shortlist = shortlist;
  e->status.state = "loading";
  entries_.push_back(std::move(e));
  return true;
}

std::mutex* ModelRegistry::ComputeLock(const Placement& p) {
  const std::string device = p.device == Device::kCpu ? "cpu" : absl::StrCat("cuda:", p.index);
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<std::mutex>& m = compute_locks_[device];
  if (m == nullptr) m = std::make_unique<std::mutex>();
  return m.get();
}

ModelRegistry::Entry* ModelRegistry::FindLocked(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e->status.name == name) return e.get();
  }
  return nullptr;
}

absl::Status ModelRegistry::Load(const std::string& name) {
  std::lock_guard<std::mutex> loading(load_mu_);
  // Entries are never removed, so the pointer stays valid; its fields are read under mu_.
  Entry* e = nullptr;
  std::string path, shortlist;
  Placement placement;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (drained_) return absl::UnavailableError("server is shutting down");
    e = FindLocked(name);
    if (e == nullptr) return absl::NotFoundError(absl::StrCat("no model named ", QuoteForError(name)));
    path = e->status.path;
    placement = e->status.placement;
    shortlist = e->status.shortlist;
  }
  auto fail = [&](const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    e->status.error = std::string(s.message());
    if (e->scheduler == nullptr) e->status.state = "failed";
    if (metrics_ != nullptr) metrics_->ModelLoadFailed(name);
    return absl::Status(s.code(), absl::StrCat("model \"", name, "\": ", s.message()));
  };
  absl::StatusOr<std::shared_ptr<const LoadedModel>> model = LoadModelDirectory(path, placement, shortlist);
  if (!model.ok()) return fail(model.status());
  auto scheduler = std::make_shared<Scheduler>(name, *model, options_, metrics_, ComputeLock(placement));
  if (absl::Status s = WarmUp(*scheduler); !s.ok()) return fail(s);
  std::shared_ptr<Scheduler> old;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(e->scheduler);
    e->scheduler = scheduler;
    e->status.state = "ready";
    e->status.error.clear();
    e->status.model = *model;
    e->status.generation = generation = e->status.generation + 1;
    e->status.loaded_at = absl::Now();
  }
  if (metrics_ != nullptr) metrics_->ModelLoaded(name, generation);
  // Requests that took the old scheduler before the swap finish on it.
  if (old != nullptr) old->Drain();
  return absl::OkStatus();
}

absl::Status ModelRegistry::LoadAll() {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : entries_) names.push_back(e->status.name);
  }
  absl::Status first;
  for (const std::string& n : names) first.Update(Load(n));
  return first;
}

absl::StatusOr<std::shared_ptr<Scheduler>> ModelRegistry::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = FindLocked(name);
  if (e == nullptr) {
    return WithReason(absl::NotFoundError(absl::StrCat("no model named ", QuoteForError(name))), "UNKNOWN_MODEL");
  }
  if (e->scheduler != nullptr) return e->scheduler;
  if (drained_) return WithReason(absl::UnavailableError("server is shutting down"), "SHUTTING_DOWN");
  absl::Status not_ready = absl::UnavailableError(absl::StrCat("model \"", name, "\" is ", e->status.state,
                                                               e->status.error.empty() ? "" : ": ", e->status.error));
  // Still loading: worth a retry shortly. Failed: only a reload of the model changes that.
  if (e->status.state == "failed") return WithReason(not_ready, "MODEL_FAILED");
  return WithRetryDelay(WithReason(not_ready, "MODEL_NOT_READY"), absl::Seconds(1));
}

std::vector<ModelStatus> ModelRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelStatus> out;
  for (const auto& e : entries_) out.push_back(e->status);
  return out;
}

bool ModelRegistry::AllReady() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.empty() || drained_) return false;
  for (const auto& e : entries_) {
    if (e->scheduler == nullptr) return false;
  }
  return true;
}

std::string ModelRegistry::default_model() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!default_.empty()) return default_;
  return entries_.size() == 1 ? entries_[0]->status.name : "";
}

void ModelRegistry::SetDefault(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  default_ = name;
}

void ModelRegistry::DrainAll() {
  std::vector<std::shared_ptr<Scheduler>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drained_ = true;
    for (auto& e : entries_) {
      if (e->scheduler != nullptr) all.push_back(std::move(e->scheduler));
      if (metrics_ != nullptr) metrics_->ModelUnloaded(e->status.name);
    }
  }
  for (auto& s : all) s->Drain();
}

}  // namespace tnmt::server

// ModelRegistry: the server's named models. Each ready model is served by a Scheduler bound
// to one loaded generation of its directory. A (re)load builds the new generation beside the
// serving one, warms it up with a real translation, then swaps it in; the old generation
// finishes everything it accepted before it is dropped, so a reload fails no request.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/runtime/placement.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace tnmt::server {

struct ModelStatus {
  std::string name;
  std::string path;
  Placement placement;  // where it is (to be) loaded
  std::string shortlist;  // vocabulary shortlist file loaded with it, used by every request ("": none)
  std::string state;  // "loading", "ready", "failed"
  std::string error;  // why the last load failed
  uint64_t generation = 0;
  absl::Time loaded_at;
  std::shared_ptr<const LoadedModel> model;  // serving generation (null if none)
};

class ModelRegistry {
 public:
  ModelRegistry(SchedulerOptions options, ServerMetrics* metrics);
  ~ModelRegistry();  // DrainAll()

  // Declares a model (state "loading") to be loaded on `placement` (with a vocabulary
  // shortlist file, "": none, that every request to it then uses); false if the name is taken.
  bool Add(const std::string& name, const std::string& path, const Placement& placement = {},
           const std::string& shortlist = "");
  // Loads (or reloads) the model's directory and swaps it in after a warm-up translation.
  // On failure the serving generation, if any, keeps serving.
  absl::Status Load(const std::string& name);
  // Loads every model; returns the first error (all are attempted).
  absl::Status LoadAll();

  // The scheduler serving `name`: NOT_FOUND if unknown, UNAVAILABLE if not loaded.
  absl::StatusOr<std::shared_ptr<Scheduler>> Get(const std::string& name) const;
  std::vector<ModelStatus> List() const;
  // True when every model has a serving generation.
  bool AllReady() const;
  // The model a request without `model` gets: the one set by SetDefault (the server's only
  // configured model), else the only model served, else none ("" : the request must name one).
  // Models published later by training jobs never change a configured default.
  std::string default_model() const;
  void SetDefault(const std::string& name);

  // Finishes all accepted work and stops every scheduler; later Gets are UNAVAILABLE.
  void DrainAll();

 private:
  std::string default_;  // guarded by mu_
  struct Entry {
    ModelStatus status;
    std::shared_ptr<Scheduler> scheduler;
  };
  // The entry named `name`, or null; mu_ held.
  Entry* FindLocked(const std::string& name) const;
  const SchedulerOptions options_;
  ServerMetrics* const metrics_;
  // One decode step at a time per device ("cpu", "cuda:0", ...) across models; mu_ guards
  // the map, the mutexes live as long as the registry.
  std::mutex* ComputeLock(const Placement& p);
  std::map<std::string, std::unique_ptr<std::mutex>> compute_locks_;
  std::mutex load_mu_;       // one load at a time
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
  bool drained_ = false;
};

}  // namespace tnmt::server

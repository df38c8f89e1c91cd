// A training job's spec: validation (field ranges, limits, path confinement under the data
// root) and its translation into the `tnmt train` JSON config the runner hands the trainer.
// Every refusal is a precise status: INVALID_ARGUMENT for a malformed field or a path with
// "..", PERMISSION_DENIED for a path that leaves the data root (also through a symlink),
// NOT_FOUND for a data file that does not exist, RESOURCE_EXHAUSTED for an oversize spec.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "proto/tnmt/v1/training.pb.h"

namespace tnmt::server::jobs {

struct SpecPolicy {
  std::string data_root;                      // specs read only under this directory
  size_t max_spec_bytes = 64 << 10;           // serialized JobSpec
  std::vector<std::string> reserved_models;   // names a job may not publish under
  bool cuda_available = false;
};

// Letters, digits, '.', '_', '-'; 1 to 64 characters; not "." or "..".
bool IsValidModelName(const std::string& name);

// `path` (relative to `root`, or absolute) resolved through symlinks; refused when it has a
// ".." component, does not exist, or resolves outside `root`. `field` names it in errors.
absl::StatusOr<std::string> ResolveUnderRoot(const std::string& root, const std::string& path,
                                             const std::string& field);

// Checks everything the job needs before it is stored, including that `tnmt train` accepts
// the resulting configuration.
absl::Status ValidateJobSpec(const tnmt::v1::JobSpec& spec, const SpecPolicy& policy);

// Checkpoints averaged into the published model when publish.average_last is 0.
inline constexpr int kDefaultAverageLast = 5;

// `spec` as the job trains with it: each unset (0 or empty) field that has a fixed default gets
// that default (the preset's model sizes, the schedule's and publishing defaults, cpu,
// float32, on_interrupt RESUME). Left as they are: fields where 0 has its own meaning
// (stop.max_epochs, schedule.valid_max_sentences), device.threads (the server's --job-threads)
// and the vocabulary size when spm_model is given.
tnmt::v1::JobSpec SpecWithDefaults(tnmt::v1::JobSpec spec);

// The name the job publishes its model under: publish.model_name, or the job id.
std::string PublishedModelName(const tnmt::v1::JobSpec& spec, const std::string& job_id);

// "cpu" or "cuda:0": the device key the runner's concurrency limit counts by.
std::string DeviceKey(const tnmt::v1::JobSpec& spec);

// The trainer configuration: data paths resolved (again, so a symlink swapped after submission
// is caught) under `data_root`, checkpoints and metrics in `save_dir`.
absl::StatusOr<nlohmann::json> TrainConfigJson(const tnmt::v1::JobSpec& spec, const std::string& data_root,
                                               const std::string& save_dir, int default_threads);

}  // namespace tnmt::server::jobs

// Training checkpoints: a model directory (docs/model-format.md) plus optimizer state and the
// data position, so that training resumes exactly after a kill -9. See README.md here for the
// on-disk layout.
//
//   root/step-00001000/   config.json, model.safetensors, spm.model   (a valid model directory)
//                         optimizer.safetensors  m.<name>, v.<name>   (Adam moments, F32)
//                         trainer_state.json     step, data position, seed, counters
//   root/latest           "step-00001000\n": a hint for scripts and people
//
// Invariants:
// - A directory named step-N under root is always complete: it is built under
//   root/.tmp-step-N-<pid>, every file and the directory are fsynced, and only then is it
//   renamed into place (and root fsynced). Deleting one first renames it to .tmp-delete-...,
//   so a crash at any moment never leaves a half checkpoint under a step-N name.
// - Anything named .tmp-* is debris of an interrupted save or delete; it is never listed or
//   loaded, and the next successful save removes it. One writer per root.
// - The truth is the scan of step-N directories (ListCheckpoints); `latest` is written after
//   each save, but a crash between the rename and that write can leave it one save behind,
//   so nothing here reads it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"

namespace tnmt {

// Everything besides tensors that exact resumption needs. Serialized as trainer_state.json.
struct TrainerState {
  int64_t step = 0;            // optimizer updates done
  int64_t epoch = 0;           // current pass over the data, from 0
  int64_t batch_in_epoch = 0;  // batches of `epoch` already consumed (the data position)
  uint64_t seed = 0;           // RNG seed; with step/epoch it determines every random draw
  double tokens_seen = 0;      // target tokens trained on so far
  double elapsed_seconds = 0;  // training wall time so far
  double loss_scale = 1;       // dynamic loss scale (mixed precision)
  nlohmann::json extra;        // anything else the trainer wants back verbatim (RNG state, ...)

  static constexpr const char* kFormat = "tnmt-trainer-state";
  static constexpr int kFormatVersion = 1;

  // Every number round-trips bit-exactly (integers as JSON integers, doubles in shortest
  // round-trip form); non-finite doubles are rejected by ToJson's callers (SaveCheckpoint).
  std::string ToJson() const;
  // `source` names the file in errors (bad JSON, missing or mistyped key, unknown version).
  static absl::StatusOr<TrainerState> Parse(const std::string& json_text, const std::string& source);
};

struct Checkpoint {
  ModelConfig config;
  std::map<std::string, Tensor> params;  // fairseq names (ModelWeights::ToTensors), float32
  std::map<std::string, Tensor> adam_m;  // first moments, same names and shapes as params
  std::map<std::string, Tensor> adam_v;  // second moments, same names and shapes as params
  TrainerState state;
  // SentencePiece model copied into the checkpoint by SaveCheckpoint; LoadCheckpoint sets it to
  // the checkpoint's own spm.model (which a later prune may delete: copy what must outlive it).
  std::string spm_model_path;
};

// "step-00001000" (at least 8 digits).
std::string CheckpointDirName(int64_t step);

// Writes `root`/step-<step> atomically (see the invariants above), replacing an existing
// checkpoint of the same step, then keeps only the `keep_last` newest checkpoints (<= 0: keep
// all; the one just written is never deleted), removes stale .tmp-* debris and rewrites
// `latest`. Before writing anything, checks that params match the config (names and shapes),
// that moments exist with the same shapes, and that the state's numbers are finite.
absl::Status SaveCheckpoint(const std::string& root, const Checkpoint& checkpoint, int keep_last);

// Complete checkpoint directories under `root` (full paths), oldest step first. A missing
// root has none; a root that is not a directory is an error.
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root);

// Loads and cross-checks everything in a checkpoint directory: config.json, model.safetensors
// (float32, exactly the tensors the config implies), optimizer.safetensors (m./v. for every
// parameter, same shapes, nothing else), trainer_state.json (its step must match a step-N
// directory name) and spm.model (its vocabulary must match). Errors name the file.
absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& dir);

// The newest checkpoint under `root`; NotFound when there is none. A newest checkpoint that
// fails to load is an error (never a silent fall-back to an older one).
absl::StatusOr<Checkpoint> LoadLatestCheckpoint(const std::string& root);

}  // namespace tnmt

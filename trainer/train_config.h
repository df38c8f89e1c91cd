// TrainConfig: everything `tnmt train` needs, from a JSON file (--config) with flags on top.
// Keys are the flag names with '_' for '-'. Validation names the bad setting as the user wrote
// it: a flag as the flag (--max-steps), a key of the file as that key in that file.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace tnmt::train {

// Where the settings of one FromJson call came from, for error messages.
struct ConfigOrigin {
  std::string file;                 // names the JSON (a --config path, "job spec"); empty: none
  std::set<std::string> flag_keys;  // keys ('_' spelling) that command-line flags set
  std::map<std::string, std::string> spelled;  // key -> as the file spells it ("max-steps")

  // "--max-steps" for a flag key, else "FILE: \"max_steps\"" (or "\"max_steps\"" without a file).
  std::string Name(const std::string& key) const;
};

struct TrainConfig {
  // Data.
  std::string train_source, train_target;  // plain or .gz, one sentence per line
  std::string valid_source, valid_target;  // optional
  std::string spm_model;                   // empty: train a joint one into save_dir
  // A model directory (config.json, model.safetensors, spm.model) whose weights start the run
  // instead of random ones (fine-tuning, continued training); its vocabulary is the run's, its
  // architecture must be the one the settings ask for. Fresh optimizer, step 0. Ignored when
  // save_dir already holds a checkpoint (the run resumes from that).
  std::string init_model;
  int vocab_size = 8000;
  int max_length = 256;            // pieces per side; longer pairs are skipped
  double max_length_ratio = 2.0;   // longer/shorter side; larger ratios are skipped
  // Model: a preset ("base", "big", "small", "tiny") and explicit overrides.
  std::string preset = "base";
  ModelConfig model;               // filled from the preset, then the overrides
  // Schedule.
  int64_t max_tokens = 4096;       // per batch per process, padding included
  int accum_steps = 1;             // batches per update
  int64_t warmup_steps = 4000;
  double lr_scale = 1.0;
  int64_t max_steps = 100000;
  int64_t max_epochs = 0;          // 0: no epoch limit
  double clip_norm = 0.0;          // 0: no clipping
  float dropout = 0.1f;             // residual: sub-layer outputs, embeddings
  float attention_dropout = 0.0f;   // attention probabilities
  float activation_dropout = 0.0f;  // the feed-forward's hidden layer after the activation
  // R-Drop: each batch runs twice under different dropout masks, and rdrop_alpha / 2 times the
  // symmetric KL divergence between the two output distributions joins the loss (0: off).
  // A step then costs about twice as much: halve max_tokens to keep it.
  float rdrop_alpha = 0.0f;
  // Subword sampling of the training data: segmentations per side drawn from (1: the best
  // only, off) and the exponent of their probabilities (data::DatasetOptions).
  int subword_nbest = 1;
  float subword_alpha = 0.1f;
  uint64_t seed = 1;
  // Checkpoints and validation.
  std::string save_dir;
  int64_t save_every_steps = 1000;
  double save_every_minutes = 0.0;
  int keep_last = 5;
  int64_t valid_every_steps = 1000;
  bool valid_bleu = true;
  int valid_beam_size = 4;
  int valid_max_sentences = 0;     // 0: the whole dev set
  // Observability and resources.
  std::string metrics_file;        // JSON lines; default save_dir/metrics.jsonl
  int64_t log_every_steps = 10;
  int threads = 0;                 // 0: all cores (CPU training)
  // Device and precision. device: "cpu", "cuda" (GPU rank % visible GPUs: one process per GPU)
  // or "cuda:N". dtype: "float32", or "float16" / "bfloat16" (mixed precision: float32 master
  // weights, half-precision GEMM inputs; float16 with dynamic loss scaling), cuda only.
  std::string device = "cpu";
  std::string dtype = "float32";

  // Parses JSON (`origin` names its settings in errors), validates, applies the preset.
  static absl::StatusOr<TrainConfig> FromJson(const nlohmann::json& j, const ConfigOrigin& origin);
  // The same with every key from one JSON source (`source` names it in errors).
  static absl::StatusOr<TrainConfig> FromJson(const nlohmann::json& j, const std::string& source);
  nlohmann::json ToJson() const;
};

enum class TrainPrecision { kFloat32, kFloat16, kBFloat16 };

// A parsed `device` key.
struct TrainDevice {
  bool cuda = false;
  int index = -1;  // cuda: the GPU ordinal; -1 ("cuda"): rank % the number of visible GPUs
};

// "cpu", "cuda", "cuda:N" (N >= 0). Errors name the key and the accepted forms.
absl::StatusOr<TrainDevice> ParseTrainDevice(const std::string& device);
// "float32", "float16", "bfloat16".
absl::StatusOr<TrainPrecision> ParseTrainPrecision(const std::string& dtype);
const char* TrainPrecisionName(TrainPrecision p);

// Whether training may resume from a checkpoint of model `checkpoint` with the model the
// settings ask for (`requested`): every architecture and vocabulary key of config.json must be
// equal. The error names each differing key ("d_model: checkpoint 256, config 512").
absl::Status CheckResumable(const ModelConfig& checkpoint, const ModelConfig& requested);

// The paper's base and big models, and smaller ones for CPUs and tests.
absl::StatusOr<ModelConfig> PresetModel(const std::string& preset, int vocab_size);

}  // namespace tnmt::train

// Checkpoint save, list and load; see checkpoint.h for the layout and invariants.
#include "trainer/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_limits.h"
#include "engine/core/status_macros.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"
#include "trainer/checkpoint/durable_file.h"

namespace tnmt {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kSpmFile = "spm.model";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kLatestFile = "latest";
constexpr const char* kStepPrefix = "step-";
constexpr const char* kTmpPrefix = ".tmp-";

std::string Join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Last path component, ignoring trailing slashes ("a/step-1/" -> "step-1").
std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return fs::path(path).filename().string();
}

// Steps with more digits than this are refused (they could not be listed back).
constexpr int64_t kMaxStep = 999999999999999999;  // 18 digits

std::string ShapeOf(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&s, i ? ", " : "", shape[i]);
  return s + "]";
}

// The step of a directory named step-<digits>, or -1.
int64_t StepOfName(const std::string& name) {
  if (!absl::StartsWith(name, kStepPrefix) || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Checks the parameters against the config exactly as the engine's loader does.
absl::Status CheckParams(const ModelConfig& config, const std::map<std::string, Tensor>& params,
                         const std::string& source) {
  TensorMap stored;
  for (const auto& [name, t] : params) {
    if (t.empty() || t.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": parameter \"", name, "\" must be a non-empty float32 CPU tensor"));
    }
    stored.emplace(name, StoredTensor{t, DType::kFloat32});
  }
  return ModelWeights::Build(config, std::move(stored), source).status();
}

// `moments` (named `prefix` + parameter name in `source`) must cover exactly the parameters,
// with the same shapes, in float32.
absl::Status CheckMoments(const std::map<std::string, Tensor>& params,
                          const std::map<std::string, Tensor>& moments, const std::string& prefix,
                          const std::string& source) {
  for (const auto& [name, p] : params) {
    auto it = moments.find(name);
    if (it == moments.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": missing tensor \"", prefix, name, "\""));
    }
    if (it->second.shape() != p.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": tensor \"", prefix, name, "\" has shape ", ShapeOf(it->second.shape()),
          " but parameter \"", name, "\" has shape ", ShapeOf(p.shape())));
    }
    if (it->second.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor \"", prefix, name, "\" must be float32"));
    }
  }
  for (const auto& [name, m] : moments) {
    if (params.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": unexpected tensor \"", prefix, name, "\" (no such parameter)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckState(const TrainerState& s) {
  if (s.step < 0 || s.step > kMaxStep || s.epoch < 0 || s.batch_in_epoch < 0) {
    return absl::InvalidArgumentError(
        "trainer state: step (at most 18 digits), epoch and batch_in_epoch must be >= 0");
  }
  for (double v : {s.tokens_seen, s.elapsed_seconds, s.loss_scale}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          "trainer state: tokens_seen, elapsed_seconds and loss_scale must be finite");
    }
  }
  return absl::OkStatus();
}

// Writes every file of the checkpoint into the (new, empty) directory `dir`, each fsynced.
absl::Status WriteCheckpointFiles(const std::string& dir, const Checkpoint& c) {
  TNMT_RETURN_IF_ERROR(WriteFileSynced(Join(dir, kConfigFile), c.config.ToJson()));
  TNMT_RETURN_IF_ERROR(WriteSafetensors(Join(dir, kModelFile), c.params, DType::kFloat32));
  TNMT_RETURN_IF_ERROR(CopyFileSynced(c.spm_model_path, Join(dir, kSpmFile)));
  std::map<std::string, Tensor> moments;
  for (const auto& [name, t] : c.adam_m) moments.emplace("m." + name, t);
  for (const auto& [name, t] : c.adam_v) moments.emplace("v." + name, t);
  TNMT_RETURN_IF_ERROR(WriteSafetensors(Join(dir, kOptimizerFile), moments, DType::kFloat32));
  TNMT_RETURN_IF_ERROR(WriteFileSynced(Join(dir, kStateFile), c.state.ToJson()));
  return SyncPath(dir);
}

// Deletes the oldest checkpoints so that at most `keep_last` remain, never `keep`.
absl::Status Prune(const std::string& root, const std::string& keep, int keep_last,
                   const std::string& pid) {
  if (keep_last <= 0) return absl::OkStatus();
  TNMT_ASSIGN_OR_RETURN(std::vector<std::string> all, ListCheckpoints(root));
  std::vector<std::string> others;
  for (const std::string& d : all) {
    if (d != keep) others.push_back(d);
  }
  const int64_t excess = static_cast<int64_t>(others.size()) - (keep_last - 1);
  for (int64_t i = 0; i < excess; ++i) {
    const std::string name = BaseName(others[i]);
    TNMT_RETURN_IF_ERROR(
        RemoveTreeVia(others[i], Join(root, absl::StrCat(kTmpPrefix, "delete-", name, "-", pid))));
  }
  return absl::OkStatus();
}

// Removes .tmp-* debris left in `root` by interrupted saves and deletes.
absl::Status RemoveDebris(const std::string& root) {
  std::error_code ec;
  std::vector<fs::path> debris;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (absl::StartsWith(it->path().filename().string(), kTmpPrefix)) debris.push_back(it->path());
  }
  if (ec) return absl::InternalError(absl::StrCat(root, ": cannot list: ", ec.message()));
  for (const fs::path& p : debris) {
    fs::remove_all(p, ec);
    if (ec) return absl::InternalError(absl::StrCat(p.string(), ": cannot remove: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status BadState(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

}  // namespace

std::string TrainerState::ToJson() const {
  json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["step"] = step;
  j["epoch"] = epoch;
  j["batch_in_epoch"] = batch_in_epoch;
  j["seed"] = seed;
  j["tokens_seen"] = tokens_seen;
  j["elapsed_seconds"] = elapsed_seconds;
  j["loss_scale"] = loss_scale;
  j["extra"] = extra;
  return j.dump(2) + "\n";
}

absl::StatusOr<TrainerState> TrainerState::Parse(const std::string& text, const std::string& source) {
  if (absl::Status s = CheckJsonLimits(text, source); !s.ok()) return s;
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return BadState(source, "not valid JSON");
  if (!j.is_object()) return BadState(source, "top level must be a JSON object");
  auto format = j.find("format");
  if (format == j.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    return BadState(source, absl::StrCat("\"format\" must be \"", kFormat, "\""));
  }
  auto version = j.find("format_version");
  if (version == j.end() || !version->is_number_integer()) {
    return BadState(source, "missing or non-integer \"format_version\"");
  }
  if (version->get<int64_t>() != kFormatVersion) {
    return BadState(source, absl::StrCat("format_version ", version->dump(),
                                         " is not supported (this build reads ", kFormatVersion, ")"));
  }
  TrainerState s;
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"step", &s.step},
                          {"epoch", &s.epoch},
                          {"batch_in_epoch", &s.batch_in_epoch}}) {
    auto it = j.find(key);
    if (it == j.end()) return BadState(source, absl::StrCat("missing \"", key, "\""));
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() &&
         it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
        it->get<int64_t>() < 0) {
      return BadState(source, absl::StrCat("\"", key, "\" must be a non-negative integer"));
    }
    *out = it->get<int64_t>();
  }
  auto seed = j.find("seed");
  if (seed == j.end()) return BadState(source, "missing \"seed\"");
  if (!seed->is_number_unsigned()) return BadState(source, "\"seed\" must be a non-negative integer");
  s.seed = seed->get<uint64_t>();
  for (auto [key, out, required] :
       {std::tuple<const char*, double*, bool>{"tokens_seen", &s.tokens_seen, true},
        {"elapsed_seconds", &s.elapsed_seconds, true},
        {"loss_scale", &s.loss_scale, false}}) {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) return BadState(source, absl::StrCat("missing \"", key, "\""));
      continue;
    }
    if (!it->is_number()) return BadState(source, absl::StrCat("\"", key, "\" must be a number"));
    *out = it->get<double>();
  }
  if (auto it = j.find("extra"); it != j.end()) s.extra = *it;
  return s;
}

std::string CheckpointDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%08" PRId64, kStepPrefix, step);
  return buf;
}

absl::Status SaveCheckpoint(const std::string& root, const Checkpoint& c, int keep_last) {
  const std::string name = CheckpointDirName(c.state.step);
  const std::string final_dir = Join(root, name);
  TNMT_RETURN_IF_ERROR(CheckState(c.state));
  TNMT_RETURN_IF_ERROR(CheckParams(c.config, c.params, final_dir));
  TNMT_RETURN_IF_ERROR(CheckMoments(c.params, c.adam_m, "m.", final_dir));
  TNMT_RETURN_IF_ERROR(CheckMoments(c.params, c.adam_v, "v.", final_dir));
  if (c.spm_model_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(final_dir, ": no spm_model_path to copy"));
  }

  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat(root, ": cannot create: ", ec.message()));
  const std::string pid = std::to_string(::getpid());
  const std::string tmp_dir = Join(root, absl::StrCat(kTmpPrefix, name, "-", pid));
  fs::remove_all(tmp_dir, ec);
  if (!fs::create_directory(tmp_dir, ec) || ec) {
    return absl::InternalError(absl::StrCat(tmp_dir, ": cannot create: ", ec.message()));
  }
  absl::Status written = WriteCheckpointFiles(tmp_dir, c);
  if (written.ok()) written = InstallDirectory(tmp_dir, final_dir, /*replace=*/true);
  if (!written.ok()) {
    fs::remove_all(tmp_dir, ec);
    return written;
  }

  TNMT_RETURN_IF_ERROR(Prune(root, final_dir, keep_last, pid));
  TNMT_RETURN_IF_ERROR(RemoveDebris(root));
  TNMT_ASSIGN_OR_RETURN(std::vector<std::string> all, ListCheckpoints(root));
  const std::string newest = BaseName(all.back());
  return WriteFileAtomically(Join(root, kLatestFile), newest + "\n",
                             Join(root, absl::StrCat(kTmpPrefix, "latest-", pid)));
}

absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::vector<std::string>{};
  if (!fs::is_directory(root, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(root, ": not a directory"));
  }
  std::vector<std::pair<int64_t, std::string>> found;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const int64_t step = StepOfName(name);
    std::error_code type_ec;
    if (step >= 0 && it->is_directory(type_ec)) found.emplace_back(step, name);
  }
  if (ec) return absl::InternalError(absl::StrCat(root, ": cannot list: ", ec.message()));
  std::sort(found.begin(), found.end());
  std::vector<std::string> dirs;
  for (const auto& [step, name] : found) dirs.push_back(Join(root, name));
  return dirs;
}

absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": checkpoint directory does not exist"));
  }
  Checkpoint c;
  const std::string model_path = Join(dir, kModelFile);
  const std::string optimizer_path = Join(dir, kOptimizerFile);
  const std::string state_path = Join(dir, kStateFile);
  TNMT_ASSIGN_OR_RETURN(c.config, ModelConfig::Load(Join(dir, kConfigFile)));

  TNMT_ASSIGN_OR_RETURN(TensorMap model, ReadSafetensors(model_path));
  for (auto& [name, t] : model) {
    if (t.stored_dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(
          absl::StrCat(model_path, ": tensor \"", name, "\" is stored as ", DTypeName(t.stored_dtype),
                       "; a training checkpoint keeps float32"));
    }
    c.params.emplace(name, t.value);
  }
  TNMT_RETURN_IF_ERROR(CheckParams(c.config, c.params, model_path));

  TNMT_ASSIGN_OR_RETURN(TensorMap optimizer, ReadSafetensors(optimizer_path));
  for (auto& [name, t] : optimizer) {
    std::map<std::string, Tensor>* moments = absl::StartsWith(name, "m.")   ? &c.adam_m
                                             : absl::StartsWith(name, "v.") ? &c.adam_v
                                                                            : nullptr;
    if (moments == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          optimizer_path, ": unexpected tensor \"", name, "\" (names are m.<param> or v.<param>)"));
    }
    if (t.stored_dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(optimizer_path, ": tensor \"", name,
                                                     "\" is stored as ", DTypeName(t.stored_dtype),
                                                     "; optimizer state is float32"));
    }
    moments->emplace(name.substr(2), t.value);
  }
  TNMT_RETURN_IF_ERROR(CheckMoments(c.params, c.adam_m, "m.", optimizer_path));
  TNMT_RETURN_IF_ERROR(CheckMoments(c.params, c.adam_v, "v.", optimizer_path));

  TNMT_ASSIGN_OR_RETURN(std::string state_text, ReadFileToString(state_path));
  TNMT_ASSIGN_OR_RETURN(c.state, TrainerState::Parse(state_text, state_path));
  const int64_t dir_step = StepOfName(BaseName(dir));
  if (dir_step >= 0 && dir_step != c.state.step) {
    return absl::InvalidArgumentError(absl::StrCat(state_path, ": step ", c.state.step,
                                                   " does not match the directory name (step ",
                                                   dir_step, ")"));
  }

  c.spm_model_path = Join(dir, kSpmFile);
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(c.spm_model_path));
  if (tokenizer->vocab_size() != c.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.spm_model_path, ": vocabulary has ", tokenizer->vocab_size(), " pieces but ",
        Join(dir, kConfigFile), " says vocab_size ", c.config.vocab_size));
  }
  return c;
}

absl::StatusOr<Checkpoint> LoadLatestCheckpoint(const std::string& root) {
  TNMT_ASSIGN_OR_RETURN(std::vector<std::string> dirs, ListCheckpoints(root));
  if (dirs.empty()) return absl::NotFoundError(absl::StrCat(root, ": no checkpoint"));
  return LoadCheckpoint(dirs.back());
}

}  // namespace tnmt

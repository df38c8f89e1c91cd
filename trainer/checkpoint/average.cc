// Checkpoint averaging; see average.h.
#include "trainer/checkpoint/average.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/durable_file.h"

namespace tnmt {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string StripSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The first top-level key whose value differs between two config.json texts.
std::string FirstDifferentKey(const std::string& a, const std::string& b) {
  const json ja = json::parse(a, nullptr, false), jb = json::parse(b, nullptr, false);
  if (!ja.is_object() || !jb.is_object()) return "?";
  for (auto it = ja.begin(); it != ja.end(); ++it) {
    auto other = jb.find(it.key());
    if (other == jb.end() || *other != it.value()) return it.key();
  }
  for (auto it = jb.begin(); it != jb.end(); ++it) {
    if (!ja.contains(it.key())) return it.key();
  }
  return "?";
}

struct Sum {
  std::vector<int64_t> shape;
  std::vector<double> values;  // running sum, element-wise, in input order
};

bool IsNonEmptyDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && !fs::is_empty(path, ec);
}

}  // namespace

absl::Status AverageCheckpoints(const std::vector<std::string>& dirs, const std::string& out_dir_arg,
                                const AverageOptions& options) {
  if (dirs.empty()) return absl::InvalidArgumentError("average: no checkpoints given");
  if (options.stored_dtype != DType::kFloat32 && options.stored_dtype != DType::kFloat16 &&
      options.stored_dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "average: stored dtype ", DTypeName(options.stored_dtype), " is not F32, F16 or BF16"));
  }
  const std::string out_dir = StripSlashes(out_dir_arg);
  if (!options.overwrite && IsNonEmptyDirectory(out_dir)) {
    return absl::AlreadyExistsError(
        absl::StrCat(out_dir, ": already exists and is not empty (not replaced)"));
  }

  ModelConfig config;
  std::string config_json;
  // The vocabulary files as config.json names them (spm.model; or source.spm, target.spm and
  // vocab.json for an imported Marian model), with the first input's bytes.
  std::vector<std::pair<std::string, std::string>> vocabulary;
  std::map<std::string, Sum> sums;
  const std::string first = dirs[0];
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string config_path = dirs[i] + "/config.json";
    const std::string model_path = dirs[i] + "/model.safetensors";
    TNMT_ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::Load(config_path));
    if (i == 0) {
      config = c;
      config_json = c.ToJson();
      const VocabularyFiles& v = c.vocabulary;
      const std::vector<std::string> names =
          v.separate() ? std::vector<std::string>{v.source_spm, v.target_spm, v.ids} : std::vector<std::string>{v.joint_spm};
      for (const std::string& name : names) {
        TNMT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(dirs[i] + "/" + name));
        vocabulary.emplace_back(name, std::move(bytes));
      }
    } else {
      if (c.ToJson() != config_json) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_path, ": differs from ", first, "/config.json (key \"",
            FirstDifferentKey(c.ToJson(), config_json), "\"); only checkpoints of one model average"));
      }
      for (const auto& [name, bytes] : vocabulary) {
        const std::string path = dirs[i] + "/" + name;
        TNMT_ASSIGN_OR_RETURN(std::string other, ReadFileToString(path));
        if (other != bytes) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": differs from ", first, "/", name));
        }
      }
    }
    TNMT_ASSIGN_OR_RETURN(TensorMap tensors, ReadSafetensors(model_path));
    if (i > 0) {
      for (const auto& [name, sum] : sums) {
        if (tensors.count(name) == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(model_path, ": missing tensor \"", name, "\" (present in ", first, ")"));
        }
      }
    }
    for (const auto& [name, t] : tensors) {
      if (t.value.dtype() != DType::kFloat32) {
        return absl::InvalidArgumentError(
            absl::StrCat(model_path, ": tensor \"", name, "\" is not a float tensor"));
      }
      auto it = sums.find(name);
      if (it == sums.end()) {
        if (i > 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              model_path, ": unexpected tensor \"", name, "\" (absent from ", first, ")"));
        }
        it = sums.emplace(name, Sum{t.value.shape(), std::vector<double>(t.value.numel(), 0.0)}).first;
      } else if (it->second.shape != t.value.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(model_path, ": tensor \"", name,
                                                       "\" has shape ", t.value.ShapeString(),
                                                       ", unlike in ", first));
      }
      const float* x = t.value.f32();
      double* acc = it->second.values.data();
      const int64_t n = t.value.numel();
      for (int64_t k = 0; k < n; ++k) acc[k] += static_cast<double>(x[k]);
    }
  }

  const double count = static_cast<double>(dirs.size());
  std::map<std::string, Tensor> mean;
  for (auto& [name, sum] : sums) {
    TNMT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(sum.shape));
    float* y = t.f32();
    for (size_t k = 0; k < sum.values.size(); ++k) y[k] = static_cast<float>(sum.values[k] / count);
    std::vector<double>().swap(sum.values);
    mean.emplace(name, std::move(t));
  }
  TensorMap check;
  for (const auto& [name, t] : mean) check.emplace(name, StoredTensor{t, DType::kFloat32});
  TNMT_RETURN_IF_ERROR(ModelWeights::Build(config, std::move(check), first + "/model.safetensors").status());

  const std::string parent = ParentDirectory(out_dir);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return absl::InternalError(absl::StrCat(parent, ": cannot create: ", ec.message()));
  const std::string tmp_dir = absl::StrCat(parent, "/.tmp-", fs::path(out_dir).filename().string(),
                                           "-", ::getpid());
  fs::remove_all(tmp_dir, ec);
  if (!fs::create_directory(tmp_dir, ec) || ec) {
    return absl::InternalError(absl::StrCat(tmp_dir, ": cannot create: ", ec.message()));
  }
  if (!options.source_language.empty() || !options.target_language.empty()) {
    if (!options.source_language.empty()) config.source_language = options.source_language;
    if (!options.target_language.empty()) config.target_language = options.target_language;
    config_json = config.ToJson();
  }
  absl::Status s = WriteFileSynced(tmp_dir + "/config.json", config_json);
  if (s.ok()) s = WriteSafetensors(tmp_dir + "/model.safetensors", mean, options.stored_dtype);
  for (const auto& [name, bytes] : vocabulary) {
    if (s.ok()) s = WriteFileSynced(tmp_dir + "/" + name, bytes);
  }
  if (s.ok()) s = InstallDirectory(tmp_dir, out_dir, options.overwrite);
  if (!s.ok()) fs::remove_all(tmp_dir, ec);
  return s;
}

absl::Status AverageLastCheckpoints(const std::string& root, int last,
                                    const std::string& out_model_dir,
                                    const AverageOptions& options) {
  if (last < 1) return absl::InvalidArgumentError(absl::StrCat("average: --last ", last, " must be >= 1"));
  std::error_code ec;
  if (!fs::exists(root, ec)) return absl::NotFoundError(absl::StrCat(root, ": no such directory"));
  TNMT_ASSIGN_OR_RETURN(std::vector<std::string> all, ListCheckpoints(root));
  if (all.empty()) {
    return absl::NotFoundError(absl::StrCat(root, ": no checkpoints (step-N directories) to average"));
  }
  if (static_cast<int>(all.size()) < last) {
    return absl::FailedPreconditionError(absl::StrCat(root, ": ", all.size(),
                                                      " checkpoint(s), fewer than the ", last,
                                                      " to average"));
  }
  return AverageCheckpoints(std::vector<std::string>(all.end() - last, all.end()), out_model_dir,
                            options);
}

}  // namespace tnmt

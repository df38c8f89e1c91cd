// Model directory loading and cross-checks; see loaded_model.h.
#include "engine/runtime/loaded_model.h"

#include <sys/stat.h>

#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/model/safetensors.h"

namespace tnmt {

namespace {

absl::Status CheckFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const LoadedModel>> LoadModelDirectory(const std::string& dir,
                                                                      const Placement& placement,
                                                                      const std::string& shortlist) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": model directory does not exist"));
  }
  const std::string config_path = dir + "/config.json";
  const std::string weights_path = dir + "/model.safetensors";
  TNMT_RETURN_IF_ERROR(CheckFile(config_path));

  auto m = std::make_shared<LoadedModel>();
  m->directory = dir;
  // config.json first: it says what else the directory should hold (and tells a Hugging Face
  // directory, which may have no model.safetensors, from a tnmt one).
  TNMT_ASSIGN_OR_RETURN(m->config, ModelConfig::Load(config_path));
  TNMT_RETURN_IF_ERROR(CheckFile(weights_path));
  const ModelConfig& c = m->config;
  const VocabularyFiles& v = c.vocabulary;
  // The file the vocabulary checks below name.
  std::string vocab_path = dir + "/" + (v.separate() ? v.ids : v.joint_spm);
  if (v.separate()) {
    const std::string src = dir + "/" + v.source_spm, tgt = dir + "/" + v.target_spm;
    for (const std::string& p : {src, tgt, vocab_path}) TNMT_RETURN_IF_ERROR(CheckFile(p));
    TNMT_ASSIGN_OR_RETURN(m->tokenizer, Tokenizer::LoadSeparate(src, tgt, vocab_path));
  } else {
    TNMT_RETURN_IF_ERROR(CheckFile(vocab_path));
    TNMT_ASSIGN_OR_RETURN(m->tokenizer, Tokenizer::Load(vocab_path));
  }
  if (m->tokenizer->vocab_size() != c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        vocab_path, ": vocabulary has ", m->tokenizer->vocab_size(), " pieces but ", config_path,
        " says vocab_size ", c.vocab_size));
  }
  // A separate vocabulary is checked on every special id it names; SentencePiece's own
  // <s> may be absent from a joint one (then -1) when the model starts from another token.
  for (auto [name, spm_id, cfg_id] :
       {std::tuple<const char*, int, int>{"eos_id", m->tokenizer->eos_id(), c.eos_id},
        {"bos_id", v.separate() ? -1 : m->tokenizer->bos_id(), c.bos_id},
        {"unk_id", m->tokenizer->unk_id(), c.unk_id},
        {"pad_id", v.separate() ? m->tokenizer->pad_id() : -1, c.pad_id}}) {
    if (spm_id >= 0 && spm_id != cfg_id) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": ", name, " is ", spm_id, " but ",
                                                     config_path, " says ", cfg_id));
    }
  }
  TNMT_ASSIGN_OR_RETURN(TensorMap tensors, ReadSafetensors(weights_path));
  for (const auto& [name, t] : tensors) m->parameter_count += t.value.numel();
  TNMT_ASSIGN_OR_RETURN(m->weights, ModelWeights::Build(c, std::move(tensors), weights_path));
  m->placement = placement;
  if (!shortlist.empty()) {
    if (placement.device == Device::kCuda) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shortlist ", shortlist, ": the vocabulary shortlist runs on the CPU engine only (not on ",
          placement.ToString(), ")"));
    }
    TNMT_ASSIGN_OR_RETURN(Shortlist table, ReadShortlist(shortlist, c.vocab_size));
    m->shortlist = std::make_shared<const Shortlist>(std::move(table));
  }
  if (placement.device == Device::kCuda) {
    auto backend = MakeCudaBackend(c, m->weights, {placement.index, placement.dtype});
    if (!backend.ok()) {
      return absl::Status(backend.status().code(),
                          absl::StrCat(dir, ": placing the model on ", placement.ToString(), ": ",
                                       backend.status().message()));
    }
    m->backend = *std::move(backend);
  } else {
    // Inference weights never change after loading: pack the GEMM operands once (quantized
    // to int8 when the placement asks for it).
    m->weights.PackForInference(placement.int8);
    m->backend = MakeCpuBackend(m->config, m->weights, placement.ToString(), m->shortlist);
  }
  return std::shared_ptr<const LoadedModel>(std::move(m));
}

absl::Status CheckEnsembleMembers(const LoadedModel& first, const LoadedModel& other) {
  const auto differ = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("cannot ensemble ", other.directory, " with ", first.directory,
                                                   ": ", what));
  };
  const ModelConfig& a = first.config;
  const ModelConfig& b = other.config;
  if (a.vocab_size != b.vocab_size) {
    return differ(absl::StrCat("their vocabularies have ", b.vocab_size, " and ", a.vocab_size, " tokens"));
  }
  for (const auto& [name, x, y] : std::vector<std::tuple<const char*, int, int>>{
           {"pad_id", a.pad_id, b.pad_id},
           {"unk_id", a.unk_id, b.unk_id},
           {"bos_id", a.bos_id, b.bos_id},
           {"eos_id", a.eos_id, b.eos_id},
           {"the decoder's start token", a.start_id(), b.start_id()}}) {
    if (x != y) return differ(absl::StrCat(name, " is ", y, " and ", x));
  }
  for (int id = 0; id < a.vocab_size; ++id) {
    const std::string pa = first.tokenizer->Piece(id);
    const std::string pb = other.tokenizer->Piece(id);
    if (pa != pb) {
      return differ(absl::StrCat("their vocabularies differ at id ", id, " (\"", pb, "\" and \"", pa,
                                 "\"): ensemble members must share one vocabulary"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::shared_ptr<const LoadedModel>>> LoadEnsembleMembers(
    const LoadedModel& first, const std::vector<std::string>& dirs, const Placement& placement) {
  std::vector<std::shared_ptr<const LoadedModel>> members;
  for (const std::string& dir : dirs) {
    TNMT_ASSIGN_OR_RETURN(std::shared_ptr<const LoadedModel> m, LoadModelDirectory(dir, placement));
    TNMT_RETURN_IF_ERROR(CheckEnsembleMembers(first, *m));
    members.push_back(std::move(m));
  }
  return members;
}

absl::StatusOr<BeamDecoder> NewBeamDecoder(const LoadedModel& model) {
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> step, model.backend->NewStepModel());
  return BeamDecoder::Create(model.config, std::move(step));
}

}  // namespace tnmt

#include "server/jobs/job_spec.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor.h"
#include "trainer/train_config.h"

namespace tnmt::server::jobs {

namespace {

using tnmt::v1::JobSpec;

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", std::strerror(e)));
  }
  return std::string(buf);
}

bool Within(const std::string& root, const std::string& path) {
  return path == root || absl::StartsWith(path, root == "/" ? root : root + "/");
}

absl::Status CheckDataField(const std::string& root, const std::string& value, const std::string& field,
                            bool required) {
  if (value.empty()) {
    return required ? absl::InvalidArgumentError(absl::StrCat(field, " is required")) : absl::OkStatus();
  }
  return ResolveUnderRoot(root, value, field).status();
}

}  // namespace

bool IsValidModelName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::string> ResolveUnderRoot(const std::string& root, const std::string& path,
                                             const std::string& field) {
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": contains a NUL byte"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(field, " \"", path, "\": \"..\" is not allowed in paths"));
    }
  }
  auto real_root = RealPath(root);
  if (!real_root.ok()) return absl::FailedPreconditionError(absl::StrCat("data root ", real_root.status().message()));
  if (path[0] == '/') {  // the contract is a path relative to the data root
    if (!Within(*real_root, path)) {
      return absl::PermissionDeniedError(
          absl::StrCat(field, " \"", path, "\": outside the data root ", *real_root));
    }
    return absl::InvalidArgumentError(absl::StrCat(field, " \"", path,
                                                   "\": give the path relative to the data root, not absolute"));
  }
  const std::string joined = absl::StrCat(*real_root, "/", path);
  auto real = RealPath(joined);
  if (!real.ok()) {
    if (absl::IsNotFound(real.status())) {
      return absl::NotFoundError(absl::StrCat(field, " \"", path, "\": no such file under the data root"));
    }
    return absl::Status(real.status().code(), absl::StrCat(field, ": ", real.status().message()));
  }
  if (!Within(*real_root, *real)) {
    return absl::PermissionDeniedError(absl::StrCat(field, " \"", path, "\": resolves to ", *real,
                                                    ", outside the data root ", *real_root, " (symlink)"));
  }
  // Only regular files: a FIFO would hold the job's trainer (and the device's only run slot) at
  // step 0 waiting for a writer; a directory or device is never a corpus.
  struct stat st;
  if (::stat(real->c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    const char* what = ::stat(real->c_str(), &st) != 0 ? "cannot be read"
                       : S_ISDIR(st.st_mode)            ? "is a directory"
                       : S_ISFIFO(st.st_mode)           ? "is a FIFO"
                                                        : "is not a regular file";
    return absl::InvalidArgumentError(absl::StrCat(field, " \"", path, "\": ", what, " (a regular file is needed)"));
  }
  return *real;
}

absl::Status ValidateJobSpec(const JobSpec& spec, const SpecPolicy& policy) {
  const size_t bytes = spec.ByteSizeLong();
  if (bytes > policy.max_spec_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job spec is ", bytes, " bytes; the limit is ", policy.max_spec_bytes));
  }
  if (spec.name().size() > 128) return absl::InvalidArgumentError("name: longer than 128 bytes");
  const auto& d = spec.data();
  TNMT_RETURN_IF_ERROR(CheckDataField(policy.data_root, d.train_source(), "data.train_source", true));
  TNMT_RETURN_IF_ERROR(CheckDataField(policy.data_root, d.train_target(), "data.train_target", true));
  if (d.valid_source().empty() != d.valid_target().empty()) {
    return absl::InvalidArgumentError("data.valid_source and data.valid_target: give both or neither");
  }
  TNMT_RETURN_IF_ERROR(CheckDataField(policy.data_root, d.valid_source(), "data.valid_source", false));
  TNMT_RETURN_IF_ERROR(CheckDataField(policy.data_root, d.valid_target(), "data.valid_target", false));
  TNMT_RETURN_IF_ERROR(CheckDataField(policy.data_root, spec.vocabulary().spm_model(), "vocabulary.spm_model", false));
  if (spec.stop().max_steps() < 1) return absl::InvalidArgumentError("stop.max_steps must be at least 1");
  if (spec.stop().max_epochs() < 0) return absl::InvalidArgumentError("stop.max_epochs must not be negative");
  const std::string& type = spec.device().type();
  if (!type.empty() && type != "cpu" && type != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("device.type \"", type, "\": expected cpu or cuda"));
  }
  if (type == "cuda" && !policy.cuda_available) {
    return absl::FailedPreconditionError("device.type cuda: this server has no CUDA device");
  }
  const std::string& dtype = spec.device().dtype();
  if (!dtype.empty() && !ParseFloatDType(dtype).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device.dtype \"", dtype, "\": expected float32, float16 or bfloat16"));
  }
  if (type != "cuda" && !dtype.empty() && dtype != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("device.dtype ", dtype, ": half precision needs device.type cuda"));
  }
  if (spec.device().threads() < 0 || spec.device().threads() > 1024) {
    return absl::InvalidArgumentError("device.threads must be between 0 and 1024");
  }
  const auto& p = spec.publish();
  if (!p.model_name().empty() && !IsValidModelName(p.model_name())) {
    return absl::InvalidArgumentError(absl::StrCat("publish.model_name \"", p.model_name(),
                                                   "\": use 1 to 64 letters, digits, '.', '_' or '-'"));
  }
  for (const std::string& r : policy.reserved_models) {
    if (p.model_name() == r) {
      return absl::AlreadyExistsError(absl::StrCat("publish.model_name \"", r,
                                                   "\": a model the server was started with; choose another name"));
    }
  }
  if (p.average_last() < 0 || p.average_last() > 100) {
    return absl::InvalidArgumentError("publish.average_last must be between 0 and 100");
  }
  if (!p.dtype().empty() && p.dtype() != "float32" && p.dtype() != "float16" && p.dtype() != "bfloat16") {
    return absl::InvalidArgumentError(absl::StrCat("publish.dtype \"", p.dtype(), "\": expected float32, float16 or bfloat16"));
  }
  // Sizes this server will train at all: beyond them one job could exhaust host memory
  // (a d_model of 10^6 is terabytes of weights) or run for years.
  const auto& m = spec.model();
  const struct {
    const char* field;
    int64_t value, max;
  } bounds[] = {
      {"model.d_model", m.d_model(), 8192},
      {"model.d_ff", m.d_ff(), 65536},
      {"model.num_heads", m.num_heads(), 128},
      {"model.encoder_layers", m.encoder_layers(), 64},
      {"model.decoder_layers", m.decoder_layers(), 64},
      {"vocabulary.vocab_size", spec.vocabulary().vocab_size(), 1000000},
      {"schedule.max_tokens", spec.schedule().max_tokens(), 1 << 20},
      {"schedule.accum_steps", spec.schedule().accum_steps(), 1024},
      {"schedule.max_length", spec.schedule().max_length(), 4096},
      {"stop.max_steps", spec.stop().max_steps(), 100000000},
      {"stop.max_epochs", spec.stop().max_epochs(), 100000},
  };
  for (const auto& b : bounds) {
    if (b.value < 0 || b.value > b.max) {
      return absl::InvalidArgumentError(absl::StrCat(b.field, " ", b.value, " is outside [0, ", b.max, "]"));
    }
  }
  // Everything else is the trainer's own validation, run here so a bad job fails at submit.
  auto j = TrainConfigJson(spec, policy.data_root, "/nonexistent-save-dir", 1);
  if (!j.ok()) return j.status();
  auto cfg = train::TrainConfig::FromJson(*j, "job spec");
  if (!cfg.ok()) return absl::InvalidArgumentError(cfg.status().message());
  return absl::OkStatus();
}

JobSpec SpecWithDefaults(JobSpec spec) {
  const train::TrainConfig t;
  auto* v = spec.mutable_vocabulary();
  if (v->spm_model().empty() && v->vocab_size() == 0) v->set_vocab_size(t.vocab_size);
  auto* m = spec.mutable_model();
  if (m->preset().empty()) m->set_preset(t.preset);
  if (absl::StatusOr<ModelConfig> preset = train::PresetModel(m->preset(), v->vocab_size()); preset.ok()) {
    if (m->d_model() == 0) m->set_d_model(preset->d_model);
    if (m->num_heads() == 0) m->set_num_heads(preset->num_heads);
    if (m->d_ff() == 0) m->set_d_ff(preset->d_ff);
    if (m->encoder_layers() == 0) m->set_encoder_layers(preset->encoder_layers);
    if (m->decoder_layers() == 0) m->set_decoder_layers(preset->decoder_layers);
    if (m->label_smoothing() == 0) m->set_label_smoothing(preset->label_smoothing);
  }
  if (m->dropout() == 0) m->set_dropout(t.dropout);
  auto* s = spec.mutable_schedule();
  if (s->max_tokens() == 0) s->set_max_tokens(t.max_tokens);
  if (s->accum_steps() == 0) s->set_accum_steps(t.accum_steps);
  if (s->warmup_steps() == 0) s->set_warmup_steps(t.warmup_steps);
  if (s->lr_scale() == 0) s->set_lr_scale(t.lr_scale);
  if (s->seed() == 0) s->set_seed(t.seed);
  if (s->max_length() == 0) s->set_max_length(t.max_length);
  if (s->save_every_steps() == 0) s->set_save_every_steps(t.save_every_steps);
  if (s->valid_every_steps() == 0) s->set_valid_every_steps(t.valid_every_steps);
  if (s->keep_last() == 0) s->set_keep_last(t.keep_last);
  auto* d = spec.mutable_device();
  if (d->type().empty()) d->set_type("cpu");
  if (d->dtype().empty()) d->set_dtype(t.dtype);
  auto* p = spec.mutable_publish();
  if (p->average_last() == 0) p->set_average_last(kDefaultAverageLast);
  if (p->dtype().empty()) p->set_dtype("float32");
  if (spec.on_interrupt() == tnmt::v1::ON_INTERRUPT_UNSPECIFIED) spec.set_on_interrupt(tnmt::v1::ON_INTERRUPT_RESUME);
  return spec;
}

std::string PublishedModelName(const JobSpec& spec, const std::string& job_id) {
  return spec.publish().model_name().empty() ? job_id : spec.publish().model_name();
}

std::string DeviceKey(const JobSpec& spec) { return spec.device().type() == "cuda" ? "cuda:0" : "cpu"; }

absl::StatusOr<nlohmann::json> TrainConfigJson(const JobSpec& spec, const std::string& data_root,
                                               const std::string& save_dir, int default_threads) {
  nlohmann::json j = nlohmann::json::object();
  auto path = [&](const std::string& value, const char* field, const char* key) -> absl::Status {
    if (value.empty()) return absl::OkStatus();
    TNMT_ASSIGN_OR_RETURN(std::string real, ResolveUnderRoot(data_root, value, field));
    j[key] = real;
    return absl::OkStatus();
  };
  const auto& d = spec.data();
  TNMT_RETURN_IF_ERROR(path(d.train_source(), "data.train_source", "train_source"));
  TNMT_RETURN_IF_ERROR(path(d.train_target(), "data.train_target", "train_target"));
  TNMT_RETURN_IF_ERROR(path(d.valid_source(), "data.valid_source", "valid_source"));
  TNMT_RETURN_IF_ERROR(path(d.valid_target(), "data.valid_target", "valid_target"));
  TNMT_RETURN_IF_ERROR(path(spec.vocabulary().spm_model(), "vocabulary.spm_model", "spm_model"));
  auto set_if = [&](const char* key, auto value) {
    if (value != 0) j[key] = value;
  };
  set_if("vocab_size", spec.vocabulary().vocab_size());
  set_if("subword_nbest", spec.vocabulary().subword_nbest());
  set_if("subword_alpha", spec.vocabulary().subword_alpha());
  const auto& m = spec.model();
  j["preset"] = m.preset().empty() ? "base" : m.preset();
  set_if("d_model", m.d_model());
  set_if("num_heads", m.num_heads());
  set_if("d_ff", m.d_ff());
  set_if("encoder_layers", m.encoder_layers());
  set_if("decoder_layers", m.decoder_layers());
  set_if("dropout", m.dropout());
  set_if("attention_dropout", m.attention_dropout());
  set_if("activation_dropout", m.activation_dropout());
  set_if("rdrop_alpha", m.rdrop_alpha());
  set_if("label_smoothing", m.label_smoothing());
  const auto& s = spec.schedule();
  set_if("max_tokens", s.max_tokens());
  set_if("accum_steps", s.accum_steps());
  set_if("warmup_steps", s.warmup_steps());
  set_if("lr_scale", s.lr_scale());
  set_if("seed", s.seed());
  set_if("max_length", s.max_length());
  set_if("save_every_steps", s.save_every_steps());
  set_if("valid_every_steps", s.valid_every_steps());
  set_if("valid_max_sentences", s.valid_max_sentences());
  set_if("keep_last", s.keep_last());
  j["max_steps"] = spec.stop().max_steps();
  set_if("max_epochs", spec.stop().max_epochs());
  j["threads"] = spec.device().threads() > 0 ? spec.device().threads() : default_threads;
  if (spec.device().type() == "cuda") {
    j["device"] = DeviceKey(spec);
    if (!spec.device().dtype().empty()) j["dtype"] = spec.device().dtype();
  }
  j["save_dir"] = save_dir;
  j["valid_bleu"] = !d.valid_source().empty();
  return j;
}

}  // namespace tnmt::server::jobs

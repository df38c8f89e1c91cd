// TrainConfig parsing and presets; see train_config.h.
#include "trainer/train_config.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "engine/core/tensor.h"
#include "engine/tokenizer/tokenizer.h"

namespace tnmt::train {

namespace {

using nlohmann::json;

// Model keys that may override the preset (same names as config.json).
const std::set<std::string>& ModelKeys() {
  static const auto* keys = new std::set<std::string>{
      "d_model", "num_heads", "d_ff", "encoder_layers", "decoder_layers", "normalize_before",
      "activation", "position_encoding", "max_positions", "share_embeddings",
      "share_decoder_input_output_embed", "scale_embedding", "layer_norm_epsilon", "label_smoothing"};
  return *keys;
}

}  // namespace

absl::StatusOr<TrainDevice> ParseTrainDevice(const std::string& device) {
  absl::StatusOr<DeviceId> id = ParseDeviceId(device);
  if (!id.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"device\" must be \"cpu\", \"cuda\" or \"cuda:N\" (got \"", device, "\")"));
  }
  TrainDevice d;
  d.cuda = id->device == Device::kCuda;
  d.index = id->index;
  return d;
}

absl::StatusOr<TrainPrecision> ParseTrainPrecision(const std::string& dtype) {
  absl::StatusOr<DType> t = ParseFloatDType(dtype);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"dtype\" must be \"float32\", \"float16\" or \"bfloat16\" (got \"", dtype, "\")"));
  }
  switch (*t) {
    case DType::kFloat16: return TrainPrecision::kFloat16;
    case DType::kBFloat16: return TrainPrecision::kBFloat16;
    default: return TrainPrecision::kFloat32;
  }
}

const char* TrainPrecisionName(TrainPrecision p) {
  switch (p) {
    case TrainPrecision::kFloat32: return "float32";
    case TrainPrecision::kFloat16: return "float16";
    case TrainPrecision::kBFloat16: return "bfloat16";
  }
  return "float32";
}

absl::StatusOr<ModelConfig> PresetModel(const std::string& preset, int vocab_size) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  if (preset == "base") {
    // Defaults of ModelConfig are the paper's base model.
  } else if (preset == "big") {
    c.d_model = 1024, c.num_heads = 16, c.d_ff = 4096;
  } else if (preset == "small") {
    c.d_model = 256, c.num_heads = 4, c.d_ff = 1024, c.encoder_layers = 3, c.decoder_layers = 3;
  } else if (preset == "tiny") {
    c.d_model = 32, c.num_heads = 2, c.d_ff = 64, c.encoder_layers = 1, c.decoder_layers = 1;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown preset \"", preset, "\" (base, big, small, tiny)"));
  }
  return c;
}

std::string ConfigOrigin::Name(const std::string& key) const {
  if (flag_keys.count(key)) return "--" + absl::StrReplaceAll(key, {{"_", "-"}});
  auto it = spelled.find(key);
  const std::string& written = it == spelled.end() ? key : it->second;
  if (file.empty()) return absl::StrCat("\"", written, "\"");
  return absl::StrCat(file, ": \"", written, "\"");
}

absl::StatusOr<TrainConfig> TrainConfig::FromJson(const json& j, const std::string& source) {
  ConfigOrigin origin;
  origin.file = source;
  return FromJson(j, origin);
}

absl::StatusOr<TrainConfig> TrainConfig::FromJson(const json& j, const ConfigOrigin& origin) {
  const std::string& source = origin.file;
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": must be a JSON object"));
  TrainConfig t;
  std::vector<std::string> unknown;
  // "NAME what (got VALUE)", NAME as the user wrote the setting.
  auto bad = [&](const std::string& key, const std::string& what) {
    std::string got;
    if (j.contains(key)) got = absl::StrCat(" (got ", j[key].dump(), ")");
    return absl::InvalidArgumentError(absl::StrCat(origin.Name(key), " ", what, got));
  };
  // Typed readers; wrong types are errors naming the key.
  auto str = [&](const char* key, std::string* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_string()) return bad(key, "must be a string");
    *out = j[key].get<std::string>();
    return absl::OkStatus();
  };
  auto integer = [&](const char* key, auto* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_number_integer()) return bad(key, "must be an integer");
    *out = j[key].get<std::remove_pointer_t<decltype(out)>>();
    return absl::OkStatus();
  };
  auto number = [&](const char* key, auto* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_number()) return bad(key, "must be a number");
    *out = j[key].get<std::remove_pointer_t<decltype(out)>>();
    return absl::OkStatus();
  };
  auto boolean = [&](const char* key, bool* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_boolean()) return bad(key, "must be true or false");
    *out = j[key].get<bool>();
    return absl::OkStatus();
  };
  const std::set<std::string> known = {
      "train_source", "train_target", "valid_source", "valid_target", "spm_model", "init_model", "vocab_size",
      "max_length", "max_length_ratio", "preset", "max_tokens", "accum_steps", "warmup_steps",
      "lr_scale", "max_steps", "max_epochs", "clip_norm", "dropout", "attention_dropout",
      "activation_dropout", "rdrop_alpha", "subword_nbest", "subword_alpha", "seed", "save_dir",
      "save_every_steps", "save_every_minutes", "keep_last", "valid_every_steps", "valid_bleu",
      "valid_beam_size", "valid_max_sentences", "metrics_file", "log_every_steps", "threads", "device", "dtype"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (known.count(it.key()) || ModelKeys().count(it.key())) continue;
    auto spelled = origin.spelled.find(it.key());
    unknown.push_back(spelled == origin.spelled.end() ? it.key() : spelled->second);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unknown key(s) ", absl::StrJoin(unknown, ", ")));
  }
  for (absl::Status s : {str("train_source", &t.train_source), str("train_target", &t.train_target),
                         str("valid_source", &t.valid_source), str("valid_target", &t.valid_target),
                         str("spm_model", &t.spm_model), str("init_model", &t.init_model),
                         integer("vocab_size", &t.vocab_size),
                         integer("max_length", &t.max_length), number("max_length_ratio", &t.max_length_ratio),
                         str("preset", &t.preset), integer("max_tokens", &t.max_tokens),
                         integer("accum_steps", &t.accum_steps), integer("warmup_steps", &t.warmup_steps),
                         number("lr_scale", &t.lr_scale), integer("max_steps", &t.max_steps),
                         integer("max_epochs", &t.max_epochs), number("clip_norm", &t.clip_norm),
                         number("dropout", &t.dropout), number("attention_dropout", &t.attention_dropout),
                         number("activation_dropout", &t.activation_dropout),
                         number("rdrop_alpha", &t.rdrop_alpha),
                         integer("subword_nbest", &t.subword_nbest), number("subword_alpha", &t.subword_alpha),
                         integer("seed", &t.seed),
                         str("save_dir", &t.save_dir),
                         integer("save_every_steps", &t.save_every_steps),
                         number("save_every_minutes", &t.save_every_minutes), integer("keep_last", &t.keep_last),
                         integer("valid_every_steps", &t.valid_every_steps), boolean("valid_bleu", &t.valid_bleu),
                         integer("valid_beam_size", &t.valid_beam_size),
                         integer("valid_max_sentences", &t.valid_max_sentences),
                         str("metrics_file", &t.metrics_file), integer("log_every_steps", &t.log_every_steps),
                         integer("threads", &t.threads), str("device", &t.device), str("dtype", &t.dtype)}) {
    if (!s.ok()) return s;
  }
  // A required setting names both ways to give it.
  auto required = [&](std::initializer_list<const char*> keys) {
    std::vector<std::string> flags, names;
    for (const char* k : keys) {
      flags.push_back("--" + absl::StrReplaceAll(k, {{"_", "-"}}));
      names.push_back(absl::StrCat("\"", k, "\""));
    }
    const std::string where = source.empty() ? "a --config file" : source;
    return absl::InvalidArgumentError(absl::StrCat(absl::StrJoin(flags, " and "), " (", absl::StrJoin(names, ", "),
                                                   " in ", where, ") ", keys.size() > 1 ? "are" : "is",
                                                   " required"));
  };
  if (t.train_source.empty() || t.train_target.empty()) return required({"train_source", "train_target"});
  if (t.save_dir.empty()) return required({"save_dir"});
  if (!t.init_model.empty() && !t.spm_model.empty()) {
    return bad("spm_model", "cannot be given with init_model (the run uses the init model's spm.model)");
  }
  if (t.valid_source.empty() != t.valid_target.empty()) {
    return bad(t.valid_source.empty() ? "valid_target" : "valid_source",
               "needs its other side too (give both valid_source and valid_target, or neither)");
  }
  if (t.vocab_size < 8) return bad("vocab_size", "must be at least 8");
  if (t.max_length < 1) return bad("max_length", "must be positive");
  if (!(t.max_length_ratio >= 1.0)) return bad("max_length_ratio", "must be >= 1");
  if (t.max_tokens < 1) return bad("max_tokens", "must be positive");
  if (t.accum_steps < 1) return bad("accum_steps", "must be positive");
  if (t.warmup_steps < 1) return bad("warmup_steps", "must be positive");
  if (!(t.lr_scale > 0)) return bad("lr_scale", "must be positive");
  if (t.max_steps < 1) return bad("max_steps", "must be positive");
  if (t.max_epochs < 0) return bad("max_epochs", "must be >= 0");
  if (!(t.clip_norm >= 0)) return bad("clip_norm", "must be >= 0");
  if (!(t.dropout >= 0 && t.dropout < 1)) return bad("dropout", "must be in [0, 1)");
  if (!(t.attention_dropout >= 0 && t.attention_dropout < 1)) return bad("attention_dropout", "must be in [0, 1)");
  if (!(t.activation_dropout >= 0 && t.activation_dropout < 1)) return bad("activation_dropout", "must be in [0, 1)");
  if (!(t.rdrop_alpha >= 0 && t.rdrop_alpha <= 100)) return bad("rdrop_alpha", "must be in [0, 100]");
  if (t.subword_nbest < 1 || t.subword_nbest > Tokenizer::kNBestMax) {
    return bad("subword_nbest", absl::StrCat("must be in [1, ", Tokenizer::kNBestMax, "]"));
  }
  if (!(t.subword_alpha >= 0 && t.subword_alpha <= 10)) return bad("subword_alpha", "must be in [0, 10]");
  if (t.save_every_steps < 0) return bad("save_every_steps", "must be >= 0");
  if (t.valid_every_steps < 0) return bad("valid_every_steps", "must be >= 0");
  if (t.log_every_steps < 1) return bad("log_every_steps", "must be positive");
  if (t.valid_beam_size < 1 || t.valid_beam_size > 64) return bad("valid_beam_size", "must be in [1, 64]");
  if (t.threads < 0) return bad("threads", "must be >= 0");
  auto device = ParseTrainDevice(t.device);
  if (!device.ok()) return bad("device", "must be \"cpu\", \"cuda\" or \"cuda:N\"");
  auto precision = ParseTrainPrecision(t.dtype);
  if (!precision.ok()) return bad("dtype", "must be \"float32\", \"float16\" or \"bfloat16\"");
  if (!device->cuda && *precision == TrainPrecision::kFloat16) {
    return bad("dtype", "needs a GPU for float16 (device \"cuda\"); training on \"cpu\" is float32, or bfloat16 on CPUs "
                        "with AVX-512 BF16");
  }

  auto preset = PresetModel(t.preset, t.vocab_size);
  if (!preset.ok()) return bad("preset", "must be base, big, small or tiny");
  // Model overrides go through the model-format parser, which validates them and names the
  // key as "key"; keys that flags set are renamed to their flags.
  json model = json::parse(preset->ToJson());
  bool from_file = false;
  for (const std::string& key : ModelKeys()) {
    if (!j.contains(key)) continue;
    model[key] = j[key];
    if (!origin.flag_keys.count(key)) from_file = true;
  }
  model["vocab_size"] = t.vocab_size;
  const std::string label = from_file && !source.empty() ? source + " (model settings)" : "model settings";
  auto mc = ModelConfig::Parse(model.dump(), label);
  if (!mc.ok()) {
    std::string message(mc.status().message());
    for (const std::string& key : origin.flag_keys) {
      message = absl::StrReplaceAll(message, {{absl::StrCat("\"", key, "\""), origin.Name(key)}});
    }
    return absl::Status(mc.status().code(), message);
  }
  t.model = *mc;
  return t;
}

absl::Status CheckResumable(const ModelConfig& checkpoint, const ModelConfig& requested) {
  const json a = json::parse(checkpoint.ToJson()), b = json::parse(requested.ToJson());
  std::vector<std::string> differences;
  for (auto it = a.begin(); it != a.end(); ++it) {
    // Not the model's function: decoding defaults and the label smoothing of the loss.
    if (it.key() == "decoding" || it.key() == "label_smoothing") continue;
    const json other = b.contains(it.key()) ? b[it.key()] : json();
    if (it.value() != other) differences.push_back(absl::StrCat(it.key(), ": checkpoint ", it.value().dump(), ", config ", other.dump()));
  }
  if (differences.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the checkpoint's model differs from the config (",
                                                 absl::StrJoin(differences, "; "), ")"));
}

json TrainConfig::ToJson() const {
  json j = json::parse(model.ToJson());
  for (const char* drop : {"format", "format_version", "vocab_size", "pad_id", "unk_id", "bos_id", "eos_id", "decoding"}) {
    j.erase(drop);
  }
  j["train_source"] = train_source;
  j["train_target"] = train_target;
  j["valid_source"] = valid_source;
  j["valid_target"] = valid_target;
  j["spm_model"] = spm_model;
  j["init_model"] = init_model;
  j["vocab_size"] = vocab_size;
  j["max_length"] = max_length;
  j["max_length_ratio"] = max_length_ratio;
  j["preset"] = preset;
  j["max_tokens"] = max_tokens;
  j["accum_steps"] = accum_steps;
  j["warmup_steps"] = warmup_steps;
  j["lr_scale"] = lr_scale;
  j["max_steps"] = max_steps;
  j["max_epochs"] = max_epochs;
  j["clip_norm"] = clip_norm;
  j["dropout"] = dropout;
  j["attention_dropout"] = attention_dropout;
  j["activation_dropout"] = activation_dropout;
  j["rdrop_alpha"] = rdrop_alpha;
  j["subword_nbest"] = subword_nbest;
  j["subword_alpha"] = subword_alpha;
  j["seed"] = seed;
  j["save_dir"] = save_dir;
  j["save_every_steps"] = save_every_steps;
  j["save_every_minutes"] = save_every_minutes;
  j["keep_last"] = keep_last;
  j["valid_every_steps"] = valid_every_steps;
  j["valid_bleu"] = valid_bleu;
  j["valid_beam_size"] = valid_beam_size;
  j["valid_max_sentences"] = valid_max_sentences;
  j["metrics_file"] = metrics_file;
  j["log_every_steps"] = log_every_steps;
  j["threads"] = threads;
  j["device"] = device;
  j["dtype"] = dtype;
  return j;
}

}  // namespace tnmt::train

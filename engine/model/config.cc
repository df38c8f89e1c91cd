// config.json parsing and validation; see config.h and docs/model-format.md.
#include "engine/model/config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/core/json_limits.h"

namespace tnmt {

namespace {

using nlohmann::json;

absl::Status Bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// Reads an optional key of the given JSON kind into `out`; a wrong type is an error.
template <typename T>
absl::Status Read(const json& j, const char* key, const std::string& source, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return Bad(source, absl::StrCat("\"", key, "\" must be true or false"));
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return Bad(source, absl::StrCat("\"", key, "\" must be an integer"));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return Bad(source, absl::StrCat("\"", key, "\" must be a number"));
  } else {
    if (!it->is_string()) return Bad(source, absl::StrCat("\"", key, "\" must be a string"));
  }
  *out = it->get<T>();
  return absl::OkStatus();
}

bool a_v2(kernels::Activation a) {
  return a == kernels::Activation::kGeluErf || a == kernels::Activation::kSwish;
}

#define TNMT_READ(j, key, field)                                  \
  do {                                                            \
    absl::Status s_ = Read(j, key, source, &(field));             \
    if (!s_.ok()) return s_;                                      \
  } while (0)

}  // namespace

const char* LengthPenaltyStyleName(LengthPenaltyStyle s) {
  return s == LengthPenaltyStyle::kLength ? "length" : "gnmt";
}

absl::StatusOr<LengthPenaltyStyle> ParseLengthPenaltyStyle(const std::string& name) {
  if (name == "gnmt") return LengthPenaltyStyle::kGnmt;
  if (name == "length") return LengthPenaltyStyle::kLength;
  return absl::InvalidArgumentError(absl::StrCat(
      "expected \"gnmt\" (divide by ((5 + n) / 6)^alpha) or \"length\" (divide by n^alpha), got \"",
      name.substr(0, 64), "\""));
}

absl::StatusOr<ModelConfig> ModelConfig::Parse(const std::string& text, const std::string& source) {
  if (absl::Status s = CheckJsonLimits(text, source); !s.ok()) return s;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(source, "not valid JSON");
  if (!j.is_object()) return Bad(source, "top level must be a JSON object");

  std::string format;
  int version = 0;
  if (!j.contains("format") && j.value("model_type", json()) == "marian") {
    // A Hugging Face Marian (OPUS-MT) directory, as save_pretrained writes it.
    std::string dir = source;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    return Bad(source, absl::StrCat("looks like a Hugging Face Marian directory (\"model_type\": \"marian\"), not a "
                                    "tnmt model: convert it with `tnmt import --from hf-marian ", dir,
                                    " --output MODEL_DIR` and use MODEL_DIR"));
  }
  TNMT_READ(j, "format", format);
  if (format != kFormat) {
    return Bad(source, absl::StrCat("\"format\" must be \"", kFormat, "\", got \"", format, "\""));
  }
  if (!j.contains("format_version")) return Bad(source, "missing \"format_version\"");
  TNMT_READ(j, "format_version", version);
  if (version < 1 || version > kFormatVersion) {
    return Bad(source, absl::StrCat("unsupported format_version ", version,
                                    " (this tnmt reads 1 to ", kFormatVersion, ")"));
  }
  // Keys only version 2 defines: a version 1 file that uses one is refused, naming it.
  if (version == 1) {
    for (const char* key : {"sinusoid_layout", "max_sinusoid_positions", "decoder_start_id",
                            "final_logits_bias", "vocabulary", "source_language",
                            "target_language"}) {
      if (j.contains(key)) {
        return Bad(source, absl::StrCat("\"", key, "\" needs \"format_version\": 2"));
      }
    }
  }
  ModelConfig c;
  if (!j.contains("vocab_size")) return Bad(source, "missing \"vocab_size\"");
  TNMT_READ(j, "vocab_size", c.vocab_size);
  TNMT_READ(j, "d_model", c.d_model);
  TNMT_READ(j, "num_heads", c.num_heads);
  TNMT_READ(j, "d_ff", c.d_ff);
  TNMT_READ(j, "encoder_layers", c.encoder_layers);
  TNMT_READ(j, "decoder_layers", c.decoder_layers);
  TNMT_READ(j, "normalize_before", c.normalize_before);
  std::string activation = "relu";
  TNMT_READ(j, "activation", activation);
  {
    using kernels::Activation;
    bool known = false;
    for (Activation a : {Activation::kRelu, Activation::kGelu, Activation::kGeluErf, Activation::kSwish}) {
      if (activation == kernels::ActivationName(a)) c.activation = a, known = true;
    }
    if (!known) {
      return Bad(source, absl::StrCat("\"activation\" must be \"relu\", \"gelu\" (tanh approximation), "
                                      "\"gelu_erf\" or \"swish\", got \"", activation.substr(0, 64), "\""));
    }
    if (version == 1 && a_v2(c.activation)) {
      return Bad(source, absl::StrCat("\"activation\": \"", activation, "\" needs \"format_version\": 2"));
    }
  }
  std::string positions = "sinusoidal";
  TNMT_READ(j, "position_encoding", positions);
  if (positions == "sinusoidal") {
    c.position_encoding = PositionEncoding::kSinusoidal;
  } else if (positions == "learned") {
    c.position_encoding = PositionEncoding::kLearned;
  } else {
    return Bad(source, absl::StrCat("\"position_encoding\" must be \"sinusoidal\" or \"learned\", "
                                    "got \"", positions, "\""));
  }
  std::string layout = "interleaved";
  TNMT_READ(j, "sinusoid_layout", layout);
  if (layout == "interleaved") {
    c.sinusoid_layout = SinusoidLayout::kInterleaved;
  } else if (layout == "halves") {
    c.sinusoid_layout = SinusoidLayout::kHalves;
  } else {
    return Bad(source, absl::StrCat("\"sinusoid_layout\" must be \"interleaved\" (the paper) or "
                                    "\"halves\" (Marian), got \"", layout.substr(0, 64), "\""));
  }
  TNMT_READ(j, "max_positions", c.max_positions);
  TNMT_READ(j, "max_sinusoid_positions", c.max_sinusoid_positions);
  TNMT_READ(j, "share_embeddings", c.share_embeddings);
  TNMT_READ(j, "share_decoder_input_output_embed", c.share_decoder_input_output_embed);
  TNMT_READ(j, "scale_embedding", c.scale_embedding);
  TNMT_READ(j, "layer_norm_epsilon", c.layer_norm_epsilon);
  TNMT_READ(j, "pad_id", c.pad_id);
  TNMT_READ(j, "unk_id", c.unk_id);
  TNMT_READ(j, "bos_id", c.bos_id);
  TNMT_READ(j, "eos_id", c.eos_id);
  TNMT_READ(j, "decoder_start_id", c.decoder_start_id);
  TNMT_READ(j, "final_logits_bias", c.final_logits_bias);
  TNMT_READ(j, "source_language", c.source_language);
  TNMT_READ(j, "target_language", c.target_language);
  if (auto it = j.find("vocabulary"); it != j.end()) {
    if (!it->is_object()) return Bad(source, "\"vocabulary\" must be an object");
    for (const auto& [key, value] : it->items()) {
      if (key != "source_spm" && key != "target_spm" && key != "ids") {
        return Bad(source, absl::StrCat("unknown key \"vocabulary.", key.substr(0, 64),
                                        "\" (expected source_spm, target_spm, ids)"));
      }
    }
    VocabularyFiles& v = c.vocabulary;
    TNMT_READ(*it, "source_spm", v.source_spm);
    TNMT_READ(*it, "target_spm", v.target_spm);
    TNMT_READ(*it, "ids", v.ids);
    for (auto [key, name] : {std::pair<const char*, const std::string*>{"source_spm", &v.source_spm},
                             {"target_spm", &v.target_spm}, {"ids", &v.ids}}) {
      if (name->empty()) return Bad(source, absl::StrCat("\"vocabulary.", key, "\" is missing or empty"));
      if (name->find('/') != std::string::npos || *name == "." || *name == "..") {
        return Bad(source, absl::StrCat("\"vocabulary.", key, "\" must be a file name in the model "
                                        "directory, got \"", name->substr(0, 64), "\""));
      }
    }
  }
  TNMT_READ(j, "label_smoothing", c.label_smoothing);
  if (auto it = j.find("decoding"); it != j.end()) {
    if (!it->is_object()) return Bad(source, "\"decoding\" must be an object");
    TNMT_READ(*it, "beam_size", c.decoding.beam_size);
    TNMT_READ(*it, "length_penalty", c.decoding.length_penalty);
    TNMT_READ(*it, "max_length_offset", c.decoding.max_length_offset);
    std::string style = "gnmt";
    TNMT_READ(*it, "length_penalty_style", style);
    absl::StatusOr<LengthPenaltyStyle> parsed = ParseLengthPenaltyStyle(style);
    if (!parsed.ok()) return Bad(source, absl::StrCat("\"decoding.length_penalty_style\": ", parsed.status().message()));
    c.decoding.length_penalty_style = *parsed;
  }

  auto positive = [&](const char* key, int v) -> absl::Status {
    if (v <= 0) return Bad(source, absl::StrCat("\"", key, "\" must be positive, got ", v));
    return absl::OkStatus();
  };
  for (auto [key, v] : {std::pair<const char*, int>{"vocab_size", c.vocab_size},
                        {"d_model", c.d_model}, {"num_heads", c.num_heads}, {"d_ff", c.d_ff},
                        {"encoder_layers", c.encoder_layers},
                        {"decoder_layers", c.decoder_layers},
                        {"max_positions", c.max_positions}}) {
    absl::Status s = positive(key, v);
    if (!s.ok()) return s;
  }
  if (c.d_model % c.num_heads != 0) {
    return Bad(source, absl::StrCat("\"d_model\" ", c.d_model, " is not divisible by \"num_heads\" ",
                                    c.num_heads));
  }
  if (c.decoder_start_id < 0) c.decoder_start_id = c.bos_id;
  if (c.max_sinusoid_positions < 0) {
    return Bad(source, "\"max_sinusoid_positions\" must be >= 0 (0: the longest tnmt supports)");
  }
  if (c.sinusoid_layout == SinusoidLayout::kHalves && c.d_model % 2 != 0) {
    return Bad(source, "\"sinusoid_layout\" \"halves\" needs an even \"d_model\"");
  }
  for (auto [key, v] : {std::pair<const char*, int>{"pad_id", c.pad_id}, {"unk_id", c.unk_id},
                        {"bos_id", c.bos_id}, {"eos_id", c.eos_id},
                        {"decoder_start_id", c.decoder_start_id}}) {
    if (v < 0 || v >= c.vocab_size) {
      return Bad(source, absl::StrCat("\"", key, "\" ", v, " is outside the vocabulary [0, ",
                                      c.vocab_size, ")"));
    }
  }
  if (!(c.layer_norm_epsilon > 0)) return Bad(source, "\"layer_norm_epsilon\" must be positive");
  if (c.decoding.beam_size <= 0) return Bad(source, "\"decoding.beam_size\" must be positive");
  if (c.decoding.max_length_offset < 0) {
    return Bad(source, "\"decoding.max_length_offset\" must be >= 0");
  }
  return c;
}

bool ModelConfig::NeedsVersion2() const {
  return a_v2(activation) || sinusoid_layout != SinusoidLayout::kInterleaved ||
         max_sinusoid_positions > 0 || (decoder_start_id >= 0 && decoder_start_id != bos_id) ||
         final_logits_bias || vocabulary.separate() || !source_language.empty() ||
         !target_language.empty();
}

absl::Status ModelConfig::CheckCudaSupport() const {
  auto refuse = [](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA engine does not support ", what, " yet (use --device cpu)"));
  };
  if (!kernels::HasCudaKernel(activation)) {
    return refuse(absl::StrCat("\"activation\": \"", kernels::ActivationName(activation), "\""));
  }
  if (sinusoid_layout != SinusoidLayout::kInterleaved) return refuse("\"sinusoid_layout\": \"halves\"");
  if (final_logits_bias) return refuse("\"final_logits_bias\": true");
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing or unreadable)"));
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

std::string ModelConfig::ToJson() const {
  json j;
  j["format"] = kFormat;
  const bool v2 = NeedsVersion2();
  j["format_version"] = v2 ? 2 : 1;
  j["vocab_size"] = vocab_size;
  j["d_model"] = d_model;
  j["num_heads"] = num_heads;
  j["d_ff"] = d_ff;
  j["encoder_layers"] = encoder_layers;
  j["decoder_layers"] = decoder_layers;
  j["normalize_before"] = normalize_before;
  j["activation"] = kernels::ActivationName(activation);
  j["position_encoding"] =
      position_encoding == PositionEncoding::kSinusoidal ? "sinusoidal" : "learned";
  j["max_positions"] = max_positions;
  j["share_embeddings"] = share_embeddings;
  j["share_decoder_input_output_embed"] = share_decoder_input_output_embed;
  j["scale_embedding"] = scale_embedding;
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["pad_id"] = pad_id;
  j["unk_id"] = unk_id;
  j["bos_id"] = bos_id;
  j["eos_id"] = eos_id;
  if (v2) {
    j["sinusoid_layout"] = sinusoid_layout == SinusoidLayout::kHalves ? "halves" : "interleaved";
    if (max_sinusoid_positions > 0) j["max_sinusoid_positions"] = max_sinusoid_positions;
    j["decoder_start_id"] = decoder_start_id;
    j["final_logits_bias"] = final_logits_bias;
    if (vocabulary.separate()) {
      j["vocabulary"] = {{"source_spm", vocabulary.source_spm},
                         {"target_spm", vocabulary.target_spm},
                         {"ids", vocabulary.ids}};
    }
    if (!source_language.empty()) j["source_language"] = source_language;
    if (!target_language.empty()) j["target_language"] = target_language;
  }
  j["label_smoothing"] = label_smoothing;
  j["decoding"] = {{"beam_size", decoding.beam_size},
                   {"length_penalty", decoding.length_penalty},
                   {"max_length_offset", decoding.max_length_offset}};
  if (decoding.length_penalty_style != LengthPenaltyStyle::kGnmt) {  // the default stays implicit
    j["decoding"]["length_penalty_style"] = LengthPenaltyStyleName(decoding.length_penalty_style);
  }
  return j.dump(2) + "\n";
}

}  // namespace tnmt

// Hugging Face Marian import and export; see hf_marian.h.
#include "engine/runtime/hf_marian.h"

#include <dirent.h>
#include <sys/stat.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_limits.h"
#include "engine/core/status_macros.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/embedding.h"

namespace tnmt {

namespace {

using nlohmann::json;
using kernels::Activation;

// Marian's layer norms are torch.nn.LayerNorm with its default epsilon.
constexpr float kMarianLayerNormEpsilon = 1e-5f;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing or unreadable)"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFile(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << data;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat(path, ": write failed (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot rename into place"));
  }
  return absl::OkStatus();
}

absl::Status CopyFile(const std::string& from, const std::string& to) {
  TNMT_ASSIGN_OR_RETURN(std::string data, ReadFile(from));
  return WriteFile(to, data);
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  TNMT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  TNMT_RETURN_IF_ERROR(CheckJsonLimits(text, path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a JSON object"));
  return j;
}

// The output directory: created if missing; an existing non-empty one only with `force`.
absl::Status PrepareOutput(const std::string& dir, bool force) {
  if (Exists(dir)) {
    if (!IsDir(dir)) return absl::AlreadyExistsError(absl::StrCat(dir, ": exists and is not a directory"));
    DIR* d = ::opendir(dir.c_str());
    bool empty = true;
    if (d != nullptr) {
      while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
      }
      ::closedir(d);
    }
    if (!empty && !force) {
      return absl::AlreadyExistsError(
          absl::StrCat(dir, ": output directory is not empty (--force writes into it)"));
    }
    return absl::OkStatus();
  }
  if (::mkdir(dir.c_str(), 0755) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create the output directory"));
  }
  return absl::OkStatus();
}

// The output must not be the input (writing would destroy what is being read).
absl::Status CheckDistinct(const std::string& in, const std::string& out) {
  char a[PATH_MAX], b[PATH_MAX];
  if (::realpath(in.c_str(), a) != nullptr && ::realpath(out.c_str(), b) != nullptr && std::strcmp(a, b) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(out, ": the output directory is the input directory"));
  }
  return absl::OkStatus();
}

// Typed reads of optional keys of a Hugging Face config; a wrong type names the key.
class HfConfig {
 public:
  HfConfig(json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {}

  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
  }
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  absl::StatusOr<int> Int(const char* key, int fallback) const {
    if (!Has(key)) return fallback;
    if (!j_[key].is_number_integer()) return Bad(absl::StrCat("\"", key, "\" must be an integer"));
    return j_[key].get<int>();
  }
  absl::StatusOr<int> RequiredInt(const char* key) const {
    if (!Has(key)) return Bad(absl::StrCat("missing \"", key, "\""));
    return Int(key, 0);
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!j_[key].is_boolean()) return Bad(absl::StrCat("\"", key, "\" must be true or false"));
    return j_[key].get<bool>();
  }
  absl::StatusOr<double> Number(const char* key, double fallback) const {
    if (!Has(key)) return fallback;
    if (!j_[key].is_number()) return Bad(absl::StrCat("\"", key, "\" must be a number"));
    return j_[key].get<double>();
  }
  absl::StatusOr<std::string> String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    if (!j_[key].is_string()) return Bad(absl::StrCat("\"", key, "\" must be a string"));
    return j_[key].get<std::string>();
  }

 private:
  json j_;
  std::string path_;
};

// Marian's sinusoid for `rows` positions (sines in the first half, cosines in the second).
std::vector<float> MarianSinusoid(int rows, int d) {
  std::vector<float> t(static_cast<size_t>(rows) * d);
  kernels::cpu::SinusoidalPositionsHalves(t.data(), rows, d);
  return t;
}

absl::StatusOr<Activation> ActivationFromHf(const HfConfig& hf, const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "swish" || name == "silu") return Activation::kSwish;
  if (name == "gelu") return Activation::kGeluErf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::kGelu;
  return hf.Bad(absl::StrCat("\"activation_function\": \"", name.substr(0, 64),
                             "\" is not one tnmt runs (relu, gelu, gelu_new, gelu_pytorch_tanh, swish, silu)"));
}

const char* ActivationToHf(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu_new";
    case Activation::kGeluErf: return "gelu";
    case Activation::kSwish: return "swish";
  }
  return "relu";
}

// Takes one of the names of a tied tensor; several present must hold the same values.
absl::StatusOr<StoredTensor> TakeTied(TensorMap* m, const std::vector<std::string>& names,
                                      const std::string& path) {
  std::optional<StoredTensor> got;
  std::string got_name;
  for (const std::string& n : names) {
    auto it = m->find(n);
    if (it == m->end()) continue;
    if (!got) {
      got = it->second, got_name = n;
    } else if (it->second.value.shape() != got->value.shape() ||
               std::memcmp(it->second.value.f32(), got->value.f32(), sizeof(float) * got->value.numel()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensors \"", got_name, "\" and \"", n,
          "\" differ, but config.json ties them (share_encoder_decoder_embeddings)"));
    }
    m->erase(it);
  }
  if (!got) return absl::NotFoundError(absl::StrCat(path, ": missing tensor \"", names[0], "\""));
  return *got;
}

}  // namespace

absl::Status ImportHfMarian(const std::string& hf_dir, const std::string& out_dir,
                            const HfImportOptions& options) {
  if (!IsDir(hf_dir)) return absl::NotFoundError(absl::StrCat(hf_dir, ": no such directory"));
  TNMT_RETURN_IF_ERROR(CheckDistinct(hf_dir, out_dir));
  const std::string config_path = hf_dir + "/config.json";
  if (!Exists(config_path)) {
    return absl::NotFoundError(absl::StrCat(config_path, ": no such file (not a Hugging Face model directory?)"));
  }
  TNMT_ASSIGN_OR_RETURN(json raw, ReadJson(config_path));
  HfConfig hf(raw, config_path);
  TNMT_ASSIGN_OR_RETURN(std::string model_type, hf.String("model_type", ""));
  if (model_type != "marian") {
    return hf.Bad(absl::StrCat("\"model_type\" is \"", model_type.substr(0, 64),
                               "\"; --from hf-marian reads Marian models (\"model_type\": \"marian\")"));
  }
  // What Marian can be configured to do that tnmt does not run.
  for (const char* key : {"normalize_before", "normalize_embedding", "add_final_layer_norm",
                          "scale_attention"}) {
    TNMT_ASSIGN_OR_RETURN(bool on, hf.Bool(key, false));
    if (on) return hf.Bad(absl::StrCat("\"", key, "\": true is not supported (tnmt imports post-norm Marian models)"));
  }
  TNMT_ASSIGN_OR_RETURN(bool share_enc_dec, hf.Bool("share_encoder_decoder_embeddings", true));
  if (!share_enc_dec) {
    return hf.Bad("\"share_encoder_decoder_embeddings\": false (separate decoder vocabulary) is not supported");
  }

  ModelConfig c;
  TNMT_ASSIGN_OR_RETURN(c.vocab_size, hf.RequiredInt("vocab_size"));
  TNMT_ASSIGN_OR_RETURN(int decoder_vocab, hf.Int("decoder_vocab_size", c.vocab_size));
  if (decoder_vocab != c.vocab_size) {
    return hf.Bad(absl::StrCat("\"decoder_vocab_size\" ", decoder_vocab, " differs from \"vocab_size\" ",
                               c.vocab_size, " (separate decoder vocabulary): not supported"));
  }
  TNMT_ASSIGN_OR_RETURN(c.d_model, hf.RequiredInt("d_model"));
  TNMT_ASSIGN_OR_RETURN(c.encoder_layers, hf.RequiredInt("encoder_layers"));
  TNMT_ASSIGN_OR_RETURN(c.decoder_layers, hf.RequiredInt("decoder_layers"));
  TNMT_ASSIGN_OR_RETURN(c.num_heads, hf.RequiredInt("encoder_attention_heads"));
  TNMT_ASSIGN_OR_RETURN(int dec_heads, hf.Int("decoder_attention_heads", c.num_heads));
  TNMT_ASSIGN_OR_RETURN(c.d_ff, hf.RequiredInt("encoder_ffn_dim"));
  TNMT_ASSIGN_OR_RETURN(int dec_ff, hf.Int("decoder_ffn_dim", c.d_ff));
  if (dec_heads != c.num_heads) {
    return hf.Bad(absl::StrCat("\"decoder_attention_heads\" ", dec_heads, " differs from \"encoder_attention_heads\" ",
                               c.num_heads, ": tnmt needs one head count"));
  }
  if (dec_ff != c.d_ff) {
    return hf.Bad(absl::StrCat("\"decoder_ffn_dim\" ", dec_ff, " differs from \"encoder_ffn_dim\" ", c.d_ff,
                               ": tnmt needs one feed-forward width"));
  }
  if (c.d_model <= 0 || c.num_heads <= 0 || c.d_model % c.num_heads != 0 || c.d_model % 2 != 0) {
    return hf.Bad(absl::StrCat("\"d_model\" ", c.d_model, " must be even and divisible by the ", c.num_heads, " heads"));
  }
  TNMT_ASSIGN_OR_RETURN(std::string act, hf.String("activation_function", "gelu"));
  TNMT_ASSIGN_OR_RETURN(c.activation, ActivationFromHf(hf, act));
  TNMT_ASSIGN_OR_RETURN(c.scale_embedding, hf.Bool("scale_embedding", false));
  TNMT_ASSIGN_OR_RETURN(bool tied_output, hf.Bool("tie_word_embeddings", true));
  c.share_embeddings = true;
  c.share_decoder_input_output_embed = tied_output;
  c.layer_norm_epsilon = kMarianLayerNormEpsilon;
  c.normalize_before = false;
  TNMT_ASSIGN_OR_RETURN(int max_positions, hf.Int("max_position_embeddings", 1024));
  TNMT_ASSIGN_OR_RETURN(c.pad_id, hf.RequiredInt("pad_token_id"));
  TNMT_ASSIGN_OR_RETURN(c.eos_id, hf.RequiredInt("eos_token_id"));
  TNMT_ASSIGN_OR_RETURN(c.decoder_start_id, hf.Int("decoder_start_token_id", c.pad_id));
  TNMT_ASSIGN_OR_RETURN(int forced_eos, hf.Int("forced_eos_token_id", c.eos_id));
  if (forced_eos != c.eos_id) {
    return hf.Bad(absl::StrCat("\"forced_eos_token_id\" ", forced_eos, " is not \"eos_token_id\" ", c.eos_id,
                               ": tnmt ends every hypothesis with eos_id"));
  }
  c.bos_id = c.decoder_start_id;  // Marian has no <s>; the decoder starts from decoder_start_id
  // Decoding defaults: Marian's config.json, then generation_config.json where present.
  c.decoding.length_penalty_style = LengthPenaltyStyle::kLength;
  for (const std::string& path : {config_path, hf_dir + "/generation_config.json"}) {
    if (!Exists(path)) continue;
    TNMT_ASSIGN_OR_RETURN(json gj, ReadJson(path));
    HfConfig g(gj, path);
    TNMT_ASSIGN_OR_RETURN(c.decoding.beam_size, g.Int("num_beams", path == config_path ? 4 : c.decoding.beam_size));
    TNMT_ASSIGN_OR_RETURN(double lp, g.Number("length_penalty", path == config_path ? 1.0 : c.decoding.length_penalty));
    c.decoding.length_penalty = static_cast<float>(lp);
  }
  if (c.decoding.beam_size < 1) c.decoding.beam_size = 1;

  // Vocabulary: OPUS-MT's two SentencePiece models and joint id map.
  c.vocabulary.source_spm = "source.spm";
  c.vocabulary.target_spm = "target.spm";
  c.vocabulary.ids = "vocab.json";
  for (const std::string& name : {c.vocabulary.source_spm, c.vocabulary.target_spm, c.vocabulary.ids}) {
    if (!Exists(hf_dir + "/" + name)) {
      return absl::NotFoundError(absl::StrCat(hf_dir, "/", name, ": no such file (a Marian model directory has "
                                              "source.spm, target.spm and vocab.json)"));
    }
  }
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok,
                        Tokenizer::LoadSeparate(hf_dir + "/source.spm", hf_dir + "/target.spm", hf_dir + "/vocab.json"));
  const std::string vocab_path = hf_dir + "/vocab.json";
  if (tok->vocab_size() != c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": has ", tok->vocab_size(), " pieces but ",
                                                   config_path, " says vocab_size ", c.vocab_size));
  }
  c.unk_id = tok->unk_id();
  for (auto [name, vocab_id, cfg_id] : {std::tuple<const char*, int, int>{"eos_token_id (\"</s>\")", tok->eos_id(), c.eos_id},
                                        {"pad_token_id (\"<pad>\")", tok->pad_id(), c.pad_id}}) {
    if (vocab_id != cfg_id) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": ", name, " is ", vocab_id, " there but ",
                                                     cfg_id, " in ", config_path));
    }
  }
  // Language codes.
  c.source_language = options.source_language;
  c.target_language = options.target_language;
  if (const std::string tc = hf_dir + "/tokenizer_config.json"; Exists(tc)) {
    TNMT_ASSIGN_OR_RETURN(json tj, ReadJson(tc));
    HfConfig t(tj, tc);
    TNMT_ASSIGN_OR_RETURN(std::string src, t.String("source_lang", ""));
    TNMT_ASSIGN_OR_RETURN(std::string tgt, t.String("target_lang", ""));
    TNMT_ASSIGN_OR_RETURN(bool separate_vocabs, t.Bool("separate_vocabs", false));
    if (separate_vocabs) return t.Bad("\"separate_vocabs\": true (two id maps) is not supported");
    if (c.source_language.empty()) c.source_language = src;
    if (c.target_language.empty()) c.target_language = tgt;
  }

  // Weights.
  const std::string weights_path = hf_dir + "/model.safetensors";
  if (!Exists(weights_path)) {
    if (Exists(hf_dir + "/model.safetensors.index.json")) {
      return absl::InvalidArgumentError(absl::StrCat(
          hf_dir, "/model.safetensors.index.json: sharded checkpoints are not read; save the model as one "
          "model.safetensors (save_pretrained(..., max_shard_size=\"100GB\"))"));
    }
    if (Exists(hf_dir + "/pytorch_model.bin")) {
      return absl::InvalidArgumentError(absl::StrCat(
          hf_dir, "/pytorch_model.bin: PyTorch pickle checkpoints are not read (loading a pickle runs code); "
          "convert it to model.safetensors first: python3 -c \"from transformers import MarianMTModel; "
          "MarianMTModel.from_pretrained('", hf_dir, "').save_pretrained('", hf_dir, "', safe_serialization=True)\""));
    }
    return absl::NotFoundError(absl::StrCat(weights_path, ": no such file"));
  }
  TNMT_ASSIGN_OR_RETURN(TensorMap in, ReadSafetensors(weights_path));
  const int64_t d = c.d_model, v = c.vocab_size;
  TensorMap out;
  TNMT_ASSIGN_OR_RETURN(StoredTensor embed,
                        TakeTied(&in, {"model.shared.weight", "model.encoder.embed_tokens.weight",
                                       "model.decoder.embed_tokens.weight"}, weights_path));
  out["encoder.embed_tokens.weight"] = embed;
  if (tied_output) {
    in.erase("lm_head.weight");  // tied: Hugging Face ignores a stored copy too
  } else {
    TNMT_ASSIGN_OR_RETURN(out["decoder.output_projection.weight"], TakeTied(&in, {"lm_head.weight"}, weights_path));
  }
  if (auto it = in.find("final_logits_bias"); it != in.end()) {
    StoredTensor b = it->second;
    in.erase(it);
    if (b.value.numel() != v) {
      return absl::InvalidArgumentError(absl::StrCat(weights_path, ": tensor \"final_logits_bias\" has shape ",
                                                     b.value.ShapeString(), ", expected [1, ", v, "]"));
    }
    bool nonzero = false;
    for (int64_t i = 0; i < v; ++i) nonzero = nonzero || b.value.f32()[i] != 0.0f;
    if (nonzero) {
      TNMT_ASSIGN_OR_RETURN(b.value, b.value.Reshape({v}));
      out["final_logits_bias"] = b;
      c.final_logits_bias = true;
    }
  }
  // Positions: Marian's sinusoid (stored or not), or a table of its own (then learned).
  std::optional<StoredTensor> tables[2];
  const char* position_names[2] = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"};
  bool sinusoid = true;
  for (int i = 0; i < 2; ++i) {
    auto it = in.find(position_names[i]);
    if (it == in.end()) continue;
    tables[i] = it->second;
    in.erase(it);
    const Tensor& t = tables[i]->value;
    if (t.rank() != 2 || t.dim(1) != d || t.dim(0) < 1) {
      return absl::InvalidArgumentError(absl::StrCat(weights_path, ": tensor \"", position_names[i], "\" has shape ",
                                                     t.ShapeString(), ", expected [", max_positions, ", ", d, "]"));
    }
    const std::vector<float> want = MarianSinusoid(static_cast<int>(t.dim(0)), static_cast<int>(d));
    for (int64_t k = 0; k < t.numel() && sinusoid; ++k) sinusoid = std::fabs(t.f32()[k] - want[k]) <= 1e-3f;
  }
  if (sinusoid) {
    c.position_encoding = PositionEncoding::kSinusoidal;
    c.sinusoid_layout = SinusoidLayout::kHalves;
    c.max_sinusoid_positions = max_positions;
  } else {
    if (!tables[0] || !tables[1] || tables[0]->value.dim(0) != tables[1]->value.dim(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights_path, ": position tables that are not Marian's sinusoid need both ", position_names[0], " and ",
          position_names[1], " with the same number of rows"));
    }
    c.position_encoding = PositionEncoding::kLearned;
    c.max_positions = static_cast<int>(tables[0]->value.dim(0));
    out["encoder.embed_positions.weight"] = *tables[0];
    out["decoder.embed_positions.weight"] = *tables[1];
  }
  // Layers: Marian's names are tnmt's under "model.".
  for (auto it = in.begin(); it != in.end();) {
    if (absl::StartsWith(it->first, "model.encoder.layers.") || absl::StartsWith(it->first, "model.decoder.layers.")) {
      out[it->first.substr(6)] = it->second;
      it = in.erase(it);
    } else {
      ++it;
    }
  }
  if (!in.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(weights_path, ": tensor \"", in.begin()->first,
                                                   "\" is not part of a Marian model tnmt can run"));
  }
  // Build checks every shape against the config; ToTensors gives the layout to write.
  TNMT_ASSIGN_OR_RETURN(ModelWeights w, ModelWeights::Build(c, std::move(out), weights_path));
  // The config, re-parsed, must be what a reader of the written file sees.
  TNMT_ASSIGN_OR_RETURN(ModelConfig check, ModelConfig::Parse(c.ToJson(), out_dir + "/config.json"));
  (void)check;

  TNMT_RETURN_IF_ERROR(PrepareOutput(out_dir, options.force));
  TNMT_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", w.ToTensors(c), options.dtype));
  for (const std::string& name : {c.vocabulary.source_spm, c.vocabulary.target_spm, c.vocabulary.ids}) {
    TNMT_RETURN_IF_ERROR(CopyFile(hf_dir + "/" + name, out_dir + "/" + name));
  }
  return WriteFile(out_dir + "/config.json", c.ToJson());  // last: a directory with it is complete
}

absl::Status ExportHfMarian(const std::string& model_dir, const std::string& out_dir,
                            const HfExportOptions& options) {
  const std::string config_path = model_dir + "/config.json";
  TNMT_RETURN_IF_ERROR(CheckDistinct(model_dir, out_dir));
  TNMT_ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::Load(config_path));
  auto refuse = [&](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat(config_path, ": ", what));
  };
  if (c.normalize_before) return refuse("\"normalize_before\": true: Hugging Face Marian has post-norm layers only");
  if (c.position_encoding != PositionEncoding::kSinusoidal) {
    return refuse("\"position_encoding\": \"learned\": Hugging Face Marian uses sinusoidal positions only");
  }
  if (!c.share_embeddings) {
    return refuse("\"share_embeddings\": false: Hugging Face Marian shares the encoder and decoder embeddings");
  }
  if (!c.scale_embedding) {
    // Marian's scale_embedding false multiplies by 1 as tnmt does: both are expressible.
  }
  if (c.d_model % 2 != 0) return refuse("\"d_model\" must be even for Marian's sinusoid");
  if (std::fabs(c.layer_norm_epsilon - kMarianLayerNormEpsilon) > 1e-12f && options.warnings != nullptr) {
    absl::StrAppend(options.warnings, config_path, ": \"layer_norm_epsilon\" is ", c.layer_norm_epsilon,
                    " but Hugging Face Marian always uses 1e-05: its scores will differ slightly\n");
  }
  const std::string weights_path = model_dir + "/model.safetensors";
  TNMT_ASSIGN_OR_RETURN(TensorMap tensors, ReadSafetensors(weights_path));
  TNMT_ASSIGN_OR_RETURN(ModelWeights w, ModelWeights::Build(c, std::move(tensors), weights_path));
  std::unique_ptr<Tokenizer> tok;
  const VocabularyFiles& vf = c.vocabulary;
  if (vf.separate()) {
    TNMT_ASSIGN_OR_RETURN(tok, Tokenizer::LoadSeparate(model_dir + "/" + vf.source_spm, model_dir + "/" + vf.target_spm,
                                                       model_dir + "/" + vf.ids));
  } else {
    TNMT_ASSIGN_OR_RETURN(tok, Tokenizer::Load(model_dir + "/" + vf.joint_spm));
  }
  // MarianTokenizer finds its special tokens by these pieces.
  for (auto [id, piece, key] : {std::tuple<int, const char*, const char*>{c.eos_id, "</s>", "eos_id"},
                                {c.unk_id, "<unk>", "unk_id"}, {c.pad_id, "<pad>", "pad_id"}}) {
    if (tok->Piece(id) != piece) {
      return refuse(absl::StrCat("\"", key, "\" ", id, " is the piece \"", tok->Piece(id), "\"; Hugging Face's "
                                 "MarianTokenizer needs \"", piece, "\" there"));
    }
  }

  // Residual-stream permutation: Marian dimension h holds tnmt dimension perm[h].
  const int d = c.d_model, half = d / 2;
  std::vector<int> perm(d);
  for (int h = 0; h < d; ++h) {
    perm[h] = c.sinusoid_layout == SinusoidLayout::kHalves ? h : (h < half ? 2 * h : 2 * (h - half) + 1);
  }
  auto permute_cols = [&](const Tensor& t) -> absl::StatusOr<Tensor> {  // [rows, d]
    TNMT_ASSIGN_OR_RETURN(Tensor o, Tensor::Empty(t.shape()));
    const int64_t rows = t.dim(0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int h = 0; h < d; ++h) o.f32()[r * d + h] = t.f32()[r * d + perm[h]];
    }
    return o;
  };
  auto permute_rows = [&](const Tensor& t) -> absl::StatusOr<Tensor> {  // [d, cols] or [d]
    TNMT_ASSIGN_OR_RETURN(Tensor o, Tensor::Empty(t.shape()));
    const int64_t cols = t.numel() / d;
    for (int h = 0; h < d; ++h) {
      std::memcpy(o.f32() + h * cols, t.f32() + perm[h] * cols, sizeof(float) * cols);
    }
    return o;
  };
  std::map<std::string, Tensor> hf;
  std::map<std::string, Tensor> ours = w.ToTensors(c);
  for (auto& [name, t] : ours) {
    std::string hf_name = "model." + name;
    Tensor value = t;
    const bool is_ln = absl::StrContains(name, "layer_norm.");
    const bool reads = absl::EndsWith(name, "q_proj.weight") || absl::EndsWith(name, "k_proj.weight") ||
                       absl::EndsWith(name, "v_proj.weight") || absl::EndsWith(name, "fc1.weight");
    const bool writes = absl::StrContains(name, "out_proj.") || absl::StrContains(name, "fc2.");
    if (name == "encoder.embed_tokens.weight") {
      hf_name = "model.shared.weight";
      TNMT_ASSIGN_OR_RETURN(value, permute_cols(t));
    } else if (name == "decoder.output_projection.weight") {
      hf_name = "lm_head.weight";
      TNMT_ASSIGN_OR_RETURN(value, permute_cols(t));
    } else if (name == "final_logits_bias") {
      continue;  // written below, as [1, vocab]
    } else if (is_ln || writes) {
      TNMT_ASSIGN_OR_RETURN(value, permute_rows(t));
    } else if (reads) {
      TNMT_ASSIGN_OR_RETURN(value, permute_cols(t));
    }
    hf[hf_name] = value;
  }
  TNMT_ASSIGN_OR_RETURN(Tensor bias, Tensor::Zeros({1, c.vocab_size}));
  if (c.final_logits_bias) std::memcpy(bias.f32(), w.final_logits_bias.f32(), sizeof(float) * c.vocab_size);
  hf["final_logits_bias"] = bias;
  const int positions = c.max_sinusoid_positions > 0 ? c.max_sinusoid_positions : 1024;
  const std::vector<float> table = MarianSinusoid(positions, d);
  TNMT_ASSIGN_OR_RETURN(Tensor pos, Tensor::FromVector({positions, d}, table));
  hf["model.encoder.embed_positions.weight"] = pos;
  hf["model.decoder.embed_positions.weight"] = pos;

  json j = {
      {"architectures", {"MarianMTModel"}},
      {"model_type", "marian"},
      {"vocab_size", c.vocab_size},
      {"decoder_vocab_size", c.vocab_size},
      {"d_model", c.d_model},
      {"encoder_layers", c.encoder_layers},
      {"decoder_layers", c.decoder_layers},
      {"encoder_attention_heads", c.num_heads},
      {"decoder_attention_heads", c.num_heads},
      {"encoder_ffn_dim", c.d_ff},
      {"decoder_ffn_dim", c.d_ff},
      {"activation_function", ActivationToHf(c.activation)},
      {"scale_embedding", c.scale_embedding},
      {"max_position_embeddings", positions},
      {"share_encoder_decoder_embeddings", true},
      {"tie_word_embeddings", c.share_decoder_input_output_embed},
      {"pad_token_id", c.pad_id},
      {"eos_token_id", c.eos_id},
      {"decoder_start_token_id", c.start_id()},
      {"forced_eos_token_id", c.eos_id},
      {"bad_words_ids", {{c.pad_id}}},
      {"num_beams", c.decoding.beam_size},
      {"length_penalty", c.decoding.length_penalty},
      {"max_length", positions},
      {"is_encoder_decoder", true},
      {"dropout", 0.0},
      {"attention_dropout", 0.0},
      {"activation_dropout", 0.0},
      {"init_std", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  if (c.decoding.length_penalty_style == LengthPenaltyStyle::kGnmt && options.warnings != nullptr) {
    absl::StrAppend(options.warnings, config_path, ": decoding uses the gnmt length penalty ((5 + n) / 6)^",
                    c.decoding.length_penalty, "; Hugging Face ranks beams by n^length_penalty\n");
  }
  // The vocabulary: one id map; the SentencePiece model(s) as source.spm / target.spm.
  json vocab = json::object();
  for (int id = 0; id < c.vocab_size; ++id) {
    const std::string piece = tok->Piece(id);
    if (vocab.contains(piece)) return refuse(absl::StrCat("the piece \"", piece, "\" has two ids"));
    vocab[piece] = id;
  }
  json tokenizer_config = {{"tokenizer_class", "MarianTokenizer"},
                           {"source_lang", c.source_language.empty() ? json(nullptr) : json(c.source_language)},
                           {"target_lang", c.target_language.empty() ? json(nullptr) : json(c.target_language)},
                           {"eos_token", "</s>"},
                           {"unk_token", "<unk>"},
                           {"pad_token", "<pad>"},
                           {"model_max_length", positions},
                           // tnmt joins pieces without Hugging Face's extra clean-up of spaces
                           // before punctuation; so does the exported tokenizer.
                           {"clean_up_tokenization_spaces", false},
                           {"separate_vocabs", false}};

  TNMT_RETURN_IF_ERROR(PrepareOutput(out_dir, options.force));
  TNMT_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", hf));
  TNMT_RETURN_IF_ERROR(CopyFile(model_dir + "/" + (vf.separate() ? vf.source_spm : vf.joint_spm), out_dir + "/source.spm"));
  TNMT_RETURN_IF_ERROR(CopyFile(model_dir + "/" + (vf.separate() ? vf.target_spm : vf.joint_spm), out_dir + "/target.spm"));
  TNMT_RETURN_IF_ERROR(WriteFile(out_dir + "/vocab.json", vocab.dump(2) + "\n"));
  TNMT_RETURN_IF_ERROR(WriteFile(out_dir + "/tokenizer_config.json", tokenizer_config.dump(2) + "\n"));
  TNMT_RETURN_IF_ERROR(WriteFile(out_dir + "/special_tokens_map.json",
                                 json{{"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}}.dump(2) + "\n"));
  return WriteFile(out_dir + "/config.json", j.dump(2) + "\n");
}

}  // namespace tnmt

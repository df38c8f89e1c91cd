// Hugging Face Marian (OPUS-MT) checkpoints <-> tnmt model directories
// (docs/model-import-export.md).
//
// Import reads a directory as `MarianMTModel.save_pretrained` and OPUS-MT publish it:
// config.json, model.safetensors, source.spm, target.spm, vocab.json (and, if present,
// tokenizer_config.json for the language codes and generation_config.json for the decoding
// defaults), and writes a format-2 model directory that serves the same translations: the
// weights under tnmt's names, the two SentencePiece models and the id map copied.
// Export writes a tnmt model directory in that layout, loadable by
// `MarianMTModel.from_pretrained` and `MarianTokenizer.from_pretrained`. tnmt's interleaved
// sinusoid is carried over exactly by permuting the model's width (Marian keeps sines and
// cosines in halves; every weight that reads or writes the residual stream is permuted the same
// way, so the network computes the same function).
//
// Every refusal names the file and the key or tensor tnmt cannot carry over.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "engine/core/tensor.h"

namespace tnmt {

struct HfImportOptions {
  DType dtype = DType::kFloat32;  // stored dtype of the written model.safetensors
  bool force = false;             // write into a non-empty output directory
  std::string source_language;    // overrides tokenizer_config.json's source_lang
  std::string target_language;    // overrides tokenizer_config.json's target_lang
};

absl::Status ImportHfMarian(const std::string& hf_dir, const std::string& out_dir,
                            const HfImportOptions& options);

struct HfExportOptions {
  bool force = false;
  // Warnings (e.g. a layer-norm epsilon Marian cannot express) are appended here.
  std::string* warnings = nullptr;
};

absl::Status ExportHfMarian(const std::string& model_dir, const std::string& out_dir,
                            const HfExportOptions& options);

}  // namespace tnmt

// `tnmt import` / `tnmt export`; see convert_command.h. Exit status: 0, 1 if the conversion
// failed (the message names the file and the problem), 2 for a usage error.
#include "tools/tnmt/convert_command.h"

#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "engine/runtime/hf_marian.h"
#include "tools/tnmt/args.h"

namespace tnmt::cli {

namespace {

// Parses and checks the flags both commands share; returns the exit status for a usage
// error or help, -1 to go on.
int ParseCommon(Args& args, int argc, char** argv, const char* program, const char* kind_flag) {
  args.AllowPositionals("DIR", 1);
  if (absl::Status s = args.Parse(argc, argv, 2); !s.ok()) {
    std::cerr << program << ": " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  if (args.GetString(kind_flag) != "hf-marian") {
    std::cerr << program << ": --" << kind_flag << " \"" << args.GetString(kind_flag).substr(0, 64)
              << "\" is not a layout tnmt converts (hf-marian)\n";
    return 2;
  }
  if (args.positionals().size() != 1) {
    std::cerr << program << ": give the directory to convert (see --help)\n";
    return 2;
  }
  if (args.GetString("output").empty()) {
    std::cerr << program << ": --output DIR is required\n";
    return 2;
  }
  return -1;
}

}  // namespace

int ImportCommand(int argc, char** argv) {
  Args args("tnmt import",
            "Converts a Hugging Face Marian (OPUS-MT) model directory (config.json,\n"
            "model.safetensors, source.spm, target.spm, vocab.json) into a tnmt model directory\n"
            "that `tnmt translate` and `tnmt serve` load:\n"
            "  tnmt import --from hf-marian SRC_DIR --output MODEL_DIR");
  args.AddString("from", "hf-marian", "layout of SRC_DIR: hf-marian");
  args.AddString("output", "", "model directory to write (created; must be empty unless --force)");
  args.AddString("dtype", "float32", "stored weight type: float32, float16 or bfloat16");
  args.AddBool("force", false, "write into a non-empty output directory");
  args.AddString("source-lang", "", "source language code (default: tokenizer_config.json's source_lang)");
  args.AddString("target-lang", "", "target language code (default: tokenizer_config.json's target_lang)");
  if (int rc = ParseCommon(args, argc, argv, "tnmt import", "from"); rc >= 0) return rc;
  HfImportOptions o;
  const std::string dtype = args.GetString("dtype");
  if (dtype == "float32") {
    o.dtype = DType::kFloat32;
  } else if (dtype == "float16") {
    o.dtype = DType::kFloat16;
  } else if (dtype == "bfloat16") {
    o.dtype = DType::kBFloat16;
  } else {
    std::cerr << "tnmt import: --dtype \"" << dtype.substr(0, 64) << "\": expected float32, float16 or bfloat16\n";
    return 2;
  }
  o.force = args.GetBool("force");
  o.source_language = args.GetString("source-lang");
  o.target_language = args.GetString("target-lang");
  const std::string src = args.positionals()[0], out = args.GetString("output");
  if (absl::Status s = ImportHfMarian(src, out, o); !s.ok()) {
    std::cerr << "tnmt import: " << s.message() << "\n";
    return 1;
  }
  std::cerr << "tnmt import: wrote " << out << "\n";
  return 0;
}

int ExportCommand(int argc, char** argv) {
  Args args("tnmt export",
            "Writes a tnmt model directory in the Hugging Face Marian layout, loadable with\n"
            "transformers' MarianMTModel.from_pretrained and MarianTokenizer.from_pretrained:\n"
            "  tnmt export --to hf-marian MODEL_DIR --output HF_DIR");
  args.AddString("to", "hf-marian", "layout to write: hf-marian");
  args.AddString("output", "", "directory to write (created; must be empty unless --force)");
  args.AddBool("force", false, "write into a non-empty output directory");
  if (int rc = ParseCommon(args, argc, argv, "tnmt export", "to"); rc >= 0) return rc;
  std::string warnings;
  HfExportOptions o;
  o.force = args.GetBool("force");
  o.warnings = &warnings;
  const std::string model = args.positionals()[0], out = args.GetString("output");
  const absl::Status s = ExportHfMarian(model, out, o);
  for (size_t b = 0, e; b < warnings.size(); b = e + 1) {
    e = warnings.find('\n', b);
    if (e == std::string::npos) e = warnings.size();
    std::cerr << "tnmt export: warning: " << warnings.substr(b, e - b) << "\n";
  }
  if (!s.ok()) {
    std::cerr << "tnmt export: " << s.message() << "\n";
    return 1;
  }
  std::cerr << "tnmt export: wrote " << out << "\n";
  return 0;
}

}  // namespace tnmt::cli

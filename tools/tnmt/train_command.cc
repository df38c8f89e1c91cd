// `tnmt train`: a JSON config (--config) with any key overridden by a flag of the same name
// ('-' for '_'). SIGTERM/SIGINT write a final checkpoint and exit 0. Started by mpirun, it
// trains data-parallel over MPI. `tnmt average`: average the last K checkpoints.
#include "tools/tnmt/train_command.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kernels/cpu/gemm.h"
#include "tools/tnmt/args.h"
#include "trainer/checkpoint/average.h"
#include "trainer/collective/mpi_collective.h"
#include "trainer/train_loop.h"

namespace tnmt::cli {

namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

enum class Kind { kString, kInt, kFloat, kBool };
struct Key {
  const char* name;
  Kind kind;
  const char* help;
};

const Key kKeys[] = {
    {"train_source", Kind::kString, "source side of the parallel training text (plain or .gz)"},
    {"train_target", Kind::kString, "target side, line-aligned with the source"},
    {"valid_source", Kind::kString, "dev set source (for dev loss and BLEU)"},
    {"valid_target", Kind::kString, "dev set reference"},
    {"spm_model", Kind::kString, "SentencePiece model; empty: train a joint one into save_dir"},
    {"vocab_size", Kind::kInt, "pieces of the joint vocabulary to train (default 8000)"},
    {"max_length", Kind::kInt, "skip pairs with a side longer than this many pieces (default 256)"},
    {"max_length_ratio", Kind::kFloat, "skip pairs whose length ratio exceeds this (default 2)"},
    {"preset", Kind::kString, "model size: base, big, small, tiny (default base)"},
    {"d_model", Kind::kInt, "model width (overrides the preset)"},
    {"num_heads", Kind::kInt, "attention heads"},
    {"d_ff", Kind::kInt, "feed-forward width"},
    {"encoder_layers", Kind::kInt, "encoder layers"},
    {"decoder_layers", Kind::kInt, "decoder layers"},
    {"normalize_before", Kind::kBool, "pre-norm instead of the paper's post-norm"},
    {"activation", Kind::kString, "relu or gelu"},
    {"label_smoothing", Kind::kFloat, "label smoothing epsilon (default 0.1)"},
    {"max_tokens", Kind::kInt, "tokens per batch per process, padding included (default 4096)"},
    {"accum_steps", Kind::kInt, "batches accumulated per update (default 1)"},
    {"warmup_steps", Kind::kInt, "learning-rate warmup steps (default 4000)"},
    {"lr_scale", Kind::kFloat, "multiplies the paper's learning rate (default 1)"},
    {"max_steps", Kind::kInt, "updates to train (default 100000)"},
    {"max_epochs", Kind::kInt, "epochs to train; 0: no limit"},
    {"clip_norm", Kind::kFloat, "clip the gradient's global norm; 0: off"},
    {"dropout", Kind::kFloat, "dropout (default 0.1)"},
    {"seed", Kind::kInt, "random seed (default 1)"},
    {"save_dir", Kind::kString, "where checkpoints, the vocabulary and metrics go (required)"},
    {"save_every_steps", Kind::kInt, "checkpoint every N updates (default 1000)"},
    {"save_every_minutes", Kind::kFloat, "checkpoint every M minutes of training; 0: off"},
    {"keep_last", Kind::kInt, "checkpoints kept (default 5)"},
    {"valid_every_steps", Kind::kInt, "validate every N updates (default 1000)"},
    {"valid_bleu", Kind::kBool, "compute dev BLEU with beam search (default true)"},
    {"valid_beam_size", Kind::kInt, "beam size for dev BLEU (default 4)"},
    {"valid_max_sentences", Kind::kInt, "dev sentences translated for BLEU; 0: all"},
    {"metrics_file", Kind::kString, "JSON-lines metrics (default save_dir/metrics.jsonl)"},
    {"log_every_steps", Kind::kInt, "progress and metrics every N updates (default 10)"},
    {"threads", Kind::kInt, "compute threads per process (default: all cores)"},
};

std::string FlagName(const char* key) { return absl::StrReplaceAll(key, {{"_", "-"}}); }

int Fail(const char* cmd, const std::string& message) {
  std::cerr << "tnmt " << cmd << ": " << message << "\n";
  return 2;
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  Args args("tnmt train",
            "Trains a Transformer on parallel text. Settings come from --config FILE (JSON, keys\n"
            "as the flags with '_' for '-'); flags override it. Resumes from the newest checkpoint\n"
            "in --save-dir. SIGTERM or Ctrl-C writes a final checkpoint and exits 0. Under mpirun\n"
            "every process trains on its shard and gradients are all-reduced over MPI.");
  args.AddString("config", "", "JSON file with training settings");
  for (const Key& k : kKeys) {
    switch (k.kind) {
      case Kind::kString: args.AddString(FlagName(k.name), "", k.help); break;
      case Kind::kInt: args.AddInt(FlagName(k.name), 0, k.help); break;
      case Kind::kFloat: args.AddFloat(FlagName(k.name), 0, k.help); break;
      case Kind::kBool: args.AddBool(FlagName(k.name), false, k.help); break;
    }
  }
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("train", std::string(parsed.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  json j = json::object();
  std::string source = "flags";
  if (!args.GetString("config").empty()) {
    source = args.GetString("config");
    std::ifstream in(source);
    if (!in) return Fail("train", absl::StrCat(source, ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded()) return Fail("train", absl::StrCat(source, ": not valid JSON"));
  }
  for (const Key& k : kKeys) {
    const std::string flag = FlagName(k.name);
    if (!args.given(flag)) continue;
    switch (k.kind) {
      case Kind::kString: j[k.name] = args.GetString(flag); break;
      case Kind::kInt: j[k.name] = args.GetInt(flag); break;
      case Kind::kFloat: j[k.name] = args.GetFloat(flag); break;
      case Kind::kBool: j[k.name] = args.GetBool(flag); break;
    }
  }
  auto cfg = train::TrainConfig::FromJson(j, source);
  if (!cfg.ok()) return Fail("train", std::string(cfg.status().message()));
  int threads = cfg->threads > 0 ? cfg->threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  kernels::cpu::SetBlasThreads(threads);
  train::KeepFreedMemory();

  std::unique_ptr<train::Collective> collective;
  if (train::LaunchedByMpi()) {
    auto mpi = train::MakeMpiCollective(&argc, &argv);
    if (!mpi.ok()) return Fail("train", std::string(mpi.status().message()));
    collective = *std::move(mpi);
  } else {
    collective = train::MakeSingleProcessCollective();
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  train::TrainHooks hooks;
  hooks.stop = &g_stop;
  hooks.progress_line = ::isatty(STDERR_FILENO) && collective->rank() == 0;
  absl::Status s = train::RunTraining(*cfg, collective.get(), hooks);
  if (!s.ok()) return Fail("train", std::string(s.message()));
  return 0;
}

int AverageCommand(int argc, char** argv) {
  Args args("tnmt average", "Averages the parameters of the last K checkpoints into a model directory.");
  args.AddString("checkpoints", "", "checkpoint root (a training --save-dir)");
  args.AddInt("last", 5, "how many of the newest checkpoints to average");
  args.AddString("output", "", "model directory to write");
  args.AddString("dtype", "float32", "stored dtype of the output: float32, float16, bfloat16");
  args.AddBool("overwrite", false, "replace an existing output directory");
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("average", std::string(parsed.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  if (args.GetString("checkpoints").empty() || args.GetString("output").empty()) {
    return Fail("average", "--checkpoints and --output are required");
  }
  AverageOptions o;
  const std::string dtype = args.GetString("dtype");
  if (dtype == "float32") o.stored_dtype = DType::kFloat32;
  else if (dtype == "float16") o.stored_dtype = DType::kFloat16;
  else if (dtype == "bfloat16") o.stored_dtype = DType::kBFloat16;
  else return Fail("average", absl::StrCat("--dtype ", dtype, ": expected float32, float16 or bfloat16"));
  o.overwrite = args.GetBool("overwrite");
  absl::Status s = AverageLastCheckpoints(args.GetString("checkpoints"), args.GetInt("last"), args.GetString("output"), o);
  if (!s.ok()) return Fail("average", std::string(s.message()));
  std::cerr << "tnmt average: wrote " << args.GetString("output") << "\n";
  return 0;
}

}  // namespace tnmt::cli

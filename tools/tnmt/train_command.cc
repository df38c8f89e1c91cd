// `tnmt train`: a JSON config (--config; keys spelled with '_' or '-') with any key overridden
// by a flag of the same name; errors name a setting as the user gave it (flag, or file and key).
// SIGTERM/SIGINT write a final checkpoint and exit 0. Devices: one (--device, or --devices with
// one entry); several CPU ranks (--devices cpu,cpu,...): threads of this process, one rank each,
// over an in-process collective; several GPUs on this node (--devices cuda:0,1): this process
// becomes the launcher and runs one worker per GPU (the same binary, told its rank by
// TNMT_RANK/TNMT_WORLD_SIZE/TNMT_BOOTSTRAP_DIR, see trainer/launch); started by mpirun, it trains
// data-parallel over MPI (one device per process). `tnmt average`: average the last K
// checkpoints.
#include "tools/tnmt/train_command.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "engine/runtime/compute.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/config_file.h"
#include "trainer/checkpoint/average.h"
#include "trainer/collective/mpi_collective.h"
#include "trainer/launch/cuda_devices.h"
#include "trainer/launch/devices.h"
#include "trainer/launch/file_collective.h"
#include "trainer/launch/local_launch.h"
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
  const char* shown_default = nullptr;  // for --help; nullptr: TrainConfig's default value
};

constexpr char kFromPreset[] = "from --preset";

const Key kKeys[] = {
    {"train_source", Kind::kString, "source side of the parallel training text (plain or .gz; required)"},
    {"train_target", Kind::kString, "target side, line-aligned with the source (required)"},
    {"valid_source", Kind::kString, "dev set source (for dev loss and BLEU)"},
    {"valid_target", Kind::kString, "dev set reference"},
    {"spm_model", Kind::kString, "SentencePiece model", "train a joint one into --save-dir"},
    {"init_model", Kind::kString,
     "start from this model directory's weights and vocabulary (fine-tuning; fresh optimizer, step 0)",
     "random weights"},
    {"vocab_size", Kind::kInt, "pieces of the joint vocabulary to train"},
    {"max_length", Kind::kInt, "skip pairs with a side longer than this many pieces"},
    {"max_length_ratio", Kind::kFloat, "skip pairs whose length ratio exceeds this"},
    {"preset", Kind::kString, "model size: base, big, small, tiny"},
    {"d_model", Kind::kInt, "model width (overrides the preset)", kFromPreset},
    {"num_heads", Kind::kInt, "attention heads", kFromPreset},
    {"d_ff", Kind::kInt, "feed-forward width", kFromPreset},
    {"encoder_layers", Kind::kInt, "encoder layers", kFromPreset},
    {"decoder_layers", Kind::kInt, "decoder layers", kFromPreset},
    {"normalize_before", Kind::kBool, "pre-norm instead of the paper's post-norm", "off"},
    {"activation", Kind::kString, "relu or gelu"},
    {"label_smoothing", Kind::kFloat, "label smoothing epsilon"},
    {"max_tokens", Kind::kInt, "tokens per batch per process, padding included"},
    {"accum_steps", Kind::kInt, "batches accumulated per update"},
    {"warmup_steps", Kind::kInt, "learning-rate warmup steps"},
    {"lr_scale", Kind::kFloat, "multiplies the paper's learning rate"},
    {"max_steps", Kind::kInt, "updates to train"},
    {"max_epochs", Kind::kInt, "epochs to train; 0: no limit"},
    {"clip_norm", Kind::kFloat, "clip the gradient's global norm; 0: off"},
    {"dropout", Kind::kFloat, "residual dropout: sub-layer outputs and embeddings"},
    {"attention_dropout", Kind::kFloat, "dropout on the attention probabilities", "0"},
    {"activation_dropout", Kind::kFloat, "dropout on the feed-forward's hidden layer", "0"},
    {"rdrop_alpha", Kind::kFloat,
     "R-Drop: run each batch twice, add alpha/2 x the symmetric KL between the two outputs (doubles a step's cost)",
     "0"},
    {"subword_nbest", Kind::kInt, "subword sampling: draw each epoch's segmentations from the n best (1: off)", "1"},
    {"subword_alpha", Kind::kFloat, "subword sampling: exponent of the segmentations' probabilities", "0.1"},
    {"seed", Kind::kInt, "random seed"},
    {"save_dir", Kind::kString, "where checkpoints, the vocabulary and metrics go (required)"},
    {"save_every_steps", Kind::kInt, "checkpoint every N updates; 0: off"},
    {"save_every_minutes", Kind::kFloat, "checkpoint every M minutes of training; 0: off"},
    {"keep_last", Kind::kInt, "checkpoints kept"},
    {"valid_every_steps", Kind::kInt, "validate every N updates; 0: off"},
    {"valid_bleu", Kind::kBool, "compute dev BLEU (sacreBLEU's, 0-100) with beam search"},
    {"valid_beam_size", Kind::kInt, "beam size for dev BLEU"},
    {"valid_max_sentences", Kind::kInt, "dev sentences translated for BLEU; 0: all"},
    {"metrics_file", Kind::kString, "JSON-lines metrics", "SAVE_DIR/metrics.jsonl"},
    {"log_every_steps", Kind::kInt, "progress and metrics every N updates"},
    {"threads", Kind::kInt, "compute threads of this process, split among its --devices cpu ranks",
     "all cores, divided among --devices cuda worker processes"},
    {"device", Kind::kString, "cpu, cuda:N, or cuda (GPU rank mod visible GPUs); several: --devices"},
    {"dtype", Kind::kString, "float32; mixed precision float16 / bfloat16 on cuda; bfloat16 GEMMs on CPUs with AVX-512 BF16"},
};

// What --help states as the default of `k`: its own text, else TrainConfig's value.
std::string ShownDefault(const Key& k) {
  if (k.shown_default != nullptr) return k.shown_default;
  static const json* defaults = new json(train::TrainConfig{}.ToJson());
  const json& v = defaults->contains(k.name) ? (*defaults)[k.name] : json();
  if (v.is_boolean()) return v.get<bool>() ? "on" : "off";
  if (v.is_number_float()) return absl::StrFormat("%g", v.get<double>());
  if (v.is_string()) return v.get<std::string>().empty() ? "none" : v.get<std::string>();
  if (v.is_null()) return "none";
  return v.dump();
}

std::string FlagName(const char* key) { return absl::StrReplaceAll(key, {{"_", "-"}}); }

int Fail(const char* cmd, const std::string& message) {
  std::cerr << "tnmt " << cmd << ": " << message << "\n";
  return 2;
}

// Compute threads of one rank: --threads (else all cores, shared by the `local_processes`
// processes of this node) divided among the `ranks` ranks of this process, at least 1.
int ThreadsPerRank(const train::TrainConfig& cfg, int local_processes, int ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int process = cfg.threads > 0 ? cfg.threads : std::max(1, cores / std::max(1, local_processes));
  return std::max(1, process / ranks);
}

train::TrainHooks Hooks(const train::Collective& collective) {
  train::TrainHooks hooks;
  hooks.stop = &g_stop;
  hooks.progress_line = ::isatty(STDERR_FILENO) && collective.rank() == 0;
  return hooks;
}

// Trains in this process on `collective` (a launched worker, an MPI rank, or the only process).
int Train(const train::TrainConfig& cfg, std::unique_ptr<train::Collective> collective, int local_processes) {
  train::KeepFreedMemory();
  SetCpuThreads(ThreadsPerRank(cfg, local_processes, 1));
  absl::Status s = train::RunTraining(cfg, collective.get(), Hooks(*collective));
  if (!s.ok()) return Fail("train", std::string(s.message()));
  return 0;
}

// --devices cpu,cpu,...: one rank per device, each a thread of this process running the training
// loop on its shard, over an in-process collective (sums in rank order: the same parameters as
// `mpirun -np N`). Rank 0 writes checkpoints, metrics and the log. The compute threads are split
// among the ranks; the thread pool and OpenBLAS are shared and safe to call from every rank. A
// rank that fails stops the others at their next collective, and its error is reported.
int TrainRanks(const train::TrainConfig& cfg, int ranks) {
  const int threads = ThreadsPerRank(cfg, 1, ranks);
  train::KeepFreedMemory();  // first: every thread allocates from the one heap it keeps
  SetCpuThreads(threads);    // before the rank threads start: loads OpenBLAS once
  std::cerr << "tnmt train: " << ranks << " data-parallel CPU ranks in this process, " << threads
            << " compute thread" << (threads == 1 ? "" : "s") << " each; rank 0 writes checkpoints and logs\n";
  absl::Status s = train::RunInProcessGroup(
      ranks, [&](train::Collective* c) { return train::RunTraining(cfg, c, Hooks(*c)); });
  if (!s.ok()) return Fail("train", std::string(s.message()));
  return 0;
}

// Launcher: one worker process per GPU, each this binary with the same arguments plus
// --device; returns when all have exited (see trainer/launch/local_launch.h).
int Launch(const train::TrainConfig& cfg, const train::DeviceList& devices, int argc, char** argv) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.save_dir, ec);
  if (ec) return Fail("train", absl::StrCat(cfg.save_dir, ": cannot create save_dir: ", ec.message()));
  train::LocalLaunchOptions o;
  o.program = "/proc/self/exe";  // exactly this binary, even if its file is replaced meanwhile
  o.args.assign(argv, argv + argc);
  for (int i = 0; i < devices.size(); ++i) {
    o.extra.push_back({"--device", devices.Name(i)});
    o.names.push_back(devices.Name(i));
  }
  o.work_dir = cfg.save_dir;
  o.stop = &g_stop;
  std::cerr << "tnmt train: " << devices.size() << " workers on " << absl::StrJoin(o.names, ", ")
            << "; rank 0 writes here, rank R > 0 to " << cfg.save_dir << "/worker-R.log\n";
  if (g_stop.load()) return 0;
  absl::Status s = train::LaunchLocalWorkers(o);
  if (!s.ok()) return Fail("train", std::string(s.message()));
  return 0;
}

// Under mpirun with --devices: this process's device from its local rank on the node.
absl::StatusOr<std::string> MpiDevice(const train::DeviceList& devices, const std::string& flag_value) {
  if (!devices.cuda) return std::string("cpu");
  const std::optional<int> local = train::MpiLocalRank();
  if (!local.has_value()) {
    return absl::FailedPreconditionError(
        "under mpirun, --devices cuda needs the local rank (OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID)");
  }
  int visible = 0;
  if (devices.all_visible) {
    absl::StatusOr<int> n = train::VisibleCudaDevices();
    if (!n.ok()) return n.status();
    visible = *n;
  }
  return train::DeviceForLocalRank(devices, *local, visible, flag_value);
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  Args args("tnmt train",
            "Trains a Transformer on parallel text. Settings come from --config FILE (JSON, keys\n"
            "as the flags, spelled with '-' or '_'); flags override it. Resumes from the newest\n"
            "checkpoint in --save-dir. SIGTERM or Ctrl-C writes a final checkpoint and exits 0.\n"
            "Data parallelism: --devices cpu,cpu,... trains one rank per entry as threads of this\n"
            "process; --devices cuda:0,1,... (or cuda: every visible GPU) runs one worker process\n"
            "per GPU on this node and supervises them; under mpirun every process trains on its\n"
            "shard and gradients are all-reduced (MPI, or NCCL on GPUs). See docs/training.md.");
  args.AddString("config", "", "JSON file with training settings");
  args.AddString("devices", "",
                 "devices of this node, one rank each: cpu,cpu (threads of this process) | cuda:0,1,3 | "
                 "cuda (all visible GPUs; a worker process per GPU)");
  // Only flags given on the command line are used (over the --config file); the stored
  // defaults are never read, --help states TrainConfig's.
  for (const Key& k : kKeys) {
    const std::string shown = ShownDefault(k);
    switch (k.kind) {
      case Kind::kString: args.AddString(FlagName(k.name), "", k.help, shown); break;
      case Kind::kInt: args.AddInt(FlagName(k.name), 0, k.help, shown); break;
      case Kind::kFloat: args.AddFloat(FlagName(k.name), 0, k.help, shown); break;
      case Kind::kBool: args.AddBool(FlagName(k.name), false, k.help, shown); break;
    }
  }
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("train", std::string(parsed.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  json j = json::object();
  train::ConfigOrigin origin;
  if (!args.GetString("config").empty()) {
    origin.file = args.GetString("config");
    absl::StatusOr<json> file = ReadConfigFile(origin.file, '_', &origin.spelled);  // max-steps or max_steps
    if (!file.ok()) return Fail("train", std::string(file.status().message()));
    j = *std::move(file);
  }
  for (const Key& k : kKeys) {
    const std::string flag = FlagName(k.name);
    if (!args.given(flag)) continue;
    origin.flag_keys.insert(k.name);
    switch (k.kind) {
      case Kind::kString: j[k.name] = args.GetString(flag); break;
      case Kind::kInt: j[k.name] = args.GetInt(flag); break;
      case Kind::kFloat: j[k.name] = args.GetFloat(flag); break;
      case Kind::kBool: j[k.name] = args.GetBool(flag); break;
    }
  }

  auto worker = train::WorkerEnvFromEnvironment();
  if (!worker.ok()) return Fail("train", std::string(worker.status().message()));
  const bool is_worker = worker->has_value();
  const bool under_mpi = !is_worker && train::LaunchedByMpi();
  std::optional<train::DeviceList> devices;
  // A launched worker gets its own --device; the --devices it also sees was the launcher's.
  if (args.given("devices") && !is_worker) {
    const std::string value = args.GetString("devices");
    if (args.given("device")) return Fail("train", "give --devices or --device, not both");
    auto d = train::ParseDeviceList(value);
    if (!d.ok()) return Fail("train", std::string(d.status().message()));
    if (d->cuda && !train::BuiltWithCuda()) {
      return Fail("train", absl::StrCat("--devices ", value, ": ", train::kNoCudaSupport));
    }
    if (under_mpi) {
      auto device = MpiDevice(*d, value);
      if (!device.ok()) return Fail("train", std::string(device.status().message()));
      j["device"] = *device;
    } else {
      if (d->all_visible) {
        auto visible = train::VisibleCudaDevices();
        if (!visible.ok()) return Fail("train", absl::StrCat("--devices ", value, ": ", visible.status().message()));
        absl::Status s = train::ResolveAllVisible(*visible, &*d);
        if (!s.ok()) return Fail("train", std::string(s.message()));
      }
      j["device"] = d->Name(0);
      devices = *d;
    }
  }
  if (j.contains("device") && j["device"].is_string() && absl::StartsWith(j["device"].get<std::string>(), "cuda") &&
      !train::BuiltWithCuda()) {
    return Fail("train", absl::StrCat("device ", j["device"].get<std::string>(), ": ", train::kNoCudaSupport));
  }
  auto cfg = train::TrainConfig::FromJson(j, origin);
  if (!cfg.ok()) return Fail("train", std::string(cfg.status().message()));
  if (is_worker && !absl::StartsWith(cfg->device, "cuda")) {
    return Fail("train", absl::StrCat(train::kRankEnv, " is set, but launched workers train on GPUs (--devices cuda:...); "
                                      "several CPU ranks: --devices cpu,cpu or mpirun"));
  }

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  if (devices.has_value() && devices->size() > 1) {
    return devices->cuda ? Launch(*cfg, *devices, argc, argv) : TrainRanks(*cfg, devices->size());
  }

  std::unique_ptr<train::Collective> collective;
  int local_processes = 1;
  if (is_worker) {
    const train::WorkerEnv& w = **worker;
    auto c = train::MakeFileCollective(w.bootstrap_dir, w.rank, w.world_size, w.collective_timeout);
    if (!c.ok()) return Fail("train", std::string(c.status().message()));
    collective = *std::move(c);
    local_processes = w.world_size;
  } else if (under_mpi) {
    auto mpi = train::MakeMpiCollective(&argc, &argv);
    if (!mpi.ok()) return Fail("train", std::string(mpi.status().message()));
    collective = *std::move(mpi);
  } else {
    collective = train::MakeSingleProcessCollective();
  }
  return Train(*cfg, std::move(collective), local_processes);
}

int AverageCommand(int argc, char** argv) {
  Args args("tnmt average",
            "Averages the parameters of the last K checkpoints of a training run, or of the directories\n"
            "given (checkpoints or model directories of one architecture and vocabulary, e.g. of runs\n"
            "fine-tuned from one model), each with equal weight, into a model directory.");
  args.AddString("checkpoints", "", "checkpoint root (a training --save-dir)");
  args.AddInt("last", 5, "how many of the newest checkpoints to average");
  args.AddString("output", "", "model directory to write");
  args.AddString("dtype", "float32", "stored dtype of the output: float32, float16, bfloat16");
  args.AddBool("overwrite", false, "replace an existing output directory");
  args.AllowPositionals("[DIR ...]", 4096);
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail("average", std::string(parsed.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  const std::vector<std::string>& dirs = args.positionals();
  if (args.GetString("output").empty()) return Fail("average", "--output is required");
  if (args.GetString("checkpoints").empty() == dirs.empty()) {
    return Fail("average", dirs.empty() ? "give --checkpoints (a training run) or the directories to average"
                                        : "give either --checkpoints or directories to average, not both");
  }
  if (!dirs.empty() && args.given("last")) {
    return Fail("average", "--last applies to --checkpoints; with directories given, each of them is averaged");
  }
  AverageOptions o;
  const std::string dtype = args.GetString("dtype");
  if (dtype == "float32") o.stored_dtype = DType::kFloat32;
  else if (dtype == "float16") o.stored_dtype = DType::kFloat16;
  else if (dtype == "bfloat16") o.stored_dtype = DType::kBFloat16;
  else return Fail("average", absl::StrCat("--dtype ", dtype, ": expected float32, float16 or bfloat16"));
  o.overwrite = args.GetBool("overwrite");
  absl::Status s = dirs.empty() ? AverageLastCheckpoints(args.GetString("checkpoints"), args.GetInt("last"),
                                                        args.GetString("output"), o)
                                : AverageCheckpoints(dirs, args.GetString("output"), o);
  if (!s.ok()) return Fail("average", std::string(s.message()));
  std::cerr << "tnmt average: wrote " << args.GetString("output") << "\n";
  return 0;
}

}  // namespace tnmt::cli

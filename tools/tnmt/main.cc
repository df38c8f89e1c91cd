// tnmt: one CLI for translation, training, serving and jobs. Dispatches to subcommands.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"

#include "tools/tnmt/convert_command.h"
#include "tools/tnmt/jobs_command.h"
#include "tools/tnmt/models_command.h"
#include "tools/tnmt/score_command.h"
#include "tools/tnmt/serve_command.h"
#include "tools/tnmt/shortlist_command.h"
#include "tools/tnmt/train_command.h"
#include "tools/tnmt/translate_command.h"
#include "engine/runtime/compute.h"
#include "tools/tnmt/version.h"

namespace {

constexpr const char* kUsage =
    "usage: tnmt <command> [flags]\n"
    "\n"
    "commands:\n"
    "  translate   translate text with a model directory (stdin -> stdout)\n"
    "  score       log-probabilities of given translations (forced decoding)\n"
    "  train       train a model on parallel text (resumable; CPU or GPU; data-parallel over\n"
    "              several GPUs or CPU ranks with --devices, or over nodes with mpirun)\n"
    "  average     average the last checkpoints into a model directory\n"
    "  shortlist   build a vocabulary shortlist (tnmt translate --shortlist) from a corpus\n"
    "  import      convert a Hugging Face Marian (OPUS-MT) model into a tnmt model directory\n"
    "  export      write a tnmt model in the Hugging Face Marian layout\n"
    "  serve       serve translation over gRPC with health, metrics and hot reload\n"
    "  jobs        submit, watch and cancel training jobs on a server (tnmt jobs --help)\n"
    "  models      list the models a server serves\n"
    "  health      check a server's gRPC health (exit 0 when serving)\n"
    "  version     print the version (also tnmt --version)\n"
    "\n"
    "Run `tnmt <command> --help` for the flags of a command.\n";

// A process started by `tnmt serve`'s job runner (posix_spawn, which cannot set this itself)
// carries TNMT_PARENT_PID: it asks for SIGKILL when that server dies, and exits at once if the
// server is already gone, so a trainer never outlives the server that owns its job.
void DieWithSpawningServer() {
  const char* env = std::getenv("TNMT_PARENT_PID");
  int parent = 0;
  if (env == nullptr || !absl::SimpleAtoi(env, &parent) || parent <= 0) return;
  ::unsetenv("TNMT_PARENT_PID");  // not passed on to processes this one starts
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  DieWithSpawningServer();
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version" || command == "version") {
    // The CPU kernel path is part of what a user reports (TNMT_CPU_ISA may cap it).
    std::cout << "tnmt " << tnmt::kVersion << " (cpu kernels: " << tnmt::CpuKernels() << ")\n";
    return 0;
  }
  if (command == "translate") return tnmt::cli::TranslateCommand(argc, argv);
  if (command == "train") return tnmt::cli::TrainCommand(argc, argv);
  if (command == "serve") return tnmt::cli::ServeCommand(argc, argv);
  if (command == "average") return tnmt::cli::AverageCommand(argc, argv);
  if (command == "score") return tnmt::cli::ScoreCommand(argc, argv);
  if (command == "shortlist") return tnmt::cli::ShortlistCommand(argc, argv);
  if (command == "import") return tnmt::cli::ImportCommand(argc, argv);
  if (command == "export") return tnmt::cli::ExportCommand(argc, argv);
  if (command == "jobs") return tnmt::cli::JobsCommand(argc, argv);
  if (command == "health") return tnmt::cli::HealthCommand(argc, argv);
  if (command == "models") return tnmt::cli::ModelsCommand(argc, argv);
  std::cerr << "tnmt: unknown command \"" << command << "\"\n" << kUsage;
  return 2;
}

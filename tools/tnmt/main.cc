// tnmt: one CLI for translation, training, serving and jobs. Dispatches to subcommands.
#include <iostream>
#include <string>

#include "tools/tnmt/jobs_command.h"
#include "tools/tnmt/serve_command.h"
#include "tools/tnmt/train_command.h"
#include "tools/tnmt/translate_command.h"

namespace {

constexpr const char* kUsage =
    "usage: tnmt <command> [flags]\n"
    "\n"
    "commands:\n"
    "  translate   translate text with a model directory (stdin -> stdout)\n"
    "  train       train a model on parallel text (resumable; CPU or GPU; data-parallel over\n"
    "              several GPUs or processes with --devices, or over nodes with mpirun)\n"
    "  average     average the last checkpoints into a model directory\n"
    "  serve       serve translation over gRPC with health, metrics and hot reload\n"
    "  jobs        submit, watch and cancel training jobs on a server (tnmt jobs --help)\n"
    "  health      check a server's gRPC health (exit 0 when serving)\n"
    "\n"
    "Run `tnmt <command> --help` for the flags of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "translate") return tnmt::cli::TranslateCommand(argc, argv);
  if (command == "train") return tnmt::cli::TrainCommand(argc, argv);
  if (command == "serve") return tnmt::cli::ServeCommand(argc, argv);
  if (command == "average") return tnmt::cli::AverageCommand(argc, argv);
  if (command == "jobs") return tnmt::cli::JobsCommand(argc, argv);
  if (command == "health") return tnmt::cli::HealthCommand(argc, argv);
  std::cerr << "tnmt: unknown command \"" << command << "\"\n" << kUsage;
  return 2;
}

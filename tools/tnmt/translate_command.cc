// `tnmt translate`; see translate_command.h. Reads the input in chunks (so a huge file is
// never held whole), translates each chunk sorted by length, writes outputs in input order.
// A bad line gets an error on stderr naming the line and an empty output line (alignment is
// kept); the exit status is then 1.
#include "tools/tnmt/translate_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/translator.h"
#include "engine/runtime/placement.h"
#include "kernels/cpu/gemm.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/remote_translate.h"

namespace tnmt::cli {

namespace {

constexpr int kChunkLines = 20000;

int Fail(const std::string& message) {
  std::cerr << "tnmt translate: " << message << "\n";
  return 2;
}

void DrawProgress(int done, int total) {
  const int width = 40;
  const int filled = total > 0 ? width * done / total : width;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  std::fflush(stderr);
}

// Opens --input and --output (empty: stdin/stdout). Refused before anything is written: an input
// that is a directory or other non-file (it would read as empty), and an output that is the
// input itself (opening it for writing would empty the input before it is read), by inode, so
// another name, a link or ./ prefix for the same file is caught too.
absl::Status OpenIo(const std::string& input, const std::string& output, std::ifstream* file_in,
                    std::ofstream* file_out) {
  struct stat in_st;
  bool have_in = false;
  if (!input.empty()) {
    if (::stat(input.c_str(), &in_st) != 0) {
      return absl::NotFoundError(absl::StrCat("--input ", input, ": ", std::strerror(errno)));
    }
    if (!S_ISREG(in_st.st_mode) && !S_ISFIFO(in_st.st_mode) && !S_ISCHR(in_st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("--input ", input, ": ",
                                                     S_ISDIR(in_st.st_mode) ? "is a directory" : "is not a regular file",
                                                     " (give a text file, one sentence per line)"));
    }
    have_in = true;
  } else if (::fstat(STDIN_FILENO, &in_st) == 0 && S_ISREG(in_st.st_mode)) {
    have_in = true;  // stdin redirected from a file: `tnmt translate < f --output f` empties f too
  }
  if (!output.empty()) {
    struct stat out_st;
    if (::stat(output.c_str(), &out_st) == 0) {
      if (S_ISDIR(out_st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrCat("--output ", output, ": is a directory"));
      }
      if (have_in && S_ISREG(in_st.st_mode) && out_st.st_dev == in_st.st_dev && out_st.st_ino == in_st.st_ino) {
        return absl::InvalidArgumentError(absl::StrCat("--output ", output, " is the input file",
                                                       input.empty() ? "" : absl::StrCat(" (--input ", input, ")"),
                                                       "; writing it would destroy the input: choose another output"));
      }
    }
  }
  if (!input.empty()) {
    file_in->open(input, std::ios::binary);
    if (!*file_in) return absl::PermissionDeniedError(absl::StrCat("--input ", input, ": cannot open for reading"));
  }
  if (!output.empty()) {
    file_out->open(output, std::ios::binary);
    if (!*file_out) return absl::PermissionDeniedError(absl::StrCat("--output ", output, ": cannot open for writing"));
  }
  return absl::OkStatus();
}

}  // namespace

int TranslateCommand(int argc, char** argv) {
  Args args("tnmt translate",
            "Translates text, one sentence per line, from --input (default stdin) to --output\n"
            "(default stdout). Output: one line per input line; with --n-best N > 1, N lines per\n"
            "input as 'LINE ||| TEXT ||| SCORE' (LINE counts from 0); with --scores and N = 1,\n"
            "'SCORE ||| TEXT'.");
  args.AddString("model", "", "model directory (config.json, model.safetensors, spm.model)");
  args.AddString("input", "", "input file (default: stdin)");
  args.AddString("output", "", "output file (default: stdout)");
  args.AddInt("beam-size", 0, "beam size; 1 = greedy (default: the model's config, usually 4)");
  args.AddFloat("length-penalty", -1000.0f, "length penalty alpha (default: the model's config, usually 0.6)");
  args.AddInt("max-length-offset", -1, "max output length = input length + this (default: config, usually 50)");
  args.AddInt("n-best", 1, "hypotheses to output per line");
  args.AddBool("scores", false, "also print scores");
  args.AddInt("max-batch-tokens", 4096, "source tokens per batch, padding included");
  args.AddInt("max-input-length", 1024, "longer lines (in pieces) are an error for that line");
  args.AddInt("threads", 0, "compute threads (default: all cores)");
  args.AddString("device", "cpu", "cpu, cuda or cuda:N (CUDA builds)");
  args.AddString("dtype", "", "GPU precision: float16 (default on cuda), bfloat16 or float32");
  args.AddString("server", "", "translate through a running `tnmt serve` at HOST:PORT instead of --model");
  args.AddString("model-name", "", "with --server: the served model's name (default: the server's default)");
  args.AddInt("timeout-seconds", 300, "with --server: deadline of each request");
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail(std::string(parsed.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  if (!args.GetString("server").empty()) {
    for (const char* local : {"model", "max-length-offset", "max-batch-tokens", "max-input-length", "threads", "device", "dtype"}) {
      if (args.given(local)) return Fail(absl::StrCat("--", local, " applies to local translation, not with --server"));
    }
    RemoteTranslateOptions ro;
    ro.server = args.GetString("server");
    ro.model = args.GetString("model-name");
    if (args.given("beam-size")) ro.beam_size = args.GetInt("beam-size");
    if (args.given("length-penalty")) ro.length_penalty = args.GetFloat("length-penalty");
    ro.n_best = args.GetInt("n-best");
    ro.scores = args.GetBool("scores");
    ro.timeout_seconds = args.GetInt("timeout-seconds");
    if (ro.n_best < 1) return Fail("--n-best must be positive");
    if (ro.timeout_seconds < 1) return Fail("--timeout-seconds must be positive");
    std::ifstream file_in;
    std::ofstream file_out;
    if (absl::Status io = OpenIo(args.GetString("input"), args.GetString("output"), &file_in, &file_out); !io.ok()) {
      return Fail(std::string(io.message()));
    }
    return TranslateRemote(ro, args.GetString("input").empty() ? std::cin : file_in,
                           args.GetString("output").empty() ? std::cout : file_out);
  }
  if (args.GetString("model").empty()) return Fail("--model (or --server) is required");
  if (args.given("model-name")) return Fail("--model-name needs --server");
  absl::StatusOr<Placement> placement = Placement::Parse(args.GetString("device"), args.GetString("dtype"));
  if (!placement.ok()) return Fail(std::string(placement.status().message()));
  int threads = args.GetInt("threads");
  if (threads < 0) return Fail("--threads must be >= 0");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  kernels::cpu::SetBlasThreads(threads);

  auto model = LoadModelDirectory(args.GetString("model"), *placement);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  TranslationOptions opt;
  opt.decode = DecodeOptions::FromConfig((*model)->config);
  if (args.given("beam-size")) opt.decode.beam_size = args.GetInt("beam-size");
  if (args.given("length-penalty")) opt.decode.length_penalty = args.GetFloat("length-penalty");
  if (args.given("max-length-offset")) opt.decode.max_length_offset = args.GetInt("max-length-offset");
  opt.decode.n_best = args.GetInt("n-best");
  opt.max_batch_tokens = args.GetInt("max-batch-tokens");
  opt.max_input_length = args.GetInt("max-input-length");
  if (absl::Status s = opt.decode.Validate(); !s.ok()) return Fail(std::string(s.message()));
  if (opt.max_batch_tokens < 1) return Fail("--max-batch-tokens must be positive");
  if (opt.max_input_length < 1) return Fail("--max-input-length must be positive");

  std::ifstream file_in;
  std::ofstream file_out;
  if (absl::Status io = OpenIo(args.GetString("input"), args.GetString("output"), &file_in, &file_out); !io.ok()) {
    return Fail(std::string(io.message()));
  }
  std::istream* in = args.GetString("input").empty() ? static_cast<std::istream*>(&std::cin) : &file_in;
  std::ostream* out = args.GetString("output").empty() ? static_cast<std::ostream*>(&std::cout) : &file_out;
  const bool show_progress = !args.GetString("input").empty() && ::isatty(STDERR_FILENO);
  const bool scores = args.GetBool("scores");

  Translator translator(*model);
  int errors = 0;
  int64_t line_base = 0;
  std::vector<std::string> lines;
  std::string line;
  bool eof = false;
  while (!eof) {
    lines.clear();
    while (static_cast<int>(lines.size()) < kChunkLines) {
      if (!std::getline(*in, line)) {
        eof = true;
        break;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(line);
    }
    if (lines.empty()) break;
    Translator::Progress progress = nullptr;
    if (show_progress) progress = DrawProgress;
    auto results = translator.Translate(lines, opt, progress);
    if (show_progress) std::fprintf(stderr, "\n");
    if (!results.ok()) return Fail(std::string(results.status().message()));
    for (size_t i = 0; i < results->size(); ++i) {
      const int64_t line_no = line_base + static_cast<int64_t>(i);
      const auto& r = (*results)[i];
      if (!r.ok()) {
        ++errors;
        // Messages name the line within the chunk; report the line of the whole input.
        std::cerr << "tnmt translate: input line " << line_no + 1 << ": " << r.status().message()
                  << "\n";
        for (int k = 0; k < opt.decode.n_best; ++k) {
          if (opt.decode.n_best > 1) *out << line_no << " |||  ||| error";
          *out << "\n";
        }
        continue;
      }
      for (const TextHypothesis& h : r->hypotheses) {
        if (opt.decode.n_best > 1) {
          *out << line_no << " ||| " << h.text << " ||| " << absl::StrFormat("%.6f", h.score) << "\n";
        } else if (scores) {
          *out << absl::StrFormat("%.6f", h.score) << " ||| " << h.text << "\n";
        } else {
          *out << h.text << "\n";
        }
      }
    }
    out->flush();
    line_base += static_cast<int64_t>(lines.size());
  }
  if (!*out) return Fail("writing the output failed");
  if (errors > 0) {
    std::cerr << "tnmt translate: " << errors << " line(s) could not be translated\n";
    return 1;
  }
  return 0;
}

}  // namespace tnmt::cli

// `tnmt translate`; see translate_command.h. Reads the input in chunks (so a huge file is
// never held whole), translates each chunk sorted by length, writes outputs in input order.
// A bad line gets an error on stderr naming the line and an empty output line (alignment is
// kept); the exit status is then 1.
#include "tools/tnmt/translate_command.h"

#include <unistd.h>

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
    if (!args.GetString("input").empty()) {
      file_in.open(args.GetString("input"), std::ios::binary);
      if (!file_in) return Fail(absl::StrCat(args.GetString("input"), ": cannot open for reading"));
    }
    std::ofstream file_out;
    if (!args.GetString("output").empty()) {
      file_out.open(args.GetString("output"), std::ios::binary);
      if (!file_out) return Fail(absl::StrCat(args.GetString("output"), ": cannot open for writing"));
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
  std::istream* in = &std::cin;
  if (!args.GetString("input").empty()) {
    file_in.open(args.GetString("input"), std::ios::binary);
    if (!file_in) return Fail(absl::StrCat(args.GetString("input"), ": cannot open for reading"));
    in = &file_in;
  }
  std::ofstream file_out;
  std::ostream* out = &std::cout;
  if (!args.GetString("output").empty()) {
    file_out.open(args.GetString("output"), std::ios::binary);
    if (!file_out) return Fail(absl::StrCat(args.GetString("output"), ": cannot open for writing"));
    out = &file_out;
  }
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

// `tnmt translate`; see translate_command.h. Reads the input in chunks (so a huge file is
// never held whole), translates each chunk sorted by length, writes outputs in input order in
// the format of translate_output.h. A bad line gets an error on stderr naming the line and
// keeps its place in the output; the exit status is then 1.
#include "tools/tnmt/translate_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/decode/option_table.h"
#include "engine/runtime/translator.h"
#include "engine/runtime/placement.h"
#include "engine/runtime/compute.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/connection.h"
#include "tools/tnmt/decoding_flags.h"
#include "tools/tnmt/remote_translate.h"
#include "tools/tnmt/translate_output.h"

namespace tnmt::cli {

namespace {

constexpr int kChunkLines = 20000;

int Fail(const std::string& message) {
  std::cerr << "tnmt translate: " << message << "\n";
  return 2;
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
            "Translates text, one sentence per line, from --input to --output, with a model directory\n"
            "(--model) or through a running `tnmt serve` (--server); both write the same output.\n"
            "Output: one line per input line; with --scores, 'SCORE ||| TEXT'; with --n-best N > 1,\n"
            "up to N lines per input line as 'LINE ||| TEXT ||| SCORE', LINE counting input lines\n"
            "from 1 as error messages do. A blank input line gives an empty line (with --n-best:\n"
            "one line, 'LINE |||  ||| 0.000000'); a line that cannot be translated is reported on\n"
            "stderr as 'input line N: ...' and keeps its place as an empty line (with --n-best:\n"
            "'LINE |||  ||| error').\n"
            "With --token-scores or --alignments every hypothesis is written as\n"
            "'LINE ||| TEXT ||| SCORE ||| PIECES' followed by ' ||| TOKEN_SCORES' (one log-probability\n"
            "per piece, then </s>'s) and/or ' ||| ALIGNMENT' (Pharaoh 'S-T' pairs: target piece T\n"
            "aligns to source piece S, from 0).\n"
            "Exit status: 0; 1 if some lines could not be translated; 2 for a usage error or a model\n"
            "or server that cannot be used.");
  args.AddString("model", "", "model directory (config.json, model.safetensors, spm.model)",
                 "none; required unless --server");
  args.AddString("ensemble", "", "further model directories, comma-separated, that translate together with --model (same vocabulary; CPU): each step's distribution is the models' normalized geometric mean",
                 "none");
  args.AddString("input", "", "input file", "stdin");
  args.AddString("output", "", "output file (never the input file)", "stdout");
  AddDecodingFlags(&args, FlagGroup::kSearch);
  args.AddBool("scores", false, "with --n-best 1: write 'SCORE ||| TEXT'");
  args.AddString("target-prefix", "", "file of target prefixes, one per input line (an empty line: none): each translation starts with its line's prefix");
  AddDecodingFlags(&args, FlagGroup::kOutput);  // --token-scores, --alignments, --alignment-layer
  args.AddString("n-best-format", "tnmt", "tnmt ('LINE ||| TEXT ||| SCORE' for --n-best > 1) or moses ('ID ||| TEXT ||| F0= SCORE ||| SCORE', IDs from 0, every --n-best)");
  const TranslationOptions defaults;
  args.AddInt("max-batch-tokens", defaults.max_batch_tokens, "source tokens decoded at once, padding included (sentences join as others finish)");
  args.AddInt("max-input-length", defaults.max_input_length, "longer lines (in pieces) are an error for that line");
  args.AddInt("threads", 0, "compute threads", "all cores");
  args.AddString("device", "cpu", "cpu, cuda or cuda:N (CUDA builds)");
  args.AddString("dtype", "", "GPU precision: float16, bfloat16 or float32", "float16 on cuda, float32 on cpu");
  args.AddString("compute-type", "float32", "CPU: float32, or int8 (linears quantized at load; faster, scores differ slightly)");
  args.AddString("shortlist", "", "vocabulary shortlist file (`tnmt shortlist` builds it): score only its candidate target pieces each step (CPU; faster, changes outputs)",
                 "none (the whole vocabulary)");
  args.AddBool("progress", false, "progress bar on stderr", "on when --input is a file and stderr is a terminal");
  args.AddBool("quiet", false, "no progress bar; failed lines are counted on stderr, not listed");
  args.AddString("server", "", "translate through a running `tnmt serve` at HOST:PORT instead of --model");
  args.AddString("model-name", "", "with --server: the served model's name (`tnmt models` lists them)",
                 "the server's default model");
  args.AddInt("timeout-seconds", 300, "with --server: deadline of each request, in seconds");
  AddTlsFlags(&args);
  AddApiTokenFlag(&args);
  absl::Status parsed = args.Parse(argc, argv, 2);
  if (!parsed.ok()) return Fail(std::string(parsed.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  if (absl::Status s = CheckDecodingFlags(args); !s.ok()) return Fail(std::string(s.message()));
  if (args.GetBool("quiet") && args.given("progress") && args.GetBool("progress")) {
    return Fail("give --quiet or --progress, not both");
  }
  const bool quiet = args.GetBool("quiet");
  const bool show_progress =
      !quiet && (args.given("progress") ? args.GetBool("progress")
                                        : !args.GetString("input").empty() && ::isatty(STDERR_FILENO));
  OutputFormat format;
  format.n_best = args.GetInt("n-best");
  format.scores = args.GetBool("scores");
  const std::string n_best_format = args.GetString("n-best-format");
  if (n_best_format != "tnmt" && n_best_format != "moses") {
    return Fail(absl::StrCat("--n-best-format must be tnmt or moses, got \"", n_best_format, "\""));
  }
  format.moses = n_best_format == "moses";
  if (format.moses && format.scores) return Fail("--scores does not apply to --n-best-format moses (it has the scores)");
  format.token_scores = args.GetBool("token-scores");
  format.alignments = args.GetBool("alignments");
  if (format.details() && (format.moses || format.scores)) {
    return Fail("--token-scores and --alignments have their own layout: not with --scores or --n-best-format moses");
  }
  if (args.given("alignment-layer") && !format.alignments) return Fail("--alignment-layer needs --alignments");
  uint64_t seed = 0;
  if (args.given("seed")) {
    (void)absl::SimpleAtoi(args.GetString("seed"), &seed);  // checked by CheckDecodingFlags
  } else if (args.given("sampling-topk") && args.GetInt("sampling-topk") != 1) {
    seed = DrawSeed();
    std::cerr << "tnmt translate: sampling with --seed " << seed << "\n";
  }
  // Target prefixes, one per input line, read along with the input.
  std::ifstream prefix_file;
  if (!args.GetString("target-prefix").empty()) {
    prefix_file.open(args.GetString("target-prefix"), std::ios::binary);
    if (!prefix_file) return Fail(absl::StrCat("--target-prefix ", args.GetString("target-prefix"), ": cannot open for reading"));
  }
  std::istream* prefixes = prefix_file.is_open() ? &prefix_file : nullptr;

  if (!args.GetString("server").empty()) {
    for (const char* local : {"model", "ensemble", "max-length-offset", "max-batch-tokens", "max-input-length", "threads", "device", "dtype", "compute-type", "shortlist"}) {
      if (args.given(local)) return Fail(absl::StrCat("--", local, " applies to local translation, not with --server"));
    }
    RemoteTranslateOptions ro;
    ro.server = args.GetString("server");
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = TlsCredentialsFromFlags(args, &ro.channel_args);
    if (!credentials.ok()) return Fail(std::string(credentials.status().message()));
    ro.credentials = *credentials;
    absl::StatusOr<std::string> token = ApiTokenFromFlags(args);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    ro.token = *token;
    ro.model = args.GetString("model-name");
    if (args.given("beam-size")) ro.beam_size = args.GetInt("beam-size");
    if (args.given("length-penalty")) ro.length_penalty = args.GetFloat("length-penalty");
    ro.length_penalty_style = args.GetString("length-penalty-style");
    ApplyDecodingFlags(args, &ro.options);
    if (seed != 0) ro.options.set_seed(seed);
    ro.options.set_return_token_scores(format.token_scores);
    ro.options.set_return_alignments(format.alignments);
    if (args.given("alignment-layer")) ro.options.set_alignment_layer(args.GetInt("alignment-layer"));
    ro.prefixes = prefixes;
    ro.format = format;
    ro.timeout_seconds = args.GetInt("timeout-seconds");
    ro.progress = show_progress;
    ro.quiet = quiet;
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
  for (const char* remote : {"tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "token-file"}) {
    if (args.given(remote)) return Fail(absl::StrCat("--", remote, " needs --server"));
  }
  if (args.given("timeout-seconds")) return Fail("--timeout-seconds needs --server");
  absl::StatusOr<Placement> placement =
      Placement::Parse(args.GetString("device"), args.GetString("dtype"), args.GetString("compute-type"));
  if (!placement.ok()) return Fail(std::string(placement.status().message()));
  int threads = args.GetInt("threads");
  if (threads < 0) return Fail("--threads must be >= 0");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (args.GetInt("max-batch-tokens") < 1) return Fail("--max-batch-tokens must be positive");
  if (args.GetInt("max-input-length") < 1) return Fail("--max-input-length must be positive");
  const std::string shortlist = args.GetString("shortlist");
  if (args.given("shortlist") && shortlist.empty()) return Fail("--shortlist needs a file name");
  if (!shortlist.empty() && args.given("ensemble")) {
    return Fail("--shortlist applies to one model, not with --ensemble");
  }
  if (!shortlist.empty() && placement->device != Device::kCpu) {
    return Fail(absl::StrCat("--shortlist runs on the CPU engine only, not with --device ", args.GetString("device")));
  }
  SetCpuThreads(threads);

  auto model = LoadModelDirectory(args.GetString("model"), *placement, shortlist);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  auto ensemble = LoadEnsembleFlag(args, **model, *placement);
  if (!ensemble.ok()) return Fail(std::string(ensemble.status().message()));
  TranslationOptions opt;
  opt.decode = DecodeOptions::FromConfig((*model)->config);
  if (args.given("beam-size")) opt.decode.beam_size = args.GetInt("beam-size");
  if (args.given("length-penalty")) opt.decode.length_penalty = args.GetFloat("length-penalty");
  if (args.given("length-penalty-style")) {
    opt.decode.length_penalty_style = *ParseLengthPenaltyStyle(args.GetString("length-penalty-style"));  // checked above
  }
  if (args.given("max-length-offset")) opt.decode.max_length_offset = args.GetInt("max-length-offset");
  opt.decode.n_best = args.GetInt("n-best");
  ApplyDecodingFlags(args, &opt.decode);
  opt.decode.seed = seed;
  opt.decode.return_token_scores = format.token_scores;
  opt.decode.return_alignments = format.alignments;
  // Plain output shows no score: greedy decoding then need not compute them (same text).
  opt.decode.return_scores = format.scores || format.n_best > 1 || format.moses || format.details();
  if (args.given("alignment-layer")) opt.decode.alignment_layer = args.GetInt("alignment-layer");
  opt.decode.use_shortlist = !shortlist.empty();
  opt.max_batch_tokens = args.GetInt("max-batch-tokens");
  opt.max_input_length = args.GetInt("max-input-length");
  // The rules that need the model: --n-best within its beam size, --alignment-layer within its layers.
  if (absl::Status s = ValidateDecodeOptions(opt.decode, OptionTerms::kFlag, {(*model)->config.decoder_layers}); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  std::ifstream file_in;
  std::ofstream file_out;
  if (absl::Status io = OpenIo(args.GetString("input"), args.GetString("output"), &file_in, &file_out); !io.ok()) {
    return Fail(std::string(io.message()));
  }
  std::istream* in = args.GetString("input").empty() ? static_cast<std::istream*>(&std::cin) : &file_in;
  std::ostream* out = args.GetString("output").empty() ? static_cast<std::ostream*>(&std::cout) : &file_out;

  Translator translator(*model, *std::move(ensemble));
  LineErrors errors(quiet);
  int64_t line_base = 0;
  std::vector<std::string> lines, prefix_lines;
  std::string line;
  bool eof = false;
  while (!eof) {
    lines.clear();
    prefix_lines.clear();
    while (static_cast<int>(lines.size()) < kChunkLines) {
      if (!ReadLine(*in, &line)) {
        eof = true;
        break;
      }
      lines.push_back(line);
      if (prefixes != nullptr) {
        if (!ReadLine(*prefixes, &line)) {
          return Fail(absl::StrCat("--target-prefix has fewer lines than the input (", line_base + lines.size() - 1, ")"));
        }
        prefix_lines.push_back(line);
      }
    }
    if (lines.empty()) break;
    Translator::Progress progress = nullptr;
    if (show_progress) progress = DrawProgress;
    opt.first_stream = static_cast<uint64_t>(line_base);
    auto results = translator.Translate(lines, opt, progress, prefixes != nullptr ? &prefix_lines : nullptr);
    if (show_progress) std::fprintf(stderr, "\n");
    if (!results.ok()) return Fail(std::string(results.status().message()));
    for (size_t i = 0; i < results->size(); ++i) {
      const int64_t line_no = line_base + static_cast<int64_t>(i) + 1;
      const auto& r = (*results)[i];
      if (!r.ok()) {
        // The engine names the line within the chunk; report the line of the whole input.
        absl::string_view message = r.status().message();
        absl::ConsumePrefix(&message, absl::StrCat("line ", i + 1, ": "));
        errors.Report(line_no, std::string(message));
        WriteFailedLine(format, line_no, *out);
        continue;
      }
      std::vector<OutputHypothesis> hypotheses;
      for (const TextHypothesis& h : r->hypotheses) {
        hypotheses.push_back({h.text, h.score, h.pieces, h.token_scores, h.alignments});
      }
      WriteTranslation(format, line_no, IsBlankLine(lines[i]), hypotheses, *out);
    }
    out->flush();
    line_base += static_cast<int64_t>(lines.size());
  }
  if (!*out) return Fail("writing the output failed");
  return errors.Finish();
}

}  // namespace tnmt::cli

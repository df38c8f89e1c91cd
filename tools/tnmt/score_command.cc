// `tnmt score`; see score_command.h. Reads both files in chunks, scores each chunk, writes one
// line per pair in input order. A pair that cannot be scored gets an error on stderr naming
// its line and an empty output line; the exit status is then 1.
#include "tools/tnmt/score_command.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "engine/runtime/compute.h"
#include "engine/runtime/placement.h"
#include "engine/runtime/translator.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/connection.h"
#include "tools/tnmt/decoding_flags.h"
#include "tools/tnmt/translate_output.h"

namespace tnmt::cli {

namespace {

constexpr int kChunkLines = 20000;

int Fail(const std::string& message) {
  std::cerr << "tnmt score: " << message << "\n";
  return 2;
}

// Scores through a running `tnmt serve` (the Score RPC), in requests of kRemoteBatch pairs; a
// request refused for one bad pair is retried pair by pair, so every other pair is scored.
class RemoteScorer {
 public:
  static constexpr int kRemoteBatch = 64;
  // channel: from ConnectFromFlags; token: the translation API's bearer token ("": none).
  RemoteScorer(std::shared_ptr<grpc::Channel> channel, std::string model, int timeout_seconds, std::string token)
      : model_(std::move(model)), timeout_seconds_(timeout_seconds), token_(std::move(token)) {
    stub_ = tnmt::v1::TranslationService::NewStub(channel);
  }
  // One entry per pair; fails as a whole only when the server cannot be used.
  absl::StatusOr<std::vector<absl::StatusOr<PairScore>>> Score(const std::vector<std::string>& sources,
                                                               const std::vector<std::string>& targets) {
    std::vector<absl::StatusOr<PairScore>> out;
    for (size_t b = 0; b < sources.size(); b += kRemoteBatch) {
      const size_t e = std::min(sources.size(), b + kRemoteBatch);
      tnmt::v1::ScoreResponse resp;
      grpc::Status st = Call(sources, targets, b, e, &resp);
      if (st.ok()) {
        for (const tnmt::v1::PairScore& p : resp.scores()) out.push_back(FromProto(p));
        continue;
      }
      if (st.error_code() != grpc::StatusCode::INVALID_ARGUMENT) return Error(st);
      // Only a refusal of one of the pairs is looked for pair by pair; anything else (the
      // model, above all: no --model-name for a server of several models) concerns them all.
      if (!absl::StartsWith(st.error_message(), "sources[") && !absl::StartsWith(st.error_message(), "targets[")) {
        return UsageError(st);
      }
      for (size_t i = b; i < e; ++i) {  // find the bad pair(s)
        tnmt::v1::ScoreResponse one;
        grpc::Status s1 = Call(sources, targets, i, i + 1, &one);
        if (s1.ok()) {
          out.push_back(FromProto(one.scores(0)));
        } else if (s1.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
          std::string m = s1.error_message();
          for (const char* f : {"sources[0]: ", "targets[0]: "}) {
            if (m.rfind(f, 0) == 0) m = absl::StrCat(f[0] == 's' ? "source: " : "target: ", m.substr(std::strlen(f)));
          }
          out.push_back(absl::InvalidArgumentError(m));
        } else {
          return Error(s1);
        }
      }
    }
    return out;
  }

 private:
  grpc::Status Call(const std::vector<std::string>& sources, const std::vector<std::string>& targets, size_t b,
                    size_t e, tnmt::v1::ScoreResponse* resp) {
    tnmt::v1::ScoreRequest req;
    req.set_model(model_);
    req.set_return_token_scores(true);
    for (size_t i = b; i < e; ++i) req.add_sources(sources[i]), req.add_targets(targets[i]);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_seconds_));
    if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
    return stub_->Score(&ctx, req, resp);
  }
  static PairScore FromProto(const tnmt::v1::PairScore& p) {
    PairScore s;
    s.score = p.score();
    s.token_scores.assign(p.token_scores().begin(), p.token_scores().end());
    return s;
  }
  // A refusal that is the command line's fault: FAILED_PRECONDITION (exit 2), in flag terms.
  absl::Status UsageError(const grpc::Status& st) {
    if (absl::StartsWith(st.error_message(), "model: required")) {
      tnmt::v1::ListModelsResponse models;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_seconds_));
      if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
      std::string names;
      if (stub_->ListModels(&ctx, tnmt::v1::ListModelsRequest(), &models).ok()) {
        for (const tnmt::v1::ModelInfo& m : models.models()) absl::StrAppend(&names, names.empty() ? "" : ", ", m.name());
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "the server serves ", names.empty() ? "several" : absl::StrCat(models.models_size()), " models",
          names.empty() ? "" : absl::StrCat(" (", names, ")"), "; pass --model-name NAME"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())), ": ", st.error_message()));
  }
  static absl::Status Error(const grpc::Status& st) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())), ": ",
                                     st.error_message()));
  }
  std::string model_;
  int timeout_seconds_;
  std::string token_;
  std::unique_ptr<tnmt::v1::TranslationService::Stub> stub_;
};

}  // namespace

int ScoreCommand(int argc, char** argv) {
  Args args("tnmt score",
            "Scores given translations: for each line of --source and the same line of --target,\n"
            "the log-probability the model gives the target (its tokens, then </s>), with the\n"
            "decoder forced along it. Output: one line per pair, 'SCORE' (the sum of the token\n"
            "log-probabilities, no length penalty); with --token-scores 'SCORE ||| S1 S2 ... S</s>'.\n"
            "A pair that cannot be scored is reported on stderr as 'input line N: ...' and keeps\n"
            "its place as an empty line.\n"
            "Exit status: 0; 1 if some pairs could not be scored; 2 for a usage error or a model\n"
            "that cannot be used.");
  args.AddString("model", "", "model directory", "none; required unless --server");
  args.AddString("ensemble", "", "further model directories, comma-separated, that score together with --model (same vocabulary): the log-probabilities are those of the models' normalized geometric mean",
                 "none");
  args.AddString("source", "", "source sentences, one per line (required)");
  args.AddString("target", "", "target sentences, line-aligned with --source (required)");
  args.AddString("output", "", "output file", "stdout");
  args.AddBool("token-scores", false, "also write each token's log-probability");
  const TranslationOptions defaults;
  args.AddInt("max-batch-tokens", defaults.max_batch_tokens, "tokens per batch (the longer side of each pair), padding included");
  args.AddInt("max-input-length", defaults.max_input_length, "longer sources (in pieces) are an error for that pair");
  args.AddInt("threads", 0, "compute threads", "all cores");
  args.AddString("compute-type", "float32", "float32, or int8 (linears quantized at load)");
  args.AddString("server", "", "score through a running `tnmt serve` at HOST:PORT instead of --model");
  args.AddString("model-name", "", "with --server: the served model's name (needed when the server serves several; `tnmt models` lists them)",
                 "the server's default model");
  args.AddInt("timeout-seconds", 300, "with --server: deadline of each request, in seconds");
  AddTlsFlags(&args);
  AddApiTokenFlag(&args);
  if (absl::Status s = args.Parse(argc, argv, 2); !s.ok()) return Fail(std::string(s.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  const bool remote = !args.GetString("server").empty();
  for (const char* required : {"source", "target"}) {
    if (args.GetString(required).empty()) return Fail(absl::StrCat("--", required, " is required"));
  }
  if (!remote && args.GetString("model").empty()) return Fail("--model (or --server) is required");
  if (remote) {
    for (const char* local : {"model", "ensemble", "max-batch-tokens", "max-input-length", "threads", "compute-type"}) {
      if (args.given(local)) return Fail(absl::StrCat("--", local, " applies to local scoring, not with --server"));
    }
    if (args.GetInt("timeout-seconds") < 1) return Fail("--timeout-seconds must be positive");
  } else {
    for (const char* r : {"model-name", "timeout-seconds", "tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "token-file"}) {
      if (args.given(r)) return Fail(absl::StrCat("--", r, " needs --server"));
    }
  }
  if (args.GetInt("max-batch-tokens") < 1) return Fail("--max-batch-tokens must be positive");
  if (args.GetInt("max-input-length") < 1) return Fail("--max-input-length must be positive");
  int threads = args.GetInt("threads");
  if (threads < 0) return Fail("--threads must be >= 0");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  absl::StatusOr<Placement> placement = Placement::Parse("cpu", "", args.GetString("compute-type"));
  if (!placement.ok()) return Fail(std::string(placement.status().message()));
  std::ifstream src(args.GetString("source"), std::ios::binary), tgt(args.GetString("target"), std::ios::binary);
  if (!src) return Fail(absl::StrCat("--source ", args.GetString("source"), ": cannot open for reading"));
  if (!tgt) return Fail(absl::StrCat("--target ", args.GetString("target"), ": cannot open for reading"));
  std::shared_ptr<const LoadedModel> model;
  std::vector<std::shared_ptr<const LoadedModel>> ensemble;
  std::unique_ptr<RemoteScorer> scorer;
  if (remote) {
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(64 << 20);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectFromFlags(args, args.GetString("server"), channel_args);
    if (!channel.ok()) return Fail(std::string(channel.status().message()));
    absl::StatusOr<std::string> token = ApiTokenFromFlags(args);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    scorer = std::make_unique<RemoteScorer>(*channel, args.GetString("model-name"), args.GetInt("timeout-seconds"), *token);
  } else {
    SetCpuThreads(threads);
    auto loaded = LoadModelDirectory(args.GetString("model"), *placement);
    if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
    model = *loaded;
    auto more = LoadEnsembleFlag(args, *model, *placement);
    if (!more.ok()) return Fail(std::string(more.status().message()));
    ensemble = *std::move(more);
  }
  std::ofstream file_out;
  if (!args.GetString("output").empty()) {
    file_out.open(args.GetString("output"), std::ios::binary);
    if (!file_out) return Fail(absl::StrCat("--output ", args.GetString("output"), ": cannot open for writing"));
  }
  std::ostream& out = args.GetString("output").empty() ? std::cout : file_out;
  TranslationOptions opt;
  opt.max_batch_tokens = args.GetInt("max-batch-tokens");
  opt.max_input_length = args.GetInt("max-input-length");
  const bool token_scores = args.GetBool("token-scores");
  std::unique_ptr<Translator> translator;
  if (model != nullptr) translator = std::make_unique<Translator>(model, std::move(ensemble));
  LineErrors errors(/*quiet=*/false, "tnmt score", "scored");
  int64_t line_base = 0;
  std::vector<std::string> sources, targets;
  std::string a, b;
  bool eof = false;
  while (!eof) {
    sources.clear(), targets.clear();
    while (static_cast<int>(sources.size()) < kChunkLines) {
      const bool has_a = ReadLine(src, &a), has_b = ReadLine(tgt, &b);
      if (has_a != has_b) {
        return Fail(absl::StrCat("--source and --target differ in length: line ", line_base + sources.size() + 1,
                                 " is only in --", has_a ? "source" : "target"));
      }
      if (!has_a) {
        eof = true;
        break;
      }
      sources.push_back(a), targets.push_back(b);
    }
    if (sources.empty()) break;
    auto results = remote ? scorer->Score(sources, targets) : translator->Score(sources, targets, opt);
    if (!results.ok()) {
      if (absl::IsFailedPrecondition(results.status())) return Fail(std::string(results.status().message()));
      std::cerr << "tnmt score: " << (remote ? args.GetString("server") + ": " : "") << results.status().message() << "\n";
      return remote ? 1 : 2;
    }
    for (size_t i = 0; i < results->size(); ++i) {
      const int64_t line_no = line_base + static_cast<int64_t>(i) + 1;
      const auto& r = (*results)[i];
      if (!r.ok()) {
        absl::string_view message = r.status().message();
        absl::ConsumePrefix(&message, absl::StrCat("line ", i + 1, ": "));
        errors.Report(line_no, std::string(message));
        out << "\n";
        continue;
      }
      out << absl::StrFormat("%.6f", r->score);
      if (token_scores) {
        out << " |||";
        for (float s : r->token_scores) out << absl::StrFormat(" %.6f", s);
      }
      out << "\n";
    }
    out.flush();
    line_base += static_cast<int64_t>(sources.size());
  }
  if (!out) return Fail("writing the output failed");
  return errors.Finish();
}

}  // namespace tnmt::cli

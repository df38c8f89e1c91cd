// Translation through a server; see remote_translate.h.
#include "tools/tnmt/remote_translate.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "tools/tnmt/decoding_flags.h"

namespace tnmt::cli {

namespace {

std::string CodeName(const grpc::Status& s) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));
}

// A refusal caused by one of the request's texts ("texts[i]: ...") or by their number
// ("texts: ..."): retried line by line. Anything else (options, model, server state) concerns
// every line and ends the run.
bool TextProblem(const grpc::Status& s) {
  return (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
          s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) &&
         (absl::StartsWith(s.error_message(), "texts") || absl::StartsWith(s.error_message(), "target_prefixes["));
}

int RunFailed(const RemoteTranslateOptions& o, const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {  // the options: a usage error
    std::cerr << "tnmt translate: " << InFlagTerms(s.error_message()) << "\n";
  } else {
    std::cerr << "tnmt translate: " << o.server << ": " << CodeName(s) << ": " << s.error_message() << "\n";
  }
  return 2;
}

class Remote {
 public:
  explicit Remote(const RemoteTranslateOptions& o) : o_(o) {
    grpc::ChannelArguments args = o.channel_args;
    args.SetMaxReceiveMessageSize(64 << 20);
    stub_ = tnmt::v1::TranslationService::NewStub(grpc::CreateCustomChannel(
        o.server, o.credentials != nullptr ? o.credentials : grpc::InsecureChannelCredentials(), args));
  }

  // Lines [first, first + count) of `lines` (and of `prefixes` when not empty).
  grpc::Status Translate(const std::vector<std::string>& lines, const std::vector<std::string>& prefixes, int first,
                         int count, tnmt::v1::TranslateResponse* resp) {
    tnmt::v1::TranslateRequest req;
    req.set_model(o_.model);
    for (int i = first; i < first + count; ++i) {
      req.add_texts(lines[i]);
      if (!prefixes.empty()) req.add_target_prefixes(prefixes[i]);
    }
    auto* opt = req.mutable_options();
    *opt = o_.options;
    if (o_.beam_size) opt->set_beam_size(*o_.beam_size);
    if (o_.length_penalty) opt->set_length_penalty(*o_.length_penalty);
    if (!o_.length_penalty_style.empty()) opt->set_length_penalty_style(o_.length_penalty_style);
    opt->set_n_best(o_.format.n_best);
    opt->set_return_scores(true);
    grpc::ClientContext ctx;
    if (!o_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + o_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(o_.timeout_seconds));
    return stub_->Translate(&ctx, req, resp);
  }

 private:
  const RemoteTranslateOptions& o_;
  std::unique_ptr<tnmt::v1::TranslationService::Stub> stub_;
};

void Write(const RemoteTranslateOptions& o, int64_t line_no, const std::string& line, const tnmt::v1::Translation& t,
           std::ostream& out) {
  std::vector<OutputHypothesis> hypotheses;
  for (const auto& h : t.hypotheses()) {
    hypotheses.push_back({h.text(), h.score(), {h.pieces().begin(), h.pieces().end()},
                          {h.token_scores().begin(), h.token_scores().end()},
                          {h.alignments().begin(), h.alignments().end()}});
  }
  WriteTranslation(o.format, line_no, IsBlankLine(line), hypotheses, out);
}

}  // namespace

int TranslateRemote(const RemoteTranslateOptions& o, std::istream& in, std::ostream& out) {
  Remote remote(o);
  LineErrors errors(o.quiet);
  int64_t line_base = 0;  // input lines before this chunk
  std::vector<std::string> lines, prefixes;
  std::string line;
  bool eof = false;
  while (!eof) {
    lines.clear();
    prefixes.clear();
    while (static_cast<int>(lines.size()) < o.chunk_lines) {
      if (!ReadLine(in, &line)) {
        eof = true;
        break;
      }
      lines.push_back(line);
      if (o.prefixes != nullptr) {
        if (!ReadLine(*o.prefixes, &line)) {
          std::cerr << "tnmt translate: --target-prefix has fewer lines than the input (" << line_base + lines.size() - 1
                    << ")\n";
          return 2;
        }
        prefixes.push_back(line);
      }
    }
    if (lines.empty()) break;
    const int total = static_cast<int>(lines.size());
    for (int first = 0; first < total; first += o.request_sentences) {
      const int count = std::min(o.request_sentences, total - first);
      tnmt::v1::TranslateResponse resp;
      grpc::Status s = remote.Translate(lines, prefixes, first, count, &resp);
      if (!s.ok() && !TextProblem(s)) {
        if (o.progress) std::fprintf(stderr, "\n");
        return RunFailed(o, s);
      }
      for (int i = first; i < first + count; ++i) {
        const int64_t line_no = line_base + i + 1;
        if (s.ok()) {
          Write(o, line_no, lines[i], resp.translations(i - first), out);
          continue;
        }
        tnmt::v1::TranslateResponse one;  // find the bad lines one by one
        grpc::Status si = remote.Translate(lines, prefixes, i, 1, &one);
        if (si.ok()) {
          Write(o, line_no, lines[i], one.translations(0), out);
        } else if (TextProblem(si)) {
          std::string message = si.error_message();
          if (absl::StartsWith(message, "texts[0]: ")) message.erase(0, 10);
          if (absl::StartsWith(message, "target_prefixes[0]: ")) message = "target prefix: " + message.substr(20);
          errors.Report(line_no, absl::StrCat(CodeName(si), ": ", message));  // the server's code too
          WriteFailedLine(o.format, line_no, out);
        } else {
          if (o.progress) std::fprintf(stderr, "\n");
          return RunFailed(o, si);
        }
      }
      if (o.progress) DrawProgress(first + count, total);
    }
    if (o.progress) std::fprintf(stderr, "\n");
    out.flush();
    line_base += total;
  }
  if (!out) {
    std::cerr << "tnmt translate: writing the output failed\n";
    return 2;
  }
  return errors.Finish();
}

}  // namespace tnmt::cli

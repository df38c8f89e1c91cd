#include "tools/tnmt/remote_translate.h"

#include <chrono>
#include <iostream>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"

namespace tnmt::cli {

namespace {

std::string CodeName(const grpc::Status& s) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));
}

// Codes that say the server (not this input) is the problem: stop instead of blaming lines.
bool ServerProblem(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return false;
    default:
      return true;
  }
}

class Remote {
 public:
  explicit Remote(const RemoteTranslateOptions& o) : o_(o) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    stub_ = tnmt::v1::TranslationService::NewStub(
        grpc::CreateCustomChannel(o.server, grpc::InsecureChannelCredentials(), args));
  }

  grpc::Status Translate(const std::vector<std::string>& lines, tnmt::v1::TranslateResponse* resp) {
    tnmt::v1::TranslateRequest req;
    req.set_model(o_.model);
    for (const auto& l : lines) req.add_texts(l);
    auto* opt = req.mutable_options();
    if (o_.beam_size) opt->set_beam_size(*o_.beam_size);
    if (o_.length_penalty) opt->set_length_penalty(*o_.length_penalty);
    opt->set_n_best(o_.n_best);
    opt->set_return_scores(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(o_.timeout_seconds));
    return stub_->Translate(&ctx, req, resp);
  }

 private:
  const RemoteTranslateOptions& o_;
  std::unique_ptr<tnmt::v1::TranslationService::Stub> stub_;
};

void Write(const RemoteTranslateOptions& o, int64_t line_no, const tnmt::v1::Translation* t, std::ostream& out) {
  if (t == nullptr) {  // a failed line keeps its place
    for (int k = 0; k < o.n_best; ++k) {
      if (o.n_best > 1) out << line_no << " |||  ||| error";
      out << "\n";
    }
    return;
  }
  for (const auto& h : t->hypotheses()) {
    if (o.n_best > 1) {
      out << line_no << " ||| " << h.text() << " ||| " << absl::StrFormat("%.6f", h.score()) << "\n";
    } else if (o.scores) {
      out << absl::StrFormat("%.6f", h.score()) << " ||| " << h.text() << "\n";
    } else {
      out << h.text() << "\n";
    }
  }
}

}  // namespace

int TranslateRemote(const RemoteTranslateOptions& o, std::istream& in, std::ostream& out) {
  Remote remote(o);
  int errors = 0;
  int64_t line_base = 0;
  std::vector<std::string> lines;
  std::string line;
  bool eof = false;
  while (!eof) {
    lines.clear();
    while (static_cast<int>(lines.size()) < o.request_sentences) {
      if (!std::getline(in, line)) {
        eof = true;
        break;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(line);
    }
    if (lines.empty()) break;
    tnmt::v1::TranslateResponse resp;
    grpc::Status s = remote.Translate(lines, &resp);
    if (s.ok()) {
      for (size_t i = 0; i < lines.size(); ++i) Write(o, line_base + i, &resp.translations(i), out);
    } else if (ServerProblem(s)) {
      std::cerr << "tnmt translate: " << o.server << ": " << CodeName(s) << ": " << s.error_message() << "\n";
      return 2;
    } else {
      for (size_t i = 0; i < lines.size(); ++i) {  // find the bad lines one by one
        tnmt::v1::TranslateResponse one;
        grpc::Status si = remote.Translate({lines[i]}, &one);
        if (!si.ok() && ServerProblem(si)) {
          std::cerr << "tnmt translate: " << o.server << ": " << CodeName(si) << ": " << si.error_message() << "\n";
          return 2;
        }
        if (!si.ok()) {
          ++errors;
          std::cerr << "tnmt translate: input line " << line_base + i + 1 << ": " << CodeName(si) << ": "
                    << si.error_message() << "\n";
        }
        Write(o, line_base + i, si.ok() ? &one.translations(0) : nullptr, out);
      }
    }
    out.flush();
    line_base += static_cast<int64_t>(lines.size());
  }
  if (!out) {
    std::cerr << "tnmt translate: writing the output failed\n";
    return 2;
  }
  if (errors > 0) {
    std::cerr << "tnmt translate: " << errors << " line(s) could not be translated\n";
    return 1;
  }
  return 0;
}

}  // namespace tnmt::cli

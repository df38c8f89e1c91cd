// `tnmt models`; see models_command.h. Exit status: 0, 1 if the call failed, 2 for a usage error.
#include "tools/tnmt/models_command.h"

#include "proto/enum_names.h"

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/tnmt/v1/translation.grpc.pb.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/connection.h"
#include "tools/tnmt/proto_json.h"

namespace tnmt::cli {

namespace {

constexpr const char* kRow = "%-16s %-8s %-7s %-16s %11s %6s %7s %6s %4s %4s %-20s %s\n";

std::string Dash(int64_t value) { return value > 0 ? absl::StrCat(value) : "-"; }

}  // namespace

int ModelsCommand(int argc, char** argv) {
  Args args("tnmt models",
            "Lists the models a running `tnmt serve` serves: name (what `tnmt translate --server\n"
            "--model-name` and TranslateRequest.model take), load state, device, parameters,\n"
            "vocabulary size, model width, encoder/decoder layers, default beam size, serving\n"
            "generation (1 after the first load, +1 per reload), load time and directory.");
  args.AddString("server", "localhost:50051", "server address, host:port");
  args.AddBool("json", false, "print one JSON array (proto field names) instead of the table");
  args.AddInt("timeout-seconds", 10, "deadline of the call, in seconds");
  AddTlsFlags(&args);
  AddApiTokenFlag(&args);
  if (absl::Status s = args.Parse(argc, argv, 2); !s.ok()) {
    std::cerr << "tnmt models: " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  if (args.GetInt("timeout-seconds") < 1) {
    std::cerr << "tnmt models: --timeout-seconds must be positive\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectFromFlags(args, args.GetString("server"));
  absl::StatusOr<std::string> token = channel.ok() ? ApiTokenFromFlags(args) : channel.status();
  if (!token.ok()) {
    std::cerr << "tnmt models: " << token.status().message() << "\n";
    return 2;
  }
  auto stub = tnmt::v1::TranslationService::NewStub(*channel);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(args.GetInt("timeout-seconds"));
  // Every page (a server lists at most 1000 models per call).
  tnmt::v1::ListModelsResponse resp;
  tnmt::v1::ListModelsRequest page;
  page.set_page_size(1000);
  do {
    tnmt::v1::ListModelsResponse one;
    grpc::ClientContext ctx;
    if (!token->empty()) ctx.AddMetadata("authorization", "Bearer " + *token);
    ctx.set_deadline(deadline);
    grpc::Status s = stub->ListModels(&ctx, page, &one);
    if (!s.ok()) {
      std::cerr << "tnmt models: " << args.GetString("server") << ": "
                << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())) << ": " << s.error_message()
                << "\n";
      return 1;
    }
    for (auto& m : *one.mutable_models()) *resp.add_models() = std::move(m);
    page.set_page_token(one.next_page_token());
  } while (!page.page_token().empty());
  if (args.GetBool("json")) {
    std::vector<nlohmann::ordered_json> list;
    for (const auto& m : resp.models()) list.push_back(ProtoToJson(m));
    std::cout << JsonArrayByLine(list);
    return 0;
  }
  std::cout << absl::StrFormat(kRow, "NAME", "STATE", "LANGS", "DEVICE", "PARAMETERS", "VOCAB", "D_MODEL", "LAYERS", "BEAM",
                               "GEN", "LOADED AT", "PATH");
  for (const auto& m : resp.models()) {
    const std::string layers = m.encoder_layers() > 0 ? absl::StrCat(m.encoder_layers(), "/", m.decoder_layers()) : "-";
    const std::string langs = m.source_language().empty() && m.target_language().empty()
                                  ? "-"
                                  : absl::StrCat(m.source_language().empty() ? "?" : m.source_language(), "-",
                                                 m.target_language().empty() ? "?" : m.target_language());
    std::cout << absl::StrFormat(kRow, m.name(), tnmt::v1::ModelStateWord(m.state()), langs, m.device().empty() ? "-" : m.device(), Dash(m.parameters()),
                                 Dash(m.vocab_size()), Dash(m.d_model()), layers, Dash(m.default_beam_size()),
                                 Dash(static_cast<int64_t>(m.generation())),
                                 m.has_load_time() ? absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(m.load_time().seconds()), absl::UTCTimeZone()) : "-",
                                 m.path());
  }
  return 0;
}

}  // namespace tnmt::cli

// `tnmt jobs`: the client of tnmt.v1.TrainingService, and `tnmt health`: a gRPC health probe
// (for container health checks; Debian has no grpc_health_probe). See jobs_command.h.
#include "tools/tnmt/jobs_command.h"

#include "proto/enum_names.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/core/json_limits.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tnmt/v1/training.grpc.pb.h"
#include "server/jobs/job_spec.h"
#include "tools/tnmt/args.h"
#include "tools/tnmt/connection.h"
#include "tools/tnmt/proto_json.h"

namespace tnmt::cli {

namespace {

using tnmt::v1::Job;
using tnmt::v1::JobState;
using tnmt::v1::JobUpdate;

constexpr const char* kJobsUsage =
    "usage: tnmt jobs <command> [ID] [flags]\n"
    "\n"
    "commands (talk to `tnmt serve --state-dir ...`):\n"
    "  submit --spec FILE   submit a job (JSON JobSpec, see proto/tnmt/v1/training.proto); prints its id\n"
    "  get ID               show one job\n"
    "  list                 list jobs, newest first\n"
    "  cancel ID            cancel a queued or running job\n"
    "  watch ID             follow a job until it finishes (exit 0 only if it SUCCEEDED)\n"
    "\n"
    "Flags may come before or after ID. --json prints JSON (a list as one array).\n"
    "Run `tnmt jobs <command> --help` for its flags.\n";

int Usage(const std::string& message) {
  std::cerr << "tnmt jobs: " << message << "\n";
  return 2;
}

int RpcFailed(const grpc::Status& s) {
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    // gRPC's answer for a service the server does not have: tnmt.v1.TrainingService is served
    // only by `tnmt serve --state-dir ...`.
    std::cerr << "tnmt jobs: the server has no training API (tnmt.v1.TrainingService): it was started without "
                 "--state-dir (UNIMPLEMENTED"
              << (s.error_message().empty() ? "" : ": " + s.error_message()) << ")\n";
    return 1;
  }
  std::cerr << "tnmt jobs: " << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())) << ": "
            << s.error_message() << "\n";
  return 1;
}

std::string StateName(int s) { return tnmt::v1::JobStateWord(static_cast<JobState>(s)); }

std::string Duration(double seconds) {
  if (seconds < 0) return "-";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

// One line: state, progress, loss, BLEU, speed, ETA (and the model or the error at the end).
std::string Summary(const Job& j) {
  std::string line = absl::StrFormat("%s %-10s step %d/%d", j.id(), StateName(j.state()), j.step(), j.max_steps());
  if (j.has_loss()) absl::StrAppendFormat(&line, "  loss %.4f", j.loss());
  if (j.dev_bleu() >= 0) absl::StrAppendFormat(&line, "  dev BLEU %.2f", j.dev_bleu());
  if (j.state() == tnmt::v1::JOB_STATE_RUNNING) {
    absl::StrAppendFormat(&line, "  %.0f tok/s  ETA %s", j.tokens_per_second(), Duration(j.has_eta() ? j.eta().seconds() + j.eta().nanos() * 1e-9 : -1.0));
  }
  if (!j.published_model().empty()) absl::StrAppend(&line, "  model ", j.published_model());
  if (!j.error().empty()) absl::StrAppend(&line, "  error: ", j.error());
  return line;
}

// A job as JSON, its spec (when present) with the defaults it trains with filled in.
nlohmann::ordered_json JobJson(Job job) {
  if (job.has_spec()) *job.mutable_spec() = server::jobs::SpecWithDefaults(job.spec());
  return ProtoToJson(job);
}

nlohmann::ordered_json UpdateJson(JobUpdate update) {
  if (update.job().has_spec()) {
    *update.mutable_job()->mutable_spec() = server::jobs::SpecWithDefaults(update.job().spec());
  }
  return ProtoToJson(update);
}

struct Client {
  std::unique_ptr<tnmt::v1::TrainingService::Stub> stub;
  std::string token;
  int timeout_seconds = 30;

  void Prepare(grpc::ClientContext* ctx, bool unary) const {
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    if (unary) ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_seconds));
  }
};

void AddCommonFlags(Args* args) {
  args->AddString("server", "localhost:50051", "server address, host:port");
  args->AddString("token-file", "", "file with the bearer token", "$TNMT_JOBS_TOKEN_FILE, else none");
  args->AddBool("json", false, "print JSON (proto field names; 64-bit integers as numbers) instead of text");
  args->AddInt("timeout-seconds", 30, "deadline of each call in seconds (not of watch)");
  AddTlsFlags(args);
}

absl::StatusOr<Client> MakeClient(const Args& args) {
  Client c;
  absl::StatusOr<std::string> token = TokenFromFlag(args, "token-file", "TNMT_JOBS_TOKEN_FILE", /*required_nonempty=*/false);
  if (!token.ok()) return token.status();
  c.token = *std::move(token);
  c.timeout_seconds = args.GetInt("timeout-seconds");
  if (c.timeout_seconds < 1) return absl::InvalidArgumentError("--timeout-seconds must be positive");
  grpc::ChannelArguments ch;
  ch.SetMaxReceiveMessageSize(64 << 20);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectFromFlags(args, args.GetString("server"), ch);
  if (!channel.ok()) return channel.status();
  c.stub = tnmt::v1::TrainingService::NewStub(*channel);
  return c;
}

// Follows a job until its stream ends. On a terminal the summary line is redrawn in place;
// otherwise a line is written for each change of state, validation or checkpoint and every
// 100 steps, never the same line twice in a row, and the final summary once.
int Watch(const Client& c, const std::string& id, bool json) {
  grpc::ClientContext ctx;
  c.Prepare(&ctx, false);
  tnmt::v1::WatchJobRequest req;
  req.set_id(id);
  auto reader = c.stub->WatchJob(&ctx, req);
  const bool live = !json && ::isatty(STDOUT_FILENO);
  JobUpdate u;
  Job last;
  std::string printed;  // the last line written (not live)
  auto print = [&printed](const std::string& line) {
    if (line == printed) return;
    std::cout << line << std::endl;
    printed = line;
  };
  while (reader->Read(&u)) {
    last = u.job();
    if (json) {
      std::cout << UpdateJson(u).dump() << std::endl;
    } else if (live) {
      std::cout << "\r\033[K" << Summary(last) << std::flush;
    } else if (u.kind() != JobUpdate::KIND_PROGRESS || last.step() % 100 == 0) {
      print(Summary(last));
    }
  }
  if (live) std::cout << "\n";
  grpc::Status s = reader->Finish();
  if (!s.ok()) return RpcFailed(s);
  if (!json && !live) print(Summary(last));
  return last.state() == tnmt::v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

}  // namespace

int JobsCommand(int argc, char** argv) {
  if (argc < 3 || std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h") {
    std::cout << kJobsUsage;
    return argc < 3 ? 2 : 0;
  }
  const std::string command = argv[2];
  Args args(absl::StrCat("tnmt jobs ", command), "Client of the training-job service (see `tnmt jobs --help`).");
  AddCommonFlags(&args);
  const bool needs_id = command == "get" || command == "cancel" || command == "watch";
  if (needs_id) args.AllowPositionals("ID", 1);  // before or after the flags
  if (command == "submit") {
    args.AddString("spec", "", "job spec: JSON file (\"-\": stdin) in proto JSON form (required)");
    args.AddString("request-id", "", "idempotency key: resubmitting with it returns the first job");
    args.AddBool("watch", false, "after submitting, watch the job until it finishes");
  } else if (command == "list") {
    args.AddString("state", "", "only these states, comma-separated (e.g. RUNNING,QUEUED)", "every state");
    args.AddString("name-contains", "", "only jobs whose name contains this");
    args.AddInt("page-size", 50, "jobs per page");
    args.AddBool("all", false, "follow every page");
  } else if (!needs_id) {
    return Usage(absl::StrCat("unknown command \"", command, "\"\n", kJobsUsage));
  }
  if (absl::Status s = args.Parse(argc, argv, 3); !s.ok()) return Usage(std::string(s.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  const std::string id = args.positionals().empty() ? "" : args.positionals()[0];
  if (needs_id && id.empty()) return Usage(absl::StrCat(command, " needs a job id: tnmt jobs ", command, " ID"));
  auto client = MakeClient(args);
  if (!client.ok()) return Usage(std::string(client.status().message()));
  const bool json = args.GetBool("json");

  if (command == "submit") {
    const std::string path = args.GetString("spec");
    if (path.empty()) return Usage("submit needs --spec FILE");
    std::stringstream ss;
    if (path == "-") {
      ss << std::cin.rdbuf();
    } else {
      std::ifstream in(path);
      if (!in) return Usage(absl::StrCat("--spec ", path, ": cannot open"));
      ss << in.rdbuf();
    }
    if (absl::Status s = CheckJsonLimits(ss.str(), absl::StrCat("--spec ", path)); !s.ok()) {
      return Usage(std::string(s.message()));
    }
    tnmt::v1::SubmitJobRequest req;
    auto parsed = google::protobuf::util::JsonStringToMessage(ss.str(), req.mutable_spec());
    if (!parsed.ok()) return Usage(absl::StrCat("--spec ", path, ": ", parsed.message().as_string()));
    req.set_request_id(args.GetString("request-id"));
    grpc::ClientContext ctx;
    client->Prepare(&ctx, true);
    Job job;
    grpc::Status s = client->stub->SubmitJob(&ctx, req, &job);
    if (!s.ok()) return RpcFailed(s);
    std::cout << (json ? JobJson(job).dump() : job.id()) << std::endl;
    return args.GetBool("watch") ? Watch(*client, job.id(), json) : 0;
  }
  if (command == "get" || command == "cancel") {
    grpc::ClientContext ctx;
    client->Prepare(&ctx, true);
    Job job;
    grpc::Status s;
    if (command == "get") {
      tnmt::v1::GetJobRequest req;
      req.set_id(id);
      s = client->stub->GetJob(&ctx, req, &job);
    } else {
      tnmt::v1::CancelJobRequest req;
      req.set_id(id);
      s = client->stub->CancelJob(&ctx, req, &job);
    }
    if (!s.ok()) return RpcFailed(s);
    if (json) {
      std::cout << JobJson(job).dump() << std::endl;
    } else {
      std::cout << Summary(job) << "\n";
      if (command == "get") {
        std::cout << "  name: " << job.name() << "\n  attempts: " << job.attempts() << "\n  work dir: " << job.work_dir()
                  << "\n";
        if (!job.last_checkpoint().empty()) std::cout << "  last checkpoint: " << job.last_checkpoint() << "\n";
      }
    }
    return 0;
  }
  if (command == "watch") return Watch(*client, id, json);

  // list
  tnmt::v1::ListJobsRequest req;
  for (absl::string_view name : absl::StrSplit(args.GetString("state"), ',', absl::SkipEmpty())) {
    JobState state;
    if (!tnmt::v1::ParseJobStateWord(std::string(absl::StripAsciiWhitespace(name)), &state)) {
      return Usage(absl::StrCat("--state: unknown state \"", name, "\" (QUEUED, RUNNING, CANCELLING, PUBLISHING, SUCCEEDED, FAILED, CANCELLED)"));
    }
    req.add_states(state);
  }
  req.set_name_contains(args.GetString("name-contains"));
  req.set_page_size(args.GetInt("page-size"));
  // Nothing is written before the first page arrives, so a failed call prints only its error.
  // --json: one JSON array, one job per line (`[]` when there are none).
  std::vector<std::string> rows;
  std::vector<nlohmann::ordered_json> items;
  bool more = false;
  while (true) {
    grpc::ClientContext ctx;
    client->Prepare(&ctx, true);
    tnmt::v1::ListJobsResponse resp;
    grpc::Status s = client->stub->ListJobs(&ctx, req, &resp);
    if (!s.ok()) return RpcFailed(s);
    for (const Job& j : resp.jobs()) {
      if (json) {
        items.push_back(JobJson(j));
        continue;
      }
      rows.push_back(absl::StrFormat("%-10s %-10s %-13s %-8s %-8s %-20s %s", j.id(), StateName(j.state()),
                                     absl::StrCat(j.step(), "/", j.max_steps()),
                                     j.has_loss() ? absl::StrFormat("%.3f", j.loss()) : "-",
                                     j.dev_bleu() >= 0 ? absl::StrFormat("%.2f", j.dev_bleu()) : "-", j.name(),
                                     j.published_model()));
    }
    if (resp.next_page_token().empty() || !args.GetBool("all")) {
      more = !resp.next_page_token().empty();
      break;
    }
    req.set_page_token(resp.next_page_token());
  }
  if (json) {
    std::cout << JsonArrayByLine(items);
    return 0;
  }
  std::cout << absl::StrFormat("%-10s %-10s %-13s %-8s %-8s %-20s %s\n", "ID", "STATE", "STEP", "LOSS", "BLEU", "NAME",
                               "MODEL");
  for (const std::string& row : rows) std::cout << row << "\n";
  if (more) std::cout << "(more: --all)\n";
  return 0;
}

int HealthCommand(int argc, char** argv) {
  Args args("tnmt health",
            "Asks a server's grpc.health.v1.Health/Check and prints the answer (SERVING, NOT_SERVING, ...)\n"
            "on stdout; a call that fails (server unreachable, deadline, unknown service) is reported on\n"
            "stderr. Exit status: 0 if SERVING, 1 otherwise, 2 for a usage error.");
  args.AddString("server", "localhost:50051", "server address, host:port");
  args.AddString("service", "", "service name to check", "the whole server");
  AddTlsFlags(&args);
  args.AddFloat("timeout-seconds", 2, "deadline of the check, in seconds");
  args.AddString("address", "", "deprecated name of --server", "as --server");
  args.AddInt("timeout-ms", 0, "deprecated: --timeout-seconds in milliseconds", "as --timeout-seconds");
  if (absl::Status s = args.Parse(argc, argv, 2); !s.ok()) {
    std::cerr << "tnmt health: " << s.message() << "\n";
    return 2;
  }
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  // The names every other command uses (--server, --timeout-seconds); the old ones still work.
  std::string server = args.GetString("server");
  double timeout_s = args.GetFloat("timeout-seconds");
  for (const auto& [old_name, new_name] : {std::pair<const char*, const char*>{"address", "server"}, {"timeout-ms", "timeout-seconds"}}) {
    if (!args.given(old_name)) continue;
    if (args.given(new_name)) {
      std::cerr << "tnmt health: give --" << new_name << " only (--" << old_name << " is its deprecated name)\n";
      return 2;
    }
    std::cerr << "tnmt health: --" << old_name << " is deprecated: use --" << new_name << "\n";
  }
  if (args.given("address")) server = args.GetString("address");
  if (args.given("timeout-ms")) timeout_s = args.GetInt("timeout-ms") / 1000.0;
  if (!(timeout_s > 0)) {
    std::cerr << "tnmt health: --timeout-seconds must be positive\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectFromFlags(args, server);
  if (!channel.ok()) {
    std::cerr << "tnmt health: " << channel.status().message() << "\n";
    return 2;
  }
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(timeout_s * 1000))));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(args.GetString("service"));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    std::cerr << "tnmt health: " << server << ": " << absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))
              << ": " << s.error_message() << "\n";
    return 1;
  }
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace tnmt::cli

#include "server/jobs/job_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/core/quote.h"
#include "engine/core/status_macros.h"
#include "server/jobs/job_spec.h"
#include "trainer/checkpoint/average.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/durable_file.h"

namespace tnmt::server::jobs {

namespace {

using tnmt::v1::JobSpec;

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

absl::StatusOr<JobSpec> SpecOf(const JobRecord& job) {
  JobSpec spec;
  auto s = google::protobuf::util::JsonStringToMessage(job.spec_json, &spec);
  if (!s.ok()) return absl::DataLossError(absl::StrCat(job.id, ": stored spec does not parse: ", s.ToString()));
  return spec;
}

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

// The last non-empty line of a (log) file, for error messages.
std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!absl::StripAsciiWhitespace(line).empty()) last = line;
  }
  if (last.size() > 500) last = last.substr(last.size() - 500);
  return last;
}

std::string Describe(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrCat("was killed by signal ", sig, sig == SIGKILL ? " (SIGKILL: out of memory?)" : "");
  }
  return "ended";
}

}  // namespace

JobRunner::JobRunner(RunnerOptions options, JobStore* store, PublishFn publish)
    : options_(std::move(options)), store_(store), publish_(std::move(publish)) {}

JobRunner::~JobRunner() { Stop(); }

std::string JobRunner::WorkDir(const std::string& id) const { return options_.state_dir + "/jobs/" + id; }
std::string JobRunner::TrainDir(const std::string& id) const { return WorkDir(id) + "/train"; }
std::string JobRunner::ModelDir(const std::string& name) const { return options_.state_dir + "/models/" + name; }

absl::Status JobRunner::Start() {
  TNMT_RETURN_IF_ERROR(MakeDirs(options_.state_dir + "/jobs"));
  TNMT_RETURN_IF_ERROR(MakeDirs(options_.state_dir + "/models"));
  auto interrupted = store_->ListByState({tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_CANCELLING, tnmt::v1::JOB_STATE_PUBLISHING});
  if (!interrupted.ok()) return interrupted.status();
  std::lock_guard<std::mutex> l(mu_);
  for (JobRecord& job : *interrupted) {
    if (job.state == tnmt::v1::JOB_STATE_CANCELLING) {
      SetState(&job, tnmt::v1::JOB_STATE_CANCELLED);
      continue;
    }
    auto spec = SpecOf(job);
    if (!spec.ok()) {
      SetState(&job, tnmt::v1::JOB_STATE_FAILED, std::string(spec.status().message()));
    } else if (job.state == tnmt::v1::JOB_STATE_RUNNING && spec->on_interrupt() == tnmt::v1::ON_INTERRUPT_FAIL) {
      SetState(&job, tnmt::v1::JOB_STATE_FAILED,
               absl::StrCat("interrupted: the server stopped while the job was running (attempt ", job.attempts,
                            "); on_interrupt is FAIL"));
    } else {
      // Training resumes from the newest checkpoint (a finished one just re-publishes).
      SetState(&job, tnmt::v1::JOB_STATE_QUEUED);
    }
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void JobRunner::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<JobRecord> JobRunner::Submit(const JobSpec& spec, const std::string& request_id, bool* created) {
  JobRecord job;
  job.name = spec.name();
  job.request_id = request_id;
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  auto s = google::protobuf::util::MessageToJsonString(spec, &json, o);
  if (!s.ok()) return absl::InternalError(absl::StrCat("cannot encode the spec: ", s.ToString()));
  job.spec_json = json;
  job.device = DeviceKey(spec);
  job.max_steps = spec.stop().max_steps();
  job.state = tnmt::v1::JOB_STATE_QUEUED;
  TNMT_ASSIGN_OR_RETURN(JobRecord stored, store_->Insert(std::move(job), created));
  if (!*created && stored.spec_json != json) {
    // A retry must repeat its request; the same request_id with another spec is a client bug
    // that would otherwise silently get the first job back.
    return absl::AlreadyExistsError(absl::StrCat("request_id ", QuoteForError(request_id), " was used for ", stored.id,
                                                 " with a different spec; use a new request_id for a new job"));
  }
  if (*created) {
    store_->AppendEvent(stored.id, "state", R"({"state":"QUEUED"})").IgnoreError();
    {
      std::lock_guard<std::mutex> l(mu_);
      wake_ = true;
    }
    cv_.notify_all();
  }
  return stored;
}

absl::StatusOr<JobRecord> JobRunner::Cancel(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  TNMT_ASSIGN_OR_RETURN(JobRecord job, store_->Get(id));
  if (IsTerminal(job.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat(id, " already finished (", JobStateName(job.state), "); nothing to cancel"));
  }
  if (job.state == tnmt::v1::JOB_STATE_CANCELLING) return job;
  job.cancel_requested = true;
  auto it = children_.find(id);
  if (it == children_.end()) {  // queued (or between states): nothing is running
    SetState(&job, tnmt::v1::JOB_STATE_CANCELLED);
    return job;
  }
  ::kill(-it->second.pid, SIGTERM);
  it->second.kill_at = absl::Now() + options_.cancel_grace;
  SetState(&job, tnmt::v1::JOB_STATE_CANCELLING);
  return job;
}

int JobRunner::Subscribe(const std::string& id, std::function<void(const JobChange&)> fn) {
  std::lock_guard<std::mutex> l(subs_mu_);
  const int token = next_sub_++;
  subs_[token] = {id, std::move(fn)};
  return token;
}

void JobRunner::Unsubscribe(int token) {
  std::lock_guard<std::mutex> l(subs_mu_);
  subs_.erase(token);
}

void JobRunner::Notify(const std::string& kind, const JobRecord& job, double dev_loss) {
  JobChange change{kind, job, dev_loss};
  std::lock_guard<std::mutex> l(subs_mu_);
  for (auto& [token, sub] : subs_) {
    if (sub.first == job.id) sub.second(change);
  }
}

void JobRunner::SetState(JobRecord* job, JobState state, const std::string& error) {
  job->state = state;
  if (!error.empty()) job->error = error;
  if (state == tnmt::v1::JOB_STATE_RUNNING && job->started_ms == 0) job->started_ms = NowMs();
  if (IsTerminal(state)) job->finished_ms = NowMs();
  absl::Status s = store_->Update(*job);
  if (!s.ok()) std::fprintf(stderr, "tnmt serve: jobs: %s: %s\n", job->id.c_str(), std::string(s.message()).c_str());
  nlohmann::json e = {{"state", JobStateName(state)}};
  if (!error.empty()) e["error"] = error;
  store_->AppendEvent(job->id, "state", e.dump()).IgnoreError();
  std::fprintf(stderr, "tnmt serve: job %s: %s%s%s\n", job->id.c_str(), JobStateName(state), error.empty() ? "" : ": ",
               error.c_str());
  Notify("state", *job);
}

void JobRunner::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  bool stop_sent = false;
  while (true) {
    cv_.wait_for(l, absl::ToChronoMilliseconds(options_.poll_interval), [this] { return wake_; });
    wake_ = false;
    if (stopping_ && !stop_sent) {
      stop_sent = true;
      for (auto& [id, child] : children_) {
        ::kill(-child.pid, SIGTERM);
        child.stopping_for_shutdown = true;
        child.kill_at = std::min(child.kill_at, absl::Now() + options_.cancel_grace);
      }
    }
    Tick();
    if (stopping_ && children_.empty()) return;
  }
}

void JobRunner::Tick() {
  for (auto it = children_.begin(); it != children_.end();) {
    Follow(it->first, &it->second);
    int status = 0;
    const pid_t r = ::waitpid(it->second.pid, &status, WNOHANG);
    if (r == it->second.pid || (r < 0 && errno == ECHILD)) {
      Finished(it->first, it->second, r < 0 ? 0 : status);
      it = children_.erase(it);
      continue;
    }
    if (absl::Now() >= it->second.kill_at) {
      ::kill(-it->second.pid, SIGKILL);
      it->second.kill_at = absl::InfiniteFuture();
    }
    ++it;
  }
  if (!stopping_) StartQueued();
}

void JobRunner::StartQueued() {
  auto queued = store_->ListByState({tnmt::v1::JOB_STATE_QUEUED});
  if (!queued.ok()) return;
  std::map<std::string, int> running;
  for (const auto& [id, child] : children_) ++running[child.device];
  for (JobRecord& job : *queued) {
    if (running[job.device] >= options_.max_running_jobs) continue;
    absl::Status s = Launch(&job);
    if (s.ok()) {
      ++running[job.device];
    } else if (!absl::IsUnavailable(s)) {  // UNAVAILABLE: an old trainer still holds the lock
      SetState(&job, tnmt::v1::JOB_STATE_FAILED, std::string(s.message()));
    }
  }
}

absl::Status JobRunner::Launch(JobRecord* job) {
  TNMT_ASSIGN_OR_RETURN(JobSpec spec, SpecOf(*job));
  const std::string work = WorkDir(job->id), train = TrainDir(job->id);
  TNMT_RETURN_IF_ERROR(MakeDirs(train));
  // The lock outlives this server if a trainer does (it is inherited as fd 3): a job is never
  // trained by two processes at once.
  const int lock = ::open((work + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return absl::InternalError(absl::StrCat(work, "/lock: ", std::strerror(errno)));
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock);
    return absl::UnavailableError("a previous trainer of this job is still running");
  }
  auto config = TrainConfigJson(spec, options_.data_root, train, options_.default_threads);
  if (!config.ok()) {
    ::close(lock);
    return config.status();
  }
  const std::string config_path = work + "/train_config.json";
  absl::Status w = WriteFileAtomically(config_path, config->dump(2) + "\n", config_path + ".tmp");
  if (!w.ok()) {
    ::close(lock);
    return w;
  }
  const std::string log_path = work + "/train.log";
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log < 0 || devnull < 0) {
    ::close(lock);
    if (log >= 0) ::close(log);
    if (devnull >= 0) ::close(devnull);
    return absl::InternalError(absl::StrCat(log_path, ": ", std::strerror(errno)));
  }
  Child child;
  child.device = job->device;
  struct stat st;
  if (::stat((train + "/metrics.jsonl").c_str(), &st) == 0) child.metrics_offset = st.st_size;

  // The trainer is started with posix_spawn, never fork(): this process is multi-threaded
  // (gRPC, the engine's OpenBLAS pool), and fork() runs the libraries' atfork handlers, one of
  // which (OpenBLAS's) waits for its idle worker threads and never returns, with this runner's
  // lock held: the job stayed QUEUED, submits hung and SIGTERM no longer stopped the server.
  // posix_spawn runs no atfork handler. The child gets: its own process group (SIGTERM/SIGKILL
  // reach the trainer and anything it starts), no blocked signals and default dispositions for
  // the signals the server handles or ignores, stdin from /dev/null, stdout and stderr to the
  // job's log, the job lock as fd 3 and no other descriptor. TNMT_PARENT_PID makes the trainer
  // ask for SIGKILL when this server dies (tools/tnmt/main.cc), as PR_SET_PDEATHSIG cannot be
  // set through posix_spawn.
  std::vector<std::string> args = {options_.trainer_binary, "train", "--config", config_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "TNMT_PARENT_PID=")) env_strings.emplace_back(*e);
  }
  env_strings.push_back(absl::StrCat("TNMT_PARENT_PID=", ::getpid()));
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, devnull, 0);
  ::posix_spawn_file_actions_adddup2(&actions, log, 1);
  ::posix_spawn_file_actions_adddup2(&actions, log, 2);
  ::posix_spawn_file_actions_adddup2(&actions, lock, 3);
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&defaults, sig);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int spawn_errno = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  ::close(lock);
  ::close(log);
  ::close(devnull);
  if (spawn_errno != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start the trainer ", options_.trainer_binary, ": ", std::strerror(spawn_errno)));
  }
  child.pid = pid;
  children_[job->id] = child;
  ++job->attempts;
  SetState(job, tnmt::v1::JOB_STATE_RUNNING);
  return absl::OkStatus();
}

void JobRunner::Follow(const std::string& id, Child* child) {
  const std::string path = TrainDir(id) + "/metrics.jsonl";
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(child->metrics_offset);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end = chunk.rfind('\n');
  if (end == std::string::npos) return;  // no complete line yet
  child->metrics_offset += static_cast<int64_t>(end + 1);
  auto job = store_->Get(id);
  if (!job.ok()) return;
  for (absl::string_view line : absl::StrSplit(absl::string_view(chunk).substr(0, end), '\n', absl::SkipEmpty())) {
    nlohmann::json m = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
    if (!m.is_object() || !m.contains("event")) continue;
    const std::string event = m.value("event", "");
    std::string kind;
    double dev_loss = 0;
    if (event == "train") {
      kind = "progress";
      job->step = m.value("step", job->step);
      job->loss = m.value("loss", job->loss);
      job->tokens_per_second = m.value("tokens_per_second", job->tokens_per_second);
      job->eta_seconds = m.value("eta_seconds", job->eta_seconds);
    } else if (event == "validation") {
      kind = "validation";
      job->dev_bleu = m.value("dev_bleu", job->dev_bleu);
      job->dev_bleu_signature = m.value("dev_bleu_signature", job->dev_bleu_signature);
      dev_loss = m.value("dev_loss", 0.0);
    } else if (event == "checkpoint") {
      kind = "checkpoint";
      job->last_checkpoint = m.value("path", job->last_checkpoint);
      job->step = std::max<int64_t>(job->step, m.value("step", int64_t{0}));
    } else {
      continue;
    }
    store_->AppendEvent(id, kind, std::string(line)).IgnoreError();
    Notify(kind, *job, dev_loss);
  }
  store_->Update(*job).IgnoreError();
}

void JobRunner::Finished(const std::string& id, const Child& child, int wait_status) {
  auto job = store_->Get(id);
  if (!job.ok()) return;
  auto spec = SpecOf(*job);
  const bool clean_exit = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
  if (job->cancel_requested) {
    SetState(&*job, tnmt::v1::JOB_STATE_CANCELLED);
  } else if (child.stopping_for_shutdown) {
    SetState(&*job, tnmt::v1::JOB_STATE_QUEUED);  // the next server resumes it from this checkpoint
  } else if (!clean_exit) {
    const std::string last = LastLine(WorkDir(id) + "/train.log");
    SetState(&*job, tnmt::v1::JOB_STATE_FAILED,
             absl::StrCat("tnmt train ", Describe(wait_status), last.empty() ? "" : ": ", last));
  } else if (!spec.ok()) {
    SetState(&*job, tnmt::v1::JOB_STATE_FAILED, std::string(spec.status().message()));
  } else if (job->step < job->max_steps && spec->stop().max_epochs() == 0) {
    SetState(&*job, tnmt::v1::JOB_STATE_FAILED,
             absl::StrCat("tnmt train stopped at step ", job->step, " of ", job->max_steps,
                          " without being asked to (signalled from outside the server?)"));
  } else {
    Publish(&*job, *spec);
  }
}

void JobRunner::Publish(JobRecord* job, const JobSpec& spec) {
  SetState(job, tnmt::v1::JOB_STATE_PUBLISHING);
  const std::string name = PublishedModelName(spec, job->id);
  const std::string dir = ModelDir(name);
  auto checkpoints = ListCheckpoints(TrainDir(job->id));
  if (!checkpoints.ok() || checkpoints->empty()) {
    return SetState(job, tnmt::v1::JOB_STATE_FAILED, "publish: the trainer left no checkpoint");
  }
  const int want = spec.publish().average_last() > 0 ? spec.publish().average_last() : 5;
  AverageOptions o;
  o.overwrite = true;
  const std::string& dtype = spec.publish().dtype();
  o.stored_dtype = dtype == "float16" ? DType::kFloat16 : dtype == "bfloat16" ? DType::kBFloat16 : DType::kFloat32;
  // The spec's languages go into the model's config.json, so ListModels reports them.
  o.source_language = spec.data().source_language();
  o.target_language = spec.data().target_language();
  absl::Status s = AverageLastCheckpoints(TrainDir(job->id), std::min<int>(want, checkpoints->size()), dir, o);
  if (s.ok()) {
    nlohmann::json provenance = {{"job_id", job->id},
                                 {"job_name", job->name},
                                 {"step", job->step},
                                 {"dev_bleu", job->dev_bleu},
                                 {"dev_bleu_signature", job->dev_bleu_signature},
                                 {"averaged_checkpoints", std::min<int>(want, checkpoints->size())},
                                 {"source_language", spec.data().source_language()},
                                 {"target_language", spec.data().target_language()},
                                 {"spec", nlohmann::json::parse(job->spec_json, nullptr, false)}};
    s = WriteFileAtomically(dir + "/job.json", provenance.dump(2) + "\n", dir + "/job.json.tmp");
  }
  if (s.ok()) s = publish_(name, dir);
  if (!s.ok() && stopping_) {
    // The training finished as the server began to stop: nothing is lost, the next start
    // re-runs the (finished) trainer, which exits at once, and publishes then.
    return SetState(job, tnmt::v1::JOB_STATE_QUEUED);
  }
  if (!s.ok()) return SetState(job, tnmt::v1::JOB_STATE_FAILED, absl::StrCat("publish: ", s.message()));
  job->published_model = name;
  SetState(job, tnmt::v1::JOB_STATE_SUCCEEDED);
}

}  // namespace tnmt::server::jobs

// TrainingService; see training_service.h.
#include "server/jobs/training_service.h"
#include "server/proto_time.h"
#include "server/secret.h"
#include "server/status_mapping.h"

#include <deque>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tnmt::server::jobs {

namespace {

using tnmt::v1::Job;
using tnmt::v1::JobUpdate;


// A JobState from a request: one of the lifecycle's states (not UNSPECIFIED, not an unknown number).
absl::StatusOr<JobState> FromProtoState(int s) {
  for (JobState state : kAllJobStates) {
    if (s == state) return state;
  }
  return absl::InvalidArgumentError(absl::StrCat("states: ", s, " is not a job state"));
}

JobUpdate::Kind ToKind(const std::string& kind) {
  if (kind == "state") return JobUpdate::KIND_STATE;
  if (kind == "progress") return JobUpdate::KIND_PROGRESS;
  if (kind == "validation") return JobUpdate::KIND_VALIDATION;
  if (kind == "checkpoint") return JobUpdate::KIND_CHECKPOINT;
  return JobUpdate::KIND_UNSPECIFIED;
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& s) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

}  // namespace

Job ToProto(const JobRecord& job, bool with_spec, const std::string& work_dir) {
  Job p;
  p.set_id(job.id);
  p.set_name(job.name);
  p.set_state(job.state);
  if (with_spec) {
    (void)google::protobuf::util::JsonStringToMessage(job.spec_json, p.mutable_spec());
  }
  // Times are unix milliseconds in the store, 0 for "not yet".
  if (job.created_ms > 0) SetTimestamp(absl::FromUnixMillis(job.created_ms), p.mutable_create_time());
  if (job.started_ms > 0) SetTimestamp(absl::FromUnixMillis(job.started_ms), p.mutable_start_time());
  if (job.finished_ms > 0) SetTimestamp(absl::FromUnixMillis(job.finished_ms), p.mutable_finish_time());
  p.set_attempts(job.attempts);
  p.set_step(job.step);
  p.set_max_steps(job.max_steps);
  if (job.loss != 0) p.set_loss(job.loss);  // 0: no progress report yet
  p.set_dev_bleu(job.dev_bleu);
  p.set_dev_bleu_signature(job.dev_bleu_signature);
  p.set_tokens_per_second(job.tokens_per_second);
  if (job.eta_seconds >= 0) SetDuration(job.eta_seconds, p.mutable_eta());  // -1: unknown
  p.set_last_checkpoint(job.last_checkpoint);
  p.set_published_model(job.published_model);
  p.set_error(job.error);
  p.set_work_dir(work_dir);
  return p;
}

// One WatchJob stream: a snapshot, then the runner's changes, until the job finishes.
class TrainingServiceImpl::WatchCall final : public grpc::ServerWriteReactor<JobUpdate> {
 public:
  // Refused calls (`admitted` not OK) end at once with that status.
  WatchCall(TrainingServiceImpl* service, const std::string& id, const absl::Status& admitted) : service_(service) {
    {  // Lock order: watches_mu_ before mu_ (StopAccepting ends watches while holding it).
      std::lock_guard<std::mutex> w(service_->watches_mu_);
      service_->watches_.insert(this);
    }
    std::lock_guard<std::mutex> l(mu_);
    if (!admitted.ok()) {
      FinishLocked(admitted);
      return;
    }
    // Subscribe before reading the snapshot, so no change can fall between the two.
    token_ = service_->runner_->Subscribe(id, [this](const JobChange& c) { OnChange(c); });
    auto job = service_->store_->Get(id);
    if (!job.ok()) {
      FinishLocked(job.status());
      return;
    }
    JobUpdate u;
    u.set_kind(JobUpdate::KIND_SNAPSHOT);
    *u.mutable_job() = ToProto(*job, true, service_->runner_->WorkDir(id));
    EnqueueLocked(std::move(u), IsTerminal(job->state));
  }

  // Ends the stream now with `s` (server shutdown).
  void End(const absl::Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    FinishLocked(s);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!ok) return FinishLocked(absl::CancelledError("the client went away"));
    writes_.pop_front();
    if (finished_) return;
    if (!writes_.empty()) {
      writing_ = true;
      StartWrite(&writes_.front());
    } else if (end_after_writes_) {
      FinishLocked(absl::OkStatus());
    }
  }

  void OnCancel() override { End(absl::CancelledError("watch cancelled")); }

  void OnDone() override {
    if (token_ != 0) service_->runner_->Unsubscribe(token_);
    {
      std::lock_guard<std::mutex> w(service_->watches_mu_);
      service_->watches_.erase(this);
    }
    delete this;
  }

 private:
  void OnChange(const JobChange& c) {
    std::lock_guard<std::mutex> l(mu_);
    if (finished_ || end_after_writes_) return;
    // A watcher that cannot keep up skips progress reports, never state changes.
    if (c.kind == "progress" && writes_.size() > 64) return;
    JobUpdate u;
    u.set_kind(ToKind(c.kind));
    *u.mutable_job() = ToProto(c.job, false, service_->runner_->WorkDir(c.job.id));
    u.set_dev_loss(c.dev_loss);
    EnqueueLocked(std::move(u), IsTerminal(c.job.state));
  }

  void EnqueueLocked(JobUpdate u, bool last) {
    if (finished_) return;
    writes_.push_back(std::move(u));
    end_after_writes_ = end_after_writes_ || last;
    if (!writing_) {
      writing_ = true;
      StartWrite(&writes_.front());
    }
  }

  void FinishLocked(const absl::Status& s) {
    if (finished_) return;
    finished_ = true;
    Finish(ToGrpcStatus(s));
  }

  TrainingServiceImpl* const service_;
  std::mutex mu_;
  std::deque<JobUpdate> writes_;  // front is in flight while writing_
  bool writing_ = false;
  bool end_after_writes_ = false;
  bool finished_ = false;
  int token_ = 0;
};

TrainingServiceImpl::TrainingServiceImpl(TrainingServiceOptions options, JobStore* store, JobRunner* runner)
    : options_(std::move(options)), store_(store), runner_(runner) {}

TrainingServiceImpl::~TrainingServiceImpl() = default;

absl::Status TrainingServiceImpl::Admit(const grpc::CallbackServerContext* context) const {
  if (!accepting_) return absl::UnavailableError("server is shutting down");
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("TrainingService needs metadata \"authorization: Bearer <token>\"");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  if (!SameSecret(value, absl::StrCat("Bearer ", options_.token))) {
    return absl::UnauthenticatedError("invalid bearer token");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* TrainingServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                         const tnmt::v1::SubmitJobRequest* request, Job* response) {
  if (absl::Status s = Admit(context); !s.ok()) return Done(context, s);
  if (request->request_id().size() > 128) {
    return Done(context, absl::InvalidArgumentError("request_id: longer than 128 bytes"));
  }
  if (absl::Status s = ValidateJobSpec(request->spec(), options_.policy); !s.ok()) return Done(context, s);
  std::lock_guard<std::mutex> l(submit_mu_);
  const int64_t unfinished =
      store_->CountInStates({tnmt::v1::JOB_STATE_QUEUED, tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_CANCELLING, tnmt::v1::JOB_STATE_PUBLISHING});
  if (unfinished < 0) return Done(context, absl::InternalError("job store unreadable"));
  bool created = false;
  if (unfinished >= options_.max_unfinished_jobs) {
    return Done(context, absl::ResourceExhaustedError(absl::StrCat(
                             unfinished, " jobs are queued or running; the limit is ", options_.max_unfinished_jobs,
                             " (--max-unfinished-jobs)")));
  }
  auto job = runner_->Submit(request->spec(), request->request_id(), &created);
  if (!job.ok()) return Done(context, job.status());
  *response = ToProto(*job, true, runner_->WorkDir(job->id));
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* TrainingServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                      const tnmt::v1::GetJobRequest* request, Job* response) {
  if (absl::Status s = Admit(context); !s.ok()) return Done(context, s);
  if (request->id().empty()) return Done(context, absl::InvalidArgumentError("id is required"));
  auto job = store_->Get(request->id());
  if (!job.ok()) return Done(context, job.status());
  *response = ToProto(*job, true, runner_->WorkDir(job->id));
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* TrainingServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                        const tnmt::v1::ListJobsRequest* request,
                                                        tnmt::v1::ListJobsResponse* response) {
  if (absl::Status s = Admit(context); !s.ok()) return Done(context, s);
  if (request->page_size() < 0) return Done(context, absl::InvalidArgumentError("page_size must not be negative"));
  ListFilter f;
  for (int s : request->states()) {
    auto state = FromProtoState(s);
    if (!state.ok()) return Done(context, state.status());
    f.states.push_back(*state);
  }
  f.name_contains = request->name_contains();
  f.page_size = request->page_size() == 0 ? 50 : std::min(request->page_size(), 1000);
  f.page_token = request->page_token();
  std::string next;
  auto jobs = store_->List(f, &next);
  if (!jobs.ok()) return Done(context, jobs.status());
  for (const JobRecord& j : *jobs) *response->add_jobs() = ToProto(j, false, runner_->WorkDir(j.id));
  response->set_next_page_token(next);
  return Done(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* TrainingServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                         const tnmt::v1::CancelJobRequest* request, Job* response) {
  if (absl::Status s = Admit(context); !s.ok()) return Done(context, s);
  if (request->id().empty()) return Done(context, absl::InvalidArgumentError("id is required"));
  auto job = runner_->Cancel(request->id());
  if (!job.ok()) return Done(context, job.status());
  *response = ToProto(*job, true, runner_->WorkDir(job->id));
  return Done(context, absl::OkStatus());
}

grpc::ServerWriteReactor<JobUpdate>* TrainingServiceImpl::WatchJob(grpc::CallbackServerContext* context,
                                                                   const tnmt::v1::WatchJobRequest* request) {
  return new WatchCall(this, request->id(), Admit(context));
}

void TrainingServiceImpl::StopAccepting() {
  accepting_ = false;
  std::lock_guard<std::mutex> w(watches_mu_);
  for (WatchCall* c : watches_) c->End(absl::UnavailableError("server is shutting down"));
}

}  // namespace tnmt::server::jobs

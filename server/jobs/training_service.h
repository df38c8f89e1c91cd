// tnmt.v1.TrainingService over gRPC's callback API: bearer-token authentication, spec
// validation (job_spec.h), the job store for reads, the JobRunner for submit/cancel and for
// WatchJob's live stream. Every call is quick except WatchJob, which is a server stream fed
// by the runner's change notifications.
#pragma once

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "proto/tnmt/v1/training.grpc.pb.h"
#include "server/jobs/job_runner.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/job_store.h"

namespace tnmt::server::jobs {

struct TrainingServiceOptions {
  std::string token;             // required bearer token (non-empty)
  SpecPolicy policy;
  int max_unfinished_jobs = 16;  // queued + running; more is RESOURCE_EXHAUSTED
};

// The wire form of a stored job (spec included when `with_spec`).
tnmt::v1::Job ToProto(const JobRecord& job, bool with_spec, const std::string& work_dir);

class TrainingServiceImpl final : public tnmt::v1::TrainingService::CallbackService {
 public:
  TrainingServiceImpl(TrainingServiceOptions options, JobStore* store, JobRunner* runner);
  ~TrainingServiceImpl() override;

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context, const tnmt::v1::SubmitJobRequest* request,
                                      tnmt::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context, const tnmt::v1::GetJobRequest* request,
                                   tnmt::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context, const tnmt::v1::ListJobsRequest* request,
                                     tnmt::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context, const tnmt::v1::CancelJobRequest* request,
                                      tnmt::v1::Job* response) override;
  grpc::ServerWriteReactor<tnmt::v1::JobUpdate>* WatchJob(grpc::CallbackServerContext* context,
                                                          const tnmt::v1::WatchJobRequest* request) override;

  // Shutdown: new calls get UNAVAILABLE and open watches end with UNAVAILABLE now (instead of
  // holding the server's drain until its grace period runs out).
  void StopAccepting();

  class WatchCall;

 private:
  // OK, UNAUTHENTICATED or UNAVAILABLE for a new call.
  absl::Status Admit(const grpc::CallbackServerContext* context) const;

  const TrainingServiceOptions options_;
  JobStore* const store_;
  JobRunner* const runner_;
  std::atomic<bool> accepting_{true};
  std::mutex submit_mu_;  // the unfinished-jobs limit is checked and used atomically
  std::mutex watches_mu_;
  std::set<WatchCall*> watches_;
};

}  // namespace tnmt::server::jobs

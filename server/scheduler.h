// Scheduler: one model's decode loop. Sentences from every client are queued; a worker thread
// admits them into a running BeamDecoder between decode steps (continuous batching: a new
// sentence does not wait for the current batch to finish), bounded by a row budget and a
// source-token budget, and hands each finished sentence to its callback. Sentences whose
// client cancelled or whose deadline passed are dropped from the batch between steps.
//
// All schedulers of a process share one compute lock, so only one decode step runs at a time
// and the kernels' thread pool (sized once by --threads) is never oversubscribed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/runtime/decoding.h"
#include "engine/runtime/loaded_model.h"
#include "engine/runtime/translator.h"
#include "server/metrics.h"

namespace tnmt::server {

struct SchedulerOptions {
  // Hypothesis rows decoded per step (sentences x beam); a sentence larger than this alone
  // still runs, alone.
  int max_batch_rows = 256;
  // Rows kept for short work and small requests. A sentence may take one of the last
  // `reserved_rows` of max_batch_rows only if it is short (beam x its maximum output length at
  // most reserved_cost row-steps) or its request holds at most reserved_rows / 2 rows in the
  // decoder with it. So requests of long decodes (a beam of 64 with max_length 1023 holds its
  // rows for a thousand steps) fill at most the other rows, and a one-sentence call finds room
  // instead of waiting until its deadline; the reserved rows are each held for at most
  // reserved_cost / beam steps by a sentence of a large request. Natural-length work (a beam
  // of 4, the source length + 50 tokens) is short and uses every row. -1: a quarter of
  // max_batch_rows; 0: no reserve.
  int reserved_rows = -1;
  int64_t reserved_cost = 2048;
  // Source tokens encoded per admission, counting padding (sentences x longest).
  int max_batch_tokens = 8192;
  // Sentences waiting; beyond it Enqueue fails with RESOURCE_EXHAUSTED at once.
  int max_queue = 4096;
  // When the decoder is idle, how long the first queued sentence waits for company.
  absl::Duration max_queue_delay = absl::Milliseconds(5);
  // Off: a batch runs to completion before the next is admitted (for comparison).
  bool continuous = true;
  // Work queued, in seconds at the measured rate, beyond which Enqueue refuses at once
  // (RESOURCE_EXHAUSTED), so that clients are told to back off while their deadlines can still
  // be met instead of timing out in the queue. 0: no limit. Until a rate has been measured only
  // max_queue applies.
  double max_queue_seconds = 30;
};

struct SentenceResult {
  absl::Status status;                  // OK, CANCELLED, DEADLINE_EXCEEDED or an engine error
  std::vector<TextHypothesis> hypotheses;
  std::vector<std::string> source_pieces;  // with options.return_alignments (</s> excluded)
  int source_tokens = 0;
  double queue_seconds = 0;             // enqueue -> admitted into the decoder
  double compute_seconds = 0;           // admitted -> finished
};

struct SentenceTask {
  std::vector<int32_t> ids;  // source pieces ending with </s>
  std::vector<int32_t> prefix;  // target prefix pieces (forced), may be empty
  uint64_t stream = 0;          // sampling stream (the text's index in its request)
  DecodeOptions options;
  absl::Time deadline = absl::InfiniteFuture();
  // Polled between steps; true drops the sentence (its callback gets CANCELLED).
  std::function<bool()> cancelled;
  // Called exactly once, on the worker thread, for every accepted task.
  std::function<void(SentenceResult)> done;
  // False for internal work (the warm-up sentence): not counted in the sentence metrics.
  bool counted = true;
};

class Scheduler {
 public:
  Scheduler(std::string model_name, std::shared_ptr<const LoadedModel> model,
            SchedulerOptions options, ServerMetrics* metrics, std::mutex* compute_lock);
  ~Scheduler();  // Drain()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues all tasks or none: RESOURCE_EXHAUSTED if the queue would exceed max_queue, if the
  // work ahead of them (at the measured sentences/s) exceeds max_queue_seconds, or if they
  // would only start after their deadline; UNAVAILABLE once draining. Accepted tasks always
  // get their callback.
  absl::Status Enqueue(std::vector<SentenceTask> tasks);

  // Stops accepting, finishes every queued and running sentence, joins the worker.
  void Drain();

  const std::shared_ptr<const LoadedModel>& model() const { return model_; }
  // Forced decoding of (source, target) pairs with this model (Translator::Score), holding the
  // device's compute lock so it runs between decode steps; UNAVAILABLE once draining.
  absl::StatusOr<std::vector<absl::StatusOr<PairScore>>> Score(const std::vector<std::string>& sources,
                                                               const std::vector<std::string>& targets,
                                                               int max_input_length);
  int queue_length() const;
  // How many times the idle worker has given back the memory a busy period grew (at most once
  // per 2 s of idleness after decoding).
  int memory_releases() const;

 private:
  struct Queued {
    SentenceTask task;
    absl::Time enqueued;
    absl::Time admitted;
    int64_t handle = -1;
    uint64_t request = 0;  // which Enqueue call (the queue holds each call's tasks contiguously)
  };
  void Run();
  // Admits queued sentences within the budgets, taking the waiting requests' sentences in turn
  // (the first of each request in arrival order, then the second of each, ...) so that a large
  // request cannot hold every free row while others wait; called with mu_ held.
  // live_request_rows: rows each request holds in the decoder now (see reserved_rows).
  std::vector<std::unique_ptr<Queued>> AdmitLocked(int live_rows, bool decoder_idle,
                                                   std::unordered_map<uint64_t, int> live_request_rows);
  void Finish(Queued& q, SentenceResult r);

  const std::string name_;
  const std::shared_ptr<const LoadedModel> model_;
  const SchedulerOptions options_;
  ServerMetrics* const metrics_;
  std::mutex* const compute_lock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Queued>> queue_;
  bool draining_ = false;
  // Throughput, measured by the worker over windows of decoding time (guarded by mu_).
  double rate_ = 0;        // sentences per second; 0: not measured yet
  int live_sentences_ = 0;  // in the decoder
  uint64_t requests_ = 0;   // Enqueue calls so far
  int memory_releases_ = 0;
  std::thread worker_;
};

}  // namespace tnmt::server

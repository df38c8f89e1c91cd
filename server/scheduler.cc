// Scheduler; see scheduler.h.
#include "server/scheduler.h"

#include <malloc.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/batching_policy.h"
#include "engine/runtime/decoding.h"
#include "server/status_mapping.h"

namespace tnmt::server {

namespace {
constexpr absl::Duration kReleaseInterval = absl::Seconds(2);
}  // namespace

namespace {

// Sentences with equal options can share one BeamDecoder::Add (one encoder pass).
auto OptionsKey(const DecodeOptions& o) {
  return std::apply([](const auto&... f) { return std::make_tuple(f...); }, o.Tie());
}

double Seconds(absl::Time from, absl::Time to) { return absl::ToDoubleSeconds(to - from); }

}  // namespace

Scheduler::Scheduler(std::string model_name, std::shared_ptr<const LoadedModel> model,
                     SchedulerOptions options, ServerMetrics* metrics, std::mutex* compute_lock)
    : name_(std::move(model_name)),
      model_(std::move(model)),
      options_(options),
      metrics_(metrics),
      compute_lock_(compute_lock) {
  worker_ = std::thread([this] { Run(); });
}

Scheduler::~Scheduler() { Drain(); }

absl::StatusOr<std::vector<absl::StatusOr<PairScore>>> Scheduler::Score(const std::vector<std::string>& sources,
                                                                         const std::vector<std::string>& targets,
                                                                         int max_input_length) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) return absl::UnavailableError(absl::StrCat("model ", name_, " is shutting down"));
  }
  TranslationOptions opt;
  opt.max_input_length = max_input_length;
  opt.max_batch_tokens = 4096;
  Translator translator(model_);
  std::lock_guard<std::mutex> compute(*compute_lock_);
  return translator.Score(sources, targets, opt);
}

absl::Status Scheduler::Enqueue(std::vector<SentenceTask> tasks) {
  const absl::Time now = absl::Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_) return absl::UnavailableError(absl::StrCat("model ", name_, " is shutting down"));
    if (tasks.size() > static_cast<size_t>(options_.max_queue)) {  // could never fit: not retryable
      return WithReason(absl::InvalidArgumentError(absl::StrCat(
                            "texts: ", tasks.size(), " texts to translate exceed the queue of model ", name_, " (",
                            options_.max_queue, " sentences, --max-queue); send at most ", options_.max_queue,
                            " per request")),
                        "TOO_MANY_TEXTS");
    }
    if (queue_.size() + tasks.size() > static_cast<size_t>(options_.max_queue)) {
      // Retry once the excess would have been decoded at the measured rate (1 s before one).
      const double excess = static_cast<double>(queue_.size() + tasks.size() - options_.max_queue);
      return WithRetryDelay(WithReason(absl::ResourceExhaustedError(absl::StrCat(
                                           "queue of model ", name_, " is full (", queue_.size(),
                                           " sentences waiting, limit ", options_.max_queue, "); retry later")),
                                       "QUEUE_FULL"),
                            absl::Seconds(rate_ > 0 ? std::max(0.1, excess / rate_) : 1.0));
    }
    if (rate_ > 0 && !tasks.empty()) {
      // Sentences ahead of these: the queue, and the decoder's beyond what fits beside them.
      const int beam = std::max(1, tasks[0].options.beam_size);
      const int room = std::max(1, options_.max_batch_rows / beam);
      const double ahead = static_cast<double>(queue_.size()) + std::max(0, live_sentences_ - room);
      const double wait_s = ahead / rate_;
      if (options_.max_queue_seconds > 0 && wait_s > options_.max_queue_seconds) {
        return WithRetryDelay(
            WithReason(absl::ResourceExhaustedError(absl::StrFormat(
                           "model %s has about %.1f s of work queued (%d sentences at %.1f/s; limit %.0f s); retry later",
                           name_, wait_s, static_cast<int>(queue_.size()), rate_, options_.max_queue_seconds)),
                       "QUEUE_FULL"),
            absl::Seconds(std::max(0.1, wait_s - options_.max_queue_seconds)));
      }
      absl::Time deadline = absl::InfiniteFuture();
      for (const SentenceTask& t : tasks) deadline = std::min(deadline, t.deadline);
      if (now + absl::Seconds(wait_s) > deadline) {
        return WithRetryDelay(
            WithReason(absl::ResourceExhaustedError(absl::StrFormat(
                           "model %s would start this request after about %.2f s of queued work, past its "
                           "deadline (%.2f s away); retry later or with a longer deadline",
                           name_, wait_s, absl::ToDoubleSeconds(deadline - now))),
                       "DEADLINE_UNREACHABLE"),
            absl::Seconds(std::max(0.1, wait_s - absl::ToDoubleSeconds(deadline - now))));
      }
    }
    const uint64_t request = ++requests_;
    for (SentenceTask& t : tasks) {
      auto q = std::make_unique<Queued>();
      q->task = std::move(t);
      q->enqueued = now;
      q->request = request;
      queue_.push_back(std::move(q));
    }
    if (metrics_ != nullptr) metrics_->SetQueueLength(name_, queue_.size());
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void Scheduler::Drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int Scheduler::queue_length() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

int Scheduler::memory_releases() const {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_releases_;
}

std::vector<std::unique_ptr<Scheduler::Queued>> Scheduler::AdmitLocked(
    int live_rows, bool decoder_idle, std::unordered_map<uint64_t, int> request_rows) {
  const int reserved = options_.reserved_rows >= 0 ? std::min(options_.reserved_rows, options_.max_batch_rows)
                                                   : options_.max_batch_rows / 4;
  const int small_request_rows = std::max(1, reserved / 2);
  // The queue as runs of one request each (Enqueue appends a request's tasks together).
  struct Run {
    size_t start, count;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (runs.empty() || queue_[i]->request != queue_[runs.back().start]->request) {
      runs.push_back({i, 0});
    }
    ++runs.back().count;
  }
  // Round r takes the r-th sentence of every request that has one, in arrival order; the first
  // sentence that does not fit the budgets (engine/runtime/batching_policy.h: the decoder's
  // rows and this admission's padded source tokens) ends the admission. A sentence kept out of
  // the reserved rows (SchedulerOptions::reserved_rows) is passed over, not an end.
  BatchLimits limits;
  limits.max_rows = options_.max_batch_rows;
  limits.max_tokens = options_.max_batch_tokens;
  BatchFill fill(limits, live_rows, 0, /*first_always_fits=*/decoder_idle);
  std::vector<size_t> chosen;
  bool full = false;
  size_t rounds = 0;
  for (const Run& run : runs) rounds = std::max(rounds, run.count);
  for (size_t round = 0; !full && round < rounds; ++round) {
    for (const Run& run : runs) {
      if (round >= run.count) continue;
      const Queued& q = *queue_[run.start + round];
      const int beam = q.task.options.beam_size;
      const int64_t length = static_cast<int64_t>(q.task.ids.size());
      if (!fill.Fits(length, beam)) {
        full = true;
        break;
      }
      // Into the reserved rows only for short work or while the request stays small; other
      // sentences wait, and the requests after them still get their turn.
      const bool first = chosen.empty() && decoder_idle;  // a lone oversized sentence still runs
      int& mine = request_rows[q.request];
      if (!first && fill.rows() + beam > options_.max_batch_rows - reserved && mine + beam > small_request_rows &&
          static_cast<int64_t>(beam) * MaxOutputLength(q.task.options, static_cast<int>(q.task.ids.size()),
                                                       model_->config) > options_.reserved_cost) {
        continue;
      }
      mine += beam;
      fill.Add(length, beam);
      chosen.push_back(run.start + round);
    }
  }
  std::vector<std::unique_ptr<Queued>> out;
  if (chosen.empty()) return out;
  for (size_t i : chosen) out.push_back(std::move(queue_[i]));
  std::deque<std::unique_ptr<Queued>> rest;
  for (auto& q : queue_) {
    if (q != nullptr) rest.push_back(std::move(q));
  }
  queue_.swap(rest);
  return out;
}

void Scheduler::Finish(Queued& q, SentenceResult r) {
  r.queue_seconds = q.admitted == absl::Time() ? Seconds(q.enqueued, absl::Now())
                                               : Seconds(q.enqueued, q.admitted);
  if (q.admitted != absl::Time()) r.compute_seconds = Seconds(q.admitted, absl::Now());
  r.source_tokens = static_cast<int>(q.task.ids.size());
  if (metrics_ != nullptr && r.status.ok() && q.task.counted) {
    // As Hypothesis.tokens in the API: the best hypothesis' tokens, </s> excluded.
    int generated = 0;
    if (!r.hypotheses.empty()) generated = static_cast<int>(r.hypotheses[0].ids.size());
    metrics_->SentenceDone(name_, r.source_tokens, generated);
  }
  if (q.task.done) q.task.done(std::move(r));
}

void Scheduler::Run() {
  absl::StatusOr<BeamDecoder> created = NewBeamDecoder(*model_);
  std::unordered_map<int64_t, std::unique_ptr<Queued>> live;
  std::vector<BeamDecoder::Done> done;
  auto dropped = [](const Queued& q, absl::Time now) -> absl::Status {
    if (q.task.cancelled && q.task.cancelled()) return absl::CancelledError("cancelled by the client");
    if (now > q.task.deadline) return absl::DeadlineExceededError("deadline passed before the translation finished");
    return absl::OkStatus();
  };
  // When the decoder's memory was last given back (at most once per kReleaseInterval), and
  // whether it has decoded since.
  absl::Time released = absl::Now();
  bool grown = false;
  // Throughput window: sentences finished and decoding time since the last estimate.
  int window_sentences = 0;
  double window_seconds = 0;
  while (true) {
    std::vector<std::unique_ptr<Queued>> admitted;
    const bool idle = !created.ok() || created->empty();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (idle && grown && created.ok()) {
        // Idle after decoding: give back what the busy period grew (K/V caches and scratch
        // sized for its largest batch and longest outputs) instead of keeping it until the
        // next one; at most once per kReleaseInterval, so light traffic does not pay for it
        // on every request.
        const auto work_or_drain = [&] { return draining_ || !queue_.empty(); };
        if (cv_.wait_for(lock, absl::ToChronoNanoseconds(released + kReleaseInterval - absl::Now()),
                         work_or_drain) == false) {
          lock.unlock();
          {
            std::lock_guard<std::mutex> compute(*compute_lock_);
            created = absl::InternalError("released");  // the old decoder and its scratch go first
            created = NewBeamDecoder(*model_);
            ::malloc_trim(0);
          }
          released = absl::Now();
          grown = false;
          lock.lock();
          ++memory_releases_;
        }
      }
      if (idle) {
        cv_.wait(lock, [&] { return draining_ || !queue_.empty(); });
        if (queue_.empty()) break;  // draining and nothing left anywhere
        // Batching window: the oldest sentence waits up to max_queue_delay for company.
        const absl::Time until = queue_.front()->enqueued + options_.max_queue_delay;
        auto rows_waiting = [&] {
          int rows = 0;
          for (const auto& q : queue_) rows += q->task.options.beam_size;
          return rows;
        };
        while (!draining_ && rows_waiting() < options_.max_batch_rows && absl::Now() < until) {
          cv_.wait_for(lock, absl::ToChronoNanoseconds(until - absl::Now()));
        }
      }
      if (options_.continuous || idle) {
        std::unordered_map<uint64_t, int> request_rows;
        if (!idle) {
          for (const auto& [handle, q] : live) request_rows[q->request] += q->task.options.beam_size;
        }
        admitted = AdmitLocked(idle ? 0 : created->live_rows(), idle, std::move(request_rows));
      }
      if (metrics_ != nullptr) metrics_->SetQueueLength(name_, queue_.size());
    }
    std::unique_lock<std::mutex> compute(*compute_lock_);
    const absl::Time now = absl::Now();
    if (!created.ok()) {  // cannot decode at all: every sentence gets the reason
      for (auto& q : admitted) Finish(*q, {created.status()});
      continue;
    }
    BeamDecoder& decoder = *created;
    for (auto it = live.begin(); it != live.end();) {
      absl::Status why = dropped(*it->second, now);
      if (why.ok()) {
        ++it;
        continue;
      }
      decoder.Cancel(it->first);
      Finish(*it->second, {why});
      it = live.erase(it);
    }
    // Equal options share one encoder pass; groups keep arrival order.
    std::map<decltype(OptionsKey(DecodeOptions())), std::vector<std::unique_ptr<Queued>>> groups;
    for (auto& q : admitted) {
      q->admitted = now;
      if (absl::Status why = dropped(*q, now); !why.ok()) {
        Finish(*q, {why});
        continue;
      }
      if (metrics_ != nullptr) metrics_->ObserveQueueWait(name_, Seconds(q->enqueued, now));
      groups[OptionsKey(q->task.options)].push_back(std::move(q));
    }
    const absl::Time encode_start = absl::Now();
    for (auto& [key, group] : groups) {
      std::vector<DecodeInput> inputs;
      for (auto& q : group) inputs.push_back({q->task.ids, q->task.prefix, q->task.stream});
      absl::StatusOr<std::vector<int64_t>> handles = decoder.Add(inputs, group[0]->task.options);
      for (size_t i = 0; i < group.size(); ++i) {
        if (!handles.ok()) {
          Finish(*group[i], {handles.status()});
          continue;
        }
        group[i]->handle = (*handles)[i];
        live[(*handles)[i]] = std::move(group[i]);
      }
    }
    if (metrics_ != nullptr && !groups.empty()) {
      metrics_->ObserveEncode(name_, Seconds(encode_start, absl::Now()));
    }
    if (decoder.empty()) continue;
    int batch_tokens = 0;
    for (const auto& [h, q] : live) batch_tokens += static_cast<int>(q->task.ids.size());
    const int batch_sentences = static_cast<int>(live.size());
    done.clear();
    const absl::Time step_start = absl::Now();
    absl::Status step = decoder.Step(&done);
    grown = true;
    const double step_seconds = Seconds(step_start, absl::Now());
    window_seconds += step_seconds;
    window_sentences += static_cast<int>(done.size());
    if (window_sentences >= 32 && window_seconds > 0.05) {
      std::lock_guard<std::mutex> lock(mu_);
      const double measured = window_sentences / window_seconds;
      rate_ = rate_ == 0 ? measured : 0.7 * rate_ + 0.3 * measured;
      window_sentences = 0;
      window_seconds = 0;
    }
    if (metrics_ != nullptr) {
      metrics_->ObserveCompute(name_, step_seconds);
      metrics_->BatchDone(name_, batch_sentences, batch_tokens);
    }
    if (!step.ok()) {  // an engine failure fails the sentences in flight, not the server
      for (auto& [h, q] : live) {
        decoder.Cancel(h);
        Finish(*q, {step});
      }
      live.clear();
      continue;
    }
    std::vector<std::pair<std::unique_ptr<Queued>, DecodeResult>> finished;
    for (BeamDecoder::Done& d : done) {
      auto it = live.find(d.handle);
      if (it == live.end()) continue;
      finished.emplace_back(std::move(it->second), std::move(d.result));
      live.erase(it);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_sentences_ = static_cast<int>(live.size());
    }
    // Detokenizing and answering need no device: the next step (of this model or another on
    // the same device) may start meanwhile.
    compute.unlock();
    for (auto& [q, result] : finished) {
      SentenceResult r;
      const SentenceTask& task = q->task;
      absl::StatusOr<std::vector<TextHypothesis>> text = ToTextHypotheses(
          *model_->tokenizer, std::move(result), task.options.return_token_scores || task.options.return_alignments);
      if (text.ok()) {
        r.hypotheses = *std::move(text);
        if (task.options.return_alignments) r.source_pieces = SourcePieces(*model_->tokenizer, task.ids);
      } else {
        r.status = text.status();
      }
      Finish(*q, std::move(r));
    }
  }
}

}  // namespace tnmt::server

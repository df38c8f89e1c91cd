// TranslationService; see translation_service.h.
#include "server/translation_service.h"
#include "server/proto_time.h"
#include "server/status_mapping.h"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>


#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/raw_message.h"
#include "server/secret.h"

namespace tnmt::server {

namespace {

using tnmt::v1::TranslateStreamRequest;
using tnmt::v1::TranslateStreamResponse;

// Appends one finished call to the request log, if there is one.
void LogCall(RequestLog* log, const char* method, const std::string& model, const std::string& peer, int texts,
             const absl::Status& s, absl::Time start) {
  if (log == nullptr) return;
  RequestRecord r;
  r.time = absl::Now();
  r.method = method;
  r.model = model;
  r.peer = peer;
  r.texts = texts;
  r.code = static_cast<int>(s.code());
  r.message = std::string(s.message());
  r.seconds = absl::ToDoubleSeconds(r.time - start);
  log->Write(r);
}

// The code a finished call is counted and logged under: a call the transport cancelled because
// the client's deadline passed is DEADLINE_EXCEEDED (what the client saw), not CANCELLED. The
// client's own timer cancels the call at its deadline, which reaches this server a little
// before the server's copy of that deadline (taken from the grpc-timeout header on arrival),
// hence the slack.
absl::Status AsObserved(const absl::Status& s, absl::Time deadline) {
  constexpr absl::Duration kClockSlack = absl::Milliseconds(100);
  if (absl::IsCancelled(s) && absl::Now() >= deadline - kClockSlack) {
    return absl::DeadlineExceededError(absl::StrCat("deadline passed: ", s.message()));
  }
  return s;
}



absl::Time Deadline(const grpc::CallbackServerContext* ctx) {
  const auto d = ctx->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// One Translate call: answered when its last sentence is done.
class TranslateCall final : public grpc::ServerUnaryReactor {
 public:
  TranslateCall(TranslationServiceImpl* service, ModelRegistry* registry, ServerMetrics* metrics,
                const ServiceLimits& limits, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* bytes,
                grpc::ByteBuffer* out)
      : service_(service), state_(std::make_shared<State>()) {
    state_->reactor = this;
    state_->metrics = metrics;
    state_->out = out;
    tnmt::v1::TranslateResponse* resp = state_->response = &state_->owned_response;
    state_->log = service->request_log();
    if (state_->log != nullptr) state_->peer = ctx->peer();
    state_->deadline = Deadline(ctx);
    if (metrics != nullptr) metrics->RequestStarted();
    const absl::Status admitted = service_->Enter(*ctx, &peer_);
    entered_ = admitted.ok();
    if (!entered_) {
      state_->Finish(admitted);
      return;
    }
    if (absl::Status authorized = service_->Authorize(*ctx); !authorized.ok()) {
      state_->Finish(authorized);
      return;
    }
    if (absl::Status parsed = ParseMessage(*bytes, &request_, "request"); !parsed.ok()) {
      state_->Finish(parsed);
      return;
    }
    const tnmt::v1::TranslateRequest* req = &request_;
    state_->texts = req->texts_size();
    absl::StatusOr<PreparedRequest> p =
        PrepareRequest(*registry, limits, req->model(), req->options(), req->texts(), &req->target_prefixes());
    if (!p.ok()) {
      state_->model = registry->Get(req->model()).ok() ? req->model() : "";
      state_->Finish(p.status());
      return;
    }
    state_->model = p->model;
    state_->return_scores = p->return_scores;
    resp->set_model(p->model);
    resp->set_seed(p->seed);
    for (int i = 0; i < p->texts; ++i) resp->add_translations();
    for (int i : p->blank) FillBlank(p->options.n_best, p->source_tokens[i], resp->mutable_translations(i));
    if (p->indices.empty()) {
      state_->Finish(absl::OkStatus());
      return;
    }
    state_->remaining = static_cast<int>(p->indices.size());
    const absl::Time deadline = Deadline(ctx);
    std::shared_ptr<State> st = state_;
    const std::vector<int> indices = p->indices;
    absl::Status s = SubmitRequest(*registry, *p, [&](int i) {
      SentenceTask t;
      t.deadline = deadline;
      t.cancelled = [st] { return st->cancelled.load(); };
      t.done = [st, index = indices[i]](SentenceResult r) { st->Done(index, std::move(r)); };
      return t;
    });
    if (!s.ok()) state_->Finish(s);  // nothing was queued
  }

  void OnCancel() override { state_->cancelled = true; }
  void OnDone() override {
    if (entered_) service_->Leave(peer_);
    delete this;
  }

 private:
  struct State {
    std::mutex mu;
    std::atomic<bool> cancelled{false};
    int remaining = 0;
    absl::Status error;
    double queue_s = 0, compute_s = 0;
    bool return_scores = false;
    std::string model;
    absl::Time start = absl::Now();
    grpc::ServerUnaryReactor* reactor = nullptr;
    tnmt::v1::TranslateResponse owned_response;
    tnmt::v1::TranslateResponse* response = nullptr;  // &owned_response
    grpc::ByteBuffer* out = nullptr;                   // the response's wire bytes
    ServerMetrics* metrics = nullptr;
    RequestLog* log = nullptr;
    std::string peer;
    int texts = 0;
    absl::Time deadline = absl::InfiniteFuture();

    void Done(int index, SentenceResult r) {
      std::lock_guard<std::mutex> lock(mu);
      if (r.status.ok()) {
        FillTranslation(r, return_scores, response->mutable_translations(index));
      } else if (error.ok()) {
        error = r.status;
      }
      queue_s = std::max(queue_s, r.queue_seconds);
      compute_s = std::max(compute_s, r.compute_seconds);
      if (--remaining == 0) FinishLocked(error);
    }
    void Finish(const absl::Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      FinishLocked(s);
    }
    void FinishLocked(const absl::Status& s) {
      const double total = absl::ToDoubleSeconds(absl::Now() - start);
      if (s.ok()) {
        SetDuration(queue_s, response->mutable_timing()->mutable_queue_time());
        SetDuration(compute_s, response->mutable_timing()->mutable_compute_time());
        SetDuration(total, response->mutable_timing()->mutable_total_time());
      } else {
        response->Clear();
      }
      if (s.ok()) *out = Serialize(*response);
      const absl::Status observed = AsObserved(s, deadline);
      if (metrics != nullptr) metrics->RequestDone(model, "Translate", static_cast<int>(observed.code()), total);
      LogCall(log, "Translate", model, peer, texts, observed, start);
      reactor->Finish(ToGrpcStatus(s));
    }
  };
  TranslationServiceImpl* const service_;
  bool entered_ = false;
  std::string peer_;  // the client's address, for the per-peer count
  tnmt::v1::TranslateRequest request_;
  std::shared_ptr<State> state_;
};

// One TranslateStream: reads request messages, queues their texts, writes one response per
// text as it finishes (one write in flight at a time), and finishes after the client
// half-closed and every accepted text was answered.
class StreamCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamCall(TranslationServiceImpl* service, ModelRegistry* registry, ServerMetrics* metrics,
             const ServiceLimits& limits, grpc::CallbackServerContext* ctx)
      : service_(service), registry_(registry), limits_(limits), ctx_(ctx), state_(std::make_shared<State>()) {
    state_->reactor = this;
    state_->metrics = metrics;
    state_->log = service->request_log();
    if (state_->log != nullptr) state_->peer = ctx->peer();
    state_->deadline = Deadline(ctx);
    if (metrics != nullptr) metrics->RequestStarted();
    const absl::Status admitted = service_->Enter(*ctx, &peer_);
    entered_ = admitted.ok();
    if (!entered_) {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->FinishLocked(admitted);
      return;
    }
    if (absl::Status authorized = service_->Authorize(*ctx); !authorized.ok()) {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->FinishLocked(authorized);
      return;
    }
    StartRead(&read_bytes_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // client half-closed (or the call ended)
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->reads_done = true;
      state_->MaybeFinishLocked();
      return;
    }
    ++messages_read_;
    request_.Clear();
    if (absl::Status parsed = ParseMessage(read_bytes_, &request_, absl::StrCat("request message ", messages_read_));
        !parsed.ok()) {
      FailAfterAccepted(parsed);
      return;
    }
    if (request_.texts().empty()) {  // nothing to answer
      StartRead(&read_bytes_);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->texts += request_.texts_size();
    }
    absl::StatusOr<PreparedRequest> p =
        PrepareRequest(*registry_, limits_, request_.model(), request_.options(), request_.texts(),
                       &request_.target_prefixes());
    absl::Status s = p.status();
    if (p.ok()) {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->model.empty()) state_->model = p->model;
      for (int i : p->blank) {
        TranslateStreamResponse r;
        r.set_id(request_.id());
        r.set_index(i);
        r.set_seed(p->seed);
        FillBlank(p->options.n_best, p->source_tokens[i], r.mutable_translation());
        state_->writes.push_back(Serialize(r));
      }
      state_->pending += static_cast<int>(p->indices.size());
      state_->MaybeWriteLocked();
    }
    if (p.ok() && !p->indices.empty()) {
      const absl::Time deadline = Deadline(ctx_);
      std::shared_ptr<State> st = state_;
      const uint64_t id = request_.id();
      const bool scores = p->return_scores;
      const uint64_t seed = p->seed;
      const std::vector<int> indices = p->indices;
      s = SubmitRequest(*registry_, *p, [&](int i) {
        SentenceTask t;
        t.deadline = deadline;
        t.cancelled = [st] { return st->cancelled.load(); };
        t.done = [st, id, scores, seed, index = indices[i]](SentenceResult r) {
          st->Done(id, index, scores, seed, std::move(r));
        };
        return t;
      });
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(state_->mu);
        state_->pending -= static_cast<int>(p->indices.size());
      }
    }
    if (!s.ok()) {
      FailAfterAccepted(absl::Status(s.code(), absl::StrCat("request message id ", request_.id(), ": ", s.message())));
      return;
    }
    StartRead(&read_bytes_);
  }

  // A request message that cannot be accepted ends the stream with its error, after the texts
  // of the messages before it, already accepted, are answered: reading stops, the error is the
  // final status.
  void FailAfterAccepted(const absl::Status& s) {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->error.ok()) state_->error = s;
    state_->reads_done = true;
    state_->MaybeFinishLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->writing = false;
    if (!state_->writes.empty()) state_->writes.pop_front();
    if (!ok) {  // the client is gone: stop decoding its texts
      state_->cancelled = true;
      state_->FinishLocked(absl::CancelledError("stream write failed"));
      return;
    }
    state_->MaybeWriteLocked();
    state_->MaybeFinishLocked();
  }

  void OnCancel() override { state_->cancelled = true; }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->reactor = nullptr;  // late scheduler callbacks must not touch this object
    }
    if (entered_) service_->Leave(peer_);
    delete this;
  }

 private:
  struct State {
    std::mutex mu;
    std::atomic<bool> cancelled{false};
    StreamCall* reactor = nullptr;
    ServerMetrics* metrics = nullptr;
    std::string model;
    absl::Time start = absl::Now();
    RequestLog* log = nullptr;
    std::string peer;
    int texts = 0;  // over all request messages
    absl::Time deadline = absl::InfiniteFuture();
    std::deque<grpc::ByteBuffer> writes;  // serialized responses; front is in flight when writing
    bool writing = false;
    bool reads_done = false;
    bool finished = false;
    int pending = 0;  // accepted texts not yet answered
    absl::Status error;  // a refused request message: the final status once `pending` are answered

    void Done(uint64_t id, int index, bool scores, uint64_t seed, SentenceResult r) {
      std::lock_guard<std::mutex> lock(mu);
      --pending;
      if (finished || reactor == nullptr) return;
      if (!r.status.ok()) {
        if (absl::IsCancelled(r.status)) return MaybeFinishLocked();
        FinishLocked(absl::Status(r.status.code(), absl::StrCat("request message id ", id, ", text ", index, ": ", r.status.message())));
        return;
      }
      TranslateStreamResponse resp;
      resp.set_id(id);
      resp.set_index(index);
      resp.set_seed(seed);
      FillTranslation(r, scores, resp.mutable_translation());
      writes.push_back(Serialize(resp));
      MaybeWriteLocked();
    }
    void MaybeWriteLocked() {
      if (finished || writing || writes.empty() || reactor == nullptr) return;
      writing = true;
      reactor->StartWrite(&writes.front());
    }
    void MaybeFinishLocked() {
      if (reads_done && pending == 0 && writes.empty() && !writing) FinishLocked(error);
    }
    void FinishLocked(const absl::Status& s) {
      if (finished || reactor == nullptr) return;
      finished = true;
      const absl::Status observed = AsObserved(s, deadline);
      if (metrics != nullptr) {
        metrics->RequestDone(model, "TranslateStream", static_cast<int>(observed.code()),
                             absl::ToDoubleSeconds(absl::Now() - start));
      }
      LogCall(log, "TranslateStream", model, peer, texts, observed, start);
      reactor->Finish(ToGrpcStatus(s));
    }
  };

  TranslationServiceImpl* const service_;
  bool entered_ = false;
  std::string peer_;  // the client's address, for the per-peer count
  ModelRegistry* const registry_;
  const ServiceLimits limits_;
  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<State> state_;
  grpc::ByteBuffer read_bytes_;
  int messages_read_ = 0;  // including the one in read_bytes_
  TranslateStreamRequest request_;
};

tnmt::v1::ModelState StateOf(const std::string& state) {
  if (state == "ready") return tnmt::v1::MODEL_STATE_READY;
  if (state == "loading") return tnmt::v1::MODEL_STATE_LOADING;
  if (state == "failed") return tnmt::v1::MODEL_STATE_FAILED;
  return tnmt::v1::MODEL_STATE_UNSPECIFIED;
}

constexpr char kPageTokenPrefix[] = "after:";

}  // namespace

grpc::ServerUnaryReactor* TranslationServiceImpl::Score(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (metrics_ != nullptr) metrics_->RequestStarted();
  absl::Status s;
  std::string model;
  tnmt::v1::ScoreRequest req;
  std::string peer;
  if (s = Enter(*context, &peer); s.ok()) {
    s = Authorize(*context);
    if (s.ok()) s = ParseMessage(*request, &req, "request");
    tnmt::v1::ScoreResponse resp;
    if (s.ok()) s = DoScore(req, &resp, &model);
    if (s.ok()) *response = Serialize(resp);
    Leave(peer);
  }
  s = AsObserved(s, Deadline(context));
  if (metrics_ != nullptr) {
    metrics_->RequestDone(model, "Score", static_cast<int>(s.code()), absl::ToDoubleSeconds(absl::Now() - start));
  }
  LogCall(request_log_, "Score", model, request_log_ != nullptr ? context->peer() : "", req.sources_size(), s, start);
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

absl::Status TranslationServiceImpl::DoScore(const tnmt::v1::ScoreRequest& request,
                                             tnmt::v1::ScoreResponse* response, std::string* model_out) {
  std::string model = request.model();
  if (model.empty()) model = registry_->default_model();
  if (model.empty()) return absl::InvalidArgumentError("model: required (this server serves several models; see ListModels)");
  absl::StatusOr<std::shared_ptr<Scheduler>> scheduler = registry_->Get(model);
  if (!scheduler.ok()) return scheduler.status();
  *model_out = model;
  const int n = request.sources_size();
  if (n == 0) return absl::InvalidArgumentError("sources: empty batch (send at least one pair)");
  if (request.targets_size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets: ", request.targets_size(), " targets for ", n, " sources (give one per source)"));
  }
  if (n > limits_.max_sentences_per_request) {
    return WithReason(absl::ResourceExhaustedError(absl::StrCat("sources: ", n, " pairs exceed the limit of ",
                                                                limits_.max_sentences_per_request, " per request")),
                      "TOO_MANY_TEXTS");
  }
  std::vector<std::string> sources(request.sources().begin(), request.sources().end());
  std::vector<std::string> targets(request.targets().begin(), request.targets().end());
  for (int i = 0; i < n; ++i) {
    for (auto [field, text] : {std::pair<const char*, const std::string*>{"sources", &sources[i]}, {"targets", &targets[i]}}) {
      if (static_cast<int64_t>(text->size()) > limits_.max_text_bytes) {
        return WithReason(absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: ", text->size(),
                                                                  " bytes exceed the limit of ", limits_.max_text_bytes)),
                          "TEXT_TOO_LONG");
      }
    }
  }
  auto scores = (*scheduler)->Score(sources, targets, limits_.max_tokens_per_sentence);
  if (!scores.ok()) return scores.status();
  response->set_model(model);
  for (int i = 0; i < n; ++i) {
    const absl::StatusOr<PairScore>& r = (*scores)[i];
    if (!r.ok()) {
      // "line N: source: ..." from the translator, in the request's field terms.
      absl::string_view message = r.status().message();
      absl::ConsumePrefix(&message, absl::StrCat("line ", i + 1, ": "));
      const bool target = absl::ConsumePrefix(&message, "target: ");
      if (!target) absl::ConsumePrefix(&message, "source: ");
      const bool too_long = message.find("exceeds the maximum length") != std::string::npos;
      return WithReason(absl::InvalidArgumentError(absl::StrCat(target ? "targets[" : "sources[", i, "]: ", message)),
                        too_long ? "TEXT_TOO_LONG" : TextReason(r.status()));
    }
    tnmt::v1::PairScore* out = response->add_scores();
    out->set_score(r->score);
    out->set_target_tokens(static_cast<int32_t>(r->token_scores.size()));
    if (request.return_token_scores()) {
      for (float t : r->token_scores) out->add_token_scores(t);
    }
  }
  return absl::OkStatus();
}

absl::Status TranslationServiceImpl::Authorize(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return absl::OkStatus();
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "this server's TranslationService needs metadata \"authorization: Bearer <token>\" (tnmt: --token-file)");
  }
  if (!SameSecret(absl::string_view(it->second.data(), it->second.size()), absl::StrCat("Bearer ", token_))) {
    return absl::UnauthenticatedError("invalid bearer token for the TranslationService");
  }
  return absl::OkStatus();
}

// Counts accepted calls only: refused ones neither Enter nor Leave.
absl::Status TranslationServiceImpl::Enter(const grpc::ServerContextBase& context, std::string* peer) {
  peer->clear();
  if (max_calls_per_peer_ > 0) {
    // "ipv4:10.1.2.3:51234" -> "ipv4:10.1.2.3": one count per address, whatever the port.
    *peer = context.peer();
    const size_t colon = peer->rfind(':');
    if (colon != std::string::npos && colon > peer->find(':')) peer->resize(colon);
    // Only network clients are counted: the HTTP API's calls arrive on the in-process channel
    // (peer "unknown"), all alike; its own worker pool bounds them.
    if (!absl::StartsWith(*peer, "ipv4:") && !absl::StartsWith(*peer, "ipv6:")) peer->clear();
  }
  std::lock_guard<std::mutex> lock(idle_mu_);
  if (!accepting_) {
    last_activity_ = absl::Now();
    peer->clear();
    return absl::UnavailableError("server is shutting down");
  }
  if (!peer->empty()) {
    int& calls = peer_calls_[*peer];
    if (calls >= max_calls_per_peer_) {
      const std::string who = *peer;
      peer->clear();
      if (calls == 0) peer_calls_.erase(who);
      return absl::ResourceExhaustedError(absl::StrCat("the client ", who, " already has ", max_calls_per_peer_,
                                                       " calls running (--max-calls-per-peer)"));
    }
    ++calls;
  }
  ++inflight_;
  return absl::OkStatus();
}

void TranslationServiceImpl::Leave(const std::string& peer) {
  std::lock_guard<std::mutex> lock(idle_mu_);
  if (!peer.empty()) {
    auto it = peer_calls_.find(peer);
    if (it != peer_calls_.end() && --it->second <= 0) peer_calls_.erase(it);
  }
  last_activity_ = absl::Now();  // its client may send the next call soon
  if (--inflight_ == 0) idle_cv_.notify_all();
}

bool TranslationServiceImpl::WaitIdle(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(idle_mu_);
  if (!idle_cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return inflight_ == 0; })) {
    return false;
  }
  // Then a quiet period (no call finished or refused for 500 ms, at most 3 s in all), so the
  // next calls of clients that just got a reply, already on their way, are refused by us with
  // UNAVAILABLE rather than cut off by the transport (CANCELLED: ambiguous to a client); on a
  // loaded machine a client can take a few hundred ms to send again. Clients that retry at
  // once never go quiet, hence the bound.
  const absl::Time give_up = std::min(deadline, absl::Now() + absl::Seconds(3));
  while (absl::Now() < give_up) {
    const absl::Time calm_at = last_activity_ + absl::Milliseconds(500);
    if (absl::Now() >= calm_at) break;
    idle_cv_.wait_until(lock, absl::ToChronoTime(std::min(calm_at, give_up)));
  }
  return inflight_ == 0;
}

grpc::ServerUnaryReactor* TranslationServiceImpl::Translate(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  return new TranslateCall(this, registry_, metrics_, limits_, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* TranslationServiceImpl::TranslateStream(
    grpc::CallbackServerContext* context) {
  return new StreamCall(this, registry_, metrics_, limits_, context);
}

grpc::ServerUnaryReactor* TranslationServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* response) {
  const absl::Time start = absl::Now();
  tnmt::v1::ListModelsRequest req;
  tnmt::v1::ListModelsResponse resp;
  absl::Status status = Authorize(*context);
  if (status.ok()) status = ParseMessage(*request, &req, "request");
  if (status.ok()) status = DoListModels(req, &resp);
  if (status.ok()) *response = Serialize(resp);
  if (metrics_ != nullptr) {
    metrics_->RequestStarted();
    metrics_->RequestDone("", "ListModels", static_cast<int>(status.code()), absl::ToDoubleSeconds(absl::Now() - start));
  }
  LogCall(request_log_, "ListModels", "", request_log_ != nullptr ? context->peer() : "", 0, status, start);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status TranslationServiceImpl::DoListModels(const tnmt::v1::ListModelsRequest& req,
                                                  tnmt::v1::ListModelsResponse* response) {
  const tnmt::v1::ListModelsRequest* request = &req;
  // Pages in name order; a page token is the last name of the previous page.
  absl::Status status;
  const int page_size = request->page_size() == 0 ? 100 : request->page_size();
  absl::string_view after = request->page_token();
  if (page_size < 1 || page_size > 1000) {
    status = absl::InvalidArgumentError(absl::StrCat("page_size: ", request->page_size(), " is outside [0, 1000]"));
  } else if (!after.empty() && !absl::ConsumePrefix(&after, kPageTokenPrefix)) {
    status = absl::InvalidArgumentError("page_token: not a token this server issued (pass next_page_token as it is)");
  }
  std::vector<ModelStatus> models = registry_->List();
  std::sort(models.begin(), models.end(), [](const ModelStatus& a, const ModelStatus& b) { return a.name < b.name; });
  for (const ModelStatus& m : models) {
    if (!status.ok()) break;
    if (!after.empty() && m.name <= after) continue;
    if (response->models_size() == page_size) {
      response->set_next_page_token(absl::StrCat(kPageTokenPrefix, response->models(page_size - 1).name()));
      break;
    }
    tnmt::v1::ModelInfo* info = response->add_models();
    info->set_name(m.name);
    info->set_path(m.path);
    info->set_state(StateOf(m.state));
    info->set_generation(m.generation);
    if (m.loaded_at != absl::Time()) SetTimestamp(m.loaded_at, info->mutable_load_time());
    info->set_device(m.placement.ToString());
    info->set_compute_type(m.placement.ComputeType());
    if (m.model != nullptr) {
      const ModelConfig& c = m.model->config;
      info->set_parameters(m.model->parameter_count);
      info->set_vocab_size(c.vocab_size);
      info->set_d_model(c.d_model);
      info->set_encoder_layers(c.encoder_layers);
      info->set_decoder_layers(c.decoder_layers);
      info->set_default_beam_size(c.decoding.beam_size);
      info->set_source_language(c.source_language);
      info->set_target_language(c.target_language);
    }
  }
  if (!status.ok()) response->Clear();
  return status;
}

}  // namespace tnmt::server

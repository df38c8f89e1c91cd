// Training loop; see train_loop.h.
#include "trainer/train_loop.h"

#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/translator.h"
#include "kernels/time_account.h"
#include "trainer/bleu.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/schedule.h"
#include "trainer/data/batch_iterator.h"
#include "trainer/data/dataset.h"
#include "trainer/data/spm_trainer.h"
#include "trainer/data/text_reader.h"
#include "trainer/model/make_train_engine.h"
#include "trainer/model/parameters.h"
#include "trainer/model/train_engine.h"
#include "trainer/model/transformer_train.h"
#include "trainer/optim/adam.h"

namespace tnmt::train {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Seconds spent in each phase of the updates of one logging window.
struct StepPhases {
  int64_t updates = 0;
  double data = 0, forward_backward = 0, reduce = 0, update = 0;
};

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TrainBatch ToTrainBatch(data::Batch&& b) {
  TrainBatch t;
  t.batch = b.batch_size;
  t.src_len = b.src_len;
  t.tgt_len = b.tgt_len;
  t.src = std::move(b.src);
  t.src_lengths = std::move(b.src_lengths);
  t.tgt_in = std::move(b.tgt_in);
  t.tgt_out = std::move(b.tgt_out);
  return t;
}

uint64_t MixSeed(uint64_t seed, int64_t step, int micro, int rank) {
  uint64_t z = seed ^ 0x9e3779b97f4a7c15ull;
  for (uint64_t v : {static_cast<uint64_t>(step), static_cast<uint64_t>(micro), static_cast<uint64_t>(rank)}) {
    z = (z ^ v) * 0xbf58476d1ce4e5b9ull;
    z ^= z >> 31;
  }
  return z;
}

absl::Status BroadcastParams(Collective* c, const ModelConfig& config, ModelWeights* params) {
  if (c->world_size() == 1) return absl::OkStatus();
  for (ParamRef& r : TrainableParams(config, params)) {
    TNMT_RETURN_IF_ERROR(c->Broadcast(r.tensor->f32(), r.tensor->numel(), 0));
  }
  return absl::OkStatus();
}

absl::Status Barrier(Collective* c) {
  double x = 0;
  return c->AllReduceSum(&x, 1);
}

absl::StatusOr<std::vector<std::string>> ReadLines(const std::string& path, int limit) {
  TNMT_ASSIGN_OR_RETURN(auto reader, data::LineReader::Open(path));
  std::vector<std::string> lines;
  std::string line;
  while (limit <= 0 || static_cast<int>(lines.size()) < limit) {
    TNMT_ASSIGN_OR_RETURN(bool more, reader->Next(&line));
    if (!more) break;
    lines.push_back(line);
  }
  return lines;
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "--";
  const int64_t s = static_cast<int64_t>(seconds);
  return absl::StrFormat("%dh%02dm%02ds", s / 3600, (s / 60) % 60, s % 60);
}

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, Collective* coll, const TrainHooks& hooks)
      : cfg_(cfg), coll_(coll), hooks_(hooks), rank0_(coll->rank() == 0) {}

  absl::Status Run() {
    TNMT_RETURN_IF_ERROR(Setup());
    return Loop();
  }

 private:
  absl::Status Setup() {
    if (rank0_) ::mkdir(cfg_.save_dir.c_str(), 0755);
    TNMT_RETURN_IF_ERROR(Barrier(coll_));
    if (!Exists(cfg_.save_dir)) return absl::NotFoundError(absl::StrCat(cfg_.save_dir, ": cannot create save_dir"));
    for (const std::string& p : {cfg_.train_source, cfg_.train_target}) {
      if (!Exists(p)) return absl::NotFoundError(absl::StrCat(p, ": training data not found"));
    }
    spm_path_ = cfg_.spm_model.empty() ? cfg_.save_dir + "/spm.model" : cfg_.spm_model;
    // A new run from init_model takes its vocabulary; a resumed one has its own in save_dir.
    TNMT_ASSIGN_OR_RETURN(const std::vector<std::string> saved, ListCheckpoints(cfg_.save_dir));
    const bool from_init = !cfg_.init_model.empty() && saved.empty();
    if (from_init) {
      spm_path_ = cfg_.init_model + "/spm.model";
      for (const char* f : {"config.json", "model.safetensors", "spm.model"}) {
        const std::string p = cfg_.init_model + "/" + f;
        if (!Exists(p)) return absl::NotFoundError(absl::StrCat(p, ": init_model needs ", f));
      }
    }
    if (!Exists(spm_path_)) {
      if (!cfg_.spm_model.empty()) return absl::NotFoundError(absl::StrCat(spm_path_, ": spm_model not found"));
      if (rank0_) {
        Log(absl::StrCat("training a joint SentencePiece model of ", cfg_.vocab_size, " pieces"));
        data::SpmTrainerOptions o;
        o.vocab_size = cfg_.vocab_size;
        TNMT_RETURN_IF_ERROR(data::TrainJointSentencePiece({cfg_.train_source, cfg_.train_target}, spm_path_, o));
      }
      TNMT_RETURN_IF_ERROR(Barrier(coll_));
    }
    TNMT_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::Load(spm_path_));
    config_ = cfg_.model;
    config_.vocab_size = tokenizer_->vocab_size();
    config_.pad_id = tokenizer_->pad_id(), config_.unk_id = tokenizer_->unk_id();
    config_.bos_id = tokenizer_->bos_id(), config_.eos_id = tokenizer_->eos_id();
    if (config_.pad_id < 0 || config_.bos_id < 0 || config_.eos_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(spm_path_, ": needs pad, bos and eos pieces"));
    }
    // A run that cannot resume (or start from init_model) fails now, before the data is read
    // and tokenized.
    if (!saved.empty()) {
      TNMT_ASSIGN_OR_RETURN(const ModelConfig saved_model, ModelConfig::Load(saved.back() + "/config.json"));
      TNMT_RETURN_IF_ERROR(ResumableFrom(saved.back(), saved_model));
      if (!cfg_.init_model.empty()) Log(absl::StrCat("resuming from ", saved.back(), "; init_model is not used"));
    }
    if (from_init) {
      TNMT_ASSIGN_OR_RETURN(const ModelConfig init_config, ModelConfig::Load(cfg_.init_model + "/config.json"));
      if (absl::Status s = CheckResumable(init_config, config_); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(cfg_.init_model, ": cannot start from init_model: ", s.message(),
                                                       "; set those keys to the init model's values"));
      }
      const std::string weights = cfg_.init_model + "/model.safetensors";
      TNMT_ASSIGN_OR_RETURN(TensorMap tensors, ReadSafetensors(weights));
      TNMT_ASSIGN_OR_RETURN(params_, ModelWeights::Build(config_, std::move(tensors), weights));
    }

    data::DatasetOptions dopt;
    dopt.max_length = cfg_.max_length;
    dopt.max_length_ratio = cfg_.max_length_ratio;
    const std::string cache = absl::StrCat(cfg_.save_dir, "/train.rank", coll_->rank(), ".cache");
    data::DatasetOptions topt = dopt;  // subword sampling for the training data only
    topt.subword_nbest = cfg_.subword_nbest;
    topt.subword_alpha = cfg_.subword_alpha;
    TNMT_ASSIGN_OR_RETURN(train_, data::Dataset::Build(cfg_.train_source, cfg_.train_target, *tokenizer_, cache, topt));
    const auto& st = train_->stats();
    Log(absl::StrCat("training pairs: ", st.pairs_kept, " kept of ", st.pairs_read, " (empty ", st.dropped_empty,
                     ", too long ", st.dropped_too_long, ", ratio ", st.dropped_ratio, ")"));
    if (train_->size() == 0) return absl::InvalidArgumentError("no training pairs left after filtering");
    data::BatchOptions bopt;
    bopt.max_tokens = cfg_.max_tokens;
    bopt.seed = cfg_.seed;
    bopt.rank = coll_->rank();
    bopt.world_size = coll_->world_size();
    bopt.pad_id = config_.pad_id, bopt.bos_id = config_.bos_id, bopt.eos_id = config_.eos_id;
    TNMT_ASSIGN_OR_RETURN(batches_, data::BatchIterator::Create(train_.get(), bopt));
    if (batches_->batches_per_epoch() == 0) return absl::InvalidArgumentError("no batches for this rank");

    if (!cfg_.valid_source.empty() && rank0_) {
      const std::string vcache = cfg_.save_dir + "/valid.cache";
      data::DatasetOptions vopt = dopt;
      vopt.max_length = MaxPositions(config_) - 1;
      vopt.max_length_ratio = 1e9;
      TNMT_ASSIGN_OR_RETURN(valid_, data::Dataset::Build(cfg_.valid_source, cfg_.valid_target, *tokenizer_, vcache, vopt));
      TNMT_ASSIGN_OR_RETURN(valid_src_lines_, ReadLines(cfg_.valid_source, cfg_.valid_max_sentences));
      TNMT_ASSIGN_OR_RETURN(valid_ref_lines_, ReadLines(cfg_.valid_target, cfg_.valid_max_sentences));
    }

    auto latest = LoadLatestCheckpoint(cfg_.save_dir);
    if (latest.ok()) {
      TNMT_RETURN_IF_ERROR(Resume(*std::move(latest)));
    } else if (latest.status().code() == absl::StatusCode::kNotFound && from_init) {  // params_ loaded above
      TNMT_ASSIGN_OR_RETURN(adam_, Adam::Create(config_, params_));
      Log(absl::StrCat("starting from the weights of ", cfg_.init_model));
    } else if (latest.status().code() == absl::StatusCode::kNotFound) {
      TNMT_ASSIGN_OR_RETURN(params_, InitializeWeights(config_, cfg_.seed));
      TNMT_ASSIGN_OR_RETURN(adam_, Adam::Create(config_, params_));
    } else {
      return latest.status();
    }
    TNMT_RETURN_IF_ERROR(BroadcastParams(coll_, config_, &params_));
    Log(absl::StrCat("model: ", ParameterCount(config_, &params_), " parameters, d_model ", config_.d_model, ", ",
                     config_.encoder_layers, "+", config_.decoder_layers, " layers, vocab ", config_.vocab_size,
                     "; ", batches_->batches_per_epoch(), " batches per epoch per rank"));
    TrainEngineOptions eopt;
    TNMT_ASSIGN_OR_RETURN(eopt.device, ParseTrainDevice(cfg_.device));
    TNMT_ASSIGN_OR_RETURN(eopt.precision, ParseTrainPrecision(cfg_.dtype));
    eopt.collective = coll_;
    // A resumed float16 run continues with its saved loss scale (1 included: the scale may have
    // fallen there; a checkpoint of another precision saves 1, a fine start too).
    if (eopt.precision == TrainPrecision::kFloat16 && state_.step > 0 && state_.loss_scale > 0) {
      eopt.initial_loss_scale = state_.loss_scale;
    }
    precision_ = eopt.precision;
    TNMT_ASSIGN_OR_RETURN(engine_, MakeTrainEngine(config_, eopt, std::move(params_), std::move(adam_)));
    Log(absl::StrCat("training on ", engine_->Describe()));
    if (rank0_) {
      metrics_.open(cfg_.metrics_file.empty() ? cfg_.save_dir + "/metrics.jsonl" : cfg_.metrics_file, std::ios::app);
      std::ofstream(cfg_.save_dir + "/train_config.json") << cfg_.ToJson().dump(2) << "\n";
    }
    return absl::OkStatus();
  }

  // Whether the checkpoint at `where` holds the model the config asks for (see CheckResumable).
  absl::Status ResumableFrom(const std::string& where, const ModelConfig& saved) const {
    absl::Status s = CheckResumable(saved, config_);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat(where, ": cannot resume: ", s.message(),
                                                   "; restore those settings or train into a new save_dir"));
  }

  absl::Status Resume(Checkpoint ck) {
    TensorMap p, m, v;
    for (auto& [name, t] : ck.params) p.emplace(name, StoredTensor{t, DType::kFloat32});
    for (auto& [name, t] : ck.adam_m) m.emplace(name, StoredTensor{t, DType::kFloat32});
    for (auto& [name, t] : ck.adam_v) v.emplace(name, StoredTensor{t, DType::kFloat32});
    TNMT_RETURN_IF_ERROR(ResumableFrom(cfg_.save_dir, ck.config));
    TNMT_ASSIGN_OR_RETURN(params_, ModelWeights::Build(config_, std::move(p), "checkpoint params"));
    TNMT_ASSIGN_OR_RETURN(adam_, Adam::Create(config_, params_));
    TNMT_ASSIGN_OR_RETURN(adam_.m(), ModelWeights::Build(config_, std::move(m), "checkpoint adam m"));
    TNMT_ASSIGN_OR_RETURN(adam_.v(), ModelWeights::Build(config_, std::move(v), "checkpoint adam v"));
    adam_.set_step(ck.state.step);
    state_ = ck.state;
    TNMT_RETURN_IF_ERROR(batches_->Seek({state_.epoch, state_.batch_in_epoch}));
    Log(absl::StrCat("resumed from step ", state_.step, " (epoch ", state_.epoch, ", batch ", state_.batch_in_epoch, ")"));
    return absl::OkStatus();
  }

  absl::Status Loop() {
    CheckpointSchedule sched;
    sched.every_steps = cfg_.save_every_steps;
    sched.every_minutes = cfg_.save_every_minutes;
    sched.keep_last = cfg_.keep_last;
    CheckpointTimer timer(sched, state_.step, state_.elapsed_seconds);
    const double start_elapsed = state_.elapsed_seconds;
    const auto start = Clock::now();
    auto window_start = Clock::now();
    double window_tokens = 0, window_loss = 0, window_nll = 0, window_count = 0;
    // Where a step's wall time goes, summed over the window's updates (skipped ones included):
    // preparing batches, the forward and backward passes (on a GPU: queuing them), the
    // reduction of the loss totals and the gradient norm (on a GPU: waiting for the queued
    // work), the optimizer update.
    StepPhases phases;
    auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    int64_t last_saved = state_.step;
    bool stop = false;  // a rank asked to stop (learned with the previous update's reductions)
    while (state_.step < cfg_.max_steps) {
      if (cfg_.max_epochs > 0 && state_.epoch >= cfg_.max_epochs) break;
      if (stop || (coll_->world_size() == 1 && StopRequested())) {
        Log("stop requested: writing a final checkpoint");
        break;
      }
      TNMT_RETURN_IF_ERROR(engine_->BeginStep(cfg_.accum_steps));
      ++phases.updates;
      for (int a = 0; a < cfg_.accum_steps; ++a) {
        auto t = Clock::now();
        data::Batch b;
        TNMT_RETURN_IF_ERROR(batches_->Next(&b));
        TrainBatch batch = ToTrainBatch(std::move(b));
        if (cfg_.rdrop_alpha > 0) batch = DoubleForRDrop(batch);
        phases.data += since(t);
        TrainStepOptions o;
        o.dropout = cfg_.dropout;
        o.attention_dropout = cfg_.attention_dropout;
        o.activation_dropout = cfg_.activation_dropout;
        o.label_smoothing = config_.label_smoothing;
        o.rdrop_alpha = cfg_.rdrop_alpha;
        o.dropout_seed = MixSeed(cfg_.seed, state_.step, a, coll_->rank());
        t = Clock::now();
        TNMT_RETURN_IF_ERROR(engine_->ForwardBackward(batch, o));
        phases.forward_backward += since(t);
      }
      // Whether the coming update is due for a checkpoint; with several ranks each reads its own
      // clock, and the reduction makes them agree (a rank saving alone would desynchronize the
      // collectives).
      const double now_elapsed = start_elapsed + std::chrono::duration<double>(Clock::now() - start).count();
      const bool save_due = timer.Due(state_.step + 1, now_elapsed);
      const auto reduce_start = Clock::now();
      TNMT_ASSIGN_OR_RETURN(const StepTotals totals, engine_->AllReduce(StopRequested(), save_due));
      stop = totals.stop;
      const double stats[3] = {totals.loss_sum, totals.nll_sum, totals.tokens};
      const double tokens = std::max(1.0, stats[2]);
      float grad_scale = static_cast<float>(1.0 / tokens);
      // The norm of the per-token gradient: for clipping, and for the log when this update is
      // logged (every rank computes it at the same steps).
      const bool log_due = (state_.step + 1) % cfg_.log_every_steps == 0 || state_.step + 1 == cfg_.max_steps;
      double gnorm = 0;
      if (cfg_.clip_norm > 0 || log_due) {
        TNMT_ASSIGN_OR_RETURN(const double norm, engine_->GradNorm());
        gnorm = norm * grad_scale;
        if (cfg_.clip_norm > 0 && gnorm > cfg_.clip_norm) grad_scale *= static_cast<float>(cfg_.clip_norm / gnorm);
      }
      phases.reduce += since(reduce_start);
      const auto update_start = Clock::now();
      const double lr = NoamLearningRate(state_.step + 1, config_.d_model, {cfg_.warmup_steps, cfg_.lr_scale});
      const double scale_before = engine_->loss_scale();
      TNMT_ASSIGN_OR_RETURN(const bool applied, engine_->AdamStep(lr, grad_scale));
      phases.update += since(update_start);
      if (!applied) {
        // float16 gradients overflowed: no update (the step counter stays), the batches are
        // consumed, the loss scale was halved.
        const data::DataPosition pos = batches_->Position();
        state_.epoch = pos.epoch;
        state_.batch_in_epoch = pos.batch_in_epoch;
        ++skipped_steps_;
        Log(absl::StrCat("update ", state_.step + 1, " skipped: float16 gradients not finite at loss scale ",
                         scale_before, "; the scale is now ", engine_->loss_scale()));
        Metric({{"event", "overflow"}, {"step", state_.step}, {"loss_scale", engine_->loss_scale()},
                {"skipped_steps", skipped_steps_}});
        continue;
      }
      ++state_.step;
      const data::DataPosition pos = batches_->Position();
      state_.epoch = pos.epoch;
      state_.batch_in_epoch = pos.batch_in_epoch;
      // The corpus's target tokens: an R-Drop batch holds each sentence twice, and its loss and
      // perplexity average over both copies, but tokens_seen and tokens/s count the data once.
      const double data_tokens = cfg_.rdrop_alpha > 0 ? stats[2] / 2 : stats[2];
      state_.tokens_seen += data_tokens;
      state_.seed = cfg_.seed;
      state_.elapsed_seconds = start_elapsed + std::chrono::duration<double>(Clock::now() - start).count();
      window_tokens += data_tokens, window_loss += stats[0], window_nll += stats[1], window_count += stats[2];

      if (log_due) {
        const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
        const double tps = secs > 0 ? window_tokens / secs : 0;
        const double loss = window_loss / std::max(1.0, window_count);
        const double nll = window_nll / std::max(1.0, window_count);
        const double per_step = secs / cfg_.log_every_steps;
        const double eta = per_step * static_cast<double>(cfg_.max_steps - state_.step);
        json m = {{"event", "train"}, {"step", state_.step}, {"epoch", state_.epoch}, {"loss", loss},
                  {"nll", nll}, {"ppl", std::exp(nll)}, {"lr", lr}, {"tokens_per_second", tps},
                  {"tokens_seen", state_.tokens_seen},
                  {"elapsed_seconds", state_.elapsed_seconds}, {"eta_seconds", eta}};
        if (std::isfinite(gnorm)) m["grad_norm"] = gnorm;
        const double per = 1000.0 / std::max<int64_t>(1, phases.updates);
        m["data_ms"] = phases.data * per;
        m["forward_backward_ms"] = phases.forward_backward * per;
        m["reduce_ms"] = phases.reduce * per;
        m["update_ms"] = phases.update * per;
        if (precision_ == TrainPrecision::kFloat16) {
          m["loss_scale"] = engine_->loss_scale();
          m["skipped_steps"] = skipped_steps_;
        }
        LogDeviceTimes(secs, phases, &m);
        Metric(m);
        if (hooks_.progress_line && rank0_) {
          std::fprintf(stderr, "\rstep %lld/%lld  epoch %lld  loss %.4f  ppl %.2f  lr %.3g  %.0f tok/s  ETA %s   ",
                       static_cast<long long>(state_.step), static_cast<long long>(cfg_.max_steps),
                       static_cast<long long>(state_.epoch), loss, std::exp(nll), lr, tps, FormatDuration(eta).c_str());
          std::fflush(stderr);
          progress_shown_ = true;
        }
        window_start = Clock::now();
        window_tokens = window_loss = window_nll = window_count = 0;
        phases = {};
      }
      if (cfg_.valid_every_steps > 0 && state_.step % cfg_.valid_every_steps == 0) TNMT_RETURN_IF_ERROR(Validate());
      if (totals.save) {
        TNMT_RETURN_IF_ERROR(Save());
        timer.Saved(state_.step, state_.elapsed_seconds);
        last_saved = state_.step;
      }
    }
    EndProgressLine();
    if (last_saved != state_.step || !LoadLatestCheckpoint(cfg_.save_dir).ok()) TNMT_RETURN_IF_ERROR(Save());
    Log(absl::StrCat("done at step ", state_.step));
    return absl::OkStatus();
  }

  // With device timing on (TrainEngine::TakeDeviceTimes): the window's "where every ms went"
  // table in the log, and in the metrics each category's device ms per update ("device_ms",
  // with the gaps) and the window's cudaMalloc calls and GEMM plans built. A timing error is
  // logged, not fatal (the device's own errors surface at the engine's next call).
  void LogDeviceTimes(double secs, const StepPhases& phases, json* m) {
    absl::StatusOr<kernels::TimeAccount> taken = engine_->TakeDeviceTimes();
    if (!taken.ok()) {
      Log(absl::StrCat("device timing: ", taken.status().ToString()));
      return;
    }
    kernels::TimeAccount& a = *taken;
    if (a.empty()) return;
    a.AddHost("data", 1000 * phases.data);
    a.AddHost("queue forward/backward", 1000 * phases.forward_backward);
    a.AddHost("reduce and norm (waits for the device)", 1000 * phases.reduce);
    a.AddHost("optimizer", 1000 * phases.update);
    kernels::TimeWindow w;
    w.steps = phases.updates;
    w.wall_ms = 1000 * secs;
    w.step = "update";
    w.between = "between passes";
    std::string table = kernels::FormatTimeTable(a, w);
    if (!table.empty() && table.back() == '\n') table.pop_back();
    Log(table);
    const double per = 1.0 / static_cast<double>(std::max<int64_t>(1, phases.updates));
    json d = json::object();
    for (int i = 0; i < kernels::kNumTimeCategories; ++i) {
      if (a.work[i].calls > 0) d[kernels::TimeCategoryName(static_cast<kernels::TimeCategory>(i))] = a.work[i].ms * per;
    }
    d["gaps_inside_passes"] = a.gap_ms * per;
    d["gaps_between_passes"] = a.between_ms * per;
    (*m)["device_ms"] = d;
    (*m)["cuda_mallocs"] = a.device_allocs;
    (*m)["gemm_plans_built"] = a.gemm_plans_built;
  }

  absl::Status Validate() {
    if (!rank0_ || valid_ == nullptr) return absl::OkStatus();
    const auto t0 = Clock::now();
    data::BatchOptions o;
    o.max_tokens = cfg_.max_tokens;
    o.shuffle = false;
    o.pad_id = config_.pad_id, o.bos_id = config_.bos_id, o.eos_id = config_.eos_id;
    TNMT_ASSIGN_OR_RETURN(auto it, data::BatchIterator::Create(valid_.get(), o));
    double loss = 0, nll = 0, tokens = 0;
    for (int64_t i = 0; i < it->batches_per_epoch(); ++i) {
      data::Batch b;
      TNMT_RETURN_IF_ERROR(it->Next(&b));
      TNMT_ASSIGN_OR_RETURN(LossStats s, engine_->EvaluateLoss(ToTrainBatch(std::move(b)), config_.label_smoothing));
      loss += s.loss_sum, nll += s.nll_sum, tokens += static_cast<double>(s.tokens);
    }
    json m = {{"event", "validation"}, {"step", state_.step}, {"dev_loss", loss / std::max(1.0, tokens)},
              {"dev_nll", nll / std::max(1.0, tokens)}, {"dev_ppl", std::exp(nll / std::max(1.0, tokens))}};
    if (cfg_.valid_bleu) {
      auto model = std::make_shared<LoadedModel>();
      model->directory = cfg_.save_dir;
      model->config = config_;
      TNMT_ASSIGN_OR_RETURN(const HostState host, engine_->Snapshot());
      model->weights = *host.params;  // shares storage; training is paused while translating
      TNMT_ASSIGN_OR_RETURN(model->tokenizer, Tokenizer::Load(spm_path_));
      model->backend = MakeCpuBackend(model->config, model->weights, "cpu");  // unpacked: GEMMs through BLAS
      Translator translator(std::move(model));
      TranslationOptions topt;
      topt.decode = DecodeOptions::FromConfig(config_);
      topt.decode.beam_size = cfg_.valid_beam_size;
      TNMT_ASSIGN_OR_RETURN(auto results, translator.Translate(valid_src_lines_, topt));
      std::vector<std::string> hyps;
      for (auto& r : results) hyps.push_back(r.ok() && !r->hypotheses.empty() ? r->hypotheses[0].text : "");
      TNMT_ASSIGN_OR_RETURN(double bleu, trainer::CorpusBleu(hyps, valid_ref_lines_));
      m["dev_bleu"] = bleu;
      m["dev_bleu_signature"] = trainer::BleuSignature(static_cast<int64_t>(hyps.size()));
    }
    m["seconds"] = std::chrono::duration<double>(Clock::now() - t0).count();
    Metric(m);
    std::string line = absl::StrFormat("validation at step %d: dev loss %.4f, ppl %.2f", state_.step,
                                       m["dev_loss"].get<double>(), m["dev_ppl"].get<double>());
    if (m.contains("dev_bleu")) absl::StrAppendFormat(&line, ", BLEU %.2f", m["dev_bleu"].get<double>());
    absl::StrAppendFormat(&line, " (%.1f s)", m["seconds"].get<double>());
    Log(line);
    return absl::OkStatus();
  }

  absl::Status Save() {
    if (rank0_) {
      TNMT_ASSIGN_OR_RETURN(const HostState host, engine_->Snapshot());
      if (host.adam_step != state_.step) {
        return absl::InternalError(absl::StrCat("Adam has made ", host.adam_step, " updates, the trainer ", state_.step));
      }
      Checkpoint ck;
      ck.config = config_;
      ck.params = host.params->ToTensors(config_);
      ck.adam_m = host.adam_m->ToTensors(config_);
      ck.adam_v = host.adam_v->ToTensors(config_);
      state_.loss_scale = engine_->loss_scale();
      ck.state = state_;
      ck.spm_model_path = spm_path_;
      TNMT_RETURN_IF_ERROR(SaveCheckpoint(cfg_.save_dir, ck, cfg_.keep_last));
      Metric({{"event", "checkpoint"}, {"step", state_.step}, {"path", cfg_.save_dir + "/" + CheckpointDirName(state_.step)}});
    }
    return Barrier(coll_);
  }

  bool StopRequested() const { return hooks_.stop != nullptr && hooks_.stop->load(); }

  void Metric(const json& m) {
    if (!rank0_ || !metrics_.is_open()) return;
    metrics_ << m.dump() << "\n";
    metrics_.flush();
  }
  // Log lines start on a line of their own, after the live progress line if one is shown.
  void Log(const std::string& s) {
    if (!rank0_) return;
    EndProgressLine();
    std::fprintf(stderr, "tnmt train: %s\n", s.c_str());
  }
  void EndProgressLine() {
    if (progress_shown_) std::fprintf(stderr, "\n");
    progress_shown_ = false;
  }

  const TrainConfig& cfg_;
  Collective* coll_;
  TrainHooks hooks_;
  const bool rank0_;
  std::string spm_path_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelConfig config_;
  std::unique_ptr<data::Dataset> train_, valid_;
  std::unique_ptr<data::BatchIterator> batches_;
  std::vector<std::string> valid_src_lines_, valid_ref_lines_;
  ModelWeights params_;  // until the engine takes them over (Setup)
  Adam adam_;
  std::unique_ptr<TrainEngine> engine_;
  TrainPrecision precision_ = TrainPrecision::kFloat32;
  int64_t skipped_steps_ = 0;
  bool progress_shown_ = false;  // the live progress line is the last thing on stderr
  TrainerState state_;
  std::ofstream metrics_;
};

}  // namespace

void KeepFreedMemory() {
  mallopt(M_MMAP_MAX, 0);                  // large blocks from the heap, not fresh mappings
  mallopt(M_TRIM_THRESHOLD, 1 << 30);      // and the heap is not returned to the system
  mallopt(M_ARENA_MAX, 1);                 // threads started later (CPU ranks) use that heap too
}

absl::Status RunTraining(const TrainConfig& cfg, Collective* collective, const TrainHooks& hooks) {
  Trainer t(cfg, collective, hooks);
  return t.Run();
}

}  // namespace tnmt::train

// Translator; see translator.h.
#include "engine/runtime/translator.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/decode/beam_search.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/decode/ensemble_step_model.h"
#include "engine/decode/flat_beam_decoder.h"
#include "engine/runtime/batching_policy.h"

namespace tnmt {

absl::StatusOr<std::vector<TextHypothesis>> ToTextHypotheses(const Tokenizer& tokenizer,
                                                              DecodeResult result, bool with_pieces) {
  std::vector<TextHypothesis> out;
  for (Hypothesis& h : result.hypotheses) {
    TNMT_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(h.ids));
    TextHypothesis t{std::move(text), std::move(h.ids), h.score, std::move(h.token_scores), std::move(h.alignments), {}};
    if (with_pieces) {
      for (int32_t id : t.ids) t.pieces.push_back(tokenizer.Piece(id));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> SourcePieces(const Tokenizer& tokenizer, const std::vector<int32_t>& source) {
  std::vector<std::string> pieces;
  for (size_t j = 0; j + 1 < source.size(); ++j) pieces.push_back(tokenizer.Piece(source[j]));
  return pieces;
}

bool FlatBeamRequested() {
  const char* v = std::getenv("TNMT_GPU_BEAM");
  return v != nullptr && std::string_view(v) == "1";
}

Translator::Translator(std::shared_ptr<const LoadedModel> model) : Translator(std::move(model), {}) {}

Translator::Translator(std::shared_ptr<const LoadedModel> model, std::vector<std::shared_ptr<const LoadedModel>> more)
    : model_(std::move(model)), more_(std::move(more)), config_(model_->config) {
  // The ensemble's sources and outputs must fit every member: the smallest position limit.
  int limit = MaxPositions(config_);
  for (const auto& m : more_) {
    limit = std::min(limit, MaxPositions(m->config));
  }
  if (limit < MaxPositions(config_)) {
    if (config_.position_encoding == PositionEncoding::kLearned) {
      config_.max_positions = limit;
    } else {
      config_.max_sinusoid_positions = limit;
    }
  }
}

absl::StatusOr<std::unique_ptr<StepModel>> Translator::NewStepModel() {
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> first, model_->backend->NewStepModel());
  if (more_.empty()) return first;
  std::vector<std::unique_ptr<StepModel>> members;
  members.push_back(std::move(first));
  for (const auto& member : more_) {
    TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> m, member->backend->NewStepModel());
    members.push_back(std::move(m));
  }
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<EnsembleStepModel> ensemble,
                        EnsembleStepModel::Create(std::move(members), config_.vocab_size, config_.pad_id, config_.eos_id));
  return std::unique_ptr<StepModel>(std::move(ensemble));
}

absl::StatusOr<std::vector<absl::StatusOr<LineTranslation>>> Translator::Translate(
    const std::vector<std::string>& lines, const TranslationOptions& opt, const Progress& progress,
    const std::vector<std::string>* target_prefixes) {
  TNMT_RETURN_IF_ERROR(opt.decode.Validate());
  if (target_prefixes != nullptr && target_prefixes->size() != lines.size()) {
    return absl::InvalidArgumentError(absl::StrCat(target_prefixes->size(), " target prefixes for ", lines.size(), " lines"));
  }
  if (opt.max_batch_tokens < 1) {
    return absl::InvalidArgumentError("max_batch_tokens must be positive");
  }
  const ModelConfig& c = config_;
  const int n = static_cast<int>(lines.size());
  std::vector<absl::StatusOr<LineTranslation>> out(n, LineTranslation{});
  std::vector<std::vector<int32_t>> sources(n), prefixes(n);
  std::vector<int> todo;
  const int limit = std::min(opt.max_input_length, MaxPositions(c));
  for (int i = 0; i < n; ++i) {
    auto ids = model_->tokenizer->Encode(lines[i]);
    if (!ids.ok()) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("line ", i + 1, ": ", ids.status().message()));
      continue;
    }
    ids->push_back(c.eos_id);
    if (static_cast<int>(ids->size()) > limit) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("line ", i + 1, ": ", ids->size(),
                                                       " tokens exceeds the maximum input length ",
                                                       limit));
      continue;
    }
    out[i]->source_tokens = static_cast<int>(ids->size());
    if (absl::StripAsciiWhitespace(lines[i]).empty()) {
      // Nothing to translate: an empty line stays empty.
      out[i]->hypotheses.assign(opt.decode.n_best, TextHypothesis{});
      continue;
    }
    if (target_prefixes != nullptr && !(*target_prefixes)[i].empty()) {
      auto prefix = model_->tokenizer->EncodeTarget((*target_prefixes)[i]);
      if (!prefix.ok()) {
        out[i] = absl::InvalidArgumentError(absl::StrCat("line ", i + 1, ": target prefix: ", prefix.status().message()));
        continue;
      }
      const int max_out = MaxOutputLength(opt.decode, static_cast<int>(ids->size()), c);
      if (static_cast<int>(prefix->size()) >= max_out) {
        out[i] = absl::InvalidArgumentError(absl::StrCat("line ", i + 1, ": target prefix of ", prefix->size(),
                                                         " pieces leaves no room within the maximum output length of ",
                                                         max_out - 1, " tokens"));
        continue;
      }
      prefixes[i] = *std::move(prefix);
    }
    sources[i] = *std::move(ids);
    todo.push_back(i);
  }
  // Longest first, so the first batch shows the peak memory at once.
  std::vector<int64_t> length_of(n);
  for (int i = 0; i < n; ++i) length_of[i] = static_cast<int64_t>(sources[i].size());
  SortLongestFirst(&todo, length_of);
  int done = n - static_cast<int>(todo.size());
  if (todo.empty()) return out;
  // One decoder for the whole input (on a GPU it owns a stream and scratch worth keeping), with
  // continuous batching: sentences join the running decode as others finish, so it never runs
  // on with a batch's last few sentences while the rest of the input waits. Groups of sentences
  // are encoded together (one encoder pass each), and the groups being decoded hold at most
  // max_batch_tokens padded source tokens (engine/runtime/batching_policy.h). A sentence's
  // result does not depend on what else is decoded with it, so the output is that of decoding
  // each batch separately.
  const bool pieces = opt.decode.return_token_scores || opt.decode.return_alignments;
  BatchLimits limits;
  limits.max_tokens = opt.max_batch_tokens;
  std::vector<int> line_of;      // by handle (handles count up from 0)
  std::vector<int64_t> cost_of;  // by handle: its padded source length (its group's longest)
  int64_t in_flight = 0;         // padded source tokens of the sentences being decoded
  size_t pos = 0;
  // BeamDecoder, or FlatBeamDecoder (the same outputs) where TNMT_GPU_BEAM asks for it.
  auto run = [&](auto& decoder) -> absl::Status {
    std::vector<BeamDecoder::Done> finished;
    while (pos < todo.size() || !decoder.empty()) {
      if (pos < todo.size()) {
        BatchFill fill(limits, 0, in_flight, /*first_always_fits=*/decoder.empty());
        int64_t count = 0;
        while (pos + count < todo.size() && fill.TryAdd(length_of[todo[pos + count]])) ++count;
        const int64_t left = static_cast<int64_t>(todo.size() - pos);
        const int64_t full = FullBatch(limits, length_of[todo[pos]]);
        // Join in groups of at least an eighth of a full batch (or all that is left): the
        // encoder is inefficient on a few sentences at a time.
        if (count >= std::min(std::max<int64_t>(1, full / 8), left)) {
          std::vector<DecodeInput> group;
          for (int64_t k = 0; k < count; ++k) {
            const int i = todo[pos + k];
            group.push_back({sources[i], prefixes[i], opt.first_stream + static_cast<uint64_t>(i)});
          }
          TNMT_ASSIGN_OR_RETURN(std::vector<int64_t> handles, decoder.Add(group, opt.decode));
          in_flight += fill.padded_tokens();
          for (int64_t k = 0; k < count; ++k) {
            const size_t h = static_cast<size_t>(handles[k]);
            if (line_of.size() <= h) line_of.resize(h + 1, -1), cost_of.resize(h + 1, 0);
            line_of[h] = todo[pos + k];
            cost_of[h] = fill.longest();
          }
          pos += count;
        }
      }
      finished.clear();
      TNMT_RETURN_IF_ERROR(decoder.Step(&finished));
      for (BeamDecoder::Done& d : finished) {
        const int i = line_of[static_cast<size_t>(d.handle)];
        TNMT_ASSIGN_OR_RETURN(out[i]->hypotheses, ToTextHypotheses(*model_->tokenizer, std::move(d.result), pieces));
        if (opt.decode.return_alignments) out[i]->source_pieces = SourcePieces(*model_->tokenizer, sources[i]);
        in_flight -= cost_of[static_cast<size_t>(d.handle)];
      }
      done += static_cast<int>(finished.size());
      if (progress && !finished.empty()) progress(done, n);
    }
    return absl::OkStatus();
  };
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> step, NewStepModel());
  const bool no_prefix = std::all_of(prefixes.begin(), prefixes.end(), [](const auto& p) { return p.empty(); });
  if (FlatBeamRequested() && more_.empty() && no_prefix && FlatBeamDecoder::Supports(opt.decode)) {
    std::unique_ptr<FlatBeamStepper> stepper = NewCudaBeamStepper(*step);
    if (stepper == nullptr) stepper = std::make_unique<HostFlatBeamStepper>();
    FlatBeamDecoder decoder(c, std::move(step), std::move(stepper));
    TNMT_RETURN_IF_ERROR(run(decoder));
  } else {
    BeamDecoder decoder = BeamDecoder::Create(c, std::move(step));
    TNMT_RETURN_IF_ERROR(run(decoder));
  }
  return out;
}

absl::StatusOr<std::vector<absl::StatusOr<PairScore>>> Translator::Score(
    const std::vector<std::string>& sources, const std::vector<std::string>& targets,
    const TranslationOptions& opt) {
  if (sources.size() != targets.size()) {
    return absl::InvalidArgumentError(absl::StrCat(sources.size(), " sources but ", targets.size(), " targets"));
  }
  if (opt.max_batch_tokens < 1) return absl::InvalidArgumentError("max_batch_tokens must be positive");
  const ModelConfig& c = config_;
  const int n = static_cast<int>(sources.size());
  std::vector<absl::StatusOr<PairScore>> out(n, PairScore{});
  std::vector<std::vector<int32_t>> src(n), tgt(n);
  std::vector<int> todo;
  const int limit = std::min(opt.max_input_length, MaxPositions(c));
  for (int i = 0; i < n; ++i) {
    auto s = model_->tokenizer->Encode(sources[i]);
    auto t = model_->tokenizer->EncodeTarget(targets[i]);
    const absl::Status bad = !s.ok() ? s.status() : t.status();
    if (!bad.ok()) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("line ", i + 1, ": ", !s.ok() ? "source: " : "target: ", bad.message()));
      continue;
    }
    s->push_back(c.eos_id);
    if (static_cast<int>(s->size()) > limit || static_cast<int>(t->size()) + 1 > MaxPositions(c)) {
      const bool source_long = static_cast<int>(s->size()) > limit;
      out[i] = absl::InvalidArgumentError(absl::StrCat(
          "line ", i + 1, ": ", source_long ? "source: " : "target: ", source_long ? s->size() : t->size() + 1,
          " tokens exceeds the maximum length ", source_long ? limit : MaxPositions(c)));
      continue;
    }
    src[i] = *std::move(s);
    tgt[i] = *std::move(t);
    todo.push_back(i);
  }
  // Ordered by the longer side; a pair costs its longer side as the decoder reads it: the
  // source, or the target after <s>.
  std::vector<int64_t> length_of(n), cost_of(n);
  for (int i = 0; i < n; ++i) {
    length_of[i] = static_cast<int64_t>(std::max(src[i].size(), tgt[i].size()));
    cost_of[i] = static_cast<int64_t>(std::max(src[i].size(), tgt[i].size() + 1));
  }
  SortLongestFirst(&todo, length_of);
  if (todo.empty()) return out;
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> model, NewStepModel());
  BatchLimits limits;
  limits.max_tokens = opt.max_batch_tokens;
  size_t pos = 0;
  while (pos < todo.size()) {
    BatchFill fill(limits, 0, 0, /*first_always_fits=*/true);
    size_t count = 0;
    while (pos + count < todo.size() && fill.TryAdd(cost_of[todo[pos + count]])) ++count;
    std::vector<std::vector<int32_t>> bs, bt;
    for (size_t k = 0; k < count; ++k) {
      bs.push_back(src[todo[pos + k]]);
      bt.push_back(tgt[todo[pos + k]]);
    }
    TNMT_ASSIGN_OR_RETURN(std::vector<PairScore> scores, ScoreBatch(c, model.get(), bs, bt));
    for (size_t k = 0; k < count; ++k) out[todo[pos + k]] = std::move(scores[k]);
    pos += count;
  }
  return out;
}

}  // namespace tnmt

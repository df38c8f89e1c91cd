// Decoding options and results shared by greedy and beam search.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"

namespace tnmt {

struct DecodeOptions {
  int beam_size = 4;            // 1 = greedy decoding
  float length_penalty = 0.6f;  // α in lp(n) = ((5 + n) / 6)^α (or n^α); beam search only
  LengthPenaltyStyle length_penalty_style = LengthPenaltyStyle::kGnmt;  // which lp(n)
  int max_length_offset = 50;   // max output length = input length + offset
  int max_length = 0;           // if > 0: max output length, replacing the offset rule
  int min_length = 0;           // </s> may not be chosen before output position min_length
  int n_best = 1;               // hypotheses returned per sentence (<= beam_size)

  // Token rules and log-probability changes, applied at every free (not forced) position to
  // the model's log-probabilities before candidates are ranked; the score of a hypothesis is
  // the sum of the changed log-probabilities (nothing is renormalised).
  bool disable_unk = false;        // unk_id is never generated
  int no_repeat_ngram_size = 0;    // > 0: no n-gram of this size occurs twice in an output
  float repetition_penalty = 1.0f; // log-probability of a token already in the output x this
                                   // (> 1 discourages repeats, < 1 encourages them)

  // Random sampling (beam_size 1 only): sampling_topk != 1 draws each token from the
  // sampling_topk most likely allowed tokens (0: all), with probabilities
  // exp(logprob / temperature) renormalised over them and cut to the smallest most likely set
  // whose mass reaches sampling_topp. The draw at output position t of the text with stream s
  // is CounterUniform(seed, s, t): the same seed and stream give the same output.
  int sampling_topk = 1;
  float sampling_topp = 1.0f;
  float sampling_temperature = 1.0f;
  uint64_t seed = 0;

  // Per output token: the source position it aligns to (alignment_layer's cross-attention
  // averaged over heads; -1: the last decoder layer) and its log-probability.
  bool return_alignments = false;
  int alignment_layer = -1;
  bool return_token_scores = false;
  // False: the caller does not read Hypothesis::score (left 0). Greedy decoding without
  // sampling or a repetition penalty then skips the log-softmax normalizer over the vocabulary
  // at every step (it ranks a row's tokens by their logits alone; the output is the same).
  bool return_scores = true;
  // Off by default. True: each step scores only the candidate set of the model's vocabulary
  // shortlist (engine/model/shortlist.h; a CPU model loaded with one, else Add refuses): the
  // shortlisted targets of the batch's source pieces, the frequent pieces, </s> and <unk>.
  // Outputs and scores change (log-probabilities are normalized over the candidates). It applies
  // to a step when every sentence in it asks for it.
  bool use_shortlist = false;

  bool sampling() const { return sampling_topk != 1; }

  // Options from the model's config.json defaults.
  static DecodeOptions FromConfig(const ModelConfig& c);
  // Checks ranges and the rules between options (engine/decode/option_table.h); the message
  // names the option.
  absl::Status Validate() const;
  // Every field, for grouping and comparing options.
  auto Tie() const {
    return std::tie(beam_size, length_penalty, length_penalty_style, max_length_offset, max_length,
                    min_length, n_best, disable_unk, no_repeat_ngram_size, repetition_penalty,
                    sampling_topk, sampling_topp, sampling_temperature, seed, return_alignments,
                    alignment_layer, return_token_scores, return_scores, use_shortlist);
  }
};

struct Hypothesis {
  std::vector<int32_t> ids;  // generated tokens without </s> (a target prefix included)
  float score = 0.0f;        // beam: normalized log-probability; greedy: sum of log-probs;
                             // 0 when DecodeOptions::return_scores is false
  // With return_token_scores: the log-probability of each of ids, then of </s>.
  std::vector<float> token_scores;
  // With return_alignments: for each of ids, the source position it aligns to.
  std::vector<int32_t> alignments;
};

// One source to decode: its ids (ending with </s>), an optional target prefix (tokens the
// output starts with, forced; no </s> or pad), and the sampling stream.
struct DecodeInput {
  std::vector<int32_t> source;
  std::vector<int32_t> prefix;
  uint64_t stream = 0;
};

struct DecodeResult {
  std::vector<Hypothesis> hypotheses;  // best first, at most n_best
};

// A sentence's maximum output length (</s> included): max_length, else the source length plus
// max_length_offset, raised to min_length when that is more (a min_length is honoured, not
// capped); at least 1 and at most the model's positions.
int MaxOutputLength(const DecodeOptions& o, int source_length, const ModelConfig& c);

// A nonzero sampling seed from the system's random source (for requests that give none).
uint64_t DrawSeed();

// Largest beam accepted (memory grows with it).
constexpr int kMaxBeamSize = 64;

}  // namespace tnmt

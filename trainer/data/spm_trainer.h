// Trains the joint (source + target) SentencePiece model used when no model is given.
//
// Invariants:
//  - Unigram model; ids pad=0, unk=1, bos=2, eos=3 by default (as config.json expects);
//    character_coverage 1.0, so every character seen in training is in the vocabulary.
//  - Inputs may be plain or .gz and are streamed, never loaded whole. Training uses at most
//    `input_sentence_size` lines (both languages together): when the files hold more, an
//    exact-size uniform subset is chosen by selection sampling (Knuth's Algorithm S) driven by
//    std::mt19937_64(seed), so the choice depends only on the files and the seed.
//  - Deterministic: the same inputs and options give a byte-identical model file. The model
//    does depend on num_threads (SentencePiece sums in per-thread order), so keep it fixed
//    (1 by default) when a model must be reproduced.
//  - The model file is written to a temporary name and renamed, so a reader never sees a
//    partial model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tnmt::data {

struct SpmTrainerOptions {
  int vocab_size = 8000;                  // pieces, including the special ones
  int64_t input_sentence_size = 2000000;  // lines used for training, all inputs together
  double character_coverage = 1.0;
  uint64_t seed = 1;    // sampling seed, also given to SentencePiece's generator
  int num_threads = 1;  // SentencePiece training threads
  int pad_id = 0;
  int unk_id = 1;
  int bos_id = 2;
  int eos_id = 3;
  bool verbose = false;  // SentencePiece's progress log on stderr
};

// Trains a model on the lines of `input_paths` (typically {source, target}) and writes it to
// `model_path` (e.g. ".../spm.model"). Errors: an input that cannot be read or holds invalid
// UTF-8 (named with file and line), no non-empty lines, a vocabulary the data cannot fill,
// an unwritable `model_path`.
absl::Status TrainJointSentencePiece(const std::vector<std::string>& input_paths,
                                     const std::string& model_path,
                                     const SpmTrainerOptions& options);

}  // namespace tnmt::data

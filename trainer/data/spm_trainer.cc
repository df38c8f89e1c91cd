// Joint SentencePiece training: a counting pass, then a streaming, sampled pass into the
// trainer; see spm_trainer.h.
#include "trainer/data/spm_trainer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "trainer/data/spm_train_backend.h"
#include "trainer/data/text_reader.h"

namespace tnmt::data {
namespace {

// Counts the non-empty lines of all inputs, checking that each is valid UTF-8.
absl::StatusOr<int64_t> CountLines(const std::vector<std::string>& paths) {
  int64_t count = 0;
  std::string line;
  for (const std::string& path : paths) {
    TNMT_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader, LineReader::Open(path));
    while (true) {
      TNMT_ASSIGN_OR_RETURN(bool more, reader->Next(&line));
      if (!more) break;
      TNMT_RETURN_IF_ERROR(ValidateUtf8Line(line, path, reader->line_number()));
      if (!line.empty()) ++count;
    }
  }
  return count;
}

// The non-empty lines of all inputs in order, of which exactly `keep` of `total` are chosen
// uniformly at random by selection sampling.
class SampledLines : public SentenceSource {
 public:
  SampledLines(std::vector<std::string> paths, int64_t total, int64_t keep, uint64_t seed)
      : paths_(std::move(paths)), total_(total), keep_(keep), rng_(seed) {}

  bool Next(std::string* sentence) override {
    while (status_.ok()) {
      if (reader_ == nullptr) {
        if (next_path_ == paths_.size()) return false;
        absl::StatusOr<std::unique_ptr<LineReader>> reader = LineReader::Open(paths_[next_path_++]);
        if (!reader.ok()) {
          status_ = reader.status();
          return false;
        }
        reader_ = std::move(*reader);
      }
      absl::StatusOr<bool> more = reader_->Next(sentence);
      if (!more.ok()) {
        status_ = more.status();
        return false;
      }
      if (!*more) {
        reader_.reset();
        continue;
      }
      if (sentence->empty()) continue;
      if (Select()) return true;
    }
    return false;
  }

  bool failed() const override { return !status_.ok(); }
  const absl::Status& status() const { return status_; }
  int64_t selected() const { return selected_; }

 private:
  // Algorithm S: take the current line with probability (still needed) / (still unseen).
  bool Select() {
    const int64_t unseen = total_ - seen_++;
    const int64_t needed = keep_ - selected_;
    if (needed <= 0 || unseen <= 0) return false;
    bool take = true;
    if (needed < unseen) {
      const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;  // uniform in [0, 1)
      take = u * static_cast<double>(unseen) < static_cast<double>(needed);
    }
    if (take) ++selected_;
    return take;
  }

  const std::vector<std::string> paths_;
  const int64_t total_;
  const int64_t keep_;
  std::mt19937_64 rng_;
  size_t next_path_ = 0;
  std::unique_ptr<LineReader> reader_;
  int64_t seen_ = 0;
  int64_t selected_ = 0;
  absl::Status status_;
};

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return absl::ErrnoToStatus(errno, absl::StrCat(temporary, ": cannot create"));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) return absl::ErrnoToStatus(errno, absl::StrCat(temporary, ": write failed"));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return absl::ErrnoToStatus(error, absl::StrCat(path, ": cannot rename ", temporary));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainJointSentencePiece(const std::vector<std::string>& input_paths,
                                     const std::string& model_path,
                                     const SpmTrainerOptions& options) {
  if (input_paths.empty()) return absl::InvalidArgumentError("no input files for SentencePiece");
  if (options.vocab_size < 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size must be at least 5, got ", options.vocab_size));
  }
  if (options.input_sentence_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_sentence_size must be positive, got ", options.input_sentence_size));
  }
  TNMT_ASSIGN_OR_RETURN(const int64_t total, CountLines(input_paths));
  if (total == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no non-empty lines to train SentencePiece on in ", input_paths[0],
                     input_paths.size() > 1 ? " and the other inputs" : ""));
  }
  const int64_t keep = std::min(total, options.input_sentence_size);
  const std::map<std::string, std::string> flags = {
      {"model_type", "unigram"},
      {"vocab_size", absl::StrCat(options.vocab_size)},
      {"character_coverage", absl::StrCat(options.character_coverage)},
      // The sample above already respects the cap, so SentencePiece's own (unseeded per call)
      // reservoir sampling never runs.
      {"input_sentence_size", absl::StrCat(keep)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", absl::StrCat(options.num_threads)},
      {"pad_id", absl::StrCat(options.pad_id)},
      {"unk_id", absl::StrCat(options.unk_id)},
      {"bos_id", absl::StrCat(options.bos_id)},
      {"eos_id", absl::StrCat(options.eos_id)},
      {"minloglevel", options.verbose ? "0" : "1"},
  };
  SampledLines sentences(input_paths, total, keep, options.seed);
  std::string model, error;
  const bool trained = TrainSentencePieceModel(flags, static_cast<unsigned>(options.seed),
                                               &sentences, &model, &error);
  TNMT_RETURN_IF_ERROR(sentences.status());
  if (!trained) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece training failed: ", error));
  }
  return WriteFileAtomically(model_path, model);
}

}  // namespace tnmt::data

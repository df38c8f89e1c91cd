// `tnmt shortlist`; see shortlist_command.h. Exit status: 0, 1 if the corpus or the model cannot
// be read (the message names the file and line), 2 for a usage error.
#include "tools/tnmt/shortlist_command.h"

#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/model/shortlist.h"
#include "engine/model/shortlist_builder.h"
#include "engine/runtime/loaded_model.h"
#include "tools/tnmt/args.h"

namespace tnmt::cli {

namespace {

constexpr const char* kProgram = "tnmt shortlist";

int Usage(const std::string& message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 2;
}

int Failure(const std::string& message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 1;
}

// Reads the corpus pair by pair into `b`; errors name the file and line.
absl::Status ReadCorpus(const Tokenizer& tok, const std::string& source, const std::string& target,
                        ShortlistBuilder* b) {
  std::ifstream src(source, std::ios::binary), tgt(target, std::ios::binary);
  if (!src) return absl::NotFoundError(absl::StrCat("--source ", source, ": cannot open for reading"));
  if (!tgt) return absl::NotFoundError(absl::StrCat("--target ", target, ": cannot open for reading"));
  std::string s, t;
  for (int64_t line = 1;; ++line) {
    const bool more_s = static_cast<bool>(std::getline(src, s));
    const bool more_t = static_cast<bool>(std::getline(tgt, t));
    if (!more_s && !more_t) break;
    if (more_s != more_t) {
      return absl::InvalidArgumentError(absl::StrCat("--source ", source, " and --target ", target,
                                                     " differ in length: ", more_s ? target : source,
                                                     " ends at line ", line - 1));
    }
    absl::StatusOr<std::vector<int32_t>> s_ids = tok.Encode(s);
    if (!s_ids.ok()) return absl::InvalidArgumentError(absl::StrCat(source, " line ", line, ": ", s_ids.status().message()));
    absl::StatusOr<std::vector<int32_t>> t_ids = tok.EncodeTarget(t);
    if (!t_ids.ok()) return absl::InvalidArgumentError(absl::StrCat(target, " line ", line, ": ", t_ids.status().message()));
    if (absl::Status st = b->Add(*s_ids, *t_ids); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(source, " line ", line, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int ShortlistCommand(int argc, char** argv) {
  Args args(kProgram,
            "Builds a vocabulary shortlist for a model from a parallel corpus (one sentence per\n"
            "line, the lines of --source and --target aligned), for `tnmt translate --shortlist`:\n"
            "  tnmt shortlist --model DIR --source train.en --target train.de --output lex.txt\n"
            "p(target piece | source piece) is estimated by IBM Model 1 over the model's own\n"
            "SentencePiece pieces; each source piece keeps its --per-source most likely target\n"
            "pieces, and the --frequent most frequent target pieces are always candidates.");
  args.AddString("model", "", "model directory whose vocabulary the table indexes (required)");
  args.AddString("source", "", "source side of the corpus (required)");
  args.AddString("target", "", "target side of the corpus, line-aligned with --source (required)");
  args.AddString("output", "", "shortlist file to write (required)");
  args.AddInt("per-source", 50, "target pieces kept per source piece, >= 1");
  args.AddInt("frequent", 100, "most frequent target pieces always allowed, >= 0");
  args.AddInt("iterations", 5, "IBM Model 1 EM iterations, 0 to 50 (0: rank by co-occurrence counts)");
  if (absl::Status s = args.Parse(argc, argv, 2); !s.ok()) return Usage(std::string(s.message()));
  if (args.help_requested()) {
    std::cout << args.Help();
    return 0;
  }
  for (const char* flag : {"model", "source", "target", "output"}) {
    if (args.GetString(flag).empty()) return Usage(absl::StrCat("--", flag, " is required"));
  }
  ShortlistBuildOptions o;
  o.per_source = args.GetInt("per-source");
  o.frequent = args.GetInt("frequent");
  o.iterations = args.GetInt("iterations");
  if (o.per_source < 1) return Usage(absl::StrCat("--per-source must be >= 1, got ", o.per_source));
  if (o.frequent < 0) return Usage(absl::StrCat("--frequent must be >= 0, got ", o.frequent));
  if (o.iterations < 0 || o.iterations > 50) {
    return Usage(absl::StrCat("--iterations must be in [0, 50], got ", o.iterations));
  }
  absl::StatusOr<std::shared_ptr<const LoadedModel>> model = LoadModelDirectory(args.GetString("model"));
  if (!model.ok()) return Usage(absl::StrCat("--model: ", model.status().message()));
  const ModelConfig& c = (*model)->config;
  ShortlistBuilder builder(c.vocab_size, c.pad_id);
  if (absl::Status s = ReadCorpus(*(*model)->tokenizer, args.GetString("source"), args.GetString("target"), &builder);
      !s.ok()) {
    return Failure(std::string(s.message()));
  }
  if (builder.pairs() == 0) return Failure("the corpus has no sentence pair with both sides non-empty");
  absl::StatusOr<Shortlist> table = builder.Build(o);
  if (!table.ok()) return Failure(std::string(table.status().message()));
  const std::vector<std::string> comment = {
      absl::StrCat("built by tnmt shortlist from ", builder.pairs(), " sentence pairs for ", args.GetString("model")),
      o.iterations > 0 ? absl::StrCat("p(target | source) by IBM Model 1, ", o.iterations, " EM iterations")
                       : std::string("ranked by sentence co-occurrence counts"),
      absl::StrCat("per-source ", o.per_source, ", frequent ", o.frequent)};
  if (absl::Status s = WriteShortlist(args.GetString("output"), *table, comment); !s.ok()) {
    return Failure(std::string(s.message()));
  }
  std::cerr << kProgram << ": wrote " << args.GetString("output") << " (" << builder.pairs() << " pairs, "
            << table->targets.size() << " source-target entries, " << table->frequent.size() << " frequent)\n";
  return 0;
}

}  // namespace tnmt::cli

// `tnmt translate --server HOST:PORT`: the same input/output contract as local translation,
// through a running `tnmt serve` (tnmt.v1.TranslationService/Translate). Lines are sent in
// requests of up to --request-sentences; a request refused for one bad text is retried line by
// line, so each bad line gets its own error and an empty output line, as locally.
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>

namespace tnmt::cli {

struct RemoteTranslateOptions {
  std::string server;           // host:port
  std::string model;            // "" = the server's default model
  std::optional<int> beam_size;
  std::optional<float> length_penalty;
  int n_best = 1;
  bool scores = false;
  int request_sentences = 64;
  int timeout_seconds = 300;    // per request
};

// Returns the exit status: 0, 1 if some lines failed, 2 if the server could not be used.
int TranslateRemote(const RemoteTranslateOptions& options, std::istream& in, std::ostream& out);

}  // namespace tnmt::cli

// `tnmt translate --server HOST:PORT`: the same input/output contract as local translation
// (translate_output.h), through a running `tnmt serve` (tnmt.v1.TranslationService/Translate).
// The input is read in chunks like locally, each sent in requests of up to
// `request_sentences` lines, with the same progress bar. A request refused for its options or
// model is one error (exit 2), as locally; one refused for a bad text is retried line by line,
// so each bad line gets its own error numbered by its input line and keeps its place.
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>

#include <grpcpp/grpcpp.h>

#include "proto/tnmt/v1/translation.pb.h"
#include "tools/tnmt/translate_output.h"

namespace tnmt::cli {

struct RemoteTranslateOptions {
  std::string server;           // host:port
  grpc::ChannelArguments channel_args;                      // with the TLS flags applied
  std::shared_ptr<grpc::ChannelCredentials> credentials;    // null: plaintext
  std::string token;            // the translation API's bearer token ("": none)
  std::string model;            // "" = the server's default model
  std::optional<int> beam_size;
  std::optional<float> length_penalty;
  std::string length_penalty_style;  // empty: the server's model default
  tnmt::v1::DecodingOptions options;  // the other options, merged into each request's
  std::istream* prefixes = nullptr;   // target prefixes, one line per input line
  OutputFormat format;
  bool progress = false;        // the progress bar on stderr
  bool quiet = false;           // failed lines counted, not listed
  int chunk_lines = 20000;      // lines read before translating (the progress bar's total)
  int request_sentences = 64;
  int timeout_seconds = 300;    // per request
};

// Returns the exit status: 0, 1 if some lines failed, 2 if the server or the options could not
// be used.
int TranslateRemote(const RemoteTranslateOptions& options, std::istream& in, std::ostream& out);

}  // namespace tnmt::cli

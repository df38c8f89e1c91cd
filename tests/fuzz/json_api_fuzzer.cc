// libFuzzer target for the JSON API's request decoding: tnmt::server::web::ParseTranslateRequest
// (the body of POST /api/translate -> tnmt.v1.TranslateRequest) and tnmt::CheckJsonLimits, the
// byte-level check every outside JSON goes through first.
//
// Beyond "no crash, no sanitizer report", each input checks:
//   - ParseTranslateRequest returns OK or INVALID_ARGUMENT, never another code, never throws;
//     a request it accepts serializes, and a body CheckJsonLimits refuses at the API's depth
//     (32) is never accepted;
//   - CheckJsonLimits returns OK or INVALID_ARGUMENT; for text that is valid JSON of depth D it
//     accepts max_depth = D and refuses max_depth = D - 1, and it refuses max_bytes below the
//     size of the text;
//   - no accepted body holds a NUL byte (the JSON parser would take it for the end of the text).
// Built with clang's -fsanitize=fuzzer,address,undefined by tests/fuzz/bazel-fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/core/json_limits.h"
#include "server/web/web_api.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "json_api_fuzzer: property violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Deepest nesting of arrays and objects in JSON text, as CheckJsonLimits counts it (a scalar 0,
// `[1]` 1), from the parser's events rather than the parsed value: with duplicate keys the value
// keeps only the last one, which may be shallower than the text.
class DepthCounter : public nlohmann::json::json_sax_t {
 public:
  int deepest() const { return deepest_; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override { return false; }

 private:
  bool Open() {
    if (++depth_ > deepest_) deepest_ = depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  int deepest_ = 0;
};

void CheckLimitsProperties(absl::string_view text) {
  tnmt::JsonLimits limits;
  const absl::Status status = tnmt::CheckJsonLimits(text, "the input", limits);
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) {
    Fail("CheckJsonLimits returned " + status.ToString());
  }
  if (!text.empty()) {
    tnmt::JsonLimits small;
    small.max_bytes = text.size() - 1;
    if (tnmt::CheckJsonLimits(text, "the input", small).ok()) {
      Fail("CheckJsonLimits accepted " + std::to_string(text.size()) + " bytes with max_bytes " +
           std::to_string(small.max_bytes));
    }
  }
  // nlohmann::json stops at a NUL byte as if the text ended there, so its depth would be that
  // of a prefix.
  if (!status.ok() || text.find('\0') != absl::string_view::npos) return;
  DepthCounter counter;
  bool valid = false;
  try {
    valid = nlohmann::json::sax_parse(text.begin(), text.end(), &counter);
  } catch (const nlohmann::json::exception&) {
  }
  if (!valid) return;  // malformed JSON: the depth count is only defined for valid text
  const int depth = counter.deepest();
  tnmt::JsonLimits exact;
  exact.max_depth = depth;
  if (const absl::Status s = tnmt::CheckJsonLimits(text, "the input", exact); !s.ok()) {
    Fail("CheckJsonLimits refused JSON of depth " + std::to_string(depth) + " with max_depth " +
         std::to_string(depth) + ": " + s.ToString());
  }
  if (depth > 0) {
    tnmt::JsonLimits shallower;
    shallower.max_depth = depth - 1;
    if (tnmt::CheckJsonLimits(text, "the input", shallower).ok()) {
      Fail("CheckJsonLimits accepted JSON of depth " + std::to_string(depth) + " with max_depth " +
           std::to_string(depth - 1));
    }
  }
}

void CheckParseProperties(absl::string_view body) {
  absl::StatusOr<tnmt::v1::TranslateRequest> request;
  try {
    request = tnmt::server::web::ParseTranslateRequest(body);
  } catch (const std::exception& e) {
    Fail(std::string("ParseTranslateRequest threw: ") + e.what());
  } catch (...) {
    Fail("ParseTranslateRequest threw a non-std exception");
  }
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("ParseTranslateRequest returned " + request.status().ToString());
    }
    if (request.status().message().empty()) Fail("ParseTranslateRequest: INVALID_ARGUMENT without a message");
    return;
  }
  if (body.find('\0') != absl::string_view::npos) Fail("ParseTranslateRequest accepted a body holding a NUL byte");
  tnmt::JsonLimits api;
  api.max_depth = 32;
  if (!tnmt::CheckJsonLimits(body, "the request body", api).ok()) {
    Fail("ParseTranslateRequest accepted a body beyond the API's JSON limits");
  }
  std::string wire;
  if (!request->SerializeToString(&wire)) Fail("an accepted TranslateRequest does not serialize");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  CheckLimitsProperties(text);
  CheckParseProperties(text);
  return 0;
}

// A request prepared for one generation of a model and submitted after a reload swapped in a
// generation with another vocabulary (a training job republishing a name, an operator
// replacing the directory): it must be prepared again and translated by the new model, not
// decoded from the old vocabulary's piece ids.
#include "server/request.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <future>

#include <gtest/gtest.h>

#include "engine/runtime/translator.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/status_mapping.h"

namespace tnmt::server {
namespace {

namespace fs = std::filesystem;

void CopyModel(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (const char* f : {"config.json", "model.safetensors", "spm.model"}) fs::copy_file(from + "/" + f, to + "/" + f);
}

TEST(RequestTest, ResubmittedAfterAReloadWithAnotherVocabulary) {
  std::string tmpl = (fs::temp_directory_path() / "request_test.XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl + "/m";
  CopyModel("tests/golden/data/tiny", dir);  // vocabulary of 256 pieces

  ServerMetrics metrics{ServerMetricsOptions{}};
  ModelRegistry registry(SchedulerOptions{}, &metrics);
  ASSERT_TRUE(registry.Add("m", dir));
  ASSERT_TRUE(registry.Load("m").ok());

  google::protobuf::RepeatedPtrField<std::string> texts;
  texts.Add("A man is riding a bicycle.");
  texts.Add("   ");
  texts.Add("Two dogs play in the snow.");
  auto p = PrepareRequest(registry, ServiceLimits{}, "m", tnmt::v1::DecodingOptions{}, texts);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->indices, (std::vector<int>{0, 2}));

  CopyModel("models/demo", dir);  // English->German, 8000 pieces
  ASSERT_TRUE(registry.Load("m").ok());

  std::vector<std::promise<SentenceResult>> results(p->indices.size());
  absl::Status s = SubmitRequest(registry, *p, [&](int i) {
    SentenceTask t;
    t.done = [&results, i](SentenceResult r) { results[i].set_value(std::move(r)); };
    return t;
  });
  ASSERT_TRUE(s.ok()) << s;

  auto demo = LoadModelDirectory("models/demo");
  ASSERT_TRUE(demo.ok()) << demo.status();
  Translator translator(*demo);
  TranslationOptions o;
  o.decode = DecodeOptions::FromConfig((*demo)->config);
  auto expected = translator.Translate({texts[0], texts[2]}, o);
  ASSERT_TRUE(expected.ok());
  for (size_t i = 0; i < results.size(); ++i) {
    SentenceResult r = results[i].get_future().get();
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_FALSE(r.hypotheses.empty());
    ASSERT_TRUE((*expected)[i].ok());
    EXPECT_EQ(r.hypotheses[0].text, (*expected)[i]->hypotheses[0].text) << texts[p->indices[i]];
  }
  registry.DrainAll();
  fs::remove_all(tmpl);
}

// The registry's refusals carry their ErrorInfo reason: an unknown name, a model still
// loading (with RetryInfo: worth retrying shortly), one whose load failed (no RetryInfo), and
// a draining server.
TEST(RequestTest, ModelStateReasons) {
  ServerMetrics metrics{ServerMetricsOptions{}};
  ModelRegistry registry(SchedulerOptions{}, &metrics);
  ASSERT_TRUE(registry.Add("loading", "tests/golden/data/tiny"));
  ASSERT_TRUE(registry.Add("broken", "/nonexistent/model"));
  EXPECT_FALSE(registry.Load("broken").ok());
  auto reason = [](const absl::Status& s) { return ReasonOf(s); };
  auto unknown = registry.Get("nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reason(unknown.status()), "UNKNOWN_MODEL");
  auto loading = registry.Get("loading");
  EXPECT_EQ(loading.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(reason(loading.status()), "MODEL_NOT_READY");
  EXPECT_TRUE(loading.status().GetPayload("type.googleapis.com/google.rpc.RetryInfo").has_value());
  auto broken = registry.Get("broken");
  EXPECT_EQ(reason(broken.status()), "MODEL_FAILED");
  EXPECT_FALSE(broken.status().GetPayload("type.googleapis.com/google.rpc.RetryInfo").has_value());
  registry.DrainAll();
  EXPECT_EQ(reason(registry.Get("loading").status()), "SHUTTING_DOWN");
  // Through PrepareRequest, the same reasons reach the client.
  google::protobuf::RepeatedPtrField<std::string> texts;
  texts.Add("x");
  EXPECT_EQ(ReasonOf(PrepareRequest(registry, ServiceLimits{}, "nope", {}, texts).status()), "UNKNOWN_MODEL");
}

// A text the tokenizer refuses for its bytes is INVALID_UTF8.
TEST(RequestTest, InvalidUtf8Reason) {
  ServerMetrics metrics{ServerMetricsOptions{}};
  ModelRegistry registry(SchedulerOptions{}, &metrics);
  ASSERT_TRUE(registry.Add("m", "tests/golden/data/tiny"));
  ASSERT_TRUE(registry.Load("m").ok());
  google::protobuf::RepeatedPtrField<std::string> texts;
  texts.Add("fine");
  texts.Add("bad \xc3\x28 bytes");
  auto p = PrepareRequest(registry, ServiceLimits{}, "m", {}, texts);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(p.status()), "INVALID_UTF8");
  EXPECT_EQ(FieldOf(p.status().message()), "texts[1]");
  EXPECT_EQ(FieldOf("options.beam_size: must be in [1, 64], got 0"), "options.beam_size");
  EXPECT_EQ(FieldOf("target_prefixes[12]: bad"), "target_prefixes[12]");
  EXPECT_EQ(FieldOf("no model named x"), "");
  EXPECT_EQ(FieldOf("model \"a\": broken"), "");
  EXPECT_EQ(FieldOf("texts[]: x"), "");
}

// Options are checked through the decoding-option table, in the request's terms: a message
// about one field starts with it (its BadRequest field), a rule about several options names the
// one it refuses in a field violation; beam_size and n_best are checked as they apply.
TEST(RequestTest, OptionsRefusedInTheRequestsTerms) {
  ServerMetrics metrics{ServerMetricsOptions{}};
  ModelRegistry registry(SchedulerOptions{}, &metrics);
  ASSERT_TRUE(registry.Add("m", "tests/golden/data/tiny"));  // beam 4, 2 decoder layers
  ASSERT_TRUE(registry.Load("m").ok());
  google::protobuf::RepeatedPtrField<std::string> texts;
  texts.Add("fine");
  auto refusal = [&](const std::function<void(tnmt::v1::DecodingOptions*)>& edit) {
    tnmt::v1::DecodingOptions o;
    edit(&o);
    return PrepareRequest(registry, ServiceLimits{}, "m", o, texts).status();
  };
  const std::string beam = "the hypotheses come from the beam";
  absl::Status s = refusal([](auto* o) { o->set_beam_size(0); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "options.beam_size: must be in [1, 64], got 0");
  EXPECT_EQ(FieldOf(s.message()), "options.beam_size");
  EXPECT_EQ(refusal([](auto* o) { o->set_n_best(5); }).message(), "options.n_best: 5 exceeds options.beam_size 4 (" + beam + ")");
  EXPECT_EQ(refusal([](auto* o) { o->set_sampling_topk(0); o->set_n_best(2); }).message(),
            "options.n_best: 2 exceeds options.beam_size 1 (" + beam + ")");
  EXPECT_EQ(refusal([](auto* o) { o->set_max_length(-5); }).message(), "options.max_length: must be in [0, 10000], got -5");
  EXPECT_EQ(refusal([](auto* o) { o->set_min_length(-1); }).message(), "options.min_length: must be >= 0, got -1");
  EXPECT_EQ(refusal([](auto* o) { o->set_length_penalty(NAN); }).message(),
            "options.length_penalty: must be in [-10, 10], got nan");
  EXPECT_EQ(refusal([](auto* o) { o->set_alignment_layer(2); }).message(),
            "options.alignment_layer: 2 is outside [0, 2) (the model's decoder layers)");
  s = refusal([](auto* o) { o->set_beam_size(4); o->set_sampling_topk(5); });
  EXPECT_EQ(s.message(), "options.sampling needs beam_size 1, got 4 (sampling_topk 5)");
  EXPECT_TRUE(s.GetPayload("type.googleapis.com/google.rpc.BadRequest").has_value()) << "names options.beam_size";
  EXPECT_TRUE(refusal([](auto* o) { o->set_sampling_topk(0); o->set_sampling_topp(0.5f); o->set_n_best(0); }).ok());
  EXPECT_TRUE(refusal([](auto* o) { o->set_alignment_layer(1); o->set_max_length(5); o->set_min_length(5); }).ok());
  registry.DrainAll();
}

}  // namespace
}  // namespace tnmt::server

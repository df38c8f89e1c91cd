// Job spec validation: required fields, ranges, and path confinement under the data root
// ("..", absolute paths outside, symlinks out of the root, missing files), size limits, and
// the trainer config a valid spec turns into.
#include "server/jobs/job_spec.h"

#include <sys/stat.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace tnmt::server::jobs {
namespace {

namespace fs = std::filesystem;

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "job_spec_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/data";
    fs::create_directories(root_ + "/corpus");
    for (const char* f : {"corpus/train.en", "corpus/train.de", "corpus/dev.en", "corpus/dev.de"}) {
      std::ofstream(root_ + "/" + f) << "a b c\n";
    }
    std::ofstream(dir_ + "/secret.txt") << "outside\n";
    fs::create_symlink(dir_ + "/secret.txt", root_ + "/corpus/escape.en");
    fs::create_symlink(root_ + "/corpus/train.en", root_ + "/corpus/inside-link.en");
    policy_.data_root = root_;
    policy_.reserved_models = {"demo"};
  }
  void TearDown() override { fs::remove_all(dir_); }

  tnmt::v1::JobSpec Valid() const {
    tnmt::v1::JobSpec s;
    s.set_name("tiny");
    s.mutable_data()->set_train_source("corpus/train.en");
    s.mutable_data()->set_train_target("corpus/train.de");
    s.mutable_data()->set_valid_source("corpus/dev.en");
    s.mutable_data()->set_valid_target("corpus/dev.de");
    s.mutable_model()->set_preset("tiny");
    s.mutable_vocabulary()->set_vocab_size(60);
    s.mutable_stop()->set_max_steps(10);
    s.mutable_publish()->set_model_name("tiny-en-de");
    return s;
  }

  std::string dir_, root_;
  SpecPolicy policy_;
};

TEST_F(JobSpecTest, ValidSpecPassesAndBecomesATrainerConfig) {
  ASSERT_TRUE(ValidateJobSpec(Valid(), policy_).ok()) << ValidateJobSpec(Valid(), policy_);
  auto j = TrainConfigJson(Valid(), root_, "/state/jobs/job-000001/train", 3);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["train_source"], fs::canonical(root_ + "/corpus/train.en").string());
  EXPECT_EQ((*j)["save_dir"], "/state/jobs/job-000001/train");
  EXPECT_EQ((*j)["max_steps"], 10);
  EXPECT_EQ((*j)["threads"], 3);
  EXPECT_EQ((*j)["preset"], "tiny");
  EXPECT_EQ((*j)["vocab_size"], 60);
  EXPECT_TRUE((*j)["valid_bleu"].get<bool>());
  EXPECT_FALSE(j->contains("d_model"));  // unset overrides keep the preset's
  EXPECT_FALSE(j->contains("attention_dropout"));  // off unless asked for
  tnmt::v1::JobSpec regularized = Valid();
  regularized.mutable_model()->set_attention_dropout(0.1f);
  regularized.mutable_model()->set_activation_dropout(0.2f);
  regularized.mutable_model()->set_rdrop_alpha(5.0f);
  auto rj = TrainConfigJson(regularized, root_, "/x", 1);
  ASSERT_TRUE(rj.ok()) << rj.status();
  EXPECT_FLOAT_EQ((*rj)["attention_dropout"].get<float>(), 0.1f);
  EXPECT_FLOAT_EQ((*rj)["activation_dropout"].get<float>(), 0.2f);
  EXPECT_FLOAT_EQ((*rj)["rdrop_alpha"].get<float>(), 5.0f);
  EXPECT_FALSE(j->contains("subword_nbest"));  // subword sampling: off unless asked for
  regularized.mutable_vocabulary()->set_subword_nbest(16);
  regularized.mutable_vocabulary()->set_subword_alpha(0.2f);
  rj = TrainConfigJson(regularized, root_, "/x", 1);
  ASSERT_TRUE(rj.ok()) << rj.status();
  EXPECT_EQ((*rj)["subword_nbest"], 16);
  EXPECT_FLOAT_EQ((*rj)["subword_alpha"].get<float>(), 0.2f);
  EXPECT_EQ(PublishedModelName(Valid(), "job-000001"), "tiny-en-de");
  tnmt::v1::JobSpec unnamed = Valid();
  unnamed.mutable_publish()->clear_model_name();
  EXPECT_EQ(PublishedModelName(unnamed, "job-000001"), "job-000001");
  EXPECT_EQ(DeviceKey(Valid()), "cpu");
}

TEST_F(JobSpecTest, SymlinkInsideTheRootIsFine) {
  auto spec = Valid();
  spec.mutable_data()->set_train_source("corpus/inside-link.en");
  EXPECT_TRUE(ValidateJobSpec(spec, policy_).ok());
}

TEST_F(JobSpecTest, PathsAreRelativeRegularFiles) {
  ASSERT_EQ(::mkfifo((root_ + "/corpus/pipe.en").c_str(), 0644), 0);
  struct Case {
    std::string path;
    std::string needle;
  } cases[] = {
      {root_ + "/corpus/train.en", "relative to the data root"},  // absolute, even inside the root
      {"corpus/pipe.en", "is a FIFO"},                            // would hold the run slot at step 0
      {"corpus", "is a directory"},
  };
  for (const Case& c : cases) {
    auto spec = Valid();
    spec.mutable_data()->set_train_source(c.path);
    absl::Status s = ValidateJobSpec(spec, policy_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.path << ": " << s;
    EXPECT_NE(s.message().find(c.needle), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("data.train_source"), absl::string_view::npos) << s;
  }
}

TEST_F(JobSpecTest, SizesAreBounded) {
  const std::pair<std::function<void(tnmt::v1::JobSpec*)>, std::string> cases[] = {
      {[](auto* s) { s->mutable_model()->set_d_model(1000000); }, "model.d_model 1000000 is outside [0, 8192]"},
      {[](auto* s) { s->mutable_model()->set_encoder_layers(1000); }, "model.encoder_layers"},
      {[](auto* s) { s->mutable_model()->set_d_ff(-4); }, "model.d_ff"},
      {[](auto* s) { s->mutable_vocabulary()->set_vocab_size(50000000); }, "vocabulary.vocab_size"},
      {[](auto* s) { s->mutable_stop()->set_max_steps(int64_t{1} << 40); }, "stop.max_steps"},
      {[](auto* s) { s->mutable_schedule()->set_max_tokens(1 << 30); }, "schedule.max_tokens"},
  };
  for (const auto& [change, needle] : cases) {
    auto spec = Valid();
    change(&spec);
    absl::Status s = ValidateJobSpec(spec, policy_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
  }
}

TEST_F(JobSpecTest, PathsAreConfinedToTheDataRoot) {
  struct Case {
    std::string path;
    absl::StatusCode code;
  } cases[] = {
      {"../secret.txt", absl::StatusCode::kInvalidArgument},
      {"corpus/../../secret.txt", absl::StatusCode::kInvalidArgument},
      {"corpus/..", absl::StatusCode::kInvalidArgument},
      {"/etc/passwd", absl::StatusCode::kPermissionDenied},
      {"corpus/escape.en", absl::StatusCode::kPermissionDenied},
      {"corpus/missing.en", absl::StatusCode::kNotFound},
      {std::string("corpus/train.en\0x", 17), absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    auto spec = Valid();
    spec.mutable_data()->set_train_target(c.path);
    absl::Status s = ValidateJobSpec(spec, policy_);
    EXPECT_EQ(s.code(), c.code) << c.path << ": " << s;
    EXPECT_NE(s.message().find("data.train_target"), absl::string_view::npos) << s;
  }
  auto spec = Valid();
  spec.mutable_vocabulary()->set_spm_model("../secret.txt");
  EXPECT_EQ(ValidateJobSpec(spec, policy_).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobSpecTest, SymlinkSwappedAfterSubmissionIsCaughtAtLaunch) {
  auto spec = Valid();
  spec.mutable_data()->set_train_source("corpus/inside-link.en");
  ASSERT_TRUE(ValidateJobSpec(spec, policy_).ok());
  fs::remove(root_ + "/corpus/inside-link.en");
  fs::create_symlink(dir_ + "/secret.txt", root_ + "/corpus/inside-link.en");
  EXPECT_EQ(TrainConfigJson(spec, root_, "/x", 1).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(JobSpecTest, FieldErrorsNameTheField) {
  struct Case {
    std::function<void(tnmt::v1::JobSpec*)> change;
    absl::StatusCode code;
    std::string needle;
  } cases[] = {
      {[](auto* s) { s->mutable_data()->clear_train_source(); }, absl::StatusCode::kInvalidArgument, "data.train_source is required"},
      {[](auto* s) { s->mutable_data()->clear_valid_target(); }, absl::StatusCode::kInvalidArgument, "give both or neither"},
      {[](auto* s) { s->mutable_stop()->set_max_steps(0); }, absl::StatusCode::kInvalidArgument, "stop.max_steps"},
      {[](auto* s) { s->mutable_device()->set_type("tpu"); }, absl::StatusCode::kInvalidArgument, "device.type"},
      {[](auto* s) { s->mutable_device()->set_type("cuda"); }, absl::StatusCode::kFailedPrecondition, "no CUDA"},
      {[](auto* s) { s->mutable_device()->set_dtype("int8"); }, absl::StatusCode::kInvalidArgument, "device.dtype \"int8\""},
      {[](auto* s) { s->mutable_device()->set_dtype("bfloat16"); }, absl::StatusCode::kInvalidArgument, "needs device.type cuda"},
      {[](auto* s) { s->mutable_publish()->set_model_name("../evil"); }, absl::StatusCode::kInvalidArgument, "publish.model_name"},
      {[](auto* s) { s->mutable_publish()->set_model_name("demo"); }, absl::StatusCode::kAlreadyExists, "started with"},
      {[](auto* s) { s->mutable_publish()->set_dtype("int8"); }, absl::StatusCode::kInvalidArgument, "publish.dtype"},
      {[](auto* s) { s->mutable_model()->set_preset("huge"); }, absl::StatusCode::kInvalidArgument, "huge"},
      {[](auto* s) { s->set_name(std::string(200, 'n')); }, absl::StatusCode::kInvalidArgument, "name"},
  };
  for (const Case& c : cases) {
    auto spec = Valid();
    c.change(&spec);
    absl::Status s = ValidateJobSpec(spec, policy_);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_NE(s.message().find(c.needle), absl::string_view::npos) << s;
  }
}

TEST_F(JobSpecTest, CudaJobsTrainOnTheGpuInTheirPrecision) {
  SpecPolicy gpu = policy_;
  gpu.cuda_available = true;
  auto spec = Valid();
  spec.mutable_device()->set_type("cuda");
  spec.mutable_device()->set_dtype("bfloat16");
  ASSERT_TRUE(ValidateJobSpec(spec, gpu).ok()) << ValidateJobSpec(spec, gpu);
  auto j = TrainConfigJson(spec, root_, "/x", 1);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["device"], "cuda:0");
  EXPECT_EQ((*j)["dtype"], "bfloat16");
  EXPECT_EQ(DeviceKey(spec), "cuda:0");
  auto cpu = TrainConfigJson(Valid(), root_, "/x", 1);
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->contains("device"));
}

TEST_F(JobSpecTest, OversizeSpecIsResourceExhausted) {
  auto spec = Valid();
  spec.mutable_data()->set_source_language(std::string(70 << 10, 'x'));
  absl::Status s = ValidateJobSpec(spec, policy_);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("limit is 65536"), absl::string_view::npos) << s;
}

TEST(SpecWithDefaultsTest, UnsetFieldsGetTheValuesTheJobTrainsWith) {
  tnmt::v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_model()->set_d_ff(128);
  spec.mutable_schedule()->set_warmup_steps(50);
  spec.mutable_stop()->set_max_steps(200);
  const tnmt::v1::JobSpec full = SpecWithDefaults(spec);
  EXPECT_EQ(full.model().d_model(), 32);   // the tiny preset's
  EXPECT_EQ(full.model().d_ff(), 128);     // given: kept
  EXPECT_FLOAT_EQ(full.model().dropout(), 0.1f);
  EXPECT_EQ(full.vocabulary().vocab_size(), 8000);
  EXPECT_EQ(full.schedule().warmup_steps(), 50);
  EXPECT_EQ(full.schedule().max_tokens(), 4096);
  EXPECT_EQ(full.schedule().keep_last(), 5);
  EXPECT_EQ(full.stop().max_epochs(), 0);  // 0 means no limit: kept
  EXPECT_EQ(full.device().type(), "cpu");
  EXPECT_EQ(full.device().threads(), 0);   // the server's --job-threads: not known here
  EXPECT_EQ(full.publish().average_last(), kDefaultAverageLast);
  EXPECT_EQ(full.on_interrupt(), tnmt::v1::ON_INTERRUPT_RESUME);
  EXPECT_EQ(SpecWithDefaults(full).DebugString(), full.DebugString());
}

TEST(ModelNameTest, Rules) {
  EXPECT_TRUE(IsValidModelName("en-de_v1.2"));
  for (const char* bad : {"", ".", "..", "a/b", "a b", "ü"}) EXPECT_FALSE(IsValidModelName(bad)) << bad;
  EXPECT_FALSE(IsValidModelName(std::string(65, 'a')));
}

}  // namespace
}  // namespace tnmt::server::jobs

// Checkpoint save/load: bit-exact round trips, pruning, crash debris that is never listed or
// loaded, kill -9 during saves, clear errors naming the broken file, and a checkpoint that is
// also a model directory.
#include "trainer/checkpoint/checkpoint.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>

#include <gtest/gtest.h>

#include "engine/model/safetensors.h"
#include "engine/runtime/loaded_model.h"
#include "trainer/checkpoint/durable_file.h"
#include "trainer/checkpoint/test_util.h"

namespace tnmt {
namespace {

namespace fs = std::filesystem;
using testing::BitEqual;
using testing::FreshTestDir;
using testing::RandomTinyCheckpoint;
using testing::ReadFileForTest;
using testing::WriteFileForTest;

std::vector<std::string> Names(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const std::string& d : dirs) names.push_back(fs::path(d).filename().string());
  return names;
}

std::vector<std::string> Listed(const std::string& root) {
  auto dirs = ListCheckpoints(root);
  EXPECT_TRUE(dirs.ok()) << dirs.status();
  return dirs.ok() ? Names(*dirs) : std::vector<std::string>{};
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void ExpectSameTensors(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    EXPECT_TRUE(BitEqual(t, it->second)) << name;
  }
}

void ExpectSameCheckpoint(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.config.ToJson(), b.config.ToJson());
  ExpectSameTensors(a.params, b.params);
  ExpectSameTensors(a.adam_m, b.adam_m);
  ExpectSameTensors(a.adam_v, b.adam_v);
  EXPECT_EQ(a.state.step, b.state.step);
  EXPECT_EQ(a.state.epoch, b.state.epoch);
  EXPECT_EQ(a.state.batch_in_epoch, b.state.batch_in_epoch);
  EXPECT_EQ(a.state.seed, b.state.seed);
  EXPECT_TRUE(SameBits(a.state.tokens_seen, b.state.tokens_seen));
  EXPECT_TRUE(SameBits(a.state.elapsed_seconds, b.state.elapsed_seconds));
  EXPECT_TRUE(SameBits(a.state.loss_scale, b.state.loss_scale));
  EXPECT_EQ(a.state.extra, b.state.extra);
}

// The error of `result` mentions every fragment.
template <typename T>
void ExpectError(const absl::StatusOr<T>& result, std::initializer_list<std::string> fragments) {
  ASSERT_FALSE(result.ok());
  const std::string msg(result.status().message());
  for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = FreshTestDir(); }
  Checkpoint Make(int64_t step, uint32_t seed = 1) {
    auto c = RandomTinyCheckpoint(step, seed);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  void Save(const Checkpoint& c, int keep_last = 0) {
    absl::Status s = SaveCheckpoint(root_, c, keep_last);
    ASSERT_TRUE(s.ok()) << s;
  }
  std::string Dir(int64_t step) const { return root_ + "/" + CheckpointDirName(step); }
  std::vector<std::string> RootEntries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(root_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string root_;
};

TEST_F(CheckpointTest, DirectoryNames) {
  EXPECT_EQ(CheckpointDirName(0), "step-00000000");
  EXPECT_EQ(CheckpointDirName(1234), "step-00001234");
  EXPECT_EQ(CheckpointDirName(123456789), "step-123456789");
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  const Checkpoint saved = Make(100, 7);
  Save(saved);
  EXPECT_EQ(Listed(root_), std::vector<std::string>{"step-00000100"});
  auto loaded = LoadCheckpoint(Dir(100));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameCheckpoint(saved, *loaded);
  EXPECT_EQ(loaded->spm_model_path, Dir(100) + "/spm.model");
  EXPECT_EQ(ReadFileForTest(loaded->spm_model_path), ReadFileForTest(saved.spm_model_path));
  EXPECT_EQ(ReadFileForTest(root_ + "/latest"), "step-00000100\n");
  EXPECT_EQ(RootEntries(), (std::vector<std::string>{"latest", "step-00000100"}));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(Dir(100))) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors",
                                             "optimizer.safetensors", "spm.model",
                                             "trainer_state.json"}));

  auto latest = LoadLatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectSameCheckpoint(saved, *latest);
  // A loaded checkpoint saves again unchanged (resume, then save).
  const std::string again = root_ + "/again";
  Checkpoint resumed = *std::move(loaded);
  ASSERT_TRUE(SaveCheckpoint(again, resumed, 0).ok());
  auto reloaded = LoadCheckpoint(again + "/step-00000100");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ExpectSameCheckpoint(saved, *reloaded);
}

TEST_F(CheckpointTest, CheckpointIsAModelDirectory) {
  const Checkpoint saved = Make(42, 3);
  Save(saved);
  auto model = LoadModelDirectory(Dir(42));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->get()->config.ToJson(), saved.config.ToJson());
  ExpectSameTensors(model->get()->weights.ToTensors(model->get()->config), saved.params);
}

TEST_F(CheckpointTest, KeepLastPrunesTheOldest) {
  const Checkpoint c = Make(0);
  for (int64_t step : {100, 200, 300, 400, 500}) {
    Checkpoint s = c;
    s.state.step = step;
    Save(s, /*keep_last=*/3);
  }
  EXPECT_EQ(Listed(root_), (std::vector<std::string>{"step-00000300", "step-00000400", "step-00000500"}));
  EXPECT_EQ(ReadFileForTest(root_ + "/latest"), "step-00000500\n");
  EXPECT_EQ(RootEntries(), (std::vector<std::string>{"latest", "step-00000300", "step-00000400",
                                                     "step-00000500"}));
  // The checkpoint just written survives even when it is the oldest step (a restarted run).
  Checkpoint old = c;
  old.state.step = 50;
  Save(old, 3);
  EXPECT_EQ(Listed(root_), (std::vector<std::string>{"step-00000050", "step-00000400", "step-00000500"}));
  EXPECT_EQ(ReadFileForTest(root_ + "/latest"), "step-00000500\n");
  // keep_last 1 leaves only the newest write; <= 0 keeps everything.
  Checkpoint next = c;
  next.state.step = 600;
  Save(next, 0);
  EXPECT_EQ(Listed(root_).size(), 4u);
  next.state.step = 700;
  Save(next, 1);
  EXPECT_EQ(Listed(root_), std::vector<std::string>{"step-00000700"});
}

TEST_F(CheckpointTest, SavingTheSameStepReplacesIt) {
  Save(Make(100, 1));
  const Checkpoint second = Make(100, 2);
  Save(second);
  auto loaded = LoadLatestCheckpoint(root_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameCheckpoint(second, *loaded);
  EXPECT_EQ(RootEntries(), (std::vector<std::string>{"latest", "step-00000100"}));
}

TEST_F(CheckpointTest, ListingSortsByStepAndIgnoresEverythingElse) {
  const Checkpoint c = Make(0);
  for (int64_t step : {100000000, 99999999, 7}) {
    Checkpoint s = c;
    s.state.step = step;
    Save(s);
  }
  fs::create_directories(root_ + "/step-abc");
  fs::create_directories(root_ + "/step-");
  fs::create_directories(root_ + "/averaged");
  WriteFileForTest(root_ + "/step-00000009", "a file, not a directory");
  EXPECT_EQ(Listed(root_), (std::vector<std::string>{"step-00000007", "step-99999999", "step-100000000"}));
  auto latest = LoadLatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->state.step, 100000000);
}

TEST_F(CheckpointTest, MissingRootHasNoCheckpoints) {
  auto dirs = ListCheckpoints(root_ + "/nothing-here");
  ASSERT_TRUE(dirs.ok());
  EXPECT_TRUE(dirs->empty());
  auto latest = LoadLatestCheckpoint(root_ + "/nothing-here");
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadLatestCheckpoint(root_).status().code(), absl::StatusCode::kNotFound);
  WriteFileForTest(root_ + "/file", "x");
  EXPECT_FALSE(ListCheckpoints(root_ + "/file").ok());
  ExpectError(LoadCheckpoint(root_ + "/step-00000001"), {"step-00000001", "does not exist"});
}

// What a crash leaves behind: a half-written temp directory (truncated files, a safetensors
// .tmp), and a half-deleted directory from pruning. None of it is listed or loaded; the
// previous checkpoint stays the latest, and the next save sweeps the debris away.
TEST_F(CheckpointTest, CrashDebrisIsNeverListedOrLoaded) {
  const Checkpoint first = Make(100, 1);
  Save(first);
  const std::string half = root_ + "/.tmp-step-00000200-12345";
  fs::create_directories(half);
  fs::copy_file(Dir(100) + "/config.json", half + "/config.json");
  const std::string model = ReadFileForTest(Dir(100) + "/model.safetensors");
  WriteFileForTest(half + "/model.safetensors", model.substr(0, model.size() / 2));
  WriteFileForTest(half + "/optimizer.safetensors.tmp", "partial");
  const std::string deleting = root_ + "/.tmp-delete-step-00000050-12345";
  fs::create_directories(deleting);
  WriteFileForTest(deleting + "/trainer_state.json", "{");
  WriteFileForTest(root_ + "/.tmp-latest-12345", "step-0000");

  EXPECT_EQ(Listed(root_), std::vector<std::string>{"step-00000100"});
  auto latest = LoadLatestCheckpoint(root_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectSameCheckpoint(first, *latest);

  Checkpoint second = first;
  second.state.step = 200;
  Save(second, 0);
  EXPECT_EQ(RootEntries(), (std::vector<std::string>{"latest", "step-00000100", "step-00000200"}));
  EXPECT_EQ(LoadLatestCheckpoint(root_)->state.step, 200);
}

// A real kill -9 at random moments of repeated save/prune cycles, each run resuming from the
// latest checkpoint: whatever is listed afterwards loads and holds what was saved for its step.
TEST_F(CheckpointTest, KillDashNineDuringSavesLeavesOnlyLoadableCheckpoints) {
  const Checkpoint base = Make(0, 9);
  const std::string tiny_spm = base.spm_model_path;
  const std::string param = base.params.begin()->first;
  int64_t last_step = 0;
  for (int round = 0; round < 8; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto latest = LoadLatestCheckpoint(root_);
      if (!latest.ok() && latest.status().code() != absl::StatusCode::kNotFound) ::_exit(2);
      Checkpoint c = latest.ok() ? *std::move(latest) : base;
      c.spm_model_path = tiny_spm;  // the loaded one's own copy may be pruned meanwhile
      for (int64_t step = c.state.step + 1; step < c.state.step + 100000; ++step) {
        Checkpoint s = c;
        s.state.step = step;
        s.params[param].f32()[0] = static_cast<float>(step);
        s.adam_v[param].f32()[0] = static_cast<float>(2 * step);
        if (!SaveCheckpoint(root_, s, /*keep_last=*/2).ok()) ::_exit(3);
      }
      ::_exit(0);
    }
    ::usleep(20000 + 15000 * round);
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);

    auto dirs = ListCheckpoints(root_);
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    EXPECT_LE(dirs->size(), 3u);  // keep 2, plus one if killed between rename and prune
    for (const std::string& dir : *dirs) {
      auto c = LoadCheckpoint(dir);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->params.at(param).f32()[0], static_cast<float>(c->state.step));
      EXPECT_EQ(c->adam_v.at(param).f32()[0], static_cast<float>(2 * c->state.step));
      EXPECT_EQ(c->state.seed, base.state.seed);
      EXPECT_TRUE(BitEqual(c->adam_m.at(param), base.adam_m.at(param)));
    }
    if (!dirs->empty()) {
      auto latest = LoadLatestCheckpoint(root_);
      ASSERT_TRUE(latest.ok());
      EXPECT_GE(latest->state.step, last_step);
      last_step = latest->state.step;
    }
  }
  EXPECT_GT(last_step, 0);
}

// Rewrites one tensor file of a saved checkpoint through `edit`.
void EditTensors(const std::string& path, DType stored,
                 const std::function<void(std::map<std::string, Tensor>*)>& edit) {
  auto tensors = ReadSafetensors(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::map<std::string, Tensor> plain;
  for (auto& [k, v] : *tensors) plain[k] = v.value;
  edit(&plain);
  ASSERT_TRUE(WriteSafetensors(path, plain, stored).ok());
}

TEST_F(CheckpointTest, CorruptOptimizerStateNamesTheFile) {
  const Checkpoint c = Make(100);
  const std::string name = c.params.begin()->first;
  const std::string path = Dir(100) + "/optimizer.safetensors";
  Save(c);
  const std::string good = ReadFileForTest(path);

  WriteFileForTest(path, good.substr(0, good.size() - 100));
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors", "truncated"});
  ExpectError(LoadLatestCheckpoint(root_), {"optimizer.safetensors"});
  WriteFileForTest(path, "garbage");
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors"});
  fs::remove(path);
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors"});

  WriteFileForTest(path, good);
  EditTensors(path, DType::kFloat32, [&](auto* t) { t->erase("v." + name); });
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors", "missing", "v." + name});

  WriteFileForTest(path, good);
  EditTensors(path, DType::kFloat32, [&](auto* t) {
    (*t)["m." + name] = *Tensor::Zeros({static_cast<int64_t>(c.params.at(name).numel()) + 1});
  });
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors", "m." + name, "shape"});

  WriteFileForTest(path, good);
  EditTensors(path, DType::kFloat32, [&](auto* t) { (*t)["m.no.such.param"] = *Tensor::Zeros({1}); });
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors", "unexpected", "m.no.such.param"});

  WriteFileForTest(path, good);
  EditTensors(path, DType::kFloat32, [&](auto* t) { (*t)["step"] = *Tensor::Zeros({1}); });
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors", "unexpected", "\"step\""});

  WriteFileForTest(path, good);
  EditTensors(path, DType::kBFloat16, [](auto*) {});
  ExpectError(LoadCheckpoint(Dir(100)), {"optimizer.safetensors", "float32"});

  WriteFileForTest(path, good);
  EXPECT_TRUE(LoadCheckpoint(Dir(100)).ok());
}

TEST_F(CheckpointTest, CorruptTrainerStateNamesTheFile) {
  Save(Make(100));
  const std::string path = Dir(100) + "/trainer_state.json";
  const std::string good = ReadFileForTest(path);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    WriteFileForTest(path, s.replace(at, from.size(), to));
  };

  WriteFileForTest(path, good.substr(0, good.size() / 2));
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "not valid JSON"});
  WriteFileForTest(path, "[1, 2]");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "object"});
  with("\"step\": 100", "\"stepp\": 100");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "missing \"step\""});
  with("\"step\": 100", "\"step\": -1");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "\"step\"", "non-negative"});
  with("\"step\": 100", "\"step\": 101");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "101", "directory name"});
  with("\"format_version\": 1", "\"format_version\": 2");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "format_version 2"});
  with("tnmt-trainer-state", "something-else");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "\"format\""});
  with("\"seed\": ", "\"seed\": \"x\", \"unused\": ");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "\"seed\""});
  with("\"tokens_seen\": ", "\"tokens_seen\": true, \"unused\": ");
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "\"tokens_seen\""});
  fs::remove(path);
  ExpectError(LoadCheckpoint(Dir(100)), {"trainer_state.json", "cannot open"});

  WriteFileForTest(path, good);
  EXPECT_TRUE(LoadCheckpoint(Dir(100)).ok());
}

TEST_F(CheckpointTest, CorruptModelFilesNameTheFile) {
  const Checkpoint c = Make(100);
  Save(c);
  const std::string dir = Dir(100);
  const std::string model = ReadFileForTest(dir + "/model.safetensors");
  WriteFileForTest(dir + "/model.safetensors", model.substr(0, model.size() - 4));
  ExpectError(LoadLatestCheckpoint(root_), {"model.safetensors"});
  WriteFileForTest(dir + "/model.safetensors", model);
  EditTensors(dir + "/model.safetensors", DType::kFloat16, [](auto*) {});
  ExpectError(LoadCheckpoint(dir), {"model.safetensors", "float32"});
  WriteFileForTest(dir + "/model.safetensors", model);
  EditTensors(dir + "/model.safetensors", DType::kFloat32,
              [](auto* t) { t->erase("encoder.layers.0.fc1.bias"); });
  ExpectError(LoadCheckpoint(dir), {"model.safetensors", "encoder.layers.0.fc1.bias"});
  WriteFileForTest(dir + "/model.safetensors", model);

  const std::string config = ReadFileForTest(dir + "/config.json");
  WriteFileForTest(dir + "/config.json", "{");
  ExpectError(LoadCheckpoint(dir), {"config.json", "not valid JSON"});
  WriteFileForTest(dir + "/config.json", config);

  WriteFileForTest(dir + "/spm.model", "not a sentencepiece model");
  ExpectError(LoadCheckpoint(dir), {"spm.model"});
}

TEST_F(CheckpointTest, SaveRefusesInconsistentCheckpointsAndWritesNothing) {
  const Checkpoint good = Make(100);
  const std::string name = good.params.begin()->first;
  auto expect_refused = [&](const Checkpoint& c, std::initializer_list<std::string> fragments) {
    absl::Status s = SaveCheckpoint(root_, c, 0);
    ASSERT_FALSE(s.ok());
    for (const std::string& f : fragments) {
      EXPECT_NE(std::string(s.message()).find(f), std::string::npos) << s;
    }
    EXPECT_TRUE(!fs::exists(root_) || fs::is_empty(root_));
  };
  Checkpoint c = good;
  c.adam_v.erase(name);
  expect_refused(c, {"v." + name, "missing"});
  c = good;
  c.adam_m[name] = *Tensor::Zeros({3});
  expect_refused(c, {"m." + name, "shape"});
  c = good;
  c.adam_m["extra"] = *Tensor::Zeros({3});
  expect_refused(c, {"m.extra", "unexpected"});
  c = good;
  c.params.erase("encoder.embed_tokens.weight");
  c.adam_m.erase("encoder.embed_tokens.weight");
  c.adam_v.erase("encoder.embed_tokens.weight");
  expect_refused(c, {"encoder.embed_tokens.weight", "missing"});
  c = good;
  c.state.loss_scale = std::numeric_limits<double>::infinity();
  expect_refused(c, {"finite"});
  c = good;
  c.state.step = -5;
  expect_refused(c, {"step"});
  c = good;
  c.spm_model_path.clear();
  expect_refused(c, {"spm_model_path"});
  c = good;
  c.spm_model_path = root_ + "/missing.model";
  expect_refused(c, {"missing.model"});
}

TEST(TrainerStateTest, OptionalKeysTakeDefaults) {
  auto s = TrainerState::Parse(
      R"({"format": "tnmt-trainer-state", "format_version": 1, "step": 5, "epoch": 0,
          "batch_in_epoch": 2, "seed": 1, "tokens_seen": 10, "elapsed_seconds": 0.5})",
      "state.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 5);
  EXPECT_EQ(s->tokens_seen, 10.0);
  EXPECT_EQ(s->loss_scale, 1.0);
  EXPECT_TRUE(s->extra.is_null());
}

}  // namespace
}  // namespace tnmt

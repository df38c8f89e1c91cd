// The CUDA backend's contract besides the numbers (those are cuda_step_model_test and
// cuda_translate_test): clear errors for a device that does not exist (also without any GPU),
// Describe/weight_bytes, and no device memory growth or leak across repeated decodes: the
// step model's allocator returns to the same bytes in use after each decode, and the free
// device memory after destroying backends and step models returns to its level.
#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cuda/cuda_step_model.h"
#include "engine/decode/beam_search.h"
#include "engine/runtime/loaded_model.h"
#include "kernels/cuda/test_util.h"

namespace tnmt {
namespace {

using kernels::cuda::testing::NoDeviceReason;

constexpr char kTiny[] = "tests/golden/data/tiny";
constexpr char kDemo[] = "models/demo";

std::shared_ptr<const LoadedModel> LoadCpu(const char* dir) {
  auto m = LoadModelDirectory(dir);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

TEST(CudaBackendTest, DeviceThatDoesNotExistIsAClearError) {
  auto model = LoadCpu(kTiny);
  ASSERT_NE(model, nullptr);
  int count = 0;
  const bool have_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  for (int device : {-1, have_gpu ? count : 0, 99}) {
    auto b = MakeCudaBackend(model->config, model->weights, {device, DType::kFloat16});
    ASSERT_FALSE(b.ok()) << "device " << device;
    if (have_gpu) {
      EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
      EXPECT_NE(b.status().message().find("does not exist"), std::string::npos) << b.status();
      EXPECT_NE(b.status().message().find(std::to_string(device)), std::string::npos) << b.status();
    } else {
      EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
      EXPECT_NE(b.status().message().find("no usable CUDA device"), std::string::npos) << b.status();
    }
  }
  // Through the loader: the error names the directory and the placement.
  Placement p;
  p.device = Device::kCuda;
  p.index = 99;
  p.dtype = DType::kFloat16;
  auto m = LoadModelDirectory(kTiny, p);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(kTiny), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("cuda:99"), std::string::npos) << m.status();
  // int32 is not a weight precision.
  if (have_gpu) {
    auto b = MakeCudaBackend(model->config, model->weights, {0, DType::kInt32});
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
  }
}

class CudaBackendDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
  }
};

TEST_F(CudaBackendDeviceTest, DescribeAndWeightBytes) {
  auto model = LoadCpu(kDemo);
  ASSERT_NE(model, nullptr);
  int64_t f32_bytes = 0;
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    auto b = MakeCudaBackend(model->config, model->weights, {0, t});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->Describe(), "cuda:0 " + DTypeName(t));
    // Tied embeddings stored once: about parameter_count elements of the GEMM dtype.
    const int64_t bytes = (*b)->weight_bytes();
    std::printf("%s: %lld bytes of weights (%lld parameters)\n", DTypeName(t).c_str(),
                static_cast<long long>(bytes), static_cast<long long>(model->parameter_count));
    if (t == DType::kFloat32) {
      f32_bytes = bytes;
      EXPECT_GE(bytes, 4 * model->parameter_count);
      EXPECT_LE(bytes, 4 * model->parameter_count + (64 << 20));  // + sinusoid table, alignment
    } else {
      EXPECT_LT(bytes, f32_bytes);
    }
  }
}

// Decodes the same batch repeatedly; returns the decoder's hypotheses of the last round.
class Decoding {
 public:
  Decoding(const LoadedModel& m, const DecodeBackend& backend) : m_(m) {
    auto step = backend.NewStepModel();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return;
    gpu_ = dynamic_cast<CudaStepModel*>(step->get());
    decoder_ = std::make_unique<BeamDecoder>(BeamDecoder::Create(m.config, std::move(*step)));
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> tok(4, m.config.vocab_size - 1);
    for (int len : {9, 2, 23, 14, 6, 31, 1}) {
      std::vector<int32_t> s;
      for (int i = 0; i + 1 < len; ++i) s.push_back(tok(rng));
      s.push_back(m.config.eos_id);
      sources_.push_back(s);
    }
  }
  bool ok() const { return gpu_ != nullptr; }
  void Run() {
    DecodeOptions o = DecodeOptions::FromConfig(m_.config);
    o.max_length_offset = 20;
    auto r = Decode(*decoder_, sources_, o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), sources_.size());
  }
  CudaStepModel& gpu() { return *gpu_; }

 private:
  const LoadedModel& m_;
  CudaStepModel* gpu_ = nullptr;
  std::unique_ptr<BeamDecoder> decoder_;
  std::vector<std::vector<int32_t>> sources_;
};

TEST_F(CudaBackendDeviceTest, RepeatedDecodesKeepDeviceMemoryFlat) {
  auto model = LoadCpu(kDemo);
  ASSERT_NE(model, nullptr);
  auto backend = MakeCudaBackend(model->config, model->weights, {0, DType::kFloat16});
  ASSERT_TRUE(backend.ok()) << backend.status();
  Decoding d(*model, **backend);
  ASSERT_TRUE(d.ok());
  d.Run();
  d.Run();  // pools, tables and scratch have reached their size for this batch
  const auto warm = d.gpu().memory_stats();
  EXPECT_EQ(d.gpu().slots_in_use(), 0);
  for (int round = 0; round < 4; ++round) {
    d.Run();
    const auto now = d.gpu().memory_stats();
    EXPECT_EQ(now.in_use_bytes, warm.in_use_bytes) << "round " << round;
    EXPECT_EQ(now.device_allocs, warm.device_allocs) << "round " << round << ": new cudaMalloc";
    EXPECT_EQ(d.gpu().slots_in_use(), 0) << "round " << round;
  }
  std::printf("step model: %lld bytes in use, %lld cached, %lld cudaMalloc calls\n",
              static_cast<long long>(warm.in_use_bytes), static_cast<long long>(warm.cached_bytes),
              static_cast<long long>(warm.device_allocs));
}

TEST_F(CudaBackendDeviceTest, DestroyingBackendsAndStepModelsFreesTheirMemory) {
  auto model = LoadCpu(kDemo);
  ASSERT_NE(model, nullptr);
  auto cycle = [&]() {
    auto backend = MakeCudaBackend(model->config, model->weights, {0, DType::kFloat32});
    ASSERT_TRUE(backend.ok()) << backend.status();
    // Two step models at once, each with its decode, then everything destroyed.
    Decoding a(*model, **backend), b(*model, **backend);
    ASSERT_TRUE(a.ok() && b.ok());
    a.Run();
    b.Run();
  };
  auto free_bytes = []() {
    size_t free = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    return static_cast<int64_t>(free);
  };
  cycle();  // first use loads kernels (lazily) and creates the runtime's own state
  const int64_t before = free_bytes();
  for (int i = 0; i < 3; ++i) cycle();
  const int64_t after = free_bytes();
  std::printf("free device memory: %lld before, %lld after 3 more cycles\n",
              static_cast<long long>(before), static_cast<long long>(after));
  // A leak of one cycle would be >= the float32 weights (~60 MB) or a step model's pools.
  EXPECT_GE(after, before - (16 << 20));
}

}  // namespace
}  // namespace tnmt

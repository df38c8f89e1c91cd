// What only the CUDA embedding kernels have: token embeddings from float16 and bfloat16 tables
// (as stored in model.safetensors), with and without positions, against the CPU's EmbedTokens
// on the table converted to float32. The float32 table, the position table and the gradient
// are tested once for every device in kernels/testing/embedding_devices_test.cc.
#include "kernels/cuda/embedding.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;
using testing::MaxScaledError;

class EmbeddingTest : public CudaTest {};

TEST_F(EmbeddingTest, EmbedTokensMatchesCpuForEachTableType) {
  const int vocab = 1000, d = 512, count = 77, max_pos = 128;
  std::vector<float> table = Random(static_cast<size_t>(vocab) * d, 0.0f, 0.1f);
  std::vector<float> pos(static_cast<size_t>(max_pos) * d);
  cpu::SinusoidalPositions(pos.data(), max_pos, d);
  std::vector<int32_t> ids(count), positions(count);
  std::uniform_int_distribution<int> tok(0, vocab - 1), p(0, max_pos - 1);
  for (int i = 0; i < count; ++i) {
    ids[i] = tok(rng_);
    positions[i] = p(rng_);
  }
  const float scale = std::sqrt(static_cast<float>(d));
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    // The table as stored, and as float32 for the CPU (as the engine converts it on load).
    std::vector<uint16_t> half(table.size());
    std::vector<float> as_float(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      if (t == DType::kFloat16) {
        const __half h = __float2half_rn(table[i]);
        std::memcpy(&half[i], &h, 2);
      } else if (t == DType::kBFloat16) {
        const __nv_bfloat16 h = __float2bfloat16_rn(table[i]);
        std::memcpy(&half[i], &h, 2);
      }
    }
    const void* dtable;
    if (t == DType::kFloat32) {
      as_float = table;
      dtable = ToDevice(table);
    } else {
      if (t == DType::kFloat16) cpu::HalfToFloat(as_float.data(), half.data(), half.size());
      else cpu::BFloat16ToFloat(as_float.data(), half.data(), half.size());
      dtable = ToDevice(half);
    }
    for (bool with_pos : {true, false}) {
      std::vector<float> want(static_cast<size_t>(count) * d);
      cpu::EmbedTokens(want.data(), ids.data(), positions.data(), count, as_float.data(),
                       with_pos ? pos.data() : nullptr, d, scale);
      float* dout = Alloc<float>(want.size());
      Poison(dout, want.size() * sizeof(float));
      ASSERT_TRUE(EmbedTokens(*ctx_, dout, ToDevice(ids), ToDevice(positions), count, dtable, t,
                              with_pos ? ToDevice(pos) : nullptr, d, scale)
                      .ok());
      EXPECT_LE(MaxScaledError(ToHost(dout, want.size()), want), 1e-6) << DTypeName(t);
    }
  }
}

}  // namespace
}  // namespace tnmt::kernels::cuda

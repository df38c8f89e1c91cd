// What only the CUDA attention has; MultiHeadAttention, AttentionArgmax and the training
// attention are tested once for every device against float64 in
// kernels/testing/attention_devices_test.cc. Here: the argument errors the CUDA kernels return
// (an empty batch, d_head beyond the kernels, attention dropout outside [0, 1), row strides
// below heads * d_head), and that the training attention never reads padded key rows (NaN there
// changes no bit, forward or backward; the CPU's loops multiply them by zero).
#include "kernels/cuda/attention.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

class AttentionTest : public CudaTest {};

TEST_F(AttentionTest, EmptyAndBadArguments) {
  AttentionArgs a;
  a.batch = 0;
  a.q_len = 1;
  a.num_heads = 8;
  a.d_head = 64;
  EXPECT_TRUE(
      MultiHeadAttention(*ctx_, nullptr, 512, nullptr, 512, nullptr, nullptr, 0, 1024, a).ok());
  a.batch = 1;
  a.d_head = 300;
  EXPECT_EQ(
      MultiHeadAttention(*ctx_, nullptr, 512, nullptr, 512, nullptr, nullptr, 0, 1024, a).code(),
      absl::StatusCode::kUnimplemented);
}

TEST_F(AttentionTest, TrainingIgnoresPaddedKeys) {
  const int batch = 3, q_len = 8, k_len = 10, heads = 2, d_head = 16, e = heads * d_head;
  const std::vector<int32_t> valid = {10, 6, 0};
  const std::vector<float> q = Random(static_cast<size_t>(batch) * q_len * e);
  const std::vector<float> kv = Random(static_cast<size_t>(batch) * k_len * 2 * e);  // k | v
  const std::vector<float> dout = Random(q.size());
  std::vector<float> poisoned = kv;
  for (int b = 0; b < batch; ++b) {
    for (int j = valid[b]; j < k_len; ++j) {
      for (int c = 0; c < 2 * e; ++c) poisoned[(static_cast<size_t>(b) * k_len + j) * 2 * e + c] = std::nanf("");
    }
  }
  // out, probs, dq, then dk | dv (accumulated onto zeros), one after another.
  auto run = [&](const std::vector<float>& kv_host) {
    const float* d_q = ToDevice(q);
    const float* d_kv = ToDevice(kv_host);
    const size_t p_size = static_cast<size_t>(batch) * heads * q_len * k_len;
    float* out = Alloc<float>(q.size());
    float* probs = Alloc<float>(p_size);
    float* dq = Alloc<float>(q.size());
    float* dkv = ToDevice(std::vector<float>(kv.size(), 0.0f));
    EXPECT_TRUE(AttentionTrainForward(*ctx_, out, e, probs, d_q, e, d_kv, d_kv + e, 2 * e, batch, q_len, k_len,
                                      heads, d_head, ToDevice(valid), false)
                    .ok());
    EXPECT_TRUE(AttentionBackward(*ctx_, dq, e, dkv, dkv + e, 2 * e, ToDevice(dout), e, probs, d_q, e, d_kv,
                                  d_kv + e, 2 * e, batch, q_len, k_len, heads, d_head)
                    .ok());
    std::vector<float> all = ToHost(out, q.size());
    for (const std::vector<float>& part : {ToHost(probs, p_size), ToHost(dq, q.size()), ToHost(dkv, kv.size())}) {
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  };
  const std::vector<float> clean = run(kv), nan = run(poisoned);
  ASSERT_EQ(clean.size(), nan.size());
  EXPECT_EQ(std::memcmp(clean.data(), nan.data(), clean.size() * sizeof(float)), 0);
}

TEST_F(AttentionTest, TrainingBadArguments) {
  float* p = Alloc<float>(64);
  EXPECT_FALSE(AttentionTrainForward(*ctx_, p, 4, p, p, 4, p, p, 4, 1, 1, 1, 1, 0, nullptr, false).ok());  // d_head 0
  EXPECT_FALSE(AttentionTrainForward(*ctx_, p, 3, p, p, 4, p, p, 4, 1, 1, 1, 2, 2, nullptr, false)
                   .ok());  // ld_out < heads * d_head
  EXPECT_TRUE(AttentionTrainForward(*ctx_, p, 4, p, p, 4, p, p, 4, 0, 1, 1, 1, 4, nullptr, false)
                  .ok());  // empty batch
  // Dropout outside [0, 1) is an error that names it.
  const absl::Status st = AttentionTrainForward(*ctx_, p, 4, p, p, 4, p, p, 4, 1, 1, 1, 1, 4, nullptr, false,
                                                AttentionDropout{1.0f, 0, 0});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("attention dropout"), std::string::npos) << st;
  EXPECT_FALSE(AttentionBackward(*ctx_, p, 4, p, p, 4, p, 4, p, p, 4, p, p, 4, 1, 1, 1, 1, 0).ok());
  EXPECT_TRUE(ctx_->Synchronize().ok());
}

}  // namespace
}  // namespace tnmt::kernels::cuda

// CUDA attention against kernels/cpu MultiHeadAttention on random data: the engine's KV-cache
// layout (slot pools addressed through k_groups tables, ld_kv = 0), kv_index sharing a source
// among beams, k_valid padding (including rows that see no key), causal steps, dense
// layouts, each d_head path (the vectorized 32/64/128 and the general one) and long caches.
// The training attention is tested once for every device in
// kernels/testing/attention_devices_test.cc; here only what the GPU adds: padded key rows are
// never read (NaN there changes no bit, forward or backward; the CPU's loops multiply them by
// zero) and the argument errors.
#include "kernels/cuda/attention.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;
using testing::MaxScaledError;

struct Config {
  std::string name;
  int batch, q_len, k_len, heads, d_head;
  int groups;          // K/V groups (sources or rows)
  bool slot_tables;    // engine KV cache: slots addressed through k_groups, ld_kv = 0
  bool kv_index;       // query group b reads K/V group kv_index[b]
  bool k_valid;        // random valid lengths (some 0)
  int causal_offset;   // -1: none
  int ld_pad = 0;      // extra columns in q/out rows (odd: misaligned, general path)
};

class AttentionTest : public CudaTest {
 protected:
  // Runs both kernels on the same random inputs; returns the attention's max scaled error and
  // sets *argmax_differ to the rows whose alignment (AttentionArgmax) differs from the CPU's.
  double Run(const Config& c, int64_t* argmax_differ) {
    std::uniform_int_distribution<int> any(0, 1 << 30);
    const int d = c.heads * c.d_head;
    const int64_t ld_q = d + c.ld_pad, ld_out = d + c.ld_pad;
    const int64_t rows = static_cast<int64_t>(c.batch) * c.q_len;
    std::vector<float> q = Random(rows * ld_q);
    // K/V storage: K at column 0, V at column d of each stored row.
    int64_t ld_kv, group_stride, stored_rows;
    std::vector<int32_t> tables;
    int64_t table_stride = 0;
    if (c.slot_tables) {
      const int slots = c.groups * c.k_len + 17;
      ld_kv = 0;
      group_stride = 2 * d;
      stored_rows = slots;
      table_stride = c.k_len + 3;
      tables.resize(static_cast<size_t>(c.groups) * table_stride);
      for (int32_t& t : tables) t = any(rng_) % slots;
    } else {
      ld_kv = 2 * d + 4;
      group_stride = c.k_len * ld_kv + 8;
      stored_rows = 0;
    }
    const int64_t kv_floats = c.slot_tables ? stored_rows * group_stride : c.groups * group_stride;
    std::vector<float> kv = Random(kv_floats + 2 * d);
    std::vector<int32_t> kv_index(c.batch), valid(c.groups);
    for (int32_t& g : kv_index) g = any(rng_) % c.groups;
    for (int g = 0; g < c.groups; ++g) valid[g] = g == 0 ? 0 : any(rng_) % (c.k_len + 1);
    if (c.groups > 1) valid[1] = c.k_len;

    AttentionArgs a;
    a.batch = c.batch;
    a.q_len = c.q_len;
    a.k_len = c.k_len;
    a.num_heads = c.heads;
    a.d_head = c.d_head;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.d_head));
    a.causal_offset = c.causal_offset;
    a.kv_index = c.kv_index ? kv_index.data() : nullptr;
    a.k_valid = c.k_valid ? valid.data() : nullptr;
    a.k_groups = c.slot_tables ? tables.data() : nullptr;
    a.k_groups_stride = table_stride;
    std::vector<float> want(rows * ld_out, 0.0f);
    cpu::MultiHeadAttention(want.data(), ld_out, q.data(), ld_q, kv.data(), kv.data() + d, ld_kv,
                            group_stride, a);

    AttentionArgs g = a;
    g.kv_index = c.kv_index ? ToDevice(kv_index) : nullptr;
    g.k_valid = c.k_valid ? ToDevice(valid) : nullptr;
    g.k_groups = c.slot_tables ? ToDevice(tables) : nullptr;
    float* dkv = ToDevice(kv);
    float* dout = Alloc<float>(rows * ld_out);
    Poison(dout, rows * ld_out * sizeof(float));
    const absl::Status s = MultiHeadAttention(*ctx_, dout, ld_out, ToDevice(q), ld_q, dkv, dkv + d,
                                              ld_kv, group_stride, g);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> got = ToHost(dout, rows * ld_out);
    std::vector<int32_t> want_align(rows);
    cpu::AttentionArgmax(want_align.data(), q.data(), ld_q, kv.data(), ld_kv, group_stride, a);
    int32_t* dalign = Alloc<int32_t>(rows);
    const absl::Status sa = AttentionArgmax(*ctx_, dalign, ToDevice(q), ld_q, dkv, ld_kv, group_stride, g);
    EXPECT_TRUE(sa.ok()) << sa;
    const std::vector<int32_t> got_align = ToHost(dalign, rows);
    *argmax_differ = 0;
    for (int64_t r = 0; r < rows; ++r) *argmax_differ += got_align[r] != want_align[r];
    // Compare the written columns only (padding columns stay poisoned on both sides' terms).
    std::vector<float> got_d, want_d;
    for (int64_t r = 0; r < rows; ++r) {
      got_d.insert(got_d.end(), got.begin() + r * ld_out, got.begin() + r * ld_out + d);
      want_d.insert(want_d.end(), want.begin() + r * ld_out, want.begin() + r * ld_out + d);
    }
    return MaxScaledError(got_d, want_d);
  }
};

TEST_F(AttentionTest, MatchesCpuKernel) {
  const Config configs[] = {
      // Engine decode self-attention: one new position per row, slot tables, k_valid.
      {"decode self dh64", 13, 1, 37, 8, 64, 13, true, false, true, -1},
      // Engine cross-attention: beams share their source (kv_index), source lengths.
      {"decode cross dh64", 12, 1, 29, 8, 64, 3, true, true, true, -1},
      // Several positions at once (causal_offset), dense K/V rows.
      {"causal dense dh64", 3, 5, 9, 4, 64, 3, false, false, false, 3},
      {"causal slots dh32", 4, 6, 11, 4, 32, 4, true, true, true, 4},
      {"encoder-like dh128", 2, 16, 16, 2, 128, 2, false, false, true, -1},
      {"general dh24", 5, 2, 40, 3, 24, 5, true, false, true, 20},
      {"general dh200", 3, 1, 25, 2, 200, 3, true, true, true, -1},
      {"general dh1", 4, 1, 7, 5, 1, 4, false, false, true, -1},
      {"misaligned dh64", 6, 1, 33, 8, 64, 6, true, false, true, -1, 1},
      {"long cache dh64", 8, 1, 1500, 8, 64, 8, true, false, true, -1},
      {"long dense dh128", 2, 3, 700, 4, 128, 2, false, true, false, 650},
  };
  for (const Config& c : configs) {
    int64_t argmax_differ = -1;
    const double err = Run(c, &argmax_differ);
    EXPECT_LE(err, 2e-5) << c.name;
    // Random scores have no near-ties: every alignment is the CPU's.
    EXPECT_EQ(argmax_differ, 0) << c.name << ": AttentionArgmax rows differing from the CPU's";
    std::printf("attention %-20s max scaled error %.2e, %lld alignments differ\n", c.name.c_str(), err,
                static_cast<long long>(argmax_differ));
  }
}

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

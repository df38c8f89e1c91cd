// Checks MultiHeadAttention against a naive per-head softmax(QK^T*scale + mask)V in double.
// Every test runs on each path: portable, AVX2 and AVX-512 (skipped on CPUs without them);
// the AVX2 and AVX-512 paths must also agree bit for bit.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace tnmt::kernels::cpu {
namespace {

constexpr double kTol = 1e-5;  // absolute and relative, float32 results
constexpr float kSentinel = -12345.0f;  // fills memory the kernel must not write

// One attention problem: shapes, layout and the buffers, laid out as attention.h describes.
struct Problem {
  AttentionArgs args;
  int kv_groups = 0;  // number of K/V groups stored
  int64_t ld_q = 0, ld_out = 0, kv_group_stride = 0;  // 0: tight
  int64_t ld_kv = -1;  // -1: tight (0 is meaningful: one key per stored group)
  std::vector<int32_t> kv_index, k_valid;  // empty: pass null
  std::vector<int32_t> k_groups;           // empty: pass null (stride: args.k_groups_stride)
  std::vector<float> q, k, v;
};

// Fills in tight strides where unset, points args at the index vectors and fills Q/K/V
// (padding included) with random data.
void Prepare(Problem& p, uint32_t seed) {
  AttentionArgs& a = p.args;
  const int64_t width = static_cast<int64_t>(a.num_heads) * a.d_head;
  if (p.kv_groups == 0) p.kv_groups = a.batch;
  if (p.ld_q == 0) p.ld_q = width;
  if (p.ld_out == 0) p.ld_out = width;
  if (p.ld_kv < 0) p.ld_kv = width;
  if (p.kv_group_stride == 0) p.kv_group_stride = a.k_len * p.ld_kv;
  a.kv_index = p.kv_index.empty() ? nullptr : p.kv_index.data();
  a.k_valid = p.k_valid.empty() ? nullptr : p.k_valid.data();
  a.k_groups = p.k_groups.empty() ? nullptr : p.k_groups.data();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  p.q.resize(static_cast<size_t>(a.batch) * a.q_len * p.ld_q);
  p.k.resize(static_cast<size_t>(p.kv_groups) * p.kv_group_stride);
  p.v.resize(p.k.size());
  for (float& x : p.q) x = 2.0f * dist(rng);  // scores spread enough for a peaked softmax
  for (float& x : p.k) x = 2.0f * dist(rng);
  for (float& x : p.v) x = dist(rng);
}

// Runs the kernel; out rows are prefilled with the sentinel.
std::vector<float> RunKernel(const Problem& p) {
  const AttentionArgs& a = p.args;
  std::vector<float> out(static_cast<size_t>(a.batch) * a.q_len * p.ld_out, kSentinel);
  MultiHeadAttention(out.data(), p.ld_out, p.q.data(), p.ld_q, p.k.data(), p.v.data(), p.ld_kv,
                     p.kv_group_stride, a);
  return out;
}

// Naive reference: for each query group b, row i, head h: scores over all k_len keys in double,
// -inf where masked (padding j >= k_valid[g], causal j > i + offset), softmax, times V. A row
// whose scores are all masked gives zeros. Returns the full out buffer; padding columns keep
// the sentinel.
std::vector<double> Reference(const Problem& p) {
  const AttentionArgs& a = p.args;
  const int dh = a.d_head;
  std::vector<double> out(static_cast<size_t>(a.batch) * a.q_len * p.ld_out, kSentinel);
  std::vector<double> s(a.k_len);
  for (int b = 0; b < a.batch; ++b) {
    const int g = a.kv_index ? a.kv_index[b] : b;
    const int valid = a.k_valid ? a.k_valid[g] : a.k_len;
    // Element offset of key j of this group in k and v.
    auto key = [&](int j) -> int64_t {
      const int64_t stored = a.k_groups ? a.k_groups[g * a.k_groups_stride + j] : g;
      return stored * p.kv_group_stride + j * p.ld_kv;
    };
    for (int i = 0; i < a.q_len; ++i) {
      const int64_t row = static_cast<int64_t>(b) * a.q_len + i;
      for (int h = 0; h < a.num_heads; ++h) {
        double mx = -INFINITY;
        for (int j = 0; j < a.k_len; ++j) {
          const bool masked = j >= valid || (a.causal_offset >= 0 && j > i + a.causal_offset);
          double dot = 0.0;
          for (int c = 0; c < dh && !masked; ++c) {
            dot += static_cast<double>(p.q[row * p.ld_q + h * dh + c]) * p.k[key(j) + h * dh + c];
          }
          s[j] = masked ? -INFINITY : dot * a.scale;
          mx = std::max(mx, s[j]);
        }
        double* o = &out[row * p.ld_out + h * dh];
        for (int c = 0; c < dh; ++c) o[c] = 0.0;
        if (mx == -INFINITY) continue;
        double sum = 0.0;
        for (int j = 0; j < a.k_len; ++j) sum += std::exp(s[j] - mx);
        for (int j = 0; j < a.k_len; ++j) {
          const double w = std::exp(s[j] - mx) / sum;
          if (w == 0.0) continue;
          for (int c = 0; c < dh; ++c) o[c] += w * p.v[key(j) + h * dh + c];
        }
      }
    }
  }
  return out;
}

void ExpectMatchesReference(const Problem& p, const std::string& what) {
  const std::vector<float> got = RunKernel(p);
  const std::vector<double> want = Reference(p);
  ASSERT_EQ(got.size(), want.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= kTol + kTol * std::fabs(want[i]))) {
      ++failures;
      ADD_FAILURE() << what << ": out row " << i / p.ld_out << " col " << i % p.ld_out << " = "
                    << got[i] << ", want " << want[i];
    }
  }
}

Problem Make(int batch, int q_len, int k_len, int heads, int dh) {
  Problem p;
  p.args.batch = batch;
  p.args.q_len = q_len;
  p.args.k_len = k_len;
  p.args.num_heads = heads;
  p.args.d_head = dh;
  p.args.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  return p;
}

std::string Name(const Problem& p) {
  const AttentionArgs& a = p.args;
  return "batch=" + std::to_string(a.batch) + " q_len=" + std::to_string(a.q_len) +
         " k_len=" + std::to_string(a.k_len) + " heads=" + std::to_string(a.num_heads) +
         " d_head=" + std::to_string(a.d_head) + " causal=" + std::to_string(a.causal_offset);
}

// Runs every test on each implementation.
class MultiHeadAttentionTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (GetParam() > DetectedIsa()) GTEST_SKIP() << IsaName(GetParam()) << " not on this CPU";
    SetIsaForTesting(GetParam());
  }
  void TearDown() override { SetIsaForTesting(CpuIsa::kAvx512); }
};

INSTANTIATE_TEST_SUITE_P(Paths, MultiHeadAttentionTest,
                         ::testing::Values(CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(info.param == CpuIsa::kAvx512 ? "Avx512"
                                              : info.param == CpuIsa::kAvx2 ? "Avx2"
                                                                            : "Portable");
                         });

struct Dims {
  int batch, q_len, k_len, heads, dh;
};
const Dims kDims[] = {{1, 1, 1, 1, 1},  {2, 3, 7, 2, 4},   {3, 7, 17, 4, 16},
                      {2, 17, 33, 8, 8}, {1, 5, 65, 2, 64}, {2, 3, 130, 3, 33}};

TEST_P(MultiHeadAttentionTest, NoMask) {
  uint32_t seed = 1;
  for (const Dims& d : kDims) {
    Problem p = Make(d.batch, d.q_len, d.k_len, d.heads, d.dh);
    Prepare(p, seed++);
    ExpectMatchesReference(p, "no mask " + Name(p));
  }
}

TEST_P(MultiHeadAttentionTest, ScaleIsApplied) {
  Problem p = Make(2, 3, 17, 2, 8);
  p.args.scale = 2.5f;  // not 1/sqrt(d_head): a kernel ignoring scale would differ
  Prepare(p, 40);
  ExpectMatchesReference(p, "scale 2.5");
}

TEST_P(MultiHeadAttentionTest, LargeScoresDoNotOverflow) {
  // Integer Q/K and a power-of-two scale make every score exact and up to about +-2000, far
  // beyond exp's float range: the softmax must subtract the row maximum.
  Problem p = Make(2, 3, 17, 2, 8);
  p.args.scale = 4.0f;
  Prepare(p, 50);
  std::mt19937 rng(51);
  std::uniform_int_distribution<int> dist(-8, 8);
  for (float& x : p.q) x = static_cast<float>(dist(rng));
  for (float& x : p.k) x = static_cast<float>(dist(rng));
  ExpectMatchesReference(p, "large scores");
}

TEST_P(MultiHeadAttentionTest, PaddingMaskPerGroup) {
  uint32_t seed = 100;
  for (const Dims& d : kDims) {
    Problem p = Make(4, d.q_len, d.k_len, d.heads, d.dh);
    p.k_valid = {d.k_len, 1, (d.k_len + 1) / 2, std::max(1, d.k_len - 2)};
    Prepare(p, seed++);
    ExpectMatchesReference(p, "padding " + Name(p));
  }
}

TEST_P(MultiHeadAttentionTest, CausalSelfAttention) {
  uint32_t seed = 200;
  for (int len : {1, 3, 7, 17, 33}) {
    Problem p = Make(2, len, len, 4, 8);
    p.args.causal_offset = 0;
    Prepare(p, seed++);
    ExpectMatchesReference(p, "causal " + Name(p));
    // Causal together with padding in the second group.
    p.k_valid = {len, (len + 1) / 2};
    p.args.k_valid = p.k_valid.data();
    ExpectMatchesReference(p, "causal+padding " + Name(p));
  }
}

TEST_P(MultiHeadAttentionTest, CausalRowZeroSeesOnlyKeyZero) {
  // With causal_offset 0 the first query attends only to key 0, so its output is exactly V[0].
  Problem p = Make(1, 5, 5, 2, 4);
  p.args.causal_offset = 0;
  Prepare(p, 7);
  const std::vector<float> out = RunKernel(p);
  for (int c = 0; c < 8; ++c) EXPECT_FLOAT_EQ(out[c], p.v[c]) << c;
}

TEST_P(MultiHeadAttentionTest, DecodeStepSingleQueryAtPositionT) {
  // The K/V cache holds k_len slots; only slots 0..t are filled for the query at position t.
  // Unfilled slots hold huge values so that reading them would be obvious.
  const int k_len = 33;
  for (int t : {0, 1, 5, 16, 32}) {
    Problem p = Make(3, 1, k_len, 4, 16);
    p.args.causal_offset = t;
    Prepare(p, 300 + t);
    for (int g = 0; g < 3; ++g) {
      for (int j = t + 1; j < k_len; ++j) {
        for (int c = 0; c < 64; ++c) {
          p.k[g * p.kv_group_stride + j * p.ld_kv + c] = 1e4f;
          p.v[g * p.kv_group_stride + j * p.ld_kv + c] = 1e4f;
        }
      }
    }
    ExpectMatchesReference(p, "decode t=" + std::to_string(t));
    // Same step with an explicit k_valid = t + 1 and no causal mask must give the same result.
    const std::vector<float> causal = RunKernel(p);
    p.args.causal_offset = -1;
    p.k_valid = {t + 1, t + 1, t + 1};
    p.args.k_valid = p.k_valid.data();
    EXPECT_EQ(RunKernel(p), causal) << "t=" << t;
  }
}

TEST_P(MultiHeadAttentionTest, KvIndexSharesGroupsAcrossBeams) {
  // Six query groups (2 sentences x 3 beams) read two K/V groups with different valid lengths.
  for (int q_len : {1, 3}) {
    Problem p = Make(6, q_len, 17, 2, 8);
    p.kv_groups = 2;
    p.kv_index = {0, 0, 0, 1, 1, 1};
    p.k_valid = {5, 17};
    Prepare(p, 400 + q_len);
    ExpectMatchesReference(p, "kv_index " + Name(p));
    // Interleaved, non-monotonic mapping as well.
    p.kv_index = {1, 0, 1, 0, 0, 1};
    p.args.kv_index = p.kv_index.data();
    ExpectMatchesReference(p, "kv_index shuffled " + Name(p));
    // Beams sharing a group and given identical queries must give identical outputs.
    std::vector<float> q_same = p.q;
    for (int b = 1; b < 3; ++b)
      std::copy(p.q.begin(), p.q.begin() + q_len * p.ld_q, q_same.begin() + b * q_len * p.ld_q);
    p.q = q_same;
    p.kv_index = {0, 0, 0, 1, 1, 1};
    p.args.kv_index = p.kv_index.data();
    const std::vector<float> out = RunKernel(p);
    for (int b = 1; b < 3; ++b) {
      EXPECT_TRUE(std::equal(out.begin(), out.begin() + q_len * p.ld_out,
                             out.begin() + b * q_len * p.ld_out))
          << "beam " << b;
    }
  }
}

TEST_P(MultiHeadAttentionTest, PaddedStrides) {
  uint32_t seed = 500;
  for (const Dims& d : kDims) {
    const int width = d.heads * d.dh;
    // Separate Q/out/KV strides, and a group stride with unused rows between groups.
    Problem p = Make(d.batch, d.q_len, d.k_len, d.heads, d.dh);
    p.ld_q = width + 5;
    p.ld_out = width + 3;
    p.ld_kv = width + 7;
    p.kv_group_stride = (d.k_len + 2) * p.ld_kv + 11;
    p.k_valid.assign(d.batch, d.k_len);
    p.k_valid[0] = (d.k_len + 1) / 2;
    Prepare(p, seed++);
    ExpectMatchesReference(p, "strided " + Name(p));
    p.args.causal_offset = 1;
    ExpectMatchesReference(p, "strided causal " + Name(p));
  }
}

TEST_P(MultiHeadAttentionTest, PackedKvBuffer) {
  // K and V interleaved in one [rows, 2*width] buffer (ld_kv = 2*width), as a fused projection
  // would produce; V starts width elements after K.
  Problem p = Make(2, 3, 17, 4, 8);
  const int width = 32;
  p.ld_kv = 2 * width;
  Prepare(p, 600);
  std::vector<float> kv = p.k;  // K in the first half of every row, V in the second
  for (size_t r = 0; r < kv.size() / p.ld_kv; ++r)
    for (int c = 0; c < width; ++c) p.v[r * p.ld_kv + c] = kv[r * p.ld_kv + width + c];
  const std::vector<double> want = Reference(p);
  std::vector<float> out(want.size(), kSentinel);
  MultiHeadAttention(out.data(), p.ld_out, p.q.data(), p.ld_q, kv.data(), kv.data() + width,
                     p.ld_kv, p.kv_group_stride, p.args);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(out[i], want[i], kTol + kTol * std::fabs(want[i])) << i;
}

TEST_P(MultiHeadAttentionTest, ZeroValidKeysGivesZeros) {
  Problem p = Make(3, 2, 7, 2, 4);
  p.k_valid = {7, 0, 3};
  Prepare(p, 700);
  ExpectMatchesReference(p, "k_valid 0");
  const std::vector<float> out = RunKernel(p);
  for (int i = 2 * 8; i < 4 * 8; ++i) EXPECT_EQ(out[i], 0.0f) << "group 1, element " << i - 16;
}

TEST_P(MultiHeadAttentionTest, BatchInvariance) {
  // A group's output must be bit-identical alone (batch 1) and inside a larger batch whose
  // other groups have different valid lengths.
  const int q_len = 3, k_len = 33, heads = 4, dh = 16, width = heads * dh;
  for (int causal : {-1, 2}) {
    Problem big = Make(5, q_len, k_len, heads, dh);
    big.args.causal_offset = causal;
    big.k_valid = {33, 4, 17, 1, 29};
    Prepare(big, 800);
    const std::vector<float> big_out = RunKernel(big);
    for (int b = 0; b < 5; ++b) {
      Problem one = Make(1, q_len, k_len, heads, dh);
      one.args.causal_offset = causal;
      one.k_valid = {big.k_valid[b]};
      Prepare(one, 0);
      std::copy(big.q.begin() + b * q_len * width, big.q.begin() + (b + 1) * q_len * width,
                one.q.begin());
      std::copy(big.k.begin() + b * k_len * width, big.k.begin() + (b + 1) * k_len * width,
                one.k.begin());
      std::copy(big.v.begin() + b * k_len * width, big.v.begin() + (b + 1) * k_len * width,
                one.v.begin());
      const std::vector<float> one_out = RunKernel(one);
      const auto first = big_out.begin() + b * q_len * width;
      EXPECT_TRUE(std::equal(one_out.begin(), one_out.end(), first))
          << "group " << b << " causal " << causal;
    }
  }
}

// A KV cache laid out as engine/layers/decoder.cc keeps it: a pool of slots (one key/value row
// each: ld_kv = 0, kv_group_stride = width), and per query group a table of the slot holding
// each position. Built as beam search builds it: every step each row writes a new slot for its
// position, then rows are replaced by copies of random parents of the same sentence, so beams
// share the slots of their common prefix (and two beams may share every slot).
struct BeamCache {
  std::vector<int32_t> tables;  // [rows, stride]
  std::vector<int32_t> valid;   // [rows]: positions written
  int slots = 0;
};

BeamCache MakeBeamCache(const std::vector<int>& steps, int beam, int stride, std::mt19937& rng) {
  const int sentences = static_cast<int>(steps.size());
  BeamCache c;
  c.tables.assign(static_cast<size_t>(sentences) * beam * stride, -1);
  c.valid.assign(static_cast<size_t>(sentences) * beam, 0);
  for (int s = 0; s < sentences; ++s) {
    std::vector<std::vector<int32_t>> rows(1);  // one live hypothesis at position 0
    for (int t = 0; t < steps[s]; ++t) {
      for (auto& r : rows) r.push_back(c.slots++);
      std::vector<std::vector<int32_t>> next;
      std::uniform_int_distribution<size_t> parent(0, rows.size() - 1);
      // Mostly the first parent (beams agreeing on a prefix), sometimes another one.
      for (int b = 0; b < beam; ++b) next.push_back(rows[rng() % 3 == 0 ? parent(rng) : 0]);
      rows = std::move(next);
    }
    for (int b = 0; b < beam; ++b) {
      const int row = s * beam + b;
      std::copy(rows[b].begin(), rows[b].end(), c.tables.begin() + static_cast<int64_t>(row) * stride);
      c.valid[row] = steps[s];
    }
  }
  return c;
}

// The decode step of self-attention over a beam cache: one query per row (q_len = 1), or the
// last q_len positions of every row with the causal mask (rows at the same position).
Problem SelfAttentionOverCache(const BeamCache& c, int rows, int stride, int q_len, int heads,
                               int dh) {
  Problem p = Make(rows, q_len, stride, heads, dh);
  p.kv_groups = c.slots;
  p.ld_kv = 0;
  p.kv_group_stride = static_cast<int64_t>(heads) * dh;
  p.k_groups = c.tables;
  p.args.k_groups_stride = stride;
  p.k_valid = c.valid;
  if (q_len > 1) p.args.causal_offset = c.valid[0] - q_len;
  return p;
}

// Every row computed alone (batch 1, its own table) equals its row of the batched result.
void ExpectRowsAloneMatchBatch(const Problem& p, const std::string& what) {
  const AttentionArgs& a = p.args;
  const std::vector<float> batched = RunKernel(p);
  for (int b = 0; b < a.batch; ++b) {
    AttentionArgs one = a;
    one.batch = 1;
    const int g = a.kv_index ? a.kv_index[b] : b;
    if (a.kv_index) {
      one.kv_index = nullptr;
      // Group g becomes group 0 of the single-row call: shift the tables and k_valid.
    }
    int32_t valid = a.k_valid ? a.k_valid[g] : a.k_len;
    one.k_valid = &valid;
    std::vector<int32_t> table;
    if (a.k_groups) {
      table.assign(a.k_groups + g * a.k_groups_stride, a.k_groups + (g + 1) * a.k_groups_stride);
      one.k_groups = table.data();
    }
    const float* k = p.k.data();
    const float* v = p.v.data();
    if (!a.k_groups) {  // group g's rows become group 0
      k += g * p.kv_group_stride;
      v += g * p.kv_group_stride;
    }
    std::vector<float> out(static_cast<size_t>(a.q_len) * p.ld_out, kSentinel);
    MultiHeadAttention(out.data(), p.ld_out, p.q.data() + static_cast<int64_t>(b) * a.q_len * p.ld_q,
                       p.ld_q, k, v, p.ld_kv, p.kv_group_stride, one);
    EXPECT_TRUE(std::equal(out.begin(), out.end(),
                           batched.begin() + static_cast<int64_t>(b) * a.q_len * p.ld_out))
        << what << ": row " << b << " alone differs from the batch";
  }
}

TEST_P(MultiHeadAttentionTest, SelfAttentionOverSharedCacheSlots) {
  std::mt19937 rng(900);
  uint32_t seed = 900;
  // Beam 4 (one block per sentence), 1 (no sharing), 10 (a sentence spans two blocks); one
  // sentence per step count, so rows of one call are at different positions.
  for (int beam : {4, 1, 10}) {
    for (const Dims& d : {Dims{0, 0, 0, 8, 64}, Dims{0, 0, 0, 3, 33}, Dims{0, 0, 0, 2, 80}}) {
      const std::vector<int> steps = {1, 16, 17, 5, 40};
      const int stride = 45;
      const BeamCache c = MakeBeamCache(steps, beam, stride, rng);
      Problem p = SelfAttentionOverCache(c, static_cast<int>(c.valid.size()), stride, 1, d.heads, d.dh);
      Prepare(p, seed++);
      const std::string what = "beam " + std::to_string(beam) + " " + Name(p);
      ExpectMatchesReference(p, what);
      ExpectRowsAloneMatchBatch(p, what);
    }
  }
}

TEST_P(MultiHeadAttentionTest, SelfAttentionOverSharedCacheSeveralPositions) {
  // Teacher forcing over the cache: the last q_len positions of each row, causal.
  std::mt19937 rng(950);
  for (int q_len : {2, 5}) {
    const int stride = 23;
    const BeamCache c = MakeBeamCache({19, 19, 19}, 4, stride, rng);
    Problem p = SelfAttentionOverCache(c, 12, stride, q_len, 4, 16);
    Prepare(p, 950 + q_len);
    ExpectMatchesReference(p, "q_len " + std::to_string(q_len) + " " + Name(p));
    ExpectRowsAloneMatchBatch(p, "q_len " + std::to_string(q_len));
  }
}

TEST_P(MultiHeadAttentionTest, CrossAttentionBeamsShareSourceSlots) {
  // Rows read their sentence's source (kv_index) through per-source slot tables, as the
  // decoder's cross-attention does; sources of different lengths, beams of 4 and one of 9.
  std::mt19937 rng(1000);
  const std::vector<int> src_len = {20, 1, 33, 16, 7};
  const std::vector<int> beams = {4, 4, 9, 4, 1};
  const int stride = 33;
  for (const Dims& d : {Dims{0, 0, 0, 8, 64}, Dims{0, 0, 0, 4, 8}, Dims{0, 0, 0, 3, 17}}) {
    Problem p = Make(0, 1, stride, d.heads, d.dh);
    int slots = 0;
    for (size_t s = 0; s < src_len.size(); ++s) {
      p.k_valid.push_back(src_len[s]);
      for (int j = 0; j < stride; ++j) p.k_groups.push_back(j < src_len[s] ? slots++ : -1);
      for (int b = 0; b < beams[s]; ++b) p.kv_index.push_back(static_cast<int32_t>(s));
    }
    // Slots in a shuffled order, so positions are not adjacent in memory.
    std::vector<int32_t> perm(slots);
    for (int i = 0; i < slots; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int32_t& x : p.k_groups) x = x < 0 ? x : perm[x];
    p.args.batch = static_cast<int>(p.kv_index.size());
    p.args.k_groups_stride = stride;
    p.kv_groups = slots;
    p.ld_kv = 0;
    p.kv_group_stride = static_cast<int64_t>(d.heads) * d.dh;
    Prepare(p, 1000 + d.dh);
    ExpectMatchesReference(p, "cross " + Name(p));
    ExpectRowsAloneMatchBatch(p, "cross " + Name(p));
  }
}

TEST_P(MultiHeadAttentionTest, OddHeadSizesAndKeyCounts) {
  // Head widths around the 16-float vector and the 64-column P·V pass, key counts around the
  // 16-key score chunks and the 8-key kernel of a row's last chunk; beams of 3 share one K/V
  // group through kv_index.
  uint32_t seed = 1100;
  for (int dh : {1, 7, 15, 16, 31, 48, 65, 128}) {
    for (int k_len : {1, 8, 9, 13, 15, 16, 17, 24, 25, 32, 47}) {
      Problem p = Make(6, 1, k_len, 3, dh);
      p.kv_groups = 2;
      p.kv_index = {0, 0, 0, 1, 1, 1};
      p.k_valid = {k_len, std::max(1, k_len - 5)};
      Prepare(p, seed++);
      ExpectMatchesReference(p, "odd " + Name(p));
    }
  }
}

// The AVX2 path computes what the AVX-512 path computes, bit for bit: head widths around the
// 16-float chunks (each of the score kernels), key counts around the 16-key chunks and the
// 8-key kernel, padding, causal masks, beams sharing K/V, rows of a block with different key
// counts.
TEST(AttentionPathsTest, Avx2EqualsAvx512BitForBit) {
  if (DetectedIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "needs a CPU with AVX-512 (and so AVX2)";
  uint32_t seed = 5000;
  int compared = 0;
  for (int dh : {1, 8, 15, 16, 17, 32, 33, 48, 64, 65, 96, 128}) {
    for (int k_len : {1, 7, 8, 9, 16, 17, 24, 31, 64, 100}) {
      for (int causal : {-1, 0, 5}) {
        Problem p = Make(6, causal >= 0 ? 3 : 2, k_len, 3, dh);
        p.args.causal_offset = causal;
        p.kv_groups = 2;
        p.kv_index = {0, 0, 0, 1, 1, 1};
        p.k_valid = {k_len, std::max(1, k_len / 2)};
        Prepare(p, seed++);
        SetIsaForTesting(CpuIsa::kAvx512);
        const std::vector<float> want = RunKernel(p);
        SetIsaForTesting(CpuIsa::kAvx2);
        const std::vector<float> got = RunKernel(p);
        SetIsaForTesting(CpuIsa::kAvx512);
        int failures = 0;
        for (size_t i = 0; i < got.size() && failures < 3; ++i) {
          if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            ++failures;
            ADD_FAILURE() << Name(p) << ": element " << i << " avx2 " << got[i] << ", avx512 " << want[i];
          }
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 12 * 10 * 3);
}

// AttentionArgmax against the naive reference's probabilities (averaged over the heads, the
// first maximum), with padding, a causal mask, beams sharing a K/V group and slot tables.
std::vector<int32_t> ReferenceArgmax(const Problem& p) {
  const AttentionArgs& a = p.args;
  const int dh = a.d_head;
  std::vector<int32_t> out;
  for (int b = 0; b < a.batch; ++b) {
    const int g = a.kv_index ? a.kv_index[b] : b;
    const int valid = a.k_valid ? a.k_valid[g] : a.k_len;
    for (int i = 0; i < a.q_len; ++i) {
      const int64_t row = static_cast<int64_t>(b) * a.q_len + i;
      std::vector<double> mean(a.k_len, 0.0);
      bool any = false;
      for (int h = 0; h < a.num_heads; ++h) {
        std::vector<double> s(a.k_len, -INFINITY);
        double mx = -INFINITY;
        for (int j = 0; j < a.k_len; ++j) {
          if (j >= valid || (a.causal_offset >= 0 && j > i + a.causal_offset)) continue;
          const int64_t stored = a.k_groups ? a.k_groups[g * a.k_groups_stride + j] : g;
          double dot = 0.0;
          for (int c = 0; c < dh; ++c) {
            dot += static_cast<double>(p.q[row * p.ld_q + h * dh + c]) *
                   p.k[stored * p.kv_group_stride + j * p.ld_kv + h * dh + c];
          }
          s[j] = dot * a.scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;
        any = true;
        double sum = 0.0;
        for (int j = 0; j < a.k_len; ++j) sum += std::exp(s[j] - mx);
        for (int j = 0; j < a.k_len; ++j) mean[j] += std::exp(s[j] - mx) / sum;
      }
      out.push_back(any ? static_cast<int32_t>(std::max_element(mean.begin(), mean.end()) - mean.begin()) : -1);
    }
  }
  return out;
}

TEST(AttentionArgmaxTest, MatchesReference) {
  uint32_t seed = 900;
  for (const Dims& d : kDims) {
    for (int causal : {-1, 0, 2}) {
      Problem p = Make(d.batch, d.q_len, d.k_len, d.heads, d.dh);
      p.args.causal_offset = causal;
      p.k_valid.assign(d.batch, d.k_len);
      p.k_valid[0] = (d.k_len + 1) / 2;
      Prepare(p, seed++);
      std::vector<int32_t> got(static_cast<size_t>(d.batch) * d.q_len, -7);
      AttentionArgmax(got.data(), p.q.data(), p.ld_q, p.k.data(), p.ld_kv, p.kv_group_stride, p.args);
      EXPECT_EQ(got, ReferenceArgmax(p)) << Name(p);
    }
  }
  // Beams sharing sources through kv_index, keys through a slot table (ld_kv = 0), and a group
  // with no valid key (-1).
  Problem p = Make(4, 1, 6, 2, 8);
  p.kv_groups = 12;
  p.ld_kv = 0;
  p.kv_group_stride = 16;
  p.kv_index = {1, 0, 1, 2};
  p.k_valid = {4, 6, 0};
  p.args.k_groups_stride = 6;
  for (int i = 0; i < 18; ++i) p.k_groups.push_back((i * 5) % 12);
  Prepare(p, 999);
  std::vector<int32_t> got(4, -7);
  AttentionArgmax(got.data(), p.q.data(), p.ld_q, p.k.data(), p.ld_kv, p.kv_group_stride, p.args);
  EXPECT_EQ(got, ReferenceArgmax(p));
  EXPECT_EQ(got[3], -1);
  // A key that every head prefers by far wins.
  Problem one = Make(1, 1, 5, 2, 4);
  Prepare(one, 1000);
  for (float& x : one.q) x = 1.0f;
  for (int j = 0; j < 5; ++j)
    for (int c = 0; c < 8; ++c) one.k[j * 8 + c] = j == 3 ? 4.0f : 0.0f;
  int32_t best = -7;
  AttentionArgmax(&best, one.q.data(), one.ld_q, one.k.data(), one.ld_kv, one.kv_group_stride, one.args);
  EXPECT_EQ(best, 3);
}

}  // namespace
}  // namespace tnmt::kernels::cpu

// The GPU backward kernels against the CPU ones (kernels/cpu/backward.h) on random data:
// odd sizes, d not a multiple of 4, strided and fused Q/K/V layouts, padding (including groups
// with no valid key), causal masks, q_len != k_len, 700 and 1024 keys. Outputs are poisoned
// with NaN first; accumulated outputs start from nonzero values; every kernel is run twice and
// must give the same bits.
#include "kernels/cuda/train_backward.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/backward.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::MaxScaledError;
using testing::RelativeError;

constexpr double kTol = 1e-5;  // relative 2-norm error against the CPU

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

class TrainBackwardTest : public testing::CudaTest {
 protected:
  std::vector<int32_t> RandomInts(size_t n, int lo, int hi) {
    std::uniform_int_distribution<int> dist(lo, hi);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(rng_);
    return v;
  }
  float* Copy(const std::vector<float>& h) { return ToDevice(h); }
};

TEST_F(TrainBackwardTest, LayerNormBackward) {
  struct Shape {
    int64_t rows;
    int d;
  };
  for (const Shape s : {Shape{1, 3}, Shape{7, 5}, Shape{65, 37}, Shape{130, 512},
                        Shape{300, 1023}}) {
    SCOPED_TRACE(absl::StrCat("rows ", s.rows, " d ", s.d));
    const size_t n = static_cast<size_t>(s.rows) * s.d;
    const float eps = 1e-5f;
    const std::vector<float> x = Random(n, 0.5f, 2.0f), dy = Random(n), gamma = Random(s.d, 1.0f, 0.3f);
    const std::vector<float> dgamma0 = Random(s.d), dbeta0 = Random(s.d);
    std::vector<float> dx_ref(n), dgamma_ref = dgamma0, dbeta_ref = dbeta0;
    cpu::LayerNormBackward(dx_ref.data(), dgamma_ref.data(), dbeta_ref.data(), dy.data(), x.data(),
                           gamma.data(), s.rows, s.d, eps);

    std::vector<float> first[3];
    for (bool alias : {false, true}) {
      SCOPED_TRACE(alias ? "dx aliases dy" : "separate dx");
      float* d_dy = Copy(dy);
      float* d_dx = alias ? d_dy : Alloc<float>(n);
      if (!alias) Poison(d_dx, n * sizeof(float));
      float* d_dgamma = Copy(dgamma0);
      float* d_dbeta = Copy(dbeta0);
      const absl::Status st = LayerNormBackward(*ctx_, d_dx, d_dgamma, d_dbeta, d_dy, Copy(x),
                                                Copy(gamma), s.rows, s.d, eps);
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<float> got[3] = {ToHost(d_dx, n), ToHost(d_dgamma, s.d),
                                         ToHost(d_dbeta, s.d)};
      EXPECT_LE(RelativeError(got[0], dx_ref), kTol);
      EXPECT_LE(MaxScaledError(got[0], dx_ref), 1e-4);
      EXPECT_LE(RelativeError(got[1], dgamma_ref), kTol);
      EXPECT_LE(RelativeError(got[2], dbeta_ref), kTol);
      if (!alias) {
        for (int i = 0; i < 3; ++i) first[i] = got[i];
      } else {
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(SameBits(got[i], first[i])) << "output " << i;
      }
    }
  }
}

TEST_F(TrainBackwardTest, ActivationBackward) {
  for (bool gelu : {false, true}) {
    for (int64_t count : {int64_t{1}, int64_t{1003}, int64_t{100003}}) {
      SCOPED_TRACE(absl::StrCat(gelu ? "gelu" : "relu", " count ", count));
      const std::vector<float> pre = Random(count, 0.0f, 3.0f), dy = Random(count);
      std::vector<float> ref(count);
      cpu::ActivationBackward(ref.data(), dy.data(), pre.data(), count,
                              gelu ? cpu::Activation::kGelu : cpu::Activation::kRelu);
      float* d_dx = Alloc<float>(count);
      Poison(d_dx, count * sizeof(float));
      float* d_pre = Copy(pre);
      ASSERT_TRUE(ActivationBackward(*ctx_, d_dx, Copy(dy), d_pre, count, gelu).ok());
      const std::vector<float> got = ToHost(d_dx, count);
      if (gelu) {
        EXPECT_LE(MaxScaledError(got, ref), 2e-6);
      } else {
        EXPECT_TRUE(SameBits(got, ref));
      }
      // In place (dx aliases dy), twice the same bits.
      float* d_dy = Copy(dy);
      ASSERT_TRUE(ActivationBackward(*ctx_, d_dy, d_dy, d_pre, count, gelu).ok());
      EXPECT_TRUE(SameBits(ToHost(d_dy, count), got));
    }
  }
}

TEST_F(TrainBackwardTest, AccumulateColumnSum) {
  struct Shape {
    int64_t rows;
    int n;
  };
  for (const Shape s : {Shape{1, 1}, Shape{65, 7}, Shape{200, 513}, Shape{1000, 3},
                        Shape{129, 64}}) {
    SCOPED_TRACE(absl::StrCat("rows ", s.rows, " n ", s.n));
    const std::vector<float> dy = Random(static_cast<size_t>(s.rows) * s.n), db0 = Random(s.n);
    std::vector<float> ref = db0;
    cpu::AccumulateColumnSum(ref.data(), dy.data(), s.rows, s.n);
    float* d_dy = Copy(dy);
    std::vector<float> runs[2];
    for (auto& got : runs) {
      float* d_db = Copy(db0);
      ASSERT_TRUE(AccumulateColumnSum(*ctx_, d_db, d_dy, s.rows, s.n).ok());
      got = ToHost(d_db, s.n);
      EXPECT_LE(RelativeError(got, ref), kTol);
    }
    EXPECT_TRUE(SameBits(runs[0], runs[1]));
  }
}

// ---------------------------------------------------------------------------------------------
// Attention

struct AttnCase {
  int batch, q_len, k_len, heads, d_head;
  std::vector<int32_t> k_valid;  // empty: all keys valid
  bool causal;
  bool fused;  // self-attention with q, k, v side by side in one buffer (q_len == k_len)

  std::string Name() const {
    return absl::StrCat("batch ", batch, " q_len ", q_len, " k_len ", k_len, " heads ", heads,
                        " d_head ", d_head, " k_valid ", k_valid.empty() ? "all" : "given",
                        causal ? " causal" : "", fused ? " fused" : "");
  }
};

// Buffers A: [batch * q_len, ld_a] holding q (and k, v when fused), B: [batch * k_len, ld_b]
// holding k then v (cross-attention layout). The gradients use the same layouts.
struct AttnLayout {
  int e;  // heads * d_head
  int64_t ld_a, ld_b;
  size_t a_size, b_size;
  int64_t k_off, v_off;  // in A when fused, else in B

  explicit AttnLayout(const AttnCase& c) {
    e = c.heads * c.d_head;
    ld_a = c.fused ? 3 * e + 1 : e + 3;
    ld_b = c.fused ? 0 : 2 * e + 1;
    a_size = static_cast<size_t>(c.batch) * c.q_len * ld_a;
    b_size = static_cast<size_t>(c.batch) * c.k_len * ld_b;
    k_off = c.fused ? e : 0;
    v_off = c.fused ? 2 * e : e;
  }
  int64_t ld_kv() const { return ld_b == 0 ? ld_a : ld_b; }
};

std::vector<AttnCase> AttnCases() {
  return {
      {2, 5, 7, 3, 4, {}, false, false},
      {3, 9, 9, 2, 17, {9, 4, 0}, true, true},
      {2, 6, 11, 2, 24, {11, 0}, false, false},
      {1, 33, 700, 2, 64, {650}, false, false},
      {2, 40, 40, 8, 64, {40, 23}, true, true},
      {1, 3, 1024, 1, 32, {}, false, false},
      {2, 3, 4, 1, 1, {}, true, false},
      {2, 12, 20, 2, 130, {20, 7}, true, false},
  };
}

TEST_F(TrainBackwardTest, Attention) {
  for (const AttnCase& c : AttnCases()) {
    SCOPED_TRACE(c.Name());
    const AttnLayout L(c);
    const std::vector<float> a = Random(L.a_size), b = Random(L.b_size);
    const float* qh = a.data();
    const float* kvh = c.fused ? a.data() : b.data();
    const int64_t ld_kv = L.ld_kv();
    const int64_t ld_out = L.e + 2;
    const size_t out_size = static_cast<size_t>(c.batch) * c.q_len * ld_out;
    const size_t p_size = static_cast<size_t>(c.batch) * c.heads * c.q_len * c.k_len;

    // CPU forward (out padding columns left NaN, as they must stay on the GPU).
    std::vector<float> out_ref(out_size, std::numeric_limits<float>::quiet_NaN()), p_ref(p_size);
    cpu::AttentionTrainForward(out_ref.data(), ld_out, p_ref.data(), qh, L.ld_a, kvh + L.k_off,
                               kvh + L.v_off, ld_kv, c.batch, c.q_len, c.k_len, c.heads, c.d_head,
                               c.k_valid.empty() ? nullptr : c.k_valid.data(), c.causal);

    // GPU forward, twice.
    float* d_a = Copy(a);
    float* d_b = Copy(b);
    const float* d_kv = c.fused ? d_a : d_b;
    const int32_t* d_valid = c.k_valid.empty() ? nullptr : ToDevice(c.k_valid);
    std::vector<float> out_runs[2], p_runs[2];
    for (int run = 0; run < 2; ++run) {
      float* d_out = Alloc<float>(out_size);
      float* d_p = Alloc<float>(p_size);
      Poison(d_out, out_size * sizeof(float));
      Poison(d_p, p_size * sizeof(float));
      const absl::Status st = AttentionTrainForward(
          *ctx_, d_out, ld_out, d_p, d_a, L.ld_a, d_kv + L.k_off, d_kv + L.v_off, ld_kv, c.batch,
          c.q_len, c.k_len, c.heads, c.d_head, d_valid, c.causal);
      ASSERT_TRUE(st.ok()) << st;
      out_runs[run] = ToHost(d_out, out_size);
      p_runs[run] = ToHost(d_p, p_size);
    }
    EXPECT_TRUE(SameBits(out_runs[0], out_runs[1]));
    EXPECT_TRUE(SameBits(p_runs[0], p_runs[1]));
    // Compare the written columns; the padding columns must still hold the poison.
    std::vector<float> out_got, out_want;
    int64_t pad_written = 0;
    for (size_t r = 0; r < out_size / ld_out; ++r) {
      for (int64_t j = 0; j < ld_out; ++j) {
        const float g = out_runs[0][r * ld_out + j];
        if (j < L.e) {
          out_got.push_back(g);
          out_want.push_back(out_ref[r * ld_out + j]);
        } else {
          pad_written += !std::isnan(g);
        }
      }
    }
    EXPECT_EQ(pad_written, 0);
    EXPECT_LE(RelativeError(out_got, out_want), kTol);
    EXPECT_LE(MaxScaledError(out_got, out_want), 1e-5);
    EXPECT_LE(MaxScaledError(p_runs[0], p_ref), 1e-5);
    // Masked keys have probability exactly 0; a query with no visible key has a zero row.
    int64_t masked_nonzero = 0, empty_rows = 0, empty_nonzero = 0;
    for (int bb = 0; bb < c.batch; ++bb) {
      const int valid = c.k_valid.empty() ? c.k_len : c.k_valid[bb];
      for (int h = 0; h < c.heads; ++h) {
        for (int i = 0; i < c.q_len; ++i) {
          const int limit = c.causal ? std::min(valid, i + 1) : valid;
          const float* pr = &p_runs[0][((static_cast<size_t>(bb) * c.heads + h) * c.q_len + i) * c.k_len];
          for (int j = limit; j < c.k_len; ++j) masked_nonzero += pr[j] != 0.0f;
          if (limit == 0) {
            ++empty_rows;
            const float* o = &out_runs[0][(static_cast<size_t>(bb) * c.q_len + i) * ld_out + h * c.d_head];
            for (int t = 0; t < c.d_head; ++t) empty_nonzero += o[t] != 0.0f;
          }
        }
      }
    }
    EXPECT_EQ(masked_nonzero, 0);
    EXPECT_EQ(empty_nonzero, 0) << empty_rows << " rows without a visible key";

    // Backward from the CPU's probabilities. Gradient buffers have the layouts of A and B:
    // dq written (poisoned on the GPU, zero on the CPU), dk and dv accumulated from random.
    const std::vector<float> dout = Random(out_size);
    std::vector<float> ga0 = Random(L.a_size), gb0 = Random(L.b_size);
    std::vector<float> ga_cpu = ga0, ga_gpu = ga0;
    for (size_t r = 0; r < L.a_size / L.ld_a; ++r) {
      for (int j = 0; j < L.e; ++j) {
        ga_cpu[r * L.ld_a + j] = 0.0f;
        ga_gpu[r * L.ld_a + j] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    std::vector<float> gb_cpu = gb0;
    float* gkv_cpu = c.fused ? ga_cpu.data() : gb_cpu.data();
    std::vector<float> scratch(static_cast<size_t>(c.q_len) * c.k_len);
    cpu::AttentionBackward(ga_cpu.data(), L.ld_a, gkv_cpu + L.k_off, gkv_cpu + L.v_off, ld_kv,
                           dout.data(), ld_out, p_ref.data(), qh, L.ld_a, kvh + L.k_off,
                           kvh + L.v_off, ld_kv, c.batch, c.q_len, c.k_len, c.heads, c.d_head,
                           scratch.data());
    float* d_p = Copy(p_ref);
    float* d_dout = Copy(dout);
    std::vector<float> ga_runs[2], gb_runs[2];
    for (int run = 0; run < 2; ++run) {
      float* d_ga = Copy(ga_gpu);
      float* d_gb = Copy(gb0);
      float* d_gkv = c.fused ? d_ga : d_gb;
      const absl::Status st = AttentionBackward(
          *ctx_, d_ga, L.ld_a, d_gkv + L.k_off, d_gkv + L.v_off, ld_kv, d_dout, ld_out, d_p, d_a,
          L.ld_a, d_kv + L.k_off, d_kv + L.v_off, ld_kv, c.batch, c.q_len, c.k_len, c.heads,
          c.d_head);
      ASSERT_TRUE(st.ok()) << st;
      ga_runs[run] = ToHost(d_ga, L.a_size);
      gb_runs[run] = ToHost(d_gb, L.b_size);
    }
    EXPECT_TRUE(SameBits(ga_runs[0], ga_runs[1]));
    EXPECT_TRUE(SameBits(gb_runs[0], gb_runs[1]));
    // Split A into dq and the rest (dk, dv when fused, plus the padding column).
    std::vector<float> dq_got, dq_want, rest_got, rest_want;
    for (size_t r = 0; r < L.a_size / L.ld_a; ++r) {
      for (int64_t j = 0; j < L.ld_a; ++j) {
        auto& got = j < L.e ? dq_got : rest_got;
        auto& want = j < L.e ? dq_want : rest_want;
        got.push_back(ga_runs[0][r * L.ld_a + j]);
        want.push_back(ga_cpu[r * L.ld_a + j]);
      }
    }
    EXPECT_LE(RelativeError(dq_got, dq_want), kTol);
    EXPECT_LE(MaxScaledError(dq_got, dq_want), 1e-4);
    if (c.fused) {
      EXPECT_LE(RelativeError(rest_got, rest_want), kTol);
      EXPECT_LE(MaxScaledError(rest_got, rest_want), 1e-4);
    } else {
      EXPECT_TRUE(SameBits(rest_got, rest_want));  // padding columns untouched
      EXPECT_LE(RelativeError(gb_runs[0], gb_cpu), kTol);
      EXPECT_LE(MaxScaledError(gb_runs[0], gb_cpu), 1e-4);
    }
  }
}

// Padded key rows (j >= k_valid) are never read: NaN there changes no output bit.
TEST_F(TrainBackwardTest, AttentionIgnoresPaddedKeys) {
  const AttnCase c{3, 8, 10, 2, 16, {10, 6, 0}, false, false};
  const AttnLayout L(c);
  const std::vector<float> a = Random(L.a_size), b = Random(L.b_size), dout = Random(L.a_size);
  std::vector<float> b_nan = b;
  for (int bb = 0; bb < c.batch; ++bb) {
    for (int j = c.k_valid[bb]; j < c.k_len; ++j) {
      for (int64_t t = 0; t < L.ld_b; ++t) {
        b_nan[(static_cast<size_t>(bb) * c.k_len + j) * L.ld_b + t] = std::nanf("");
      }
    }
  }
  const int32_t* d_valid = ToDevice(c.k_valid);
  const size_t p_size = static_cast<size_t>(c.batch) * c.heads * c.q_len * c.k_len;
  std::vector<float> results[2][4];
  for (int run = 0; run < 2; ++run) {
    float* d_a = Copy(a);
    float* d_b = Copy(run == 0 ? b : b_nan);
    float* d_out = Alloc<float>(L.a_size);
    float* d_p = Alloc<float>(p_size);
    Poison(d_out, L.a_size * sizeof(float));
    Poison(d_p, p_size * sizeof(float));
    ASSERT_TRUE(AttentionTrainForward(*ctx_, d_out, L.ld_a, d_p, d_a, L.ld_a, d_b + L.k_off,
                                      d_b + L.v_off, L.ld_b, c.batch, c.q_len, c.k_len, c.heads,
                                      c.d_head, d_valid, c.causal)
                    .ok());
    float* d_dq = Alloc<float>(L.a_size);
    Poison(d_dq, L.a_size * sizeof(float));
    float* d_gb = Copy(std::vector<float>(L.b_size, 0.5f));
    ASSERT_TRUE(AttentionBackward(*ctx_, d_dq, L.ld_a, d_gb + L.k_off, d_gb + L.v_off, L.ld_b,
                                  Copy(dout), L.ld_a, d_p, d_a, L.ld_a, d_b + L.k_off,
                                  d_b + L.v_off, L.ld_b, c.batch, c.q_len, c.k_len, c.heads,
                                  c.d_head)
                    .ok());
    results[run][0] = ToHost(d_out, L.a_size);
    results[run][1] = ToHost(d_p, p_size);
    results[run][2] = ToHost(d_dq, L.a_size);
    results[run][3] = ToHost(d_gb, L.b_size);
  }
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(SameBits(results[0][i], results[1][i])) << "output " << i;
}

TEST_F(TrainBackwardTest, EmbeddingBackward) {
  struct Shape {
    int64_t count;
    int d, vocab, max_pos;
    bool with_pos;
  };
  for (const Shape s : {Shape{1, 5, 3, 2, true}, Shape{1000, 37, 50, 20, true},
                        Shape{3000, 512, 700, 100, true}, Shape{777, 16, 9, 30, false}}) {
    SCOPED_TRACE(absl::StrCat("count ", s.count, " d ", s.d, s.with_pos ? " positions" : ""));
    std::vector<int32_t> ids = RandomInts(s.count, 0, s.vocab - 1);
    for (int64_t i = 0; i < s.count; i += 3) ids[i] = 2;  // one frequent id
    std::vector<int32_t> positions(s.count);
    for (int64_t i = 0; i < s.count; ++i) positions[i] = static_cast<int32_t>(i % s.max_pos);
    const float scale = std::sqrt(static_cast<float>(s.d));
    const std::vector<float> dx = Random(static_cast<size_t>(s.count) * s.d);
    const std::vector<float> table0 = Random(static_cast<size_t>(s.vocab) * s.d);
    const std::vector<float> pos0 = Random(static_cast<size_t>(s.max_pos) * s.d);
    std::vector<float> table_ref = table0, pos_ref = pos0;
    cpu::EmbeddingBackward(table_ref.data(), s.with_pos ? pos_ref.data() : nullptr, dx.data(),
                           ids.data(), positions.data(), s.count, s.d, scale);
    float* d_dx = Copy(dx);
    const int32_t* d_ids = ToDevice(ids);
    const int32_t* d_positions = ToDevice(positions);
    std::vector<float> table_runs[2], pos_runs[2];
    for (int run = 0; run < 2; ++run) {
      float* d_table = Copy(table0);
      float* d_pos = Copy(pos0);
      const absl::Status st =
          EmbeddingBackward(*ctx_, d_table, s.with_pos ? d_pos : nullptr, d_dx, d_ids,
                            s.with_pos ? d_positions : nullptr, s.count, s.d, scale);
      ASSERT_TRUE(st.ok()) << st;
      table_runs[run] = ToHost(d_table, table0.size());
      pos_runs[run] = ToHost(d_pos, pos0.size());
    }
    EXPECT_TRUE(SameBits(table_runs[0], table_runs[1]));
    EXPECT_TRUE(SameBits(pos_runs[0], pos_runs[1]));
    EXPECT_LE(RelativeError(table_runs[0], table_ref), 1e-6);
    EXPECT_LE(MaxScaledError(table_runs[0], table_ref), 1e-5);
    if (s.with_pos) {
      EXPECT_LE(RelativeError(pos_runs[0], pos_ref), 1e-6);
      EXPECT_LE(MaxScaledError(pos_runs[0], pos_ref), 1e-5);
    } else {
      EXPECT_TRUE(SameBits(pos_runs[0], pos0));
    }
  }
}

TEST_F(TrainBackwardTest, AddAndScaleInPlace) {
  for (int64_t count : {int64_t{1}, int64_t{4099}, int64_t{1000003}}) {
    const std::vector<float> x = Random(count), y = Random(count);
    std::vector<float> sum(count), scaled(count);
    for (int64_t i = 0; i < count; ++i) {
      sum[i] = y[i] + x[i];
      scaled[i] = x[i] * 0.37f;
    }
    float* d_y = Copy(y);
    float* d_x = Copy(x);
    ASSERT_TRUE(AddInPlace(*ctx_, d_y, d_x, count).ok());
    ASSERT_TRUE(ScaleInPlace(*ctx_, d_x, count, 0.37f).ok());
    EXPECT_TRUE(SameBits(ToHost(d_y, count), sum)) << count;
    EXPECT_TRUE(SameBits(ToHost(d_x, count), scaled)) << count;
  }
}

TEST_F(TrainBackwardTest, SumOfSquares) {
  double* d_out = Alloc<double>(1);
  auto run = [&](const std::vector<float>& x) {
    Poison(d_out, sizeof(double));
    const absl::Status st = SumOfSquares(*ctx_, d_out, Copy(x), static_cast<int64_t>(x.size()));
    EXPECT_TRUE(st.ok()) << st;
    return ToHost(d_out, 1)[0];
  };
  EXPECT_EQ(run({}), 0.0);
  for (int64_t count : {int64_t{1}, int64_t{255}, int64_t{4099}, int64_t{1000003}}) {
    const std::vector<float> x = Random(count, 0.1f, 3.0f);
    double ref = 0.0;
    for (float v : x) ref += static_cast<double>(v) * v;
    const double got = run(x);
    EXPECT_LE(std::fabs(got - ref), 1e-12 * ref) << count;
    const double again = run(x);
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(got)), 0) << count;
  }
  std::vector<float> x = Random(100003);
  x[50001] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(run(x)));
  x[50001] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(run(x)));
  x[50001] = 65504.0f;  // float16's largest value: finite
  EXPECT_TRUE(std::isfinite(run(x)));
}

TEST_F(TrainBackwardTest, InvalidArguments) {
  float* p = Alloc<float>(16);
  EXPECT_FALSE(ActivationBackward(*ctx_, p, p, p, -1, false).ok());
  EXPECT_FALSE(LayerNormBackward(*ctx_, p, p, p, p, p, p, 1, 0, 1e-5f).ok());
  EXPECT_FALSE(AttentionTrainForward(*ctx_, p, 4, p, p, 4, p, p, 4, 1, 1, 1, 1, 0, nullptr, false)
                   .ok());
  EXPECT_FALSE(AttentionTrainForward(*ctx_, p, 3, p, p, 4, p, p, 4, 1, 1, 1, 2, 2, nullptr, false)
                   .ok());  // ld_out < heads * d_head
  EXPECT_TRUE(AttentionTrainForward(*ctx_, p, 4, p, p, 4, p, p, 4, 0, 1, 1, 1, 4, nullptr, false)
                  .ok());  // empty batch
  EXPECT_TRUE(ctx_->Synchronize().ok());
}

}  // namespace
}  // namespace tnmt::kernels::cuda

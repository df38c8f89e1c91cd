// The GPU backward kernels against the CPU ones (the gradients of kernels/cpu elementwise.h,
// attention.h and embedding.h) on random data (the attention also against a float64
// reference, since the CPU attention needs OpenBLAS, which not every GPU host has): odd sizes, d not a multiple of 4, strided and fused Q/K/V layouts,
// padding (including groups with no valid key), causal masks, q_len != k_len, 700 and 1024
// keys. Outputs are poisoned with NaN first; accumulated outputs start from nonzero values;
// every kernel is run twice and must give the same bits.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/reduce.h"


#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
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
      const Activation act = gelu ? Activation::kGelu : Activation::kRelu;
      std::vector<float> ref(count);
      cpu::ActivationBackward(ref.data(), dy.data(), pre.data(), count, act);
      float* d_dx = Alloc<float>(count);
      Poison(d_dx, count * sizeof(float));
      float* d_pre = Copy(pre);
      ASSERT_TRUE(ActivationBackward(*ctx_, d_dx, Copy(dy), d_pre, count, act).ok());
      const std::vector<float> got = ToHost(d_dx, count);
      if (gelu) {
        // 1 - tanh(u)^2 cancels in float for |u| of a few units, so a last-bit difference of
        // tanhf and std::tanh shows up to ~1e-5 absolute there (the CPU itself is 1.3e-6 max,
        // 1.4e-7 relative 2-norm from float64 on this data).
        EXPECT_LE(RelativeError(got, ref), 2e-6);
        EXPECT_LE(MaxScaledError(got, ref), 5e-5);
      } else {
        EXPECT_TRUE(SameBits(got, ref));
      }
      // In place (dx aliases dy), twice the same bits.
      float* d_dy = Copy(dy);
      ASSERT_TRUE(ActivationBackward(*ctx_, d_dy, d_dy, d_pre, count, act).ok());
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
// Attention. Compared with a float64 reference always, and with the CPU kernels where OpenBLAS
// loads (the CPU attention uses it; not every GPU host has it). AttentionReference.MatchesCpu
// checks the reference and the comparison itself against the CPU without a GPU.

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
  const int32_t* valid_or_null() const { return k_valid.empty() ? nullptr : k_valid.data(); }
  int Limit(int b, int i) const {
    const int valid = k_valid.empty() ? k_len : std::max(0, std::min<int>(k_valid[b], k_len));
    return causal ? std::min(valid, i + 1) : valid;
  }
};

// Buffer A: [batch * q_len, ld_a] holds q (and k, v when fused); buffer B: [batch * k_len,
// ld_b] holds k then v (cross-attention), empty when fused. The gradients use the same
// layouts (dq where q is, dk where k is, dv where v is); out and dout: [batch * q_len, ld_out].
// Every buffer has padding columns that nothing may write.
struct AttnLayout {
  int e;  // heads * d_head
  int64_t ld_a, ld_b, ld_out;
  size_t a_size, b_size, out_size, p_size;
  int64_t k_off, v_off;  // in A when fused, else in B

  explicit AttnLayout(const AttnCase& c) {
    e = c.heads * c.d_head;
    ld_a = c.fused ? 3 * e + 1 : e + 3;
    ld_b = c.fused ? 0 : 2 * e + 1;
    ld_out = e + 2;
    a_size = static_cast<size_t>(c.batch) * c.q_len * ld_a;
    b_size = static_cast<size_t>(c.batch) * c.k_len * ld_b;
    out_size = static_cast<size_t>(c.batch) * c.q_len * ld_out;
    p_size = static_cast<size_t>(c.batch) * c.heads * c.q_len * c.k_len;
    k_off = c.fused ? e : 0;
    v_off = c.fused ? 2 * e : e;
  }
  int64_t ld_kv(const AttnCase& c) const { return c.fused ? ld_a : ld_b; }
};

struct AttnInputs {
  std::vector<float> a, b, dout, ga0, gb0;  // ga0, gb0: initial gradient buffers
};

struct AttnResult {
  std::vector<float> out, probs, ga, gb;
};

std::vector<float> RandomVector(std::mt19937& rng, size_t n, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

AttnInputs MakeInputs(const AttnCase& c, std::mt19937& rng) {
  const AttnLayout L(c);
  return {RandomVector(rng, L.a_size, 1.0f), RandomVector(rng, L.b_size, 1.0f),
          RandomVector(rng, L.out_size, 1.0f), RandomVector(rng, L.a_size, 0.1f),
          RandomVector(rng, L.b_size, 0.1f)};
}

// ga with the dq columns of every row set to `fill` (dq is written, not accumulated).
std::vector<float> WithDq(const AttnCase& c, std::vector<float> ga, float fill) {
  const AttnLayout L(c);
  for (size_t r = 0; r < L.a_size / L.ld_a; ++r) {
    for (int j = 0; j < L.e; ++j) ga[r * L.ld_a + j] = fill;
  }
  return ga;
}

// out: NaN in the padding columns, `fill` in the head columns.
std::vector<float> OutBuffer(const AttnCase& c, float fill) {
  const AttnLayout L(c);
  std::vector<float> out(L.out_size, std::numeric_limits<float>::quiet_NaN());
  for (size_t r = 0; r < L.out_size / L.ld_out; ++r) {
    for (int j = 0; j < L.e; ++j) out[r * L.ld_out + j] = fill;
  }
  return out;
}

// Forward and backward in float64 from the definitions (masked keys skipped).
AttnResult ReferenceAttention(const AttnCase& c, const AttnInputs& in) {
  const AttnLayout L(c);
  const int64_t ld_kv = L.ld_kv(c);
  const float* kv = c.fused ? in.a.data() : in.b.data();
  AttnResult r{OutBuffer(c, 0.0f), std::vector<float>(L.p_size), {}, {}};
  std::vector<double> ga(in.ga0.begin(), in.ga0.end()), gb(in.gb0.begin(), in.gb0.end());
  for (size_t row = 0; row < L.a_size / L.ld_a; ++row) {
    for (int j = 0; j < L.e; ++j) ga[row * L.ld_a + j] = 0.0;
  }
  std::vector<double>& gkv = c.fused ? ga : gb;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  std::vector<double> p(c.k_len), dp(c.k_len);
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      auto kv_at = [&](int64_t off, int j, int t) {
        return static_cast<double>(kv[(static_cast<int64_t>(b) * c.k_len + j) * ld_kv + off +
                                      h * c.d_head + t]);
      };
      for (int i = 0; i < c.q_len; ++i) {
        const int64_t qrow = static_cast<int64_t>(b) * c.q_len + i;
        const float* q = in.a.data() + qrow * L.ld_a + h * c.d_head;
        const float* dout = in.dout.data() + qrow * L.ld_out + h * c.d_head;
        const int limit = c.Limit(b, i);
        std::fill(p.begin(), p.end(), 0.0);
        if (limit > 0) {
          double mx = -INFINITY, sum = 0.0;
          for (int j = 0; j < limit; ++j) {
            double s = 0.0;
            for (int t = 0; t < c.d_head; ++t) s += static_cast<double>(q[t]) * kv_at(L.k_off, j, t);
            p[j] = s * scale;
            mx = std::max(mx, p[j]);
          }
          for (int j = 0; j < limit; ++j) sum += p[j] = std::exp(p[j] - mx);
          for (int j = 0; j < limit; ++j) p[j] /= sum;
        }
        float* pr = r.probs.data() + ((static_cast<int64_t>(b) * c.heads + h) * c.q_len + i) * c.k_len;
        for (int j = 0; j < c.k_len; ++j) pr[j] = static_cast<float>(p[j]);
        double dot = 0.0;
        for (int j = 0; j < limit; ++j) {
          dp[j] = 0.0;
          for (int t = 0; t < c.d_head; ++t) dp[j] += static_cast<double>(dout[t]) * kv_at(L.v_off, j, t);
          dot += p[j] * dp[j];
        }
        for (int t = 0; t < c.d_head; ++t) {
          double o = 0.0, dq = 0.0;
          for (int j = 0; j < limit; ++j) {
            const double ds = p[j] * (dp[j] - dot);
            o += p[j] * kv_at(L.v_off, j, t);
            dq += ds * kv_at(L.k_off, j, t);
            const int64_t kvrow = (static_cast<int64_t>(b) * c.k_len + j) * ld_kv + h * c.d_head + t;
            gkv[kvrow + L.v_off] += p[j] * dout[t];
            gkv[kvrow + L.k_off] += scale * ds * q[t];
          }
          r.out[qrow * L.ld_out + h * c.d_head + t] = static_cast<float>(o);
          ga[qrow * L.ld_a + h * c.d_head + t] = scale * dq;
        }
      }
    }
  }
  r.ga.assign(ga.begin(), ga.end());
  r.gb.assign(gb.begin(), gb.end());
  return r;
}

// The CPU kernels (forward, then backward from their own probabilities), with attention
// dropout `drop`.
AttnResult CpuAttention(const AttnCase& c, const AttnInputs& in, const AttentionDropout& drop = {}) {
  const AttnLayout L(c);
  const int64_t ld_kv = L.ld_kv(c);
  const float* kv = c.fused ? in.a.data() : in.b.data();
  AttnResult r{OutBuffer(c, 0.0f), std::vector<float>(L.p_size), WithDq(c, in.ga0, 0.0f), in.gb0};
  cpu::AttentionTrainForward(r.out.data(), L.ld_out, r.probs.data(), in.a.data(), L.ld_a,
                             kv + L.k_off, kv + L.v_off, ld_kv, c.batch, c.q_len, c.k_len, c.heads,
                             c.d_head, c.valid_or_null(), c.causal, drop);
  float* gkv = c.fused ? r.ga.data() : r.gb.data();
  cpu::AttentionBackward(r.ga.data(), L.ld_a, gkv + L.k_off, gkv + L.v_off, ld_kv, in.dout.data(),
                         L.ld_out, r.probs.data(), in.a.data(), L.ld_a, kv + L.k_off, kv + L.v_off,
                         ld_kv, c.batch, c.q_len, c.k_len, c.heads, c.d_head, drop);
  return r;
}

// got against want: head columns within tolerance, padding columns untouched (NaN in out, the
// initial bits in the gradients), masked probabilities exactly 0, rows without a visible key
// exactly 0.
void ExpectAttentionClose(const AttnCase& c, const AttnInputs& in, const AttnResult& got,
                          const AttnResult& want) {
  const AttnLayout L(c);
  ASSERT_EQ(got.out.size(), L.out_size);
  ASSERT_EQ(got.probs.size(), L.p_size);
  ASSERT_EQ(got.ga.size(), L.a_size);
  ASSERT_EQ(got.gb.size(), L.b_size);
  std::vector<float> out_got, out_want;
  int64_t out_pad_written = 0;
  for (size_t r = 0; r < L.out_size / L.ld_out; ++r) {
    for (int64_t j = 0; j < L.ld_out; ++j) {
      if (j < L.e) {
        out_got.push_back(got.out[r * L.ld_out + j]);
        out_want.push_back(want.out[r * L.ld_out + j]);
      } else {
        out_pad_written += !std::isnan(got.out[r * L.ld_out + j]);
      }
    }
  }
  EXPECT_EQ(out_pad_written, 0) << "out padding columns written";
  EXPECT_LE(RelativeError(out_got, out_want), kTol) << "out";
  EXPECT_LE(MaxScaledError(out_got, out_want), 1e-5) << "out";
  EXPECT_LE(MaxScaledError(got.probs, want.probs), 1e-5) << "probs";

  int64_t masked_nonzero = 0, empty_nonzero = 0;
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      for (int i = 0; i < c.q_len; ++i) {
        const int limit = c.Limit(b, i);
        const float* pr = &got.probs[((static_cast<size_t>(b) * c.heads + h) * c.q_len + i) * c.k_len];
        for (int j = limit; j < c.k_len; ++j) masked_nonzero += !(pr[j] == 0.0f);
        if (limit == 0) {
          const float* o = &got.out[(static_cast<size_t>(b) * c.q_len + i) * L.ld_out + h * c.d_head];
          for (int t = 0; t < c.d_head; ++t) empty_nonzero += !(o[t] == 0.0f);
        }
      }
    }
  }
  EXPECT_EQ(masked_nonzero, 0) << "masked keys with a nonzero probability";
  EXPECT_EQ(empty_nonzero, 0) << "nonzero outputs of queries without a visible key";

  // Gradients by region: dq; dk and dv; padding columns (bitwise unchanged).
  std::vector<float> dq_got, dq_want, dkv_got, dkv_want, pad_got, pad_init;
  auto split = [&](const std::vector<float>& g, const std::vector<float>& w,
                   const std::vector<float>& init, int64_t ld, int dq_end, int kv_end) {
    for (size_t r = 0; r < g.size() / ld; ++r) {
      for (int64_t j = 0; j < ld; ++j) {
        const size_t x = r * ld + j;
        if (j < dq_end) {
          dq_got.push_back(g[x]);
          dq_want.push_back(w[x]);
        } else if (j < kv_end) {
          dkv_got.push_back(g[x]);
          dkv_want.push_back(w[x]);
        } else {
          pad_got.push_back(g[x]);
          pad_init.push_back(init[x]);
        }
      }
    }
  };
  split(got.ga, want.ga, in.ga0, L.ld_a, L.e, c.fused ? 3 * L.e : L.e);
  if (!c.fused) split(got.gb, want.gb, in.gb0, L.ld_b, 0, 2 * L.e);
  EXPECT_LE(RelativeError(dq_got, dq_want), kTol) << "dq";
  EXPECT_LE(MaxScaledError(dq_got, dq_want), 1e-4) << "dq";
  EXPECT_LE(RelativeError(dkv_got, dkv_want), kTol) << "dk, dv";
  EXPECT_LE(MaxScaledError(dkv_got, dkv_want), 1e-4) << "dk, dv";
  EXPECT_TRUE(SameBits(pad_got, pad_init)) << "gradient padding columns written";
}

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

TEST(AttentionReference, MatchesCpu) {
  std::mt19937 rng(11);
  for (const AttnCase& c : AttnCases()) {
    SCOPED_TRACE(c.Name());
    const AttnInputs in = MakeInputs(c, rng);
    ExpectAttentionClose(c, in, CpuAttention(c, in), ReferenceAttention(c, in));
  }
}

class AttentionTest : public TrainBackwardTest {
 protected:
  // GPU forward (outputs poisoned first), then backward from the GPU's probabilities (dq
  // poisoned, dk and dv accumulated onto the inputs' initial values).
  AttnResult RunGpu(const AttnCase& c, const AttnInputs& in, const AttentionDropout& drop = {}) {
    const AttnLayout L(c);
    const int64_t ld_kv = L.ld_kv(c);
    float* d_a = Copy(in.a);
    const float* d_kv = c.fused ? d_a : Copy(in.b);
    const int32_t* d_valid = c.k_valid.empty() ? nullptr : ToDevice(c.k_valid);
    float* d_out = Copy(OutBuffer(c, std::numeric_limits<float>::quiet_NaN()));
    float* d_p = Alloc<float>(L.p_size);
    Poison(d_p, L.p_size * sizeof(float));
    absl::Status st = AttentionTrainForward(*ctx_, d_out, L.ld_out, d_p, d_a, L.ld_a,
                                            d_kv + L.k_off, d_kv + L.v_off, ld_kv, c.batch,
                                            c.q_len, c.k_len, c.heads, c.d_head, d_valid, c.causal,
                                            drop);
    EXPECT_TRUE(st.ok()) << st;
    float* d_ga = Copy(WithDq(c, in.ga0, std::numeric_limits<float>::quiet_NaN()));
    float* d_gb = c.fused ? nullptr : Copy(in.gb0);
    float* d_gkv = c.fused ? d_ga : d_gb;
    st = AttentionBackward(*ctx_, d_ga, L.ld_a, d_gkv + L.k_off, d_gkv + L.v_off, ld_kv,
                           Copy(in.dout), L.ld_out, d_p, d_a, L.ld_a, d_kv + L.k_off,
                           d_kv + L.v_off, ld_kv, c.batch, c.q_len, c.k_len, c.heads, c.d_head,
                           drop);
    EXPECT_TRUE(st.ok()) << st;
    AttnResult r;
    r.out = ToHost(d_out, L.out_size);
    r.probs = ToHost(d_p, L.p_size);
    r.ga = ToHost(d_ga, L.a_size);
    if (!c.fused) r.gb = ToHost(d_gb, L.b_size);
    return r;
  }
};

TEST_F(AttentionTest, MatchesReferenceAndCpu) {
  for (const AttnCase& c : AttnCases()) {
    SCOPED_TRACE(c.Name());
    const AttnInputs in = MakeInputs(c, rng_);
    const AttnResult got = RunGpu(c, in);
    {
      SCOPED_TRACE("against float64");
      ExpectAttentionClose(c, in, got, ReferenceAttention(c, in));
    }
    {
      SCOPED_TRACE("against the CPU kernels");
      ExpectAttentionClose(c, in, got, CpuAttention(c, in));
    }
    const AttnResult again = RunGpu(c, in);
    EXPECT_TRUE(SameBits(got.out, again.out)) << "out not deterministic";
    EXPECT_TRUE(SameBits(got.probs, again.probs)) << "probs not deterministic";
    EXPECT_TRUE(SameBits(got.ga, again.ga)) << "dq (dk, dv) not deterministic";
    EXPECT_TRUE(SameBits(got.gb, again.gb)) << "dk, dv not deterministic";
  }
}

// Attention dropout drops the CPU's elements (the counter RNG over the probs index), so the GPU
// matches the CPU kernels (checked against finite differences in kernels/cpu/backward_test).
TEST_F(AttentionTest, DropoutMatchesCpu) {
  for (const AttnCase& c : AttnCases()) {
    SCOPED_TRACE(c.Name());
    const AttnInputs in = MakeInputs(c, rng_);
    const AttentionDropout drop{0.3f, 17, 3005};
    const AttnResult got = RunGpu(c, in, drop);
    ExpectAttentionClose(c, in, got, CpuAttention(c, in, drop));
    const AttnResult again = RunGpu(c, in, drop);
    EXPECT_TRUE(SameBits(got.out, again.out)) << "out not deterministic";
    EXPECT_TRUE(SameBits(got.ga, again.ga)) << "dq (dk, dv) not deterministic";
    EXPECT_TRUE(SameBits(got.gb, again.gb)) << "dk, dv not deterministic";
  }
  // Out of [0, 1) is an error that names it.
  float* p = Alloc<float>(64);
  const absl::Status st = AttentionTrainForward(*ctx_, p, 4, p, p, 4, p, p, 4, 1, 1, 1, 1, 4, nullptr, false,
                                                AttentionDropout{1.0f, 0, 0});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("attention dropout"), std::string::npos) << st;
}

// Padded key rows (j >= k_valid) are never read: NaN there changes no output bit.
TEST_F(AttentionTest, IgnoresPaddedKeys) {
  const AttnCase c{3, 8, 10, 2, 16, {10, 6, 0}, false, false};
  const AttnLayout L(c);
  const AttnInputs in = MakeInputs(c, rng_);
  AttnInputs poisoned = in;
  for (int b = 0; b < c.batch; ++b) {
    for (int j = c.k_valid[b]; j < c.k_len; ++j) {
      for (int64_t t = 0; t < L.ld_b; ++t) {
        poisoned.b[(static_cast<size_t>(b) * c.k_len + j) * L.ld_b + t] = std::nanf("");
      }
    }
  }
  const AttnResult clean = RunGpu(c, in), nan = RunGpu(c, poisoned);
  EXPECT_TRUE(SameBits(clean.out, nan.out));
  EXPECT_TRUE(SameBits(clean.probs, nan.probs));
  EXPECT_TRUE(SameBits(clean.ga, nan.ga));
  EXPECT_TRUE(SameBits(clean.gb, nan.gb));
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

TEST_F(TrainBackwardTest, ScaleInPlace) {
  for (int64_t count : {int64_t{1}, int64_t{4099}, int64_t{1000003}}) {
    const std::vector<float> x = Random(count);
    std::vector<float> scaled(count);
    for (int64_t i = 0; i < count; ++i) scaled[i] = x[i] * 0.37f;
    float* d_x = Copy(x);
    ASSERT_TRUE(ScaleInPlace(*ctx_, d_x, count, 0.37f).ok());
    EXPECT_TRUE(SameBits(ToHost(d_x, count), scaled)) << count;
  }
}

TEST_F(TrainBackwardTest, SumOfSquares) {
  double* d_out = Alloc<double>(1);
  auto run = [&](const std::vector<float>& x) {
    Poison(d_out, sizeof(double));
    const float* d_x = x.empty() ? Alloc<float>(1) : Copy(x);
    const absl::Status st = SumOfSquares(*ctx_, d_out, d_x, static_cast<int64_t>(x.size()));
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
  EXPECT_FALSE(ActivationBackward(*ctx_, p, p, p, -1, Activation::kRelu).ok());
  EXPECT_FALSE(ActivationBackward(*ctx_, p, p, p, 16, Activation::kSwish).ok());  // no CUDA kernel
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

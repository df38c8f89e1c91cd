// The training attention (AttentionTrainForward, which saves the probabilities, and
// AttentionBackward; kernels/cpu/attention.h, kernels/cuda/attention.h, the layouts of
// kernels/attention.h), one test body run on every device (kernels/testing/devices.h) against
// float64 host loops of the definitions: odd sizes, d_head not a multiple of 4, strided and
// fused Q/K/V layouts, padding (including groups with no valid key), causal masks,
// q_len != k_len, 700 and 1024 keys, with and without attention dropout (the counter hash over
// the probabilities' index: the same elements dropped on every device). Outputs start as NaN
// (padding columns must stay NaN, masked probabilities and rows without a visible key must be
// exactly 0); dk and dv accumulate onto nonzero values and their padding columns keep their
// bits; every run is repeated and must give the same bits.
//
// Tolerances against float64: out and the probabilities within 1e-5 per element scaled by
// 1 + |want|, the gradients within 1e-4; each within a 2-norm relative 1e-5. Float32 dot
// products over d_head <= 130 and sums over up to 1024 keys; the bounds the CPU and GPU kernels
// were held to against this reference and against each other.
//
// The inference kernels (MultiHeadAttention over the KV cache's slot tables, AttentionArgmax)
// too, against float64 (InferenceAttentionTest). On one device only: the CPU's instruction-set
// paths (kernels/cpu/attention_test.cc); the GPU's argument errors and its promise that NaN in
// padded key rows reaches no output of the training attention (the CPU's loops multiply them
// by zero) (kernels/cuda/attention_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attention.h"
#include "kernels/counter_uniform.h"
#include "kernels/cpu/attention.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/attention.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::ExpectSameBits;
using testing::MaxScaledError;
using testing::RelativeError;

struct AttnCase {
  int batch, q_len, k_len, heads, d_head;
  std::vector<int32_t> k_valid;  // empty: all keys valid
  bool causal;
  bool fused;  // self-attention with q, k, v side by side in one buffer (q_len == k_len)

  std::string Name() const {
    return absl::StrCat("batch ", batch, " q_len ", q_len, " k_len ", k_len, " heads ", heads, " d_head ",
                        d_head, " k_valid ", k_valid.empty() ? "all" : "given", causal ? " causal" : "",
                        fused ? " fused" : "");
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

// Forward and backward in float64 from the definitions (masked keys skipped), with attention
// dropout: key j of probs row `row` is kept iff CounterUniform(seed, stream, row * k_len + j)
// >= p, and kept probabilities are scaled by 1 / (1 - p) (probs keeps the undropped values).
AttnResult ReferenceAttention(const AttnCase& c, const AttnInputs& in, const AttentionDropout& drop) {
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
  std::vector<double> p(c.k_len), pd(c.k_len), dp(c.k_len);
  const double keep_scale = 1.0 / (1.0 - static_cast<double>(drop.p));
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      auto kv_at = [&](int64_t off, int j, int t) {
        return static_cast<double>(
            kv[(static_cast<int64_t>(b) * c.k_len + j) * ld_kv + off + h * c.d_head + t]);
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
        const int64_t prow = (static_cast<int64_t>(b) * c.heads + h) * c.q_len + i;
        float* pr = r.probs.data() + prow * c.k_len;
        for (int j = 0; j < c.k_len; ++j) pr[j] = static_cast<float>(p[j]);
        double dot = 0.0;
        for (int j = 0; j < limit; ++j) {
          const bool keep =
              drop.p <= 0.0f ||
              CounterUniform(drop.seed, drop.stream, static_cast<uint64_t>(prow * c.k_len + j)) >= drop.p;
          pd[j] = keep ? p[j] * keep_scale : 0.0;
          dp[j] = 0.0;
          for (int t = 0; t < c.d_head; ++t) dp[j] += static_cast<double>(dout[t]) * kv_at(L.v_off, j, t);
          dp[j] = keep ? dp[j] * keep_scale : 0.0;
          dot += p[j] * dp[j];
        }
        for (int t = 0; t < c.d_head; ++t) {
          double o = 0.0, dq = 0.0;
          for (int j = 0; j < limit; ++j) {
            const double ds = p[j] * (dp[j] - dot);
            o += pd[j] * kv_at(L.v_off, j, t);
            dq += ds * kv_at(L.k_off, j, t);
            const int64_t kvrow = (static_cast<int64_t>(b) * c.k_len + j) * ld_kv + h * c.d_head + t;
            gkv[kvrow + L.v_off] += pd[j] * dout[t];
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
  EXPECT_LE(RelativeError(out_got, out_want), 1e-5) << "out";
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
  auto split = [&](const std::vector<float>& g, const std::vector<float>& w, const std::vector<float>& init,
                   int64_t ld, int dq_end, int kv_end) {
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
  EXPECT_LE(RelativeError(dq_got, dq_want), 1e-5) << "dq";
  EXPECT_LE(MaxScaledError(dq_got, dq_want), 1e-4) << "dq";
  EXPECT_LE(RelativeError(dkv_got, dkv_want), 1e-5) << "dk, dv";
  EXPECT_LE(MaxScaledError(dkv_got, dkv_want), 1e-4) << "dk, dv";
  ExpectSameBits(pad_got, pad_init, "gradient padding columns");
}

std::vector<AttnCase> AttnCases() {
  return {
      {2, 5, 7, 3, 4, {}, false, false},        {3, 9, 9, 2, 17, {9, 4, 0}, true, true},
      {2, 6, 11, 2, 24, {11, 0}, false, false}, {1, 33, 700, 2, 64, {650}, false, false},
      {2, 40, 40, 8, 64, {40, 23}, true, true}, {1, 3, 1024, 1, 32, {}, false, false},
      {2, 3, 4, 1, 1, {}, true, false},         {2, 12, 20, 2, 130, {20, 7}, true, false},
  };
}

class AttentionTest : public testing::DeviceTest {
 protected:
  // Forward (outputs NaN first), then backward from the forward's probabilities (dq NaN first,
  // dk and dv accumulated onto the inputs' initial values), on the test's device.
  AttnResult Run(const AttnCase& c, const AttnInputs& in, const AttentionDropout& drop) {
    const AttnLayout L(c);
    const int64_t ld_kv = L.ld_kv(c);
    const float* a = Upload(in.a);
    const float* kv = c.fused ? a : Upload(in.b);
    const int32_t* valid = c.k_valid.empty() ? nullptr : Upload(c.k_valid);
    float* out = Upload(OutBuffer(c, std::numeric_limits<float>::quiet_NaN()));
    float* probs = Alloc<float>(L.p_size);
    absl::Status st = TrainForward(out, L.ld_out, probs, a, L.ld_a, kv + L.k_off, kv + L.v_off, ld_kv,
                                   c.batch, c.q_len, c.k_len, c.heads, c.d_head, valid, c.causal, drop);
    EXPECT_TRUE(st.ok()) << st;
    float* ga = Upload(WithDq(c, in.ga0, std::numeric_limits<float>::quiet_NaN()));
    float* gb = c.fused ? nullptr : Upload(in.gb0);
    float* gkv = c.fused ? ga : gb;
    st =
        Backward(ga, L.ld_a, gkv + L.k_off, gkv + L.v_off, ld_kv, Upload(in.dout), L.ld_out, probs, a, L.ld_a,
                 kv + L.k_off, kv + L.v_off, ld_kv, c.batch, c.q_len, c.k_len, c.heads, c.d_head, drop);
    EXPECT_TRUE(st.ok()) << st;
    AttnResult r;
    r.out = Download(out, L.out_size);
    r.probs = Download(probs, L.p_size);
    r.ga = Download(ga, L.a_size);
    if (!c.fused) r.gb = Download(gb, L.b_size);
    return r;
  }

  absl::Status TrainForward(float* out, int64_t ld_out, float* probs, const float* q, int64_t ld_q,
                            const float* k, const float* v, int64_t ld_kv, int batch, int q_len, int k_len,
                            int heads, int d_head, const int32_t* k_valid, bool causal,
                            const AttentionDropout& drop) {
    if (cpu()) {
      cpu::AttentionTrainForward(out, ld_out, probs, q, ld_q, k, v, ld_kv, batch, q_len, k_len, heads, d_head,
                                 k_valid, causal, drop);
      return absl::OkStatus();
    }
    return TNMT_IF_CUDA(cuda::AttentionTrainForward(ctx(), out, ld_out, probs, q, ld_q, k, v, ld_kv, batch,
                                                    q_len, k_len, heads, d_head, k_valid, causal, drop));
  }
  absl::Status Backward(float* dq, int64_t ld_dq, float* dk, float* dv, int64_t ld_dkv, const float* dout,
                        int64_t ld_dout, const float* probs, const float* q, int64_t ld_q, const float* k,
                        const float* v, int64_t ld_kv, int batch, int q_len, int k_len, int heads, int d_head,
                        const AttentionDropout& drop) {
    if (cpu()) {
      cpu::AttentionBackward(dq, ld_dq, dk, dv, ld_dkv, dout, ld_dout, probs, q, ld_q, k, v, ld_kv, batch,
                             q_len, k_len, heads, d_head, drop);
      return absl::OkStatus();
    }
    return TNMT_IF_CUDA(cuda::AttentionBackward(ctx(), dq, ld_dq, dk, dv, ld_dkv, dout, ld_dout, probs, q,
                                                ld_q, k, v, ld_kv, batch, q_len, k_len, heads, d_head, drop));
  }
};

TEST_P(AttentionTest, MatchesFloat64) {
  for (const AttentionDropout drop : {AttentionDropout{}, AttentionDropout{0.3f, 17, 3005}}) {
    for (const AttnCase& c : AttnCases()) {
      SCOPED_TRACE(c.Name() + (drop.p > 0.0f ? " dropout 0.3" : ""));
      const AttnInputs in = MakeInputs(c, rng_);
      const AttnResult got = Run(c, in, drop);
      ExpectAttentionClose(c, in, got, ReferenceAttention(c, in, drop));
      const AttnResult again = Run(c, in, drop);
      ExpectSameBits(again.out, got.out, "out, second run");
      ExpectSameBits(again.probs, got.probs, "probs, second run");
      ExpectSameBits(again.ga, got.ga, "dq (dk, dv when fused), second run");
      ExpectSameBits(again.gb, got.gb, "dk, dv, second run");
    }
  }
}

// The inference kernels (MultiHeadAttention, AttentionArgmax) with the arguments of
// kernels/attention.h: the engine's KV-cache layout (slot pools addressed through k_groups
// tables, ld_kv = 0), kv_index sharing a source among beams, k_valid padding (including groups
// that see no key), causal steps, dense layouts, each d_head path of the GPU (the vectorized
// 32/64/128 and the general one), misaligned rows and long caches.
struct InferenceCase {
  std::string name;
  int batch, q_len, k_len, heads, d_head;
  int groups;         // K/V groups (sources or rows)
  bool slot_tables;   // engine KV cache: slots addressed through k_groups, ld_kv = 0
  bool kv_index;      // query group b reads K/V group kv_index[b]
  bool k_valid;       // random valid lengths (group 0: none, group 1: all)
  int causal_offset;  // -1: none
  int ld_pad = 0;     // extra columns in q/out rows (odd: misaligned)
};

// out and the alignment in float64 from the definition: for query i of group b and head h,
// keys j < limit of K/V group g = kv_index[b] (or b), each stored in group k_groups[g, j] (or
// g); limit = k_valid[g] (or k_len), and at most i + causal_offset + 1 with a causal mask.
void ReferenceInference(const InferenceCase& c, const AttentionArgs& a, const std::vector<float>& q,
                        int64_t ld_q, const std::vector<float>& kv, int64_t ld_kv, int64_t group_stride,
                        int64_t ld_out, std::vector<double>* out, std::vector<int32_t>* align) {
  const int d = c.heads * c.d_head;
  out->assign(static_cast<size_t>(c.batch) * c.q_len * ld_out, 0.0);
  align->assign(static_cast<size_t>(c.batch) * c.q_len, -1);
  for (int b = 0; b < c.batch; ++b) {
    const int g = a.kv_index != nullptr ? a.kv_index[b] : b;
    const int valid = a.k_valid != nullptr ? a.k_valid[g] : c.k_len;
    for (int i = 0; i < c.q_len; ++i) {
      const int64_t row = static_cast<int64_t>(b) * c.q_len + i;
      const int limit = a.causal_offset >= 0 ? std::min(valid, i + a.causal_offset + 1) : valid;
      std::vector<double> mean_p(std::max(limit, 0), 0.0);
      for (int h = 0; h < c.heads; ++h) {
        std::vector<double> p(std::max(limit, 0));
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < limit; ++j) {
          const int64_t stored = a.k_groups != nullptr ? a.k_groups[g * a.k_groups_stride + j] : g;
          const float* key = kv.data() + stored * group_stride + j * ld_kv + h * c.d_head;
          double dot = 0.0;
          for (int t = 0; t < c.d_head; ++t)
            dot += static_cast<double>(q[row * ld_q + h * c.d_head + t]) * key[t];
          p[j] = dot * a.scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j < limit; ++j) sum += p[j] = std::exp(p[j] - mx);
        for (int j = 0; j < limit; ++j) {
          p[j] /= sum;
          mean_p[j] += p[j] / c.heads;
          const int64_t stored = a.k_groups != nullptr ? a.k_groups[g * a.k_groups_stride + j] : g;
          const float* value = kv.data() + stored * group_stride + j * ld_kv + d + h * c.d_head;
          for (int t = 0; t < c.d_head; ++t) (*out)[row * ld_out + h * c.d_head + t] += p[j] * value[t];
        }
      }
      for (int j = 0; j < limit; ++j) {
        if ((*align)[row] < 0 || mean_p[j] > mean_p[(*align)[row]]) (*align)[row] = j;
      }
    }
  }
}

class InferenceAttentionTest : public testing::DeviceTest {
 protected:
  absl::Status MultiHeadAttention(float* out, int64_t ld_out, const float* q, int64_t ld_q, const float* k,
                                  const float* v, int64_t ld_kv, int64_t group_stride,
                                  const AttentionArgs& a) {
    if (cpu())
      return cpu::MultiHeadAttention(out, ld_out, q, ld_q, k, v, ld_kv, group_stride, a), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::MultiHeadAttention(ctx(), out, ld_out, q, ld_q, k, v, ld_kv, group_stride, a));
  }
  absl::Status AttentionArgmax(int32_t* out, const float* q, int64_t ld_q, const float* k, int64_t ld_kv,
                               int64_t group_stride, const AttentionArgs& a) {
    if (cpu()) return cpu::AttentionArgmax(out, q, ld_q, k, ld_kv, group_stride, a), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::AttentionArgmax(ctx(), out, q, ld_q, k, ld_kv, group_stride, a));
  }
};

// out within 3e-5 per element scaled by 1 + |want| of float64 (the CPU's paths are within 1e-5
// absolute and relative, the GPU was within 2e-5 of the CPU); every alignment exact (random
// scores have no near-ties).
TEST_P(InferenceAttentionTest, MatchesFloat64) {
  const InferenceCase cases[] = {
      {"decode self dh64", 13, 1, 37, 8, 64, 13, true, false, true, -1},
      {"decode cross dh64", 12, 1, 29, 8, 64, 3, true, true, true, -1},
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
  for (const InferenceCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::uniform_int_distribution<int> any(0, 1 << 30);
    const int d = c.heads * c.d_head;
    const int64_t ld_q = d + c.ld_pad, ld_out = d + c.ld_pad;
    const int64_t rows = static_cast<int64_t>(c.batch) * c.q_len;
    const std::vector<float> q = Random(rows * ld_q);
    // K/V storage: K at column 0, V at column d of each stored row.
    int64_t ld_kv, group_stride, stored_groups, table_stride = 0;
    std::vector<int32_t> tables;
    if (c.slot_tables) {
      stored_groups = static_cast<int64_t>(c.groups) * c.k_len + 17;  // slots
      ld_kv = 0;
      group_stride = 2 * d;
      table_stride = c.k_len + 3;
      tables.resize(static_cast<size_t>(c.groups) * table_stride);
      for (int32_t& t : tables) t = any(rng_) % stored_groups;
    } else {
      stored_groups = c.groups;
      ld_kv = 2 * d + 4;
      group_stride = c.k_len * ld_kv + 8;
    }
    const std::vector<float> kv = Random(stored_groups * group_stride + 2 * d);
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
    std::vector<double> want;
    std::vector<int32_t> want_align;
    ReferenceInference(c, a, q, ld_q, kv, ld_kv, group_stride, ld_out, &want, &want_align);

    AttentionArgs on_device = a;  // the same arguments, their tables on the test's device
    on_device.kv_index = c.kv_index ? Upload(kv_index) : nullptr;
    on_device.k_valid = c.k_valid ? Upload(valid) : nullptr;
    on_device.k_groups = c.slot_tables ? Upload(tables) : nullptr;
    const float* dq = Upload(q);
    const float* dkv = Upload(kv);
    float* out = Alloc<float>(rows * ld_out);
    ASSERT_TRUE(MultiHeadAttention(out, ld_out, dq, ld_q, dkv, dkv + d, ld_kv, group_stride, on_device).ok());
    int32_t* align = Alloc<int32_t>(rows);
    ASSERT_TRUE(AttentionArgmax(align, dq, ld_q, dkv, ld_kv, group_stride, on_device).ok());
    const std::vector<float> got = Download(out, rows * ld_out);
    std::vector<float> got_heads;  // the head columns only: padding columns are not written
    std::vector<double> want_heads;
    for (int64_t r = 0; r < rows; ++r) {
      got_heads.insert(got_heads.end(), got.begin() + r * ld_out, got.begin() + r * ld_out + d);
      want_heads.insert(want_heads.end(), want.begin() + r * ld_out, want.begin() + r * ld_out + d);
    }
    EXPECT_LE(MaxScaledError(got_heads, want_heads), 3e-5);
    EXPECT_EQ(Download(align, rows), want_align);
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(AttentionTest);
TNMT_INSTANTIATE_DEVICE_TEST(InferenceAttentionTest);

}  // namespace
}  // namespace tnmt::kernels

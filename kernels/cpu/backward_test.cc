// Checks the CPU training kernels: the gradients (elementwise.h, attention.h, embedding.h), the
// losses (loss.h) and dropout (dropout.h). Every backward is compared with central finite
// differences (h = 1e-6) of a naive double-precision forward of the scalar objective
// L = sum(w ⊙ forward(inputs)) with fixed random weights w (so dy = w); the naive forward is
// itself checked against the float32 forward kernel, so the two describe the same function.
// Also: the label-smoothed loss against the documented target distribution, the counter RNG,
// dropout's instruction-set paths and fused passes, and the thread-count independence. Adam,
// dropout's masks and statistics, and each shared kernel against a naive host loop are tested
// once for every device in kernels/testing (*_devices_test.cc).
#include "kernels/cpu/adam.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/test_util.h"

namespace tnmt::kernels::cpu {
namespace {

using testing::Random;

constexpr double kFdStep = 1e-6;  // central-difference step on the double forward
constexpr double kGradRel = 1e-3;  // float32 analytic gradient vs double finite difference
constexpr double kGradAbs = 2e-5;

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Central differences of f at x, for every element of x.
std::vector<double> FiniteDiff(const std::function<double(const std::vector<double>&)>& f,
                               std::vector<double> x) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double fp = f(x);
    x[i] = x0 - kFdStep;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2.0 * kFdStep);
  }
  return g;
}

// The shared comparison with this file's default tolerances.
void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want,
                   const std::string& what, double abs = kGradAbs, double rel = kGradRel) {
  testing::ExpectAllNear(got, want, what, abs, rel);
}

// want + base, the expected contents of an accumulated (+=) gradient buffer.
std::vector<double> Plus(const std::vector<double>& want, const std::vector<float>& base) {
  std::vector<double> r(want.size());
  for (size_t i = 0; i < want.size(); ++i) r[i] = want[i] + base[i];
  return r;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ------------------------------------------------------------------------ LayerNormBackward

// y = (x - mean) / sqrt(var + eps) * gamma + beta per row, biased variance.
std::vector<double> NaiveLayerNorm(const std::vector<double>& x, const std::vector<double>& gamma,
                                   const std::vector<double>& beta, int64_t rows, int d,
                                   double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[r * d];
    double mean = 0.0;
    for (int j = 0; j < d; ++j) mean += xr[j];
    mean /= d;
    double var = 0.0;
    for (int j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= d;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int j = 0; j < d; ++j) y[r * d + j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
  }
  return y;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(LayerNormBackward, MatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(11);
  const float eps = 1e-5f;
  for (auto [rows, d] : std::vector<std::pair<int64_t, int>>{{1, 2}, {3, 7}, {5, 16}, {2, 64}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " d=" + std::to_string(d));
    std::vector<float> x = Random(rows * d, rng, -2.0f, 2.0f);
    for (float& v : x) v += 0.7f;  // a non-zero mean
    const std::vector<float> gamma = Random(d, rng, 0.5f, 1.5f);
    const std::vector<float> beta = Random(d, rng);
    const std::vector<float> w = Random(rows * d, rng);
    const std::vector<double> xd = ToDouble(x), gd = ToDouble(gamma), bd = ToDouble(beta),
                              wd = ToDouble(w);

    // The naive forward is the kernel's forward.
    std::vector<float> y(x.size());
    LayerNorm(y.data(), x.data(), nullptr, gamma.data(), beta.data(), rows, d, eps);
    ExpectAllNear(y, NaiveLayerNorm(xd, gd, bd, rows, d, eps), "forward", 1e-5, 1e-5);

    const std::vector<double> want_dx = FiniteDiff(
        [&](const std::vector<double>& p) { return Dot(wd, NaiveLayerNorm(p, gd, bd, rows, d, eps)); },
        xd);
    const std::vector<double> want_dgamma = FiniteDiff(
        [&](const std::vector<double>& p) { return Dot(wd, NaiveLayerNorm(xd, p, bd, rows, d, eps)); },
        gd);
    const std::vector<double> want_dbeta = FiniteDiff(
        [&](const std::vector<double>& p) { return Dot(wd, NaiveLayerNorm(xd, gd, p, rows, d, eps)); },
        bd);
    // The check is not vacuous (with d = 2 the output is ±gamma whatever x is: dx ~ 0).
    if (d > 2) {
      ASSERT_GT(MaxAbs(want_dx), 1e-2);
    }

    const std::vector<float> dgamma0 = Random(d, rng), dbeta0 = Random(d, rng);
    std::vector<float> dx(x.size(), 1e30f), dgamma = dgamma0, dbeta = dbeta0;
    LayerNormBackward(dx.data(), dgamma.data(), dbeta.data(), w.data(), x.data(), gamma.data(),
                      rows, d, eps);
    ExpectAllNear(dx, want_dx, "dx");
    ExpectAllNear(dgamma, Plus(want_dgamma, dgamma0), "dgamma (accumulated)");
    ExpectAllNear(dbeta, Plus(want_dbeta, dbeta0), "dbeta (accumulated)");

    // dx may alias dy: same result.
    std::vector<float> inplace = w, dgamma2 = dgamma0, dbeta2 = dbeta0;
    LayerNormBackward(inplace.data(), dgamma2.data(), dbeta2.data(), inplace.data(), x.data(),
                      gamma.data(), rows, d, eps);
    EXPECT_EQ(inplace, dx);
    EXPECT_EQ(dgamma2, dgamma);
    EXPECT_EQ(dbeta2, dbeta);
  }
}

// ----------------------------------------------------------------------- ActivationBackward

double NaiveAct(double x, Activation act) {
  if (act == Activation::kRelu) return x > 0.0 ? x : 0.0;
  if (act == Activation::kSwish) return x / (1.0 + std::exp(-x));
  if (act == Activation::kGeluErf) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  const double c = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

TEST(ActivationBackward, EveryActivationMatchesFiniteDifferences) {
  std::mt19937 rng(12);
  const int64_t count = 200;
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluErf, Activation::kSwish}) {
    SCOPED_TRACE(ActivationName(act));
    std::vector<float> pre = Random(count, rng, -4.0f, 4.0f);
    for (float& v : pre) {
      if (std::fabs(v) < 0.05f) v = v < 0.0f ? -0.5f : 0.5f;  // relu kink: no derivative
    }
    const std::vector<float> w = Random(count, rng);
    const std::vector<double> wd = ToDouble(w);

    std::vector<float> y = pre;
    BiasActivation(y.data(), nullptr, 1, static_cast<int>(count), act);
    std::vector<double> want_y(count);
    for (int64_t i = 0; i < count; ++i) want_y[i] = NaiveAct(pre[i], act);
    ExpectAllNear(y, want_y, "forward", 1e-5, 1e-5);

    const std::vector<double> want = FiniteDiff(
        [&](const std::vector<double>& p) {
          double s = 0.0;
          for (int64_t i = 0; i < count; ++i) s += wd[i] * NaiveAct(p[i], act);
          return s;
        },
        ToDouble(pre));
    std::vector<float> dx(count, 1e30f);
    ActivationBackward(dx.data(), w.data(), pre.data(), count, act);
    ExpectAllNear(dx, want, "dx");

    std::vector<float> inplace = w;  // dx may alias dy
    ActivationBackward(inplace.data(), inplace.data(), pre.data(), count, act);
    EXPECT_EQ(inplace, dx);
  }
}

// ---------------------------------------------------------------- Thread-count invariance

// The training kernels that split work over the compute threads give the same bits on 1, 2
// and 3 threads (reductions go by column, each over the rows in order).
TEST(ParallelTrainingKernels, SameBitsOnAnyThreadCount) {
  std::mt19937 rng(71);
  const int64_t rows = 300;
  const int d = 264;  // not a multiple of the column block
  const std::vector<float> x = Random(rows * d, rng), dy = Random(rows * d, rng), gamma = Random(d, rng);
  const std::vector<float> g = Random(rows * d, rng), w0 = Random(rows * d, rng), m0 = Random(rows * d, rng);
  std::vector<float> v0 = Random(rows * d, rng, 0.0f, 1.0f);
  struct Out {
    std::vector<float> dx, dx_alias, dgamma, dbeta, colsum, w, m, v;
  };
  auto run = [&](int threads) {
    SetComputeThreads(threads);
    Out o;
    o.dx.assign(rows * d, 0.0f);
    o.dgamma.assign(d, 0.5f);
    o.dbeta.assign(d, -0.5f);
    LayerNormBackward(o.dx.data(), o.dgamma.data(), o.dbeta.data(), dy.data(), x.data(), gamma.data(), rows, d,
                      1e-5f);
    o.dx_alias = dy;  // dx aliasing dy gives the same dx
    std::vector<float> dg(d, 0.5f), db(d, -0.5f);
    LayerNormBackward(o.dx_alias.data(), dg.data(), db.data(), o.dx_alias.data(), x.data(), gamma.data(), rows, d,
                      1e-5f);
    EXPECT_EQ(dg, o.dgamma);
    EXPECT_EQ(db, o.dbeta);
    o.colsum.assign(d, 1.0f);
    AccumulateColumnSum(o.colsum.data(), g.data(), rows, d);
    o.w = w0, o.m = m0, o.v = v0;
    AdamOptions opt;
    opt.lr = 1e-3f;
    opt.step = 3;
    AdamUpdate(o.w.data(), o.m.data(), o.v.data(), g.data(), rows * d, 0.5f, opt);
    return o;
  };
  const Out one = run(1);
  EXPECT_EQ(one.dx_alias, one.dx);
  for (int threads : {2, 3}) {
    const Out o = run(threads);
    EXPECT_EQ(o.dx, one.dx) << threads;
    EXPECT_EQ(o.dx_alias, one.dx) << threads;
    EXPECT_EQ(o.dgamma, one.dgamma) << threads;
    EXPECT_EQ(o.dbeta, one.dbeta) << threads;
    EXPECT_EQ(o.colsum, one.colsum) << threads;
    EXPECT_EQ(o.w, one.w) << threads;
    EXPECT_EQ(o.m, one.m) << threads;
    EXPECT_EQ(o.v, one.v) << threads;
  }
  SetComputeThreads(1);
}

// Training attention splits (sentence, head) pairs over the threads: the same bits on 1, 2 and 3
// threads, forward and backward, with padding, a causal mask and dropout.
TEST(ParallelTrainingKernels, AttentionSameBitsOnAnyThreadCount) {
  std::mt19937 rng(72);
  const int batch = 5, heads = 4, q_len = 23, k_len = 29, d_head = 64, width = heads * d_head;
  const std::vector<int32_t> valid = {29, 7, 29, 1, 16};
  const std::vector<float> q = Random(batch * q_len * width, rng), k = Random(batch * k_len * width, rng),
                           v = Random(batch * k_len * width, rng), dout = Random(batch * q_len * width, rng),
                           dkv0 = Random(batch * k_len * width, rng);
  const AttentionDropout drop{0.2f, 5, 9};
  struct Out {
    std::vector<float> out, probs, dq, dk, dv;
  };
  auto run = [&](int threads, bool causal) {
    SetComputeThreads(threads);
    Out o;
    o.out.assign(batch * q_len * width, 0.0f);
    o.probs.assign(static_cast<size_t>(batch) * heads * q_len * k_len, 0.0f);
    AttentionTrainForward(o.out.data(), width, o.probs.data(), q.data(), width, k.data(), v.data(), width, batch,
                          q_len, k_len, heads, d_head, valid.data(), causal, drop);
    o.dq.assign(batch * q_len * width, 0.0f);
    o.dk = dkv0;
    o.dv = dkv0;
    AttentionBackward(o.dq.data(), width, o.dk.data(), o.dv.data(), width, dout.data(), width, o.probs.data(),
                      q.data(), width, k.data(), v.data(), width, batch, q_len, k_len, heads, d_head, drop);
    return o;
  };
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "padded");
    const Out one = run(1, causal);
    for (int threads : {2, 3}) {
      const Out o = run(threads, causal);
      EXPECT_EQ(o.out, one.out) << threads;
      EXPECT_EQ(o.probs, one.probs) << threads;
      EXPECT_EQ(o.dq, one.dq) << threads;
      EXPECT_EQ(o.dk, one.dk) << threads;
      EXPECT_EQ(o.dv, one.dv) << threads;
    }
  }
  SetComputeThreads(1);
}

// ---------------------------------------------------------------------- AccumulateColumnSum

TEST(AccumulateColumnSum, IsTheBiasGradientAndAccumulates) {
  std::mt19937 rng(13);
  for (auto [rows, n] : std::vector<std::pair<int64_t, int>>{{1, 1}, {4, 5}, {9, 33}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " n=" + std::to_string(n));
    const std::vector<float> x = Random(rows * n, rng), w = Random(rows * n, rng);
    const std::vector<float> bias = Random(n, rng);
    const std::vector<double> xd = ToDouble(x), wd = ToDouble(w);
    // y = x + bias (AddBias); L = sum(w ⊙ y); dL/dbias = column sums of w.
    std::vector<float> y = x;
    AddBias(y.data(), bias.data(), rows, n);
    const auto loss = [&](const std::vector<double>& b) {
      double s = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int j = 0; j < n; ++j) s += wd[r * n + j] * (xd[r * n + j] + b[j]);
      }
      return s;
    };
    const std::vector<double> want = FiniteDiff(loss, ToDouble(bias));
    std::vector<double> exact(n, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int j = 0; j < n; ++j) exact[j] += wd[r * n + j];
    }
    const std::vector<float> db0 = Random(n, rng);
    std::vector<float> db = db0;
    AccumulateColumnSum(db.data(), w.data(), rows, n);
    ExpectAllNear(db, Plus(want, db0), "db vs finite differences");
    ExpectAllNear(db, Plus(exact, db0), "db vs exact column sums", 1e-6, 1e-6);
  }
}

// ------------------------------------------------------------------------------- Attention

struct AttnCase {
  std::string name;
  int batch, q_len, k_len, heads, d_head;
  int64_t ld_q, ld_kv, ld_out, ld_dq, ld_dkv, ld_dout;  // 0: heads * d_head
  std::vector<int32_t> k_valid;  // empty: null
  bool causal;
  float drop_p = 0.0f;  // attention dropout (seed kDropSeed, stream kDropStream)
};

constexpr uint64_t kDropSeed = 77, kDropStream = 3005;

// The factor attention dropout applies to probs element `index`: 0 or 1 / (1 - p).
double DropFactor(const AttnCase& c, int64_t index) {
  if (c.drop_p <= 0.0f) return 1.0;
  const float keep_scale = 1.0f / (1.0f - c.drop_p);
  return CounterUniform(kDropSeed, kDropStream, static_cast<uint64_t>(index)) >= c.drop_p ? keep_scale : 0.0;
}

bool Visible(const AttnCase& c, int b, int i, int j) {
  const int valid = c.k_valid.empty() ? c.k_len : c.k_valid[b];
  return j < valid && (!c.causal || j <= i);
}

// Naive double forward; out is compact [batch*q_len, heads*d_head]; probs
// [batch, heads, q_len, k_len] (0 where masked; rows with no visible key are all 0), before
// attention dropout, which only changes what multiplies v.
void NaiveAttention(const AttnCase& c, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, std::vector<double>* out,
                    std::vector<double>* probs) {
  const int width = c.heads * c.d_head;
  out->assign(static_cast<size_t>(c.batch) * c.q_len * width, 0.0);
  probs->assign(static_cast<size_t>(c.batch) * c.heads * c.q_len * c.k_len, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  std::vector<double> s(c.k_len);
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      for (int i = 0; i < c.q_len; ++i) {
        const double* qi = &q[(static_cast<int64_t>(b) * c.q_len + i) * c.ld_q + h * c.d_head];
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < c.k_len; ++j) {
          if (!Visible(c, b, i, j)) continue;
          const double* kj = &k[(static_cast<int64_t>(b) * c.k_len + j) * c.ld_kv + h * c.d_head];
          double dot = 0.0;
          for (int e = 0; e < c.d_head; ++e) dot += qi[e] * kj[e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // all masked: zeros
        double sum = 0.0;
        for (int j = 0; j < c.k_len; ++j) {
          if (Visible(c, b, i, j)) sum += std::exp(s[j] - mx);
        }
        double* pr = &(*probs)[((static_cast<int64_t>(b) * c.heads + h) * c.q_len + i) * c.k_len];
        double* o = &(*out)[(static_cast<int64_t>(b) * c.q_len + i) * width + h * c.d_head];
        for (int j = 0; j < c.k_len; ++j) {
          if (!Visible(c, b, i, j)) continue;
          pr[j] = std::exp(s[j] - mx) / sum;
          const double pd = pr[j] * DropFactor(c, &pr[j] - probs->data());
          const double* vj = &v[(static_cast<int64_t>(b) * c.k_len + j) * c.ld_kv + h * c.d_head];
          for (int e = 0; e < c.d_head; ++e) o[e] += pd * vj[e];
        }
      }
    }
  }
}

// Copies compact [rows, width] into a [rows, ld] buffer whose padding holds `fill`.
std::vector<float> Strided(const std::vector<float>& compact, int64_t rows, int width, int64_t ld,
                           float fill) {
  std::vector<float> r(rows * ld, fill);
  for (int64_t i = 0; i < rows; ++i) {
    for (int j = 0; j < width; ++j) r[i * ld + j] = compact[i * width + j];
  }
  return r;
}

void RunAttentionCaseOnce(AttnCase c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  const int width = c.heads * c.d_head;
  for (int64_t* ld : {&c.ld_q, &c.ld_kv, &c.ld_out, &c.ld_dq, &c.ld_dkv, &c.ld_dout}) {
    if (*ld == 0) *ld = width;
  }
  std::mt19937 rng(seed);
  const int64_t q_rows = static_cast<int64_t>(c.batch) * c.q_len;
  const int64_t k_rows = static_cast<int64_t>(c.batch) * c.k_len;
  // Padding columns hold large values: reading them would show.
  std::vector<float> q = Random(q_rows * c.ld_q, rng, -1.5f, 1.5f);
  std::vector<float> k = Random(k_rows * c.ld_kv, rng, -1.5f, 1.5f);
  std::vector<float> v = Random(k_rows * c.ld_kv, rng);
  for (int64_t r = 0; r < q_rows; ++r) {
    for (int64_t j = width; j < c.ld_q; ++j) q[r * c.ld_q + j] = 1e3f;
  }
  for (int64_t r = 0; r < k_rows; ++r) {
    for (int64_t j = width; j < c.ld_kv; ++j) k[r * c.ld_kv + j] = v[r * c.ld_kv + j] = -1e3f;
  }
  const std::vector<float> w = Random(q_rows * width, rng);  // compact dout
  const std::vector<double> qd = ToDouble(q), kd = ToDouble(k), vd = ToDouble(v),
                            wd = ToDouble(w);

  // Forward: output and probabilities against the naive forward.
  const float kOutFill = 777.0f;
  std::vector<float> out(q_rows * c.ld_out, kOutFill);
  std::vector<float> probs(static_cast<size_t>(c.batch) * c.heads * c.q_len * c.k_len, -5.0f);
  const AttentionDropout drop{c.drop_p, kDropSeed, kDropStream};
  AttentionTrainForward(out.data(), c.ld_out, probs.data(), q.data(), c.ld_q, k.data(), v.data(),
                        c.ld_kv, c.batch, c.q_len, c.k_len, c.heads, c.d_head,
                        c.k_valid.empty() ? nullptr : c.k_valid.data(), c.causal, drop);
  std::vector<double> want_out, want_probs;
  NaiveAttention(c, qd, kd, vd, &want_out, &want_probs);
  std::vector<float> out_compact(q_rows * width);
  for (int64_t r = 0; r < q_rows; ++r) {
    for (int j = 0; j < width; ++j) out_compact[r * width + j] = out[r * c.ld_out + j];
    for (int64_t j = width; j < c.ld_out; ++j) {
      EXPECT_EQ(out[r * c.ld_out + j], kOutFill) << "out padding written, row " << r;
    }
  }
  ExpectAllNear(out_compact, want_out, "out", 1e-5, 1e-5);
  ExpectAllNear(probs, want_probs, "probs", 1e-6, 1e-5);
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads; ++h) {
      for (int i = 0; i < c.q_len; ++i) {
        const float* pr = &probs[((static_cast<int64_t>(b) * c.heads + h) * c.q_len + i) * c.k_len];
        double sum = 0.0;
        bool any = false;
        for (int j = 0; j < c.k_len; ++j) {
          if (Visible(c, b, i, j)) {
            any = true;
            sum += pr[j];
            EXPECT_GE(pr[j], 0.0f);
          } else {
            EXPECT_EQ(pr[j], 0.0f) << "masked key b=" << b << " h=" << h << " i=" << i << " j=" << j;
          }
        }
        EXPECT_NEAR(sum, any ? 1.0 : 0.0, 1e-5) << "b=" << b << " h=" << h << " i=" << i;
      }
    }
  }

  // Backward against finite differences of L = sum(w ⊙ out).
  const auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk,
                        const std::vector<double>& vv) {
    std::vector<double> o, p;
    NaiveAttention(c, qq, kk, vv, &o, &p);
    return Dot(wd, o);
  };
  const std::vector<double> want_dq =
      FiniteDiff([&](const std::vector<double>& p) { return loss(p, kd, vd); }, qd);
  const std::vector<double> want_dk =
      FiniteDiff([&](const std::vector<double>& p) { return loss(qd, p, vd); }, kd);
  const std::vector<double> want_dv =
      FiniteDiff([&](const std::vector<double>& p) { return loss(qd, kd, p); }, vd);
  ASSERT_GT(MaxAbs(want_dq), 1e-2);
  ASSERT_GT(MaxAbs(want_dk), 1e-2);
  ASSERT_GT(MaxAbs(want_dv), 1e-2);

  // Re-lay the finite differences out with the gradient strides (padding: 0).
  const auto relayout = [&](const std::vector<double>& g, int64_t rows, int64_t ld_from,
                            int64_t ld_to) {
    std::vector<double> r(rows * ld_to, 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < width; ++j) r[i * ld_to + j] = g[i * ld_from + j];
      for (int64_t j = width; j < ld_from; ++j) {
        EXPECT_EQ(g[i * ld_from + j], 0.0) << "naive forward reads padding";
      }
    }
    return r;
  };

  const float kDqFill = 555.0f;  // dq is written: its padding must keep this
  std::vector<float> dq(q_rows * c.ld_dq, kDqFill);
  std::vector<float> dk0 = Random(k_rows * c.ld_dkv, rng), dv0 = Random(k_rows * c.ld_dkv, rng);
  std::vector<float> dk = dk0, dv = dv0;
  const std::vector<float> dout = Strided(w, q_rows, width, c.ld_dout, 1e3f);
  AttentionBackward(dq.data(), c.ld_dq, dk.data(), dv.data(), c.ld_dkv, dout.data(), c.ld_dout,
                    probs.data(), q.data(), c.ld_q, k.data(), v.data(), c.ld_kv, c.batch, c.q_len,
                    c.k_len, c.heads, c.d_head, drop);

  std::vector<double> want_dq_s = relayout(want_dq, q_rows, c.ld_q, c.ld_dq);
  for (int64_t i = 0; i < q_rows; ++i) {
    for (int64_t j = width; j < c.ld_dq; ++j) want_dq_s[i * c.ld_dq + j] = kDqFill;
  }
  ExpectAllNear(dq, want_dq_s, "dq");
  ExpectAllNear(dk, Plus(relayout(want_dk, k_rows, c.ld_kv, c.ld_dkv), dk0), "dk (accumulated)");
  ExpectAllNear(dv, Plus(relayout(want_dv, k_rows, c.ld_kv, c.ld_dkv), dv0), "dv (accumulated)");
}

// RunAttentionCaseOnce on every instruction-set path this CPU has (the small GEMMs' tiles).
void RunAttentionCase(const AttnCase& c, uint32_t seed) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsaForTesting(isa);
    SCOPED_TRACE(IsaName(isa));
    RunAttentionCaseOnce(c, seed);
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

TEST(Attention, SelfAttentionNoMask) {
  RunAttentionCase({"self", 2, 5, 5, 3, 4, 0, 0, 0, 0, 0, 0, {}, false}, 21);
}

TEST(Attention, SingleHeadSingleBatch) {
  RunAttentionCase({"single", 1, 4, 6, 1, 8, 0, 0, 0, 0, 0, 0, {}, false}, 22);
}

TEST(Attention, PaddingMaskAndWideStrides) {
  RunAttentionCase({"padded", 3, 5, 5, 2, 4, 11, 13, 10, 9, 15, 12, {5, 3, 1}, false}, 23);
}

TEST(Attention, CausalSelfAttention) {
  RunAttentionCase({"causal", 2, 6, 6, 2, 3, 8, 7, 0, 0, 9, 0, {}, true}, 24);
}

TEST(Attention, CausalWithPadding) {
  RunAttentionCase({"causal+padded", 2, 6, 6, 3, 2, 0, 0, 0, 0, 0, 0, {4, 6}, true}, 25);
}

TEST(Attention, CrossAttentionQLenDiffersFromKLen) {
  RunAttentionCase({"cross", 3, 3, 7, 2, 4, 9, 10, 11, 12, 13, 14, {7, 2, 4}, false}, 26);
  RunAttentionCase({"cross-longer-q", 2, 7, 3, 2, 4, 0, 12, 0, 0, 0, 0, {3, 2}, false}, 27);
}

TEST(Attention, CausalWithMoreQueriesThanKeys) {
  RunAttentionCase({"causal q>k", 2, 5, 3, 2, 3, 0, 0, 0, 0, 0, 0, {}, true}, 28);
}

TEST(Attention, DropoutOnProbabilitiesMatchesNaiveAndFiniteDifferences) {
  RunAttentionCase({"dropout", 2, 5, 5, 3, 4, 0, 0, 0, 0, 0, 0, {}, false, 0.3f}, 31);
  RunAttentionCase({"dropout+causal+padded", 2, 6, 6, 3, 2, 0, 0, 0, 0, 0, 0, {4, 6}, true, 0.5f}, 32);
  RunAttentionCase({"dropout+cross+strides", 3, 3, 7, 2, 4, 9, 10, 11, 12, 13, 14, {7, 2, 4}, false, 0.2f}, 33);
}

// Register-tile widths (16 columns, 4 rows) and their remainders, d_head a multiple of 16 and
// not, with strides, padding, causal masks and dropout: the vector paths of the small GEMMs.
TEST(Attention, TileSizedAndRaggedShapes) {
  RunAttentionCase({"d_head 32, q 9, k 21", 2, 9, 21, 2, 32, 0, 0, 0, 0, 0, 0, {21, 13}, false}, 34);
  RunAttentionCase({"d_head 16 causal+dropout+strides", 2, 17, 17, 2, 16, 40, 37, 35, 36, 38, 39, {17, 5}, true,
                    0.2f}, 35);
  RunAttentionCase({"d_head 20, k 33", 1, 4, 33, 3, 20, 0, 0, 0, 0, 0, 0, {}, false, 0.1f}, 36);
}

TEST(Attention, GroupWithNoValidKeysGivesZeros) {
  RunAttentionCase({"k_valid=0", 2, 3, 4, 2, 4, 0, 0, 0, 0, 0, 0, {0, 4}, false}, 29);
}

// ------------------------------------------------------------------------ EmbeddingBackward

TEST(EmbeddingBackward, ScatterAddsWithRepeatedIdsAndPositions) {
  std::mt19937 rng(31);
  const int vocab = 5, max_pos = 4, d = 6;
  const std::vector<int32_t> ids = {3, 1, 3, 0, 3, 4, 1, 1, 2, 3};
  const std::vector<int32_t> positions = {0, 1, 2, 3, 0, 1, 2, 0, 1, 2};
  const int64_t count = static_cast<int64_t>(ids.size());
  for (bool with_pos : {true, false}) {
    for (float scale : {1.0f, 2.4494898f}) {
      SCOPED_TRACE(std::string(with_pos ? "with" : "without") + " positions, scale " +
                   std::to_string(scale));
      const std::vector<float> table = Random(vocab * d, rng), pos = Random(max_pos * d, rng);
      const std::vector<float> w = Random(count * d, rng);
      const std::vector<double> td = ToDouble(table), pd = ToDouble(pos), wd = ToDouble(w);
      const auto forward = [&](const std::vector<double>& t, const std::vector<double>& p) {
        std::vector<double> out(count * d);
        for (int64_t i = 0; i < count; ++i) {
          for (int j = 0; j < d; ++j) {
            out[i * d + j] = t[ids[i] * d + j] * scale + (with_pos ? p[positions[i] * d + j] : 0.0);
          }
        }
        return out;
      };
      std::vector<float> out(count * d);
      EmbedTokens(out.data(), ids.data(), with_pos ? positions.data() : nullptr, count,
                  table.data(), with_pos ? pos.data() : nullptr, d, scale);
      ExpectAllNear(out, forward(td, pd), "forward", 1e-6, 1e-6);

      const std::vector<double> want_dt = FiniteDiff(
          [&](const std::vector<double>& t) { return Dot(wd, forward(t, pd)); }, td);
      const std::vector<double> want_dp = FiniteDiff(
          [&](const std::vector<double>& p) { return Dot(wd, forward(td, p)); }, pd);
      const std::vector<float> dt0 = Random(vocab * d, rng), dp0 = Random(max_pos * d, rng);
      std::vector<float> dt = dt0, dp = dp0;
      EmbeddingBackward(dt.data(), with_pos ? dp.data() : nullptr, w.data(), ids.data(),
                        with_pos ? positions.data() : nullptr, count, d, scale);
      ExpectAllNear(dt, Plus(want_dt, dt0), "dtable (accumulated)");
      if (with_pos) {
        ExpectAllNear(dp, Plus(want_dp, dp0), "dpos (accumulated)");
      } else {
        EXPECT_EQ(dp, dp0);
      }
      // Row 3 is hit four times: its gradient is not a single row's.
      double row3 = 0.0;
      for (int j = 0; j < d; ++j) row3 += std::fabs(want_dt[3 * d + j]);
      EXPECT_GT(row3, 0.1);
    }
  }
}

// ---------------------------------------------------------------- LabelSmoothedCrossEntropy

// Naive summed smoothed loss from the documented target distribution; also nll and count.
double NaiveSmoothedLoss(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                         int vocab, double eps, int32_t pad, double* nll, int64_t* count) {
  double loss = 0.0;
  *nll = 0.0;
  *count = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == pad) continue;
    const double* row = &logits[r * vocab];
    double mx = row[0];
    for (int j = 1; j < vocab; ++j) mx = std::max(mx, row[j]);
    double sum = 0.0;
    for (int j = 0; j < vocab; ++j) sum += std::exp(row[j] - mx);
    const double lse = mx + std::log(sum);
    double qsum = 0.0;
    for (int j = 0; j < vocab; ++j) {
      double q = j == pad ? 0.0 : eps / (vocab - 1);
      if (j == targets[r]) q += 1.0 - eps;
      qsum += q;
      loss -= q * (row[j] - lse);
    }
    EXPECT_NEAR(qsum, 1.0, 1e-12) << "documented target distribution sums to 1";
    *nll -= row[targets[r]] - lse;
    ++*count;
  }
  return loss;
}

void CheckSmoothedLoss(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                       int vocab, float eps, int32_t pad) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  const std::vector<double> ld = ToDouble(logits);
  double want_nll = 0.0;
  int64_t want_count = 0;
  const double want = NaiveSmoothedLoss(ld, targets, vocab, eps, pad, &want_nll, &want_count);

  std::vector<float> grad = logits;
  double nll = -1.0;
  int64_t count = -1;
  const double got =
      LabelSmoothedCrossEntropy(grad.data(), targets.data(), rows, vocab, eps, pad, &nll, &count);
  EXPECT_NEAR(got, want, 1e-5 * (1.0 + std::fabs(want)));
  EXPECT_NEAR(nll, want_nll, 1e-5 * (1.0 + std::fabs(want_nll)));
  EXPECT_EQ(count, want_count);

  const std::vector<double> want_grad = FiniteDiff(
      [&](const std::vector<double>& p) {
        double n;
        int64_t c;
        return NaiveSmoothedLoss(p, targets, vocab, eps, pad, &n, &c);
      },
      ld);
  ExpectAllNear(grad, want_grad, "dlogits");
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] != pad) continue;
    for (int j = 0; j < vocab; ++j) EXPECT_EQ(grad[r * vocab + j], 0.0f) << "pad row " << r;
  }

  // Null outputs are allowed and change nothing.
  std::vector<float> grad2 = logits;
  EXPECT_EQ(LabelSmoothedCrossEntropy(grad2.data(), targets.data(), rows, vocab, eps, pad,
                                      nullptr, nullptr),
            got);
  EXPECT_EQ(grad2, grad);
}

TEST(LabelSmoothedCrossEntropy, MatchesDocumentedDistributionAndFiniteDifferences) {
  std::mt19937 rng(41);
  const int vocab = 7;
  const std::vector<int32_t> targets = {0, 1, 6, 3, 1, 2, 5, 1};  // pad = 1: rows 1, 4, 7
  for (float eps : {0.1f, 0.3f}) {
    for (int32_t pad : {1, 0}) {
      SCOPED_TRACE("eps=" + std::to_string(eps) + " pad=" + std::to_string(pad));
      const std::vector<float> logits = Random(targets.size() * vocab, rng, -4.0f, 4.0f);
      CheckSmoothedLoss(logits, targets, vocab, eps, pad);
    }
  }
}

// Every ISA path this CPU has (portable; AVX2 and AVX-512 with one exp per logit), on vocabularies
// around the 16-lane width; AVX2 and AVX-512 agree bit for bit.
TEST(LabelSmoothedCrossEntropy, EveryIsaPathMatchesTheReference) {
  std::vector<std::vector<float>> grads;
  std::vector<double> losses;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsaForTesting(isa);
    SCOPED_TRACE(IsaName(isa));
    for (int vocab : {7, 16, 17, 37, 100}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab));
      std::mt19937 rng(43 + vocab);
      const std::vector<int32_t> targets = {0, 1, 6, 3, 1, 2, 5, 4};
      CheckSmoothedLoss(Random(targets.size() * vocab, rng, -4.0f, 4.0f), targets, vocab, 0.1f, 1);
    }
    const int vocab = 8000;
    std::mt19937 rng(44);
    std::vector<float> logits = Random(4 * vocab, rng, -8.0f, 8.0f);
    const std::vector<int32_t> targets = {5, 7999, 0, 1234};
    losses.push_back(LabelSmoothedCrossEntropy(logits.data(), targets.data(), 4, vocab, 0.1f, 0, nullptr, nullptr));
    grads.push_back(logits);
  }
  SetIsaForTesting(CpuIsa::kAvx512);
  if (DetectedIsa() == CpuIsa::kAvx512) {
    EXPECT_EQ(losses[1], losses[2]);
    EXPECT_EQ(grads[1], grads[2]);
  }
}

// Row r of b16 holds, as bfloat16 over its first half, row r of f32 rounded (RoundToBfloat16);
// rows whose target is pad hold zeros.
void ExpectRoundedBfloat16Rows(const std::vector<float>& f32, const std::vector<float>& b16,
                               const std::vector<int32_t>& targets, int vocab, int32_t pad) {
  for (size_t r = 0; r < targets.size(); ++r) {
    const char* row16 = reinterpret_cast<const char*>(b16.data() + r * vocab);
    for (int j = 0; j < vocab; ++j) {
      uint16_t got;
      std::memcpy(&got, row16 + 2 * j, sizeof(got));
      const float want_f = RoundToBfloat16(f32[r * vocab + j]);
      uint32_t want_bits;
      std::memcpy(&want_bits, &want_f, sizeof(want_bits));
      ASSERT_EQ(got, static_cast<uint16_t>(want_bits >> 16)) << "row " << r << " value " << j;
      if (targets[r] == pad) {
        ASSERT_EQ(got, uint16_t{0}) << "row " << r;
      }
    }
  }
}

// The bfloat16 gradient is the float32 one rounded as the bfloat16 GEMMs round (RoundToBfloat16:
// the values here are far from the denormals, where the two roundings could differ), pad rows
// zero, on every ISA path; the loss and sums are the float32 call's bit for bit.
TEST(LabelSmoothedCrossEntropy, Bfloat16GradientIsTheRoundedFloatGradient) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsaForTesting(isa);
    SCOPED_TRACE(IsaName(isa));
    for (int vocab : {7, 17, 37, 8000}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab));
      std::mt19937 rng(45 + vocab);
      const std::vector<int32_t> targets = {5, 1, 0, 6, 1};  // rows 1 and 4: pad
      const int32_t pad = 1;
      const int64_t rows = static_cast<int64_t>(targets.size());
      std::vector<float> f32 = Random(rows * vocab, rng, -6.0f, 6.0f);
      std::vector<float> b16 = f32;
      double nll32 = 0.0, nll16 = 0.0;
      int64_t n32 = 0, n16 = 0;
      const double loss32 = LabelSmoothedCrossEntropy(f32.data(), targets.data(), rows, vocab, 0.1f, pad, &nll32, &n32);
      const double loss16 =
          LabelSmoothedCrossEntropyBf16(b16.data(), targets.data(), rows, vocab, 0.1f, pad, &nll16, &n16);
      EXPECT_EQ(loss16, loss32);
      EXPECT_EQ(nll16, nll32);
      EXPECT_EQ(n16, n32);
      ExpectRoundedBfloat16Rows(f32, b16, targets, vocab, pad);
    }
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

// With R-Drop too: the blocked loss's bfloat16 gradient is its float32 one rounded, the sums
// the same, on every ISA path and for blocks of 1, 3 and the default.
TEST(LabelSmoothedCrossEntropy, RDropBfloat16GradientIsTheRoundedFloatGradient) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsaForTesting(isa);
    for (int64_t block : {int64_t{1}, int64_t{3}, int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " block " << block);
      const int vocab = 37, pad = 1;
      const std::vector<int32_t> targets = {5, 1, 0, 6, 9, 5, 1, 0, 6, 9};  // 5 pairs, pair 1 pad
      const int64_t pairs = 5, rows = 2 * pairs;
      std::mt19937 rng(71);
      std::vector<float> f32 = Random(rows * vocab, rng, -5.0f, 5.0f);
      std::vector<float> b16 = f32;
      double nll32 = 0.0, nll16 = 0.0;
      int64_t n32 = 0, n16 = 0;
      const double loss32 = LabelSmoothedCrossEntropyWithRDrop(f32.data(), targets.data(), pairs, vocab, 0.1f, 5.0f,
                                                               pad, &nll32, &n32, block);
      const double loss16 = LabelSmoothedCrossEntropyWithRDropBf16(b16.data(), targets.data(), pairs, vocab, 0.1f,
                                                                   5.0f, pad, &nll16, &n16, block);
      EXPECT_EQ(loss16, loss32);
      EXPECT_EQ(nll16, nll32);
      EXPECT_EQ(n16, n32);
      ExpectRoundedBfloat16Rows(f32, b16, targets, vocab, pad);
    }
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

TEST(LabelSmoothedCrossEntropy, ZeroEpsIsPlainCrossEntropy) {
  std::mt19937 rng(42);
  const int vocab = 9;
  const int32_t pad = 0;
  const std::vector<int32_t> targets = {4, 0, 8, 1, 4};
  const std::vector<float> logits = Random(targets.size() * vocab, rng, -3.0f, 3.0f);
  CheckSmoothedLoss(logits, targets, vocab, 0.0f, pad);

  std::vector<float> grad = logits;
  double nll = 0.0;
  int64_t count = 0;
  const double loss = LabelSmoothedCrossEntropy(grad.data(), targets.data(),
                                                static_cast<int64_t>(targets.size()), vocab,
                                                0.0f, pad, &nll, &count);
  EXPECT_EQ(count, 4);
  EXPECT_NEAR(loss, nll, 1e-9 * (1.0 + nll));
  double want = 0.0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == pad) continue;
    double sum = 0.0;
    for (int j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(logits[r * vocab + j]));
    want += std::log(sum) - logits[r * vocab + targets[r]];
    // gradient = softmax - onehot: sums to 0, and the pad column keeps its softmax share
    double gsum = 0.0;
    for (int j = 0; j < vocab; ++j) gsum += grad[r * vocab + j];
    EXPECT_NEAR(gsum, 0.0, 1e-6);
    EXPECT_NEAR(grad[r * vocab + pad], std::exp(logits[r * vocab + pad]) / sum, 1e-6);
  }
  EXPECT_NEAR(loss, want, 1e-6 * (1.0 + want));
}

TEST(LabelSmoothedCrossEntropy, LargeLogitsStayFinite) {
  const int vocab = 4;
  const std::vector<int32_t> targets = {2, 3};
  const std::vector<float> logits = {1000.0f, 1001.0f, 999.0f, 1000.5f,
                                     -1000.0f, -999.0f, -1002.0f, -1001.0f};
  CheckSmoothedLoss(logits, targets, vocab, 0.1f, 0);
}

TEST(LabelSmoothedCrossEntropy, AllPadRows) {
  const std::vector<int32_t> targets = {2, 2};
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  double nll = -1.0;
  int64_t count = -1;
  EXPECT_EQ(LabelSmoothedCrossEntropy(logits.data(), targets.data(), 2, 3, 0.1f, 2, &nll, &count),
            0.0);
  EXPECT_EQ(nll, 0.0);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(logits, std::vector<float>(6, 0.0f));
}

// ---------------------------------------------------------------- RDropConsistency

// Naive h * (KL(p||q) + KL(q||p)) over the pairs (row r, row r + pairs) whose target is not pad.
double NaiveConsistency(const std::vector<double>& logits, const std::vector<int32_t>& targets, int vocab,
                        double alpha, int32_t pad) {
  const size_t pairs = targets.size() / 2;
  auto log_softmax = [&](size_t r) {
    std::vector<double> l(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);
    const double mx = *std::max_element(l.begin(), l.end());
    double sum = 0.0;
    for (double x : l) sum += std::exp(x - mx);
    for (double& x : l) x -= mx + std::log(sum);
    return l;
  };
  double total = 0.0;
  for (size_t r = 0; r < pairs; ++r) {
    if (targets[r] == pad) continue;
    const std::vector<double> lp = log_softmax(r), lq = log_softmax(r + pairs);
    for (int j = 0; j < vocab; ++j) {
      total += 0.5 * alpha * (std::exp(lp[j]) - std::exp(lq[j])) * (lp[j] - lq[j]);
    }
  }
  return total;
}

TEST(RDropConsistency, MatchesTheSymmetricDivergenceAndFiniteDifferences) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int vocab : {5, 37}) {
    const int64_t pairs = 4;
    std::vector<int32_t> targets = {1, 3, 0, 2};
    targets.insert(targets.end(), targets.begin(), targets.end());  // the doubled batch's targets
    std::vector<float> logits(2 * pairs * vocab);
    for (float& x : logits) x = nd(rng);
    const int32_t pad = 0;  // pair 2 is pad
    const float alpha = 3.0f;
    const std::vector<double> ld = ToDouble(logits);
    const double want = NaiveConsistency(ld, targets, vocab, alpha, pad);
    std::vector<float> grad = logits;
    const double got = RDropConsistency(grad.data(), targets.data(), pairs, vocab, alpha, pad);
    EXPECT_GT(want, 0.1);
    EXPECT_NEAR(got, want, 1e-5 * (1.0 + want));
    const std::vector<double> want_grad = FiniteDiff(
        [&](const std::vector<double>& x) { return NaiveConsistency(x, targets, vocab, alpha, pad); }, ld);
    ExpectAllNear(grad, want_grad, "dlogits");
    for (int j = 0; j < vocab; ++j) {
      EXPECT_EQ(grad[2 * vocab + j], 0.0f) << "pad pair, first row";
      EXPECT_EQ(grad[(2 + pairs) * vocab + j], 0.0f) << "pad pair, second row";
    }
  }
}

TEST(RDropConsistency, EqualHalvesHaveNoTermAndNoGradient) {
  const int vocab = 300;
  std::mt19937 rng(44);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::vector<float> half(3 * vocab);
  for (float& x : half) x = u(rng);
  std::vector<float> logits = half;
  logits.insert(logits.end(), half.begin(), half.end());
  const std::vector<int32_t> targets = {4, 5, 6, 4, 5, 6};
  const double got = RDropConsistency(logits.data(), targets.data(), 3, vocab, 5.0f, 1);
  EXPECT_EQ(got, 0.0);
  for (float g : logits) ASSERT_EQ(g, 0.0f);
}

TEST(RDropConsistency, LargeLogitsStayFinite) {
  const int vocab = 4;
  const std::vector<int32_t> targets = {2, 2};
  std::vector<float> logits = {1000.0f, 1001.0f, 999.0f, 1000.5f, -1000.0f, -999.0f, -1002.0f, -1001.0f};
  const std::vector<double> want_grad = FiniteDiff(
      [&](const std::vector<double>& x) { return NaiveConsistency(x, targets, vocab, 1.0, 0); },
      ToDouble(logits));
  const double want = NaiveConsistency(ToDouble(logits), targets, vocab, 1.0, 0);
  const double got = RDropConsistency(logits.data(), targets.data(), 1, vocab, 1.0f, 0);
  EXPECT_NEAR(got, want, 1e-5 * (1.0 + want));
  ExpectAllNear(logits, want_grad, "dlogits");
}

// The blocked loss with R-Drop gives, element for element, the whole-batch kernels' gradient
// (the cross-entropy over all rows, the consistency term on a copy, the copy added), in one
// block, in several with a short last one, at one and two threads; its sums agree.
TEST(RDropConsistency, BlockedLossGivesTheWholeBatchGradient) {
  const int vocab = 53;
  const int64_t pairs = 23;
  std::mt19937 rng(45);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> token(1, vocab - 1);
  std::vector<int32_t> targets(pairs);
  for (int32_t& t : targets) t = token(rng);
  targets[4] = targets[17] = 0;  // pad pairs
  targets.insert(targets.end(), targets.begin(), targets.end());
  std::vector<float> logits(2 * pairs * vocab);
  for (float& x : logits) x = nd(rng);
  const float eps = 0.1f, alpha = 5.0f;
  const int32_t pad = 0;

  std::vector<float> want = logits, copy = logits;
  double want_nll = 0.0;
  int64_t want_count = 0;
  double want_loss =
      LabelSmoothedCrossEntropy(want.data(), targets.data(), 2 * pairs, vocab, eps, pad, &want_nll, &want_count);
  want_loss += RDropConsistency(copy.data(), targets.data(), pairs, vocab, alpha, pad);
  Add(want.data(), want.data(), copy.data(), static_cast<int64_t>(want.size()));

  for (int threads : {1, 2}) {
    SetComputeThreads(threads);
    for (int64_t block : {0, 1, 5, 23}) {
      SCOPED_TRACE(::testing::Message() << "block " << block << ", threads " << threads);
      std::vector<float> got = logits;
      double nll = 0.0;
      int64_t count = 0;
      const double loss = LabelSmoothedCrossEntropyWithRDrop(got.data(), targets.data(), pairs, vocab, eps, alpha,
                                                             pad, &nll, &count, block);
      EXPECT_EQ(got, want);
      EXPECT_EQ(count, want_count);
      EXPECT_NEAR(loss, want_loss, 1e-12 * want_loss);
      EXPECT_NEAR(nll, want_nll, 1e-12 * want_nll);
    }
  }
  SetComputeThreads(1);
}

// ---------------------------------------------------------------------- CounterUniform / Dropout

TEST(CounterUniform, DeterministicInRangeAndUniform) {
  const int n = 100000;
  double sum = 0.0, sq = 0.0;
  std::vector<int> buckets(16, 0);
  for (int i = 0; i < n; ++i) {
    const float u = CounterUniform(1234, 7, static_cast<uint64_t>(i));
    ASSERT_EQ(u, CounterUniform(1234, 7, static_cast<uint64_t>(i)));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sq += static_cast<double>(u) * u;
    ++buckets[static_cast<int>(u * 16)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_NEAR(sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 0.005);
  for (int b = 0; b < 16; ++b) EXPECT_NEAR(buckets[b], n / 16, 400) << "bucket " << b;

  // Huge indices and seeds are fine too.
  for (uint64_t i : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{0}}) {
    const float u = CounterUniform(~uint64_t{0}, ~uint64_t{0}, i);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
}

// Fraction of the first n indices on which two (seed, stream) sequences agree, and the
// mean of their products (0.25 for independent uniforms).
void ExpectIndependent(uint64_t s1, uint64_t t1, uint64_t s2, uint64_t t2) {
  const int n = 20000;
  int same = 0;
  double prod = 0.0;
  for (int i = 0; i < n; ++i) {
    const float a = CounterUniform(s1, t1, i), b = CounterUniform(s2, t2, i);
    same += a == b;
    prod += static_cast<double>(a) * b;
  }
  EXPECT_LT(same, 10) << "(" << s1 << "," << t1 << ") vs (" << s2 << "," << t2 << ")";
  EXPECT_NEAR(prod / n, 0.25, 0.01) << "(" << s1 << "," << t1 << ") vs (" << s2 << "," << t2 << ")";
}

TEST(CounterUniform, StreamsAndSeedsDiffer) {
  ExpectIndependent(1, 0, 1, 1);
  ExpectIndependent(1, 0, 2, 0);
  ExpectIndependent(0, 0, 0, 1);
  ExpectIndependent(0, 0, 1, 0);
  ExpectIndependent(5, 3, 3, 5);
  // Successive indices are not correlated either.
  const int n = 20000;
  double prod = 0.0;
  for (int i = 0; i < n; ++i) {
    prod += static_cast<double>(CounterUniform(9, 2, i)) * CounterUniform(9, 2, i + 1);
  }
  EXPECT_NEAR(prod / n, 0.25, 0.01);
}

// Every ISA path this CPU has (the AVX2 one vectorizes the hash by hand) drops exactly the
// elements CounterUniform says and scales the rest exactly, whatever the split into ranges.
// The fused activation and dropout passes give, element for element, the two ops in turn, for
// every activation, on every ISA path, at 1 and 2 threads, with rows that do not fill a block.
TEST(Dropout, FusedWithTheActivationMatchesTheOpsInTurn) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsaForTesting(isa);
    for (int threads : {1, 2}) {
      SetComputeThreads(threads);
      for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluErf, Activation::kSwish}) {
        for (float p : {0.0f, 0.3f}) {
          SCOPED_TRACE(::testing::Message() << IsaName(isa) << " threads " << threads << " act "
                                          << static_cast<int>(act) << " p " << p);
          const int64_t rows = 37;
          const int cols = 1100;  // 14 rows per block of 16 K elements: 3 blocks, the last partial
          std::mt19937 rng(61);
          const std::vector<float> x = Random(rows * cols, rng, -3.0f, 3.0f);
          std::vector<float> want = x, got = x;
          BiasActivation(want.data(), nullptr, rows, cols, act);
          Dropout(want.data(), rows * cols, p, 5, 9);
          ActivationDropout(got.data(), rows, cols, act, p, 5, 9);
          ASSERT_EQ(got, want);
          const std::vector<float> dy = Random(rows * cols, rng, -1.0f, 1.0f);
          std::vector<float> dwant = dy, dgot = dy;
          Dropout(dwant.data(), rows * cols, p, 5, 9);
          ActivationBackward(dwant.data(), dwant.data(), x.data(), rows * cols, act);
          DropoutActivationBackward(dgot.data(), x.data(), rows * cols, act, p, 5, 9);
          ASSERT_EQ(dgot, dwant);
        }
      }
    }
  }
  SetComputeThreads(1);
  SetIsaForTesting(CpuIsa::kAvx512);
}

TEST(Dropout, EveryIsaPathMatchesTheScalarDefinition) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetIsaForTesting(isa);
    SCOPED_TRACE(IsaName(isa));
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, int64_t{4099}, int64_t{100003}}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{77}, ~uint64_t{0}}) {
        const float p = 0.3f;
        const uint64_t stream = seed ^ 0x1234;
        std::mt19937 rng(static_cast<uint32_t>(n + seed));
        const std::vector<float> x = Random(n, rng, 0.5f, 2.0f);
        std::vector<float> y = x;
        Dropout(y.data(), n, p, seed, stream);
        for (int64_t i = 0; i < n; ++i) {
          const float want = CounterUniform(seed, stream, i) >= p ? x[i] * (1.0f / (1.0f - p)) : 0.0f;
          ASSERT_EQ(y[i], want) << "n " << n << " seed " << seed << " i " << i;
        }
        // A block of the same tensor, starting anywhere, gets that part of the mask.
        for (int64_t first : {int64_t{0}, int64_t{3}, n / 2, n - 1}) {
          if (first >= n) continue;
          const int64_t count = std::min<int64_t>(n - first, 1031);
          std::vector<float> blk(x.begin() + first, x.begin() + first + count);
          DropoutBlock(blk.data(), count, static_cast<uint64_t>(first), p, seed, stream);
          for (int64_t i = 0; i < count; ++i) {
            ASSERT_EQ(blk[i], y[first + i]) << "block at " << first << ", n " << n << " i " << i;
          }
        }
        // DropoutFrom: the same values in another buffer, the source untouched.
        std::vector<float> from(n, -1.0f);
        const std::vector<float> src = x;
        DropoutFrom(from.data(), src.data(), n, p, seed, stream);
        ASSERT_EQ(from, y) << "n " << n;
        ASSERT_EQ(src, x);
        // DropoutAdd: Dropout and then += r in one pass, bit for bit (r of both signs, with
        // zeros of both signs where a dropped element meets them).
        std::vector<float> r = Random(n, rng, -2.0f, 2.0f);
        for (int64_t i = 0; i < n; i += 5) r[i] = (i / 5) % 2 == 0 ? 0.0f : -0.0f;
        std::vector<float> fused = x;
        DropoutAdd(fused.data(), r.data(), n, p, seed, stream);
        for (int64_t i = 0; i < n; ++i) {
          const float want = y[i] + r[i];
          ASSERT_EQ(std::memcmp(&fused[i], &want, sizeof(float)), 0) << "n " << n << " i " << i;
        }
      }
    }
    // p = 0: a copy and a plain sum.
    std::mt19937 rng(3);
    const std::vector<float> x = Random(1000, rng), r = Random(1000, rng);
    std::vector<float> y(1000, 5.0f), z = x;
    DropoutFrom(y.data(), x.data(), 1000, 0.0f, 1, 2);
    EXPECT_EQ(y, x);
    DropoutAdd(z.data(), r.data(), 1000, 0.0f, 1, 2);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(z[i], x[i] + r[i]) << i;
  }
  SetIsaForTesting(CpuIsa::kAvx512);
}

}  // namespace
}  // namespace tnmt::kernels::cpu

// cuBLASLt GEMMs against a float64 reference on random data (every transpose layout, float32,
// TF32, float16 and bfloat16 storage, padded row strides, beta != 0, the bias epilogues against
// kernels/cpu BiasActivation), and GemmNT against kernels/cpu GemmNT when OpenBLAS loads.
#include "kernels/cuda/gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;
using testing::RelativeError;

// Host storage of one dtype: the rounded float values and the raw bytes.
struct Stored {
  std::vector<float> values;  // what the device sees, as float
  std::vector<uint8_t> bytes;
};

Stored Store(const std::vector<float>& x, DType t) {
  Stored s;
  s.values.resize(x.size());
  s.bytes.resize(x.size() * DTypeBytes(t));
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == DType::kFloat16) {
      const __half h = __float2half_rn(x[i]);
      s.values[i] = __half2float(h);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
    } else if (t == DType::kBFloat16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
      s.values[i] = __bfloat162float(h);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
    } else {
      s.values[i] = x[i];
      std::memcpy(s.bytes.data() + 4 * i, &x[i], 4);
    }
  }
  return s;
}

std::vector<float> Load(const std::vector<uint8_t>& bytes, DType t) {
  const size_t n = bytes.size() / DTypeBytes(t);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::kFloat16) {
      __half h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = __half2float(h);
    } else if (t == DType::kBFloat16) {
      __nv_bfloat16 h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = __bfloat162float(h);
    } else {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    }
  }
  return out;
}

// Row-major reference in double: c = alpha * op(a) op(b) + beta * c.
std::vector<double> Reference(bool ta, bool tb, int m, int n, int k, double alpha,
                              const std::vector<float>& a, int64_t lda, const std::vector<float>& b,
                              int64_t ldb, double beta, const std::vector<float>& c, int64_t ldc) {
  std::vector<double> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[static_cast<int64_t>(p) * lda + i] : a[static_cast<int64_t>(i) * lda + p];
        const double bv = tb ? b[static_cast<int64_t>(j) * ldb + p] : b[static_cast<int64_t>(p) * ldb + j];
        s += av * bv;
      }
      out[static_cast<size_t>(i) * n + j] = alpha * s + beta * c[static_cast<int64_t>(i) * ldc + j];
    }
  }
  return out;
}

struct Case {
  DType ab, c;
  bool tf32;
  double tolerance;  // relative 2-norm error
};

class GemmTest : public CudaTest {
 protected:
  // Runs one GEMM on random data and returns its relative error against the reference.
  double Run(const Case& cs, bool ta, bool tb, int m, int n, int k, int pad, float beta,
             Epilogue ep = Epilogue::kNone) {
    const int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    const int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
    Stored a = Store(Random(a_rows * lda), cs.ab), b = Store(Random(b_rows * ldb), cs.ab);
    Stored c = Store(Random(static_cast<size_t>(m) * ldc), cs.c);
    Stored bias = Store(Random(n), cs.c);
    uint8_t* da = ToDevice(a.bytes);
    uint8_t* db = ToDevice(b.bytes);
    uint8_t* dc = ToDevice(c.bytes);
    if (beta == 0.0f) Poison(dc, c.bytes.size());  // must not be read
    uint8_t* dbias = ToDevice(bias.bytes);
    GemmOptions o;
    o.ab_type = cs.ab;
    o.c_type = cs.c;
    o.tf32 = cs.tf32;
    o.epilogue = ep;
    o.bias = ep == Epilogue::kNone ? nullptr : dbias;
    const float alpha = 0.75f;
    const absl::Status s = Gemm(*ctx_, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc, o);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return 1e9;
    const std::vector<float> got_padded = Load(ToHost(dc, c.bytes.size()), cs.c);
    std::vector<double> want =
        Reference(ta, tb, m, n, k, alpha, a.values, lda, b.values, ldb, beta, c.values, ldc);
    if (ep != Epilogue::kNone) {
      std::vector<float> w(want.begin(), want.end());
      if (ep == Epilogue::kBias) {
        cpu::AddBias(w.data(), bias.values.data(), m, n);
      } else {
        cpu::BiasActivation(w.data(), bias.values.data(), m, n,
                            ep == Epilogue::kBiasGelu ? cpu::Activation::kGelu : cpu::Activation::kRelu);
      }
      want.assign(w.begin(), w.end());
    }
    std::vector<float> got(static_cast<size_t>(m) * n);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) got[static_cast<size_t>(i) * n + j] = got_padded[i * ldc + j];
    }
    return RelativeError(got, want);
  }
};

const Case kCases[] = {
    {DType::kFloat32, DType::kFloat32, false, 1e-5},
    {DType::kFloat32, DType::kFloat32, true, 3e-3},
    {DType::kFloat16, DType::kFloat16, false, 2e-3},
    {DType::kFloat16, DType::kFloat32, false, 1e-5},
    {DType::kBFloat16, DType::kBFloat16, false, 1e-2},
    {DType::kBFloat16, DType::kFloat32, false, 1e-5},
};

TEST_F(GemmTest, AllLayoutsAndTypesMatchFloat64Reference) {
  struct Shape {
    int m, n, k, pad;
  };
  const Shape shapes[] = {{1, 1, 1, 0}, {7, 13, 5, 3}, {64, 96, 160, 8}, {33, 250, 70, 0}, {128, 192, 512, 0}};
  for (const Case& cs : kCases) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      for (const Shape& sh : shapes) {
        for (float beta : {0.0f, 0.5f}) {
          const double err = Run(cs, ta, tb, sh.m, sh.n, sh.k, sh.pad, beta);
          EXPECT_LE(err, cs.tolerance)
              << DTypeName(cs.ab) << "->" << DTypeName(cs.c) << (cs.tf32 ? " tf32 " : " ")
              << (ta ? "T" : "N") << (tb ? "T" : "N") << " m=" << sh.m << " n=" << sh.n
              << " k=" << sh.k << " pad=" << sh.pad << " beta=" << beta;
        }
      }
    }
    std::printf("gemm %s->%s%s: NT 128x192x512 relative error %.2e (tolerance %.0e)\n",
                DTypeName(cs.ab), DTypeName(cs.c), cs.tf32 ? " tf32" : "",
                Run(cs, false, true, 128, 192, 512, 0, 0.0f), cs.tolerance);
  }
}

TEST_F(GemmTest, BiasEpiloguesMatchCpuBiasActivation) {
  for (const Case& cs : kCases) {
    for (Epilogue ep : {Epilogue::kBias, Epilogue::kBiasRelu, Epilogue::kBiasGelu}) {
      for (float beta : {0.0f, 0.5f}) {
        const double err = Run(cs, false, true, 96, 200, 64, 0, beta, ep);
        // The GELU epilogue's own approximation differs slightly from the tanh formula.
        const double tol = std::max(cs.tolerance, ep == Epilogue::kBiasGelu ? 1e-3 : 0.0);
        EXPECT_LE(err, tol) << DTypeName(cs.ab) << "->" << DTypeName(cs.c) << " epilogue "
                            << static_cast<int>(ep) << " beta " << beta;
        if (beta == 0.0f && cs.ab == DType::kFloat32 && !cs.tf32) {
          std::printf("gemm float32 epilogue %d: relative error %.2e\n", static_cast<int>(ep), err);
        }
      }
    }
  }
}

TEST_F(GemmTest, PlansAreCachedPerShape) {
  const Case f32{DType::kFloat32, DType::kFloat32, false, 1e-5};
  EXPECT_LE(Run(f32, false, true, 16, 24, 32, 0, 0.0f), 1e-5);
  const int64_t plans = CachedGemmPlans(*ctx_);
  EXPECT_LE(Run(f32, false, true, 16, 24, 32, 0, 0.0f), 1e-5);
  EXPECT_EQ(CachedGemmPlans(*ctx_), plans);
  EXPECT_LE(Run(f32, false, true, 17, 24, 32, 0, 0.0f), 1e-5);
  EXPECT_EQ(CachedGemmPlans(*ctx_), plans + 1);
}

TEST_F(GemmTest, BadArgumentsAreStatusesNamingTheCall) {
  float* d = Alloc<float>(64);
  absl::Status s = GemmNT(*ctx_, 4, 4, 4, 1.0f, d, 2, d, 4, 0.0f, d, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("Gemm"), std::string::npos) << s;
  GemmOptions o;
  o.epilogue = Epilogue::kBias;
  s = Gemm(*ctx_, false, true, 4, 4, 4, 1.0f, d, 4, d, 4, 0.0f, d, 4, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// The engine's CPU kernel itself, where OpenBLAS can be loaded (it is not on every GPU host).
TEST_F(GemmTest, GemmNTMatchesCpuGemmNT) {
  void* blas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL);
  if (blas == nullptr) {
    // Not a skip: the float64 reference above covers GemmNT; this only adds the CPU kernel.
    std::printf("note: OpenBLAS not loadable here (%s); compared with float64 only\n", dlerror());
    return;
  }
  const int m = 100, n = 300, k = 256;
  std::vector<float> a = Random(m * k), b = Random(n * k), want(m * n);
  cpu::GemmNT(m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, want.data(), n);
  float* dc = Alloc<float>(m * n);
  ASSERT_TRUE(GemmNT(*ctx_, m, n, k, 1.0f, ToDevice(a), k, ToDevice(b), k, 0.0f, dc, n).ok());
  EXPECT_LE(RelativeError(ToHost(dc, m * n), want), 1e-5);
}

}  // namespace
}  // namespace tnmt::kernels::cuda

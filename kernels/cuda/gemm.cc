// cuBLASLt GEMMs; see gemm.h.
//
// cuBLASLt is column-major. A row-major [r, c] matrix with row stride ld is the column-major
// [c, r] matrix with leading dimension ld, i.e. its transpose; so row-major
// C = op(A) · op(B) is computed as the column-major C^T = op(B)^T · op(A)^T: cuBLASLt's first
// operand is our b, its second our a, with its (m, n) = our (n, m). Its bias epilogue adds one
// value per row of its D = per column of our C, which is the Linear bias.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace tnmt::kernels::cuda {

namespace {

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kBiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::kBiasGelu: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

int Alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  for (int a = 256; a > 1; a /= 2) {
    if (v % a == 0) return a;
  }
  return 1;
}

struct PlanKey {
  bool trans_a, trans_b;
  int m, n, k;
  int64_t lda, ldb, ldc;
  DType ab, c;
  Epilogue epilogue;
  bool tf32;
  int align_a, align_b, align_c, align_bias;
  bool operator==(const PlanKey& o) const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, ab, c, epilogue, tf32, align_a,
                    align_b, align_c, align_bias) ==
           std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ab, o.c,
                    o.epilogue, o.tf32, o.align_a, o.align_b, o.align_c, o.align_bias);
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(k.trans_a);
    mix(k.trans_b);
    mix(k.m);
    mix(k.n);
    mix(k.k);
    mix(k.lda);
    mix(k.ldb);
    mix(k.ldc);
    mix(static_cast<uint64_t>(k.ab));
    mix(static_cast<uint64_t>(k.c));
    mix(static_cast<uint64_t>(k.epilogue));
    mix(k.tf32);
    mix(k.align_a);
    mix(k.align_b);
    mix(k.align_c);
    mix(k.align_bias);
    return static_cast<size_t>(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (out != nullptr) cublasLtMatrixLayoutDestroy(out);
    if (second != nullptr) cublasLtMatrixLayoutDestroy(second);
    if (first != nullptr) cublasLtMatrixLayoutDestroy(first);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

std::string Shape(const PlanKey& k) {
  return absl::StrCat(k.trans_a ? "T" : "N", k.trans_b ? "T" : "N", " m=", k.m, " n=", k.n,
                      " k=", k.k, " lda=", k.lda, " ldb=", k.ldb, " ldc=", k.ldc, " ",
                      DTypeName(k.ab), "->", DTypeName(k.c), k.tf32 ? " tf32" : "");
}

absl::Status LtError(const char* call, cublasStatus_t st, const PlanKey& key) {
  return absl::InternalError(absl::StrCat("cuBLASLt ", call, " failed: ",
                                          cublasLtGetStatusName(st), " (",
                                          cublasLtGetStatusString(st), ") for GEMM ", Shape(key)));
}

#define TNMT_LT(call, key)                                            \
  do {                                                                \
    const cublasStatus_t st_ = (call);                                \
    if (st_ != CUBLAS_STATUS_SUCCESS) return LtError(#call, st_, key); \
  } while (0)

}  // namespace

class GemmPlanCache {
 public:
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
};

GemmPlanCache& Context::gemm_plans() {
  if (plans_ == nullptr) {
    plans_ = std::unique_ptr<GemmPlanCache, void (*)(GemmPlanCache*)>(
        new GemmPlanCache(), [](GemmPlanCache* p) { delete p; });
  }
  return *plans_;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    default: return "float32";
  }
}

int64_t CachedGemmPlans(Context& ctx) { return static_cast<int64_t>(ctx.gemm_plans().plans.size()); }

namespace {

absl::StatusOr<Plan*> GetPlan(Context& ctx, const PlanKey& key) {
  auto& plans = ctx.gemm_plans().plans;
  if (auto it = plans.find(key); it != plans.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  const cublasComputeType_t compute =
      key.ab == DType::kFloat32 && key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  TNMT_LT(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F), key);
  const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TNMT_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                         sizeof(op_first)),
          key);
  TNMT_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                         sizeof(op_second)),
          key);
  const cublasLtEpilogue_t epilogue = LtEpilogue(key.epilogue);
  TNMT_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                         sizeof(epilogue)),
          key);
  if (key.epilogue != Epilogue::kNone) {
    const int32_t bias_type = CudaType(key.c);
    TNMT_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                           &bias_type, sizeof(bias_type)),
            key);
  }
  // Stored (column-major) shapes: first = our b, second = our a, out = our c.
  const uint64_t first_rows = key.trans_b ? key.k : key.n, first_cols = key.trans_b ? key.n : key.k;
  const uint64_t second_rows = key.trans_a ? key.m : key.k, second_cols = key.trans_a ? key.k : key.m;
  TNMT_LT(cublasLtMatrixLayoutCreate(&plan->first, CudaType(key.ab), first_rows, first_cols, key.ldb),
          key);
  TNMT_LT(cublasLtMatrixLayoutCreate(&plan->second, CudaType(key.ab), second_rows, second_cols,
                                     key.lda),
          key);
  TNMT_LT(cublasLtMatrixLayoutCreate(&plan->out, CudaType(key.c), key.n, key.m, key.ldc), key);

  cublasLtMatmulPreference_t pref = nullptr;
  TNMT_LT(cublasLtMatmulPreferenceCreate(&pref), key);
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const uint64_t workspace = ctx.workspace_bytes();
  TNMT_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace, sizeof(workspace)),
          key);
  const uint32_t align_first = key.align_b, align_second = key.align_a, align_out = key.align_c;
  TNMT_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &align_first, sizeof(align_first)),
          key);
  TNMT_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                               &align_second, sizeof(align_second)),
          key);
  TNMT_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &align_out, sizeof(align_out)),
          key);
  TNMT_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &align_out, sizeof(align_out)),
          key);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  TNMT_LT(cublasLtMatmulAlgoGetHeuristic(ctx.lt(), plan->op, plan->first, plan->second, plan->out,
                                         plan->out, pref, 1, &result, &found),
          key);
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt cublasLtMatmulAlgoGetHeuristic: no algorithm for GEMM ", Shape(key)));
  }
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans.emplace(key, std::move(plan));
  return raw;
}

}  // namespace

absl::Status Gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const void* a, int64_t lda, const void* b, int64_t ldb, float beta, void* c,
                  int64_t ldc, const GemmOptions& o) {
  PlanKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc, o.ab_type, o.c_type, o.epilogue,
              o.tf32 && o.ab_type == DType::kFloat32, Alignment(a), Alignment(b), Alignment(c),
              Alignment(o.bias)};
  key.align_a = std::min(key.align_a, 16);
  key.align_b = std::min(key.align_b, 16);
  key.align_c = std::min(key.align_c, 16);
  key.align_bias = std::min(key.align_bias, 16);
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: negative size in ", Shape(key)));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (o.ab_type == DType::kFloat32 && o.c_type != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: float32 inputs need float32 output, ", Shape(key)));
  }
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < std::max<int64_t>(a_cols, 1) || ldb < std::max<int64_t>(b_cols, 1) || ldc < n) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: row stride below the row length in ", Shape(key)));
  }
  if (o.epilogue != Epilogue::kNone && o.bias == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: bias epilogue without a bias, ", Shape(key)));
  }
  if (k == 0) return absl::InvalidArgumentError(absl::StrCat("Gemm: k == 0 is not supported, ", Shape(key)));
  absl::StatusOr<Plan*> plan = GetPlan(ctx, key);
  if (!plan.ok()) return plan.status();
  if (o.epilogue != Epilogue::kNone) {
    TNMT_LT(cublasLtMatmulDescSetAttribute((*plan)->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &o.bias,
                                           sizeof(o.bias)),
            key);
  }
  TNMT_LT(cublasLtMatmul(ctx.lt(), (*plan)->op, &alpha, b, (*plan)->first, a, (*plan)->second,
                         &beta, c, (*plan)->out, c, (*plan)->out, &(*plan)->algo, ctx.workspace(),
                         ctx.workspace_bytes(), ctx.stream()),
          key);
  return absl::OkStatus();
}

}  // namespace tnmt::kernels::cuda

// OpenBLAS-backed GEMM wrappers; see gemm.h.
//
// OpenBLAS picks its kernels by CPUID when it is loaded, and versions that do not know a CPU
// model fall back to old SSE3 ("Prescott") kernels — on recent Xeons (e.g. family 6 model
// 207) Debian's 0.3.21 does exactly that and runs GEMMs at a fraction of the AVX-512 speed.
// So tnmt does not link OpenBLAS: it sets OPENBLAS_CORETYPE from the CPU's features (and a
// short OPENBLAS_THREAD_TIMEOUT, see below; the user's values win) and only then dlopen()s the
// library, once, on the first BLAS call.
#include "kernels/cpu/gemm.h"

#include "kernels/cpu/parallel.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace tnmt::kernels::cpu {

namespace {

using SgemmFn = void (*)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                         blasint, blasint, float, const float*, blasint, const float*, blasint,
                         float, float*, blasint);
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();
using GetCoreFn = char* (*)();

struct Blas {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
  GetThreadsFn get_threads = nullptr;
  GetCoreFn get_core = nullptr;
};

const char* CoreTypeForThisCpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;  // let OpenBLAS decide
}

const Blas& GetBlas() {
  static const Blas blas = [] {
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      if (const char* core = CoreTypeForThisCpu()) setenv("OPENBLAS_CORETYPE", core, 0);
    }
    // OpenBLAS's idle workers spin (yielding) for ~2^28 cycles after each GEMM, which takes the
    // cores our own compute threads (parallel.h) need between GEMMs. The shortest timeout makes
    // them sleep at once: +15% decode throughput at 2 threads on the translate bench (393-410
    // -> 468 tok/s, same build, back-to-back runs).
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    void* h = nullptr;
    for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
      h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
      if (h != nullptr) break;
    }
    Blas b;
    if (h == nullptr) {
      // Without a BLAS nothing can be computed; this is an installation error (see
      // deploy/install-deps.sh), reported once with the loader's reason.
      std::fprintf(stderr, "tnmt: cannot load OpenBLAS (libopenblas.so.0): %s\n", dlerror());
      std::abort();
    }
    b.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
    b.set_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
    b.get_threads = reinterpret_cast<GetThreadsFn>(dlsym(h, "openblas_get_num_threads"));
    b.get_core = reinterpret_cast<GetCoreFn>(dlsym(h, "openblas_get_corename"));
    if (b.sgemm == nullptr || b.set_threads == nullptr || b.get_threads == nullptr) {
      std::fprintf(stderr, "tnmt: the loaded OpenBLAS lacks cblas_sgemm or thread control\n");
      std::abort();
    }
    return b;
  }();
  return blas;
}

}  // namespace

void GemmNT(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  GetBlas().sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                  ldc);
}

void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  GetBlas().sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
                  c, ldc);
}

void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  GetBlas().sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                  ldc);
}

void SetBlasThreads(int threads) {
  GetBlas().set_threads(threads < 1 ? 1 : threads);
  SetComputeThreads(threads);
}

int BlasThreads() { return GetBlas().get_threads(); }

std::string BlasCoreName() {
  const Blas& b = GetBlas();
  return b.get_core != nullptr ? b.get_core() : "unknown";
}

}  // namespace tnmt::kernels::cpu

// CPU compute settings; see compute.h.
#include "engine/runtime/compute.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"

namespace tnmt {

void SetCpuThreads(int threads) { kernels::cpu::SetBlasThreads(threads); }

std::string CpuKernels() {
  return absl::StrCat(kernels::cpu::IsaName(kernels::cpu::ActiveIsa()), ", int8: ", kernels::cpu::Int8KernelName(),
                      ", bfloat16 training: ", !kernels::cpu::HasBf16Gemm() ? "no"
                      : kernels::cpu::UseAmxBf16() ? "avx512-amx"
                                                   : "avx512-bf16");
}

}  // namespace tnmt

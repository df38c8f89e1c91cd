// gemm_bench: GFLOP/s of the trainer's matrix products at the shapes of one step of the small
// preset (bench/train_bench's workload: 3,200 rows, d_model 256, d_ff 1024, vocab 8000), each
// through the GEMM the trainer uses for --dtype (float32: the BLAS; bfloat16: GemmBf16, the AMX
// or AVX-512 BF16 kernel), beside one 2048^3 product. A benchmark for tuning the kernels: it
// prints one table and judges nothing.
//
//   bazel build //bench:gemm_bench && bazel-bin/bench/gemm_bench --dtype bfloat16 --threads 1
//
// Each row: the best of --reps timed calls after one untimed call, c 64-byte aligned as the
// trainer's tensors are. "role" names the product: fwd y = x W^T, dx = dy W, dW = dy^T x.
//
// --dtype packed / packed-int8: the engine's GemmPacked (a decode step's linears) at a model's
// shapes (--d-model, --d-ff: the bundled demo model's 320 and 1280 by default; vocab 8000) for
// row counts from a large batch's beams down to one sentence's, W cycled through copies as a
// step meets it; the kernel path is the CPU's best or TNMT_CPU_ISA's cap (printed).
#include <cstdio>
#include <algorithm>
#include <cstdint>
#include <string>

#include "bench/gemm_timing.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "tools/tnmt/args.h"

namespace tnmt::bench {
namespace {

namespace k = kernels::cpu;

// The --dtype packed table; returns main's exit code.
int PackedTable(bool int8, int threads, int reps, int d, int ff) {
  struct Linear {
    std::string role;
    int n, k;
    double zeros = 0.0;  // the activations' fraction of zeros
  };
  const std::string ds = std::to_string(d), ffs = std::to_string(ff);
  // "relu": the feed-forward's second product on activations 97% zero, as the demo model's
  // hidden units are per token (independent here, so more of a tile's steps are nonzero than in
  // a model, where tokens share their zeros); GFLOP/s as if every product were computed.
  const Linear linears[] = {{"attn " + ds + "->" + ds, d, d},
                            {"ffn " + ds + "->" + ffs, ff, d},
                            {"ffn " + ffs + "->" + ds, d, ff},
                            {"ffn " + ffs + "->" + ds + " relu", d, ff, 0.97},
                            {"logits " + ds + "->8000", 8000, d}};
  std::printf("packed %s, kernels %s, %d thread(s), best of %d calls\n", int8 ? "int8" : "float32",
              int8 ? k::Int8KernelName() : k::IsaName(k::ActiveIsa()), threads, reps);
  std::printf("%-23s %6s %6s %6s %10s %10s\n", "role", "m", "n", "k", "ms", "GFLOP/s");
  for (const Linear& l : linears) {
    for (const int m : {1024, 256, 64, 16, 4}) {
      // ~32 MB of weight copies: more than a step's weights, so they come from L3 or memory.
      const int copies = std::max(2, static_cast<int>((32 << 20) / (static_cast<int64_t>(l.n) * l.k * 4)));
      const double ms = BestPackedGemmMs(m, l.n, l.k, int8, copies, reps, l.zeros);
      std::printf("%-23s %6d %6d %6d %10.4f %10.1f\n", l.role.c_str(), m, l.n, l.k, ms, GemmGflops({false, true, m, l.n, l.k}, ms));
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  cli::Args args("gemm_bench", "GFLOP/s of the trainer's GEMMs at the small preset's shapes.");
  args.AddString("dtype", "bfloat16",
                 "float32 (the BLAS), bfloat16 (GemmBf16), packed or packed-int8 (the engine's GemmPacked)");
  args.AddInt("threads", 1, "compute threads");
  args.AddInt("reps", 10, "timed calls per shape (the best is shown)");
  args.AddInt("d-model", 320, "with --dtype packed*: the model's width (the bundled demo model's)");
  args.AddInt("d-ff", 1280, "with --dtype packed*: the feed-forward width");
  if (const absl::Status s = args.Parse(argc, argv, 1); !s.ok()) {
    std::fprintf(stderr, "gemm_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (args.help_requested()) {
    std::printf("%s", args.Help().c_str());
    return 0;
  }
  const std::string dtype = args.GetString("dtype");
  const int threads = args.GetInt("threads"), reps = args.GetInt("reps");
  const bool packed = dtype == "packed" || dtype == "packed-int8";
  if ((dtype != "float32" && dtype != "bfloat16" && !packed) || threads < 1 || reps < 1) {
    std::fprintf(stderr,
                 "gemm_bench: --dtype is float32, bfloat16, packed or packed-int8; --threads and --reps are >= 1\n");
    return 2;
  }
  if (packed) {
    k::SetComputeThreads(threads);
    if (args.GetInt("d-model") < 1 || args.GetInt("d-ff") < 1) {
      std::fprintf(stderr, "gemm_bench: --d-model and --d-ff are >= 1\n");
      return 2;
    }
    return PackedTable(dtype == "packed-int8", threads, reps, args.GetInt("d-model"), args.GetInt("d-ff"));
  }
  const bool bf16 = dtype == "bfloat16";
  if (bf16 && !k::HasBf16Gemm()) {
    std::fprintf(stderr, "gemm_bench: --dtype bfloat16 needs a CPU with AVX-512 BF16\n");
    return 2;
  }
  k::SetComputeThreads(threads);
  k::SetBlasThreads(threads);
  struct Shape {
    const char* role;
    GemmShape shape;
  };
  const Shape shapes[] = {
      {"2048^3", {false, true, 2048, 2048, 2048}},
      {"fwd 256->1024", {false, true, 3200, 1024, 256}},
      {"fwd 1024->256", {false, true, 3200, 256, 1024}},
      {"fwd 256->768 (qkv)", {false, true, 3200, 768, 256}},
      {"dx 1024->256", {false, false, 3200, 256, 1024}},
      {"dx 256->1024", {false, false, 3200, 1024, 256}},
      {"dW 1024x256", {true, false, 1024, 256, 3200}},
      {"dW 256x1024", {true, false, 256, 1024, 3200}},
      {"logits fwd", {false, true, 3200, 8000, 256}},
      {"logits dx", {false, false, 3200, 256, 8000}},
      {"logits dW", {true, false, 8000, 256, 3200}},
  };
  std::printf("dtype %s, %d thread(s), best of %d calls\n", dtype.c_str(), threads, reps);
  std::printf("%-20s %6s %6s %6s %10s %10s %8s\n", "role", "m", "n", "k", "ms", "GFLOP/s", "of 2048^3");
  double peak = 0.0;
  for (const Shape& s : shapes) {
    const GemmShape& g = s.shape;
    const double ms = BestGemmMs(g, bf16, reps);
    const double gflops = GemmGflops(g, ms);
    if (peak == 0.0) peak = gflops;
    std::printf("%-20s %6d %6d %6d %10.3f %10.1f %7.0f%%\n", s.role, g.m, g.n, g.k, ms, gflops, 100.0 * gflops / peak);
  }
  return 0;
}

}  // namespace
}  // namespace tnmt::bench

int main(int argc, char** argv) { return tnmt::bench::Main(argc, argv); }

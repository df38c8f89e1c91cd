// train_bench: training throughput of the CPU trainer (issue "trainer", speed item). A
// benchmark, not a test: it prints numbers and does not judge them.
//
// Workload: a fresh model of a trainer preset (--preset small|base, --vocab 8000; post-norm,
// relu, sinusoidal positions, shared embeddings scaled by sqrt(d)) from a fixed seed, and ONE
// fixed synthetic batch of random ids (uniform in [4, vocab)), reused every step:
//   src     = ids (src_len - 1) + eos(3)
//   tgt_in  = bos(2) + ids (tgt_len - 1)
//   tgt_out = ids + eos(3)
// No padding anywhere, so tnmt and the PyTorch peer (bench/torch_train_peer.py) do identical
// work. One step = the CPU TrainEngine's BeginStep (gradients to zero), ForwardBackward (dropout
// --dropout, label smoothing 0.1, a new dropout seed per step), AllReduce (one rank) and AdamStep
// (β 0.9/0.98, ε 1e-9, the paper's schedule, gradients scaled by 1/tokens), exactly what
// trainer/train_loop.cc does per update with accum_steps 1 and no clipping.
//
// Counting: target tokens per step = batch_sentences x tgt_len (every one is a non-pad
// target); tokens/s = target tokens per step x steps / wall seconds of the timed steps
// (--warmup steps, default 2, run first and are not timed).
//
// Flags: --preset small|base  --vocab N  --threads N  --batch-sentences N  --src-len N
//        --tgt-len N  --steps N  --warmup N  --dropout P  --seed N
//        --attention-dropout P  --activation-dropout P  (tnmt only: what they cost; the
//        PyTorch peer has residual dropout only, so compare ratios with these at 0)
//        --dtype float32|bfloat16  (bfloat16: the linears' GEMMs with bfloat16 operands and
//        float32 sums, CPUs with AVX-512 BF16; the peer's counterpart is its bfloat16 autocast)
// Output: human-readable lines, then one machine-readable line
//   RESULT engine=tnmt threads=N tokens_per_s=X s_per_step=S peak_rss_mib=M loss0=L ...
// (loss0: the label-smoothed loss per target token of the first, untimed step; with a fresh
// model it is about ln(vocab), the check that the peer computes the same thing), with
// gemm_gflop (the step's matrix products, GFLOP) and gemm_peak_gflops (one 2048^3 product
// through the same GEMM and threads, measured after the steps): their quotient is the least
// time a step of this model can take here, whatever else is made faster.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/gemm_timing.h"
#include "kernels/cpu/gemm.h"
#include "tools/tnmt/args.h"
#include "trainer/collective/collective.h"
#include "trainer/model/cpu_train_engine.h"
#include "trainer/model/parameters.h"
#include "trainer/model/transformer_train.h"
#include "trainer/optim/adam.h"
#include "trainer/train_config.h"
#include "trainer/train_loop.h"

namespace tnmt::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Flags {
  std::string preset = "small";
  std::string dtype = "float32";
  int vocab = 8000;
  int threads = 1;
  int batch_sentences = 128;
  int src_len = 25;
  int tgt_len = 25;
  int steps = 10;
  int warmup = 2;
  double dropout = 0.1;
  double attention_dropout = 0.0;
  double activation_dropout = 0.0;
  uint64_t seed = 1;
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr, "train_bench: %s\n", error.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  cli::Args args("train_bench", "Training throughput of tnmt on a fixed synthetic batch (see bench/run_train_bench.sh).");
  Flags f;
  args.AddString("preset", f.preset, "model size: small or base");
  args.AddInt("vocab", f.vocab, "vocabulary size");
  args.AddInt("threads", f.threads, "compute threads");
  args.AddInt("batch-sentences", f.batch_sentences, "sentences per batch");
  args.AddInt("src-len", f.src_len, "source tokens per sentence, </s> included");
  args.AddInt("tgt-len", f.tgt_len, "target tokens per sentence");
  args.AddInt("steps", f.steps, "timed steps");
  args.AddInt("warmup", f.warmup, "untimed steps first");
  args.AddInt("seed", static_cast<int>(f.seed), "random seed");
  args.AddFloat("dropout", static_cast<float>(f.dropout), "dropout");
  args.AddFloat("attention-dropout", 0.0f, "dropout on the attention probabilities");
  args.AddFloat("activation-dropout", 0.0f, "dropout on the feed-forward's hidden layer");
  args.AddString("dtype", f.dtype, "float32, or bfloat16 (GEMM operands; CPUs with AVX-512 BF16)");
  const absl::Status parsed = args.Parse(argc, argv, 1);
  if (!parsed.ok()) Usage(std::string(parsed.message()));
  if (args.help_requested()) {
    std::printf("%s", args.Help().c_str());
    std::exit(0);
  }
  f.preset = args.GetString("preset");
  f.vocab = args.GetInt("vocab");
  f.threads = args.GetInt("threads");
  f.batch_sentences = args.GetInt("batch-sentences");
  f.src_len = args.GetInt("src-len");
  f.tgt_len = args.GetInt("tgt-len");
  f.steps = args.GetInt("steps");
  f.warmup = args.GetInt("warmup");
  f.seed = static_cast<uint64_t>(args.GetInt("seed"));
  f.dropout = args.GetFloat("dropout");
  f.attention_dropout = args.GetFloat("attention-dropout");
  f.activation_dropout = args.GetFloat("activation-dropout");
  f.dtype = args.GetString("dtype");
  if (f.dtype != "float32" && f.dtype != "bfloat16") Usage("--dtype must be float32 or bfloat16");
  if (f.dtype == "bfloat16" && !kernels::cpu::HasBf16Gemm()) {
    Usage("--dtype bfloat16 needs a CPU with AVX-512 BF16 (and TNMT_CPU_ISA not below avx512)");
  }
  const auto rate = [](double p) { return p >= 0.0 && p < 1.0; };
  if (f.vocab < 5 || f.threads < 1 || f.batch_sentences < 1 || f.src_len < 2 || f.tgt_len < 2 ||
      f.steps < 1 || f.warmup < 0 || args.GetInt("seed") < 0 || !rate(f.dropout) || !rate(f.attention_dropout) ||
      !rate(f.activation_dropout)) {
    Usage("a flag is out of range (vocab >= 5, lengths >= 2, steps and threads >= 1, dropout in [0, 1))");
  }
  return f;
}

double PeakRssMib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

double CpuSeconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double LoadAverage1() {
  double l[3] = {0, 0, 0};
  return getloadavg(l, 3) >= 1 ? l[0] : -1.0;
}

// Floating-point operations of one training step's matrix products (forward, input gradients
// and weight gradients: 3 x 2 x the forward's multiply-adds): every linear at its rows, the
// logits, and attention's scores and weighted sums at their full (unmasked) sizes. The rest of
// a step (norms, softmax, dropout, the loss, Adam) is not counted.
double GemmFlopsPerStep(const ModelConfig& c, const Flags& f) {
  const double d = c.d_model, ff = c.d_ff, v = c.vocab_size, heads = c.num_heads, dh = d / heads;
  const double ts = static_cast<double>(f.batch_sentences) * f.src_len;
  const double tt = static_cast<double>(f.batch_sentences) * f.tgt_len;
  const double b = f.batch_sentences, ls = f.src_len, lt = f.tgt_len;
  const double enc = ts * (4 * d * d + 2 * d * ff) + b * heads * 2 * ls * ls * dh;
  const double dec = tt * (6 * d * d + 2 * d * ff) + ts * 2 * d * d + b * heads * 2 * (lt * lt + lt * ls) * dh;
  const double macs = c.encoder_layers * enc + c.decoder_layers * dec + tt * d * v;
  return 6.0 * macs;
}

// GFLOP/s of one large product (2048 x 2048 x 2048, operands as a linear's forward) through
// the GEMM the trainer uses for this dtype, best of 3, at the configured threads: the
// machine's practical peak for the step's matrix products.
double GemmPeakGflops(const Flags& f) {
  const GemmShape s{false, true, 2048, 2048, 2048};
  return GemmGflops(s, BestGemmMs(s, f.dtype == "bfloat16", 3));
}

// The synthetic batch (see the header comment). Ids are drawn from [4, vocab): no pad, unk,
// bos or eos inside sentences.
train::TrainBatch MakeBatch(const Flags& f, const ModelConfig& c) {
  train::TrainBatch b;
  b.batch = f.batch_sentences;
  b.src_len = f.src_len;
  b.tgt_len = f.tgt_len;
  std::mt19937_64 rng(f.seed * 7919 + 17);
  std::uniform_int_distribution<int32_t> id(4, c.vocab_size - 1);
  for (int s = 0; s < b.batch; ++s) {
    for (int t = 0; t + 1 < f.src_len; ++t) b.src.push_back(id(rng));
    b.src.push_back(c.eos_id);
    b.src_lengths.push_back(f.src_len);
    std::vector<int32_t> ids(f.tgt_len - 1);
    for (int32_t& x : ids) x = id(rng);
    b.tgt_in.push_back(c.bos_id);
    b.tgt_in.insert(b.tgt_in.end(), ids.begin(), ids.end());
    b.tgt_out.insert(b.tgt_out.end(), ids.begin(), ids.end());
    b.tgt_out.push_back(c.eos_id);
  }
  return b;
}

absl::Status Run(const Flags& f) {
  train::KeepFreedMemory();  // as `tnmt train` does
  kernels::cpu::SetBlasThreads(f.threads);
  absl::StatusOr<ModelConfig> config = train::PresetModel(f.preset, f.vocab);
  if (!config.ok()) return config.status();
  const ModelConfig& c = *config;
  absl::StatusOr<ModelWeights> params = train::InitializeWeights(c, f.seed);
  if (!params.ok()) return params.status();
  absl::StatusOr<train::Adam> adam = train::Adam::Create(c, *params);
  if (!adam.ok()) return adam.status();
  const int64_t param_count = train::ParameterCount(c, &*params);
  // The trainer's own CPU engine: forward/backward, then the flat-layout update.
  std::unique_ptr<train::Collective> single = train::MakeSingleProcessCollective();
  train::TrainEngineOptions eo;
  eo.collective = single.get();
  eo.precision = f.dtype == "bfloat16" ? train::TrainPrecision::kBFloat16 : train::TrainPrecision::kFloat32;
  absl::StatusOr<std::unique_ptr<train::TrainEngine>> engine =
      train::MakeCpuTrainEngine(c, eo, *std::move(params), *std::move(adam));
  if (!engine.ok()) return engine.status();

  const train::TrainBatch batch = MakeBatch(f, c);
  const int64_t tokens_per_step = static_cast<int64_t>(f.batch_sentences) * f.tgt_len;
  train::ScheduleOptions schedule;

  std::printf("train_bench: preset %s (d_model %d, d_ff %d, heads %d, layers %d+%d), vocab %d, %lld params\n",
              f.preset.c_str(), c.d_model, c.d_ff, c.num_heads, c.encoder_layers, c.decoder_layers, c.vocab_size,
              static_cast<long long>(param_count));
  std::printf("train_bench: batch %d sentences x (src %d, tgt %d) = %lld target tokens/step, dropout %.2f (attention %.2f, activation %.2f), "
              "threads %d (BLAS %s, %d threads), %d warm-up + %d timed steps\n",
              f.batch_sentences, f.src_len, f.tgt_len, static_cast<long long>(tokens_per_step), f.dropout,
              f.attention_dropout, f.activation_dropout,
              f.threads, kernels::cpu::BlasCoreName().c_str(), kernels::cpu::BlasThreads(), f.warmup, f.steps);
  std::fflush(stdout);

  double loss0 = std::nan("");
  double last_loss = 0.0;
  int64_t updates = 0;
  auto step = [&](int64_t index) -> absl::Status {
    if (absl::Status s = (*engine)->BeginStep(1); !s.ok()) return s;
    train::TrainStepOptions o;
    o.dropout = static_cast<float>(f.dropout);
    o.attention_dropout = static_cast<float>(f.attention_dropout);
    o.activation_dropout = static_cast<float>(f.activation_dropout);
    o.label_smoothing = 0.1f;
    o.dropout_seed = f.seed * 1000003ULL + static_cast<uint64_t>(index);
    if (absl::Status st = (*engine)->ForwardBackward(batch, o); !st.ok()) return st;
    absl::StatusOr<train::StepTotals> s = (*engine)->AllReduce(false);
    if (!s.ok()) return s.status();
    if (s->tokens != static_cast<double>(tokens_per_step)) {
      return absl::InternalError(absl::StrCat("counted ", s->tokens, " target tokens, expected ", tokens_per_step));
    }
    const double lr = train::NoamLearningRate(++updates, c.d_model, schedule);
    absl::StatusOr<bool> applied = (*engine)->AdamStep(lr, static_cast<float>(1.0 / s->tokens));
    if (!applied.ok()) return applied.status();
    last_loss = s->loss_sum / s->tokens;
    if (std::isnan(loss0)) loss0 = last_loss;
    return absl::OkStatus();
  };

  int64_t index = 0;
  for (int i = 0; i < f.warmup; ++i) {
    if (absl::Status s = step(index++); !s.ok()) return s;
  }
  const double load_start = LoadAverage1();
  const double cpu0 = CpuSeconds();
  const Clock::time_point t0 = Clock::now();
  double slowest = 0.0, fastest = 1e30;
  for (int i = 0; i < f.steps; ++i) {
    const Clock::time_point a = Clock::now();
    if (absl::Status s = step(index++); !s.ok()) return s;
    const double dt = Seconds(a, Clock::now());
    slowest = std::max(slowest, dt);
    fastest = std::min(fastest, dt);
  }
  const double wall = Seconds(t0, Clock::now());
  const double cpu = CpuSeconds() - cpu0;
  const double tps = static_cast<double>(tokens_per_step) * f.steps / wall;
  if (std::isnan(loss0)) loss0 = last_loss;

  std::printf("train_bench: loss/token first step %.4f (ln V = %.4f), last step %.4f\n", loss0,
              std::log(static_cast<double>(c.vocab_size)), last_loss);
  std::printf("train_bench: %.3f s/step (min %.3f, max %.3f), %.1f target tokens/s, cores used %.2f, "
              "peak RSS %.0f MiB, load %.2f -> %.2f\n",
              wall / f.steps, fastest, slowest, tps, cpu / wall, PeakRssMib(), load_start, LoadAverage1());
  // Measured after the steps, so that the peak RSS above is the trainer's own.
  const double gflop = GemmFlopsPerStep(c, f) / 1e9, peak = GemmPeakGflops(f);
  std::printf("train_bench: %.1f GFLOP of matrix products per step; this GEMM's peak here %.1f GFLOP/s "
              "(2048^3): at least %.3f s/step, %.0f%% of it spent outside them or below peak\n",
              gflop, peak, gflop / peak, 100.0 * (1.0 - gflop / peak / (wall / f.steps)));
  std::printf("RESULT engine=tnmt threads=%d tokens_per_s=%.2f s_per_step=%.4f peak_rss_mib=%.0f loss0=%.4f "
              "cores=%.2f blas_core=%s dtype=%s gemm_gflop=%.2f gemm_peak_gflops=%.1f\n",
              f.threads, tps, wall / f.steps, PeakRssMib(), loss0, cpu / wall,
              kernels::cpu::BlasCoreName().c_str(), f.dtype.c_str(), gflop, peak);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tnmt::bench

int main(int argc, char** argv) {
  const tnmt::bench::Flags f = tnmt::bench::ParseFlags(argc, argv);
  const absl::Status s = tnmt::bench::Run(f);
  if (!s.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

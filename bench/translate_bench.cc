// translate_bench: translation throughput, peak memory and GEMM efficiency of the CPU engine
// (issue "engine throughput"). A benchmark, not a test: it prints numbers, it does not judge
// them (beyond checking that every output has the fixed length, so the token count is right).
//
// Workload (defaults = the issue's): a Transformer-base-sized model (6+6 layers, d_model 512,
// d_ff 2048, 8 heads, post-norm, relu, sinusoidal positions, shared embeddings, 8000-token
// vocabulary) with random weights from a fixed seed; 200 source lines of 20 tokens (19 random
// non-special ids + </s>); beam 4; 32 sentences per Decode call; min_length = max_length = 70,
// so every output is exactly 70 tokens: 69 generated tokens + </s> (the output length of
// docs/model-format.md, which counts </s> and not <s>).
//
// Counting: target tokens = sum over sentences of (ids of the best hypothesis + 1 for </s>);
// it must equal sentences * out_len, else the bench fails. tokens/s = target tokens / wall
// seconds of the Decode calls (model construction and warm-up excluded).
//
// Memory: "peak RSS" is getrusage(RUSAGE_SELF).ru_maxrss over the whole process (model
// construction, which briefly holds the unfused and the fused q/k/v copies, included). "decode
// peak" is the high-water mark of the decode phase alone: VmHWM is reset (write "5" to
// /proc/self/clear_refs) once the model is built, and read after the last Decode call.
//
// GEMM: GFLOP/s of cblas_sgemm through kernels::cpu::GemmNT at the shapes decoding runs
// (m = batch*beam = 128 rows per decoder step, m = batch*src_len = 640 rows in the encoder)
// and at 2048^3 as "the BLAS's own peak", each repeated for at least --gemm-seconds; and of
// kernels::cpu::GemmPacked (weights packed once) at the same shapes, which is what the decoder
// steps run on CPUs with AVX-512 (weights packed by ModelWeights::PackForInference).
// --packed=false skips PackForInference (every GEMM through OpenBLAS, as before packing).
//
// GPU: --device cuda[:N] --dtype float16|bfloat16|float32 decodes with the CUDA engine
// (engine/cuda, CUDA builds) on the same random weights; add --no-gemm (the GEMM section
// times the CPU's kernels). tests/gpu/check.sh runs it at batch 1, 32 and 256.
//
// Flags: --threads N  --sentences N  --batch N  --beam N  --src-len N  --out-len N  --seed N
//        --vocab N (8000)  --device cpu|cuda[:N]  --dtype float16|bfloat16|float32
//        --export DIR  (writes config.json, model.safetensors, sources.txt: a peer engine
//                       can load the same model; --export-only stops there)
//        --outputs DIR (writes tnmt_beam.txt and, for the first --check N sentences (8),
//                       tnmt_greedy.txt: "SCORE<TAB>ids" per sentence, ids without </s>)
//        --gemm-seconds S (0.5)  --no-gemm  --no-translate  --result FILE (key=value lines)
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/core/tensor.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/decode/beam_search.h"
#include "engine/decode/flat_beam_decoder.h"
#include "engine/decode/options.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/runtime/compute.h"
#include "engine/runtime/placement.h"
#include "engine/runtime/translator.h"
#include "kernels/cpu/gemm.h"
#include "tools/tnmt/args.h"

namespace tnmt::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Flags {
  int threads = 1;
  int sentences = 200;
  int batch = 32;
  int beam = 4;
  int src_len = 20;  // including </s>
  int out_len = 70;  // including </s>
  uint64_t seed = 1234;
  int check = 8;
  double gemm_seconds = 0.5;
  bool gemm = true;
  bool translate = true;
  bool export_only = false;
  bool packed = true;
  std::string export_dir;
  std::string outputs_dir;
  std::string result_file;
  int vocab = 8000;
  std::string device = "cpu";  // or cuda[:N] (CUDA builds): the engine's GPU backend
  std::string dtype;           // GPU precision (default float16)
  bool cuda_graphs = true;     // replay decode steps as CUDA graphs (the engine's default)
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr, "translate_bench: %s\n", error.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  cli::Args args("translate_bench", "Translation throughput and peak memory of a random Transformer-base, and GEMM GFLOP/s\n(see bench/run_translate_bench.sh).");
  Flags f;
  args.AddInt("threads", f.threads, "compute threads");
  args.AddInt("sentences", f.sentences, "source sentences");
  args.AddInt("batch", f.batch, "sentences per batch");
  args.AddInt("beam", f.beam, "beam size");
  args.AddInt("src-len", f.src_len, "source tokens, </s> included");
  args.AddInt("out-len", f.out_len, "output tokens, </s> included");
  args.AddInt("seed", static_cast<int>(f.seed), "random seed");
  args.AddInt("check", f.check, "sentences also decoded greedily for the peer comparison");
  args.AddFloat("gemm-seconds", static_cast<float>(f.gemm_seconds), "minimum time per GEMM shape");
  args.AddBool("gemm", f.gemm, "run the GEMM section");
  args.AddBool("translate", f.translate, "run the translation section");
  args.AddBool("export-only", f.export_only, "only export the model (with --export)");
  args.AddBool("packed", f.packed, "pack the decoder weights at load, as model loading does (false: GEMMs through OpenBLAS only)");
  args.AddString("export", f.export_dir, "write config.json, model.safetensors and the sources here");
  args.AddString("outputs", f.outputs_dir, "write the decoded ids here");
  args.AddString("result", f.result_file, "write key=value results here");
  args.AddInt("vocab", f.vocab, "vocabulary size of the random model");
  args.AddString("device", f.device, "cpu, cuda or cuda:N (the GPU engine; CUDA builds)");
  args.AddString("dtype", f.dtype, "GPU precision: float16 (default), bfloat16 or float32");
  args.AddBool("cuda-graphs", f.cuda_graphs, "GPU: replay each decode step as a CUDA graph (--no-cuda-graphs: eager launches)");
  const absl::Status parsed = args.Parse(argc, argv, 1);
  if (!parsed.ok()) Usage(std::string(parsed.message()));
  if (args.help_requested()) {
    std::printf("%s", args.Help().c_str());
    std::exit(0);
  }
  f.threads = args.GetInt("threads");
  f.sentences = args.GetInt("sentences");
  f.batch = args.GetInt("batch");
  f.beam = args.GetInt("beam");
  f.src_len = args.GetInt("src-len");
  f.out_len = args.GetInt("out-len");
  f.seed = static_cast<uint64_t>(args.GetInt("seed"));
  f.check = args.GetInt("check");
  f.gemm_seconds = args.GetFloat("gemm-seconds");
  f.gemm = args.GetBool("gemm");
  f.translate = args.GetBool("translate");
  f.export_only = args.GetBool("export-only");
  f.packed = args.GetBool("packed");
  f.export_dir = args.GetString("export");
  f.outputs_dir = args.GetString("outputs");
  f.result_file = args.GetString("result");
  f.vocab = args.GetInt("vocab");
  f.device = args.GetString("device");
  f.dtype = args.GetString("dtype");
  f.cuda_graphs = args.GetBool("cuda-graphs");
  if (f.threads < 1 || f.sentences < 1 || f.batch < 1 || f.beam < 1 || f.src_len < 1 ||
      f.out_len < 1 || args.GetInt("seed") < 0 || f.check < 0 || f.vocab < 8) {
    Usage("a flag is out of range (counts and lengths >= 1, seed and check >= 0)");
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// Memory

// User + system CPU seconds of the whole process (all threads) so far.
double CpuSeconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

int64_t MaxRssKiB() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;  // KiB on Linux
}

// A "VmXXX:   1234 kB" field of /proc/self/status, in KiB (-1 if unavailable).
int64_t ProcStatusKiB(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::atoll(line.c_str() + prefix.size());
  }
  return -1;
}

// Resets VmHWM (the RSS high-water mark) to the current RSS. Returns false if not supported.
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

double MiB(int64_t kib) { return kib / 1024.0; }

// ---------------------------------------------------------------------------------------------
// Random model

ModelConfig BaseConfig(int vocab) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.d_model = 512;
  c.num_heads = 8;
  c.d_ff = 2048;
  c.encoder_layers = 6;
  c.decoder_layers = 6;
  c.normalize_before = false;
  c.activation = kernels::Activation::kRelu;
  c.position_encoding = PositionEncoding::kSinusoidal;
  c.share_embeddings = true;
  c.share_decoder_input_output_embed = true;
  c.scale_embedding = true;
  c.layer_norm_epsilon = 1e-6f;
  return c;
}

class RandomModel {
 public:
  explicit RandomModel(uint64_t seed) : rng_(seed) {}

  absl::Status Normal(TensorMap* map, const std::string& name, std::vector<int64_t> shape,
                      double stddev) {
    auto t = Tensor::Empty(std::move(shape));
    if (!t.ok()) return t.status();
    std::normal_distribution<float> dist(0.0f, static_cast<float>(stddev));
    float* p = t->f32();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = dist(rng_);
    (*map)[name] = StoredTensor{*std::move(t), DType::kFloat32};
    return absl::OkStatus();
  }

  absl::Status Constant(TensorMap* map, const std::string& name, int64_t n, float value) {
    auto t = Tensor::Empty({n});
    if (!t.ok()) return t.status();
    std::fill(t->f32(), t->f32() + n, value);
    (*map)[name] = StoredTensor{*std::move(t), DType::kFloat32};
    return absl::OkStatus();
  }

  // Linear [out, in]: weight ~ N(0, 1/in), bias ~ N(0, 0.02^2) (small but not zero, so a
  // peer that dropped a bias would be caught by the output comparison).
  absl::Status Linear(TensorMap* map, const std::string& prefix, int64_t out, int64_t in) {
    if (auto s = Normal(map, prefix + ".weight", {out, in}, 1.0 / std::sqrt(double(in))); !s.ok()) {
      return s;
    }
    return Normal(map, prefix + ".bias", {out}, 0.02);
  }

  absl::Status LayerNorm(TensorMap* map, const std::string& prefix, int64_t d) {
    if (auto s = Constant(map, prefix + ".weight", d, 1.0f); !s.ok()) return s;
    return Constant(map, prefix + ".bias", d, 0.0f);
  }

  absl::StatusOr<TensorMap> Build(const ModelConfig& c) {
    TensorMap m;
    const int64_t d = c.d_model, ff = c.d_ff;
    absl::Status s = Normal(&m, "encoder.embed_tokens.weight", {c.vocab_size, d}, 1.0 / std::sqrt(double(d)));
    if (!s.ok()) return s;
    auto attention = [&](const std::string& p) -> absl::Status {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        if (auto st = Linear(&m, p + "." + proj, d, d); !st.ok()) return st;
      }
      return absl::OkStatus();
    };
    auto ffn = [&](const std::string& p) -> absl::Status {
      if (auto st = Linear(&m, p + ".fc1", ff, d); !st.ok()) return st;
      if (auto st = Linear(&m, p + ".fc2", d, ff); !st.ok()) return st;
      return LayerNorm(&m, p + ".final_layer_norm", d);
    };
    for (int i = 0; i < c.encoder_layers; ++i) {
      const std::string p = absl::StrCat("encoder.layers.", i);
      if (s = attention(p + ".self_attn"); !s.ok()) return s;
      if (s = LayerNorm(&m, p + ".self_attn_layer_norm", d); !s.ok()) return s;
      if (s = ffn(p); !s.ok()) return s;
    }
    for (int i = 0; i < c.decoder_layers; ++i) {
      const std::string p = absl::StrCat("decoder.layers.", i);
      if (s = attention(p + ".self_attn"); !s.ok()) return s;
      if (s = LayerNorm(&m, p + ".self_attn_layer_norm", d); !s.ok()) return s;
      if (s = attention(p + ".encoder_attn"); !s.ok()) return s;
      if (s = LayerNorm(&m, p + ".encoder_attn_layer_norm", d); !s.ok()) return s;
      if (s = ffn(p); !s.ok()) return s;
    }
    return m;
  }

  // n sources of (len - 1) random ids in [4, vocab) (no pad/unk/bos/eos) followed by eos.
  std::vector<std::vector<int32_t>> Sources(const ModelConfig& c, int n, int len) {
    std::uniform_int_distribution<int32_t> dist(4, c.vocab_size - 1);
    std::vector<std::vector<int32_t>> out(n);
    for (auto& s : out) {
      for (int i = 0; i + 1 < len; ++i) s.push_back(dist(rng_));
      s.push_back(c.eos_id);
    }
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

int64_t ParamCount(const ModelWeights& w) {
  // Counts every tensor once (shared embeddings once; the sinusoid table is not a parameter).
  int64_t n = w.encoder_embed.numel();
  auto count = MakeParamVisitor(
      [&n](const LinearGroup&, const Linear& l) { n += l.weight.numel() + l.bias.numel(); },
      [&n](const char*, const LayerNormWeights& l) { n += l.gamma.numel() + l.beta.numel(); });
  for (const auto& l : w.encoder) VisitEncoderLayer(count, l);
  for (const auto& l : w.decoder) VisitDecoderLayer(count, l);
  return n;
}

// ---------------------------------------------------------------------------------------------
// FLOPs of the workload (2 per multiply-add): what the engine must compute at minimum for
// this schedule. No sentence finishes before step out_len (min_length), so per batch of b
// sentences: step 1 runs b rows (one live hypothesis each), steps 2..out_len run b*beam rows.
struct Flops {
  double encoder_linear = 0, decoder_linear = 0, cross_kv = 0, logits = 0, attention = 0;
  double total() const { return encoder_linear + decoder_linear + cross_kv + logits + attention; }
};

Flops WorkloadFlops(const ModelConfig& c, int sentences, int batch, int beam, int src_len,
                    int out_len) {
  Flops f;
  const double d = c.d_model, ff = c.d_ff, V = c.vocab_size;
  for (int start = 0; start < sentences; start += batch) {
    const double b = std::min(batch, sentences - start);
    const double S = src_len;
    const double src_rows = b * S;
    f.encoder_linear += 2 * c.encoder_layers * src_rows * (4 * d * d + 2 * d * ff);
    f.attention += 2 * c.encoder_layers * b * (2 * S * S * d);
    f.cross_kv += 2 * c.decoder_layers * src_rows * (2 * d * d);
    for (int t = 1; t <= out_len; ++t) {
      const double rows = t == 1 ? b : b * beam;
      f.decoder_linear += 2 * c.decoder_layers * rows * (6 * d * d + 2 * d * ff);
      f.logits += 2 * rows * d * V;
      f.attention += 2 * c.decoder_layers * rows * (2 * t * d + 2 * S * d);
    }
  }
  return f;
}

// ---------------------------------------------------------------------------------------------
// GEMM

struct GemmResult {
  std::string label;
  int m, n, k;
  double gflops;
  int64_t iterations;
  double seconds;
};

GemmResult TimeGemmNT(const std::string& label, int m, int n, int k, double min_seconds) {
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k),
      c(static_cast<size_t>(m) * n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  kernels::cpu::GemmNT(m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);  // warm-up
  int64_t iters = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    kernels::cpu::GemmNT(m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    ++iters;
    elapsed = Seconds(t0, Clock::now());
  } while (elapsed < min_seconds);
  return {label, m, n, k, 2.0 * m * n * k * iters / elapsed / 1e9, iters, elapsed};
}

// The same with the weights packed once (kernels::cpu::GemmPacked, what decode steps run on
// CPUs with AVX-512); gflops 0 when this CPU has no packed kernel.
GemmResult TimeGemmPacked(const std::string& label, int m, int n, int k, double min_seconds) {
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k),
      c(static_cast<size_t>(m) * n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const kernels::cpu::PackedMatrix packed = kernels::cpu::PackedMatrix::Pack(n, k, b.data(), k);
  if (packed.empty()) return {label, m, n, k, 0.0, 0, 0.0};
  kernels::cpu::GemmPacked(m, a.data(), k, packed, nullptr, false, c.data(), n);  // warm-up
  int64_t iters = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    kernels::cpu::GemmPacked(m, a.data(), k, packed, nullptr, false, c.data(), n);
    ++iters;
    elapsed = Seconds(t0, Clock::now());
  } while (elapsed < min_seconds);
  return {label, m, n, k, 2.0 * m * n * k * iters / elapsed / 1e9, iters, elapsed};
}

// ---------------------------------------------------------------------------------------------

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

std::string IdLines(const std::vector<std::vector<int32_t>>& rows) {
  std::ostringstream os;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) os << (i ? " " : "") << r[i];
    os << "\n";
  }
  return os.str();
}

struct DecodeRun {
  double seconds = 0;
  int64_t target_tokens = 0;
  int bad_lengths = 0;
  std::vector<std::vector<int32_t>> outputs;  // best hypothesis ids, without </s>
  std::vector<float> scores;                  // its score (beam: normalized; greedy: sum)
};

// One line per sentence: "SCORE<TAB>id id id ..." (ids without </s>).
std::string ScoredLines(const DecodeRun& run) {
  std::ostringstream os;
  for (size_t s = 0; s < run.outputs.size(); ++s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6f", run.scores[s]);
    os << buf << "\t";
    for (size_t i = 0; i < run.outputs[s].size(); ++i) os << (i ? " " : "") << run.outputs[s][i];
    os << "\n";
  }
  return os.str();
}

// BeamDecoder, or FlatBeamDecoder with TNMT_GPU_BEAM=1 (engine/runtime/translator.h: the
// beam bookkeeping on the GPU beside the CUDA engine's scores, on the host elsewhere).
struct BenchDecoder {
  std::optional<BeamDecoder> beam;
  std::optional<FlatBeamDecoder> flat;
};

BenchDecoder MakeBenchDecoder(const ModelConfig& c, std::unique_ptr<StepModel> step) {
  BenchDecoder d;
  if (!FlatBeamRequested()) {
    d.beam.emplace(BeamDecoder::Create(c, std::move(step)));
    return d;
  }
  std::unique_ptr<FlatBeamStepper> stepper = NewCudaBeamStepper(*step);
  if (stepper == nullptr) stepper = std::make_unique<HostFlatBeamStepper>();
  d.flat.emplace(c, std::move(step), std::move(stepper));
  return d;
}

absl::StatusOr<std::vector<DecodeResult>> Decode(BenchDecoder& d, const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& opt) {
  return d.flat ? Decode(*d.flat, sources, opt) : Decode(*d.beam, sources, opt);
}

absl::StatusOr<DecodeRun> DecodeAll(BenchDecoder& decoder,
                                    const std::vector<std::vector<int32_t>>& sources,
                                    const DecodeOptions& opt, int batch, int out_len) {
  DecodeRun run;
  const auto t0 = Clock::now();
  for (size_t start = 0; start < sources.size(); start += batch) {
    const size_t end = std::min(sources.size(), start + batch);
    std::vector<std::vector<int32_t>> chunk(sources.begin() + start, sources.begin() + end);
    auto results = Decode(decoder, chunk, opt);
    if (!results.ok()) return results.status();
    for (const DecodeResult& r : *results) {
      if (r.hypotheses.empty()) return absl::InternalError("a sentence has no hypothesis");
      const auto& ids = r.hypotheses[0].ids;
      const int64_t len = static_cast<int64_t>(ids.size()) + 1;  // + </s>
      run.target_tokens += len;
      if (len != out_len) ++run.bad_lengths;
      run.outputs.push_back(ids);
      run.scores.push_back(r.hypotheses[0].score);
    }
  }
  run.seconds = Seconds(t0, Clock::now());
  return run;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  kernels::cpu::SetBlasThreads(f.threads);
  std::map<std::string, std::string> result;  // key=value lines for --result
  auto put = [&](const std::string& k, const std::string& v) { result[k] = v; };

  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  std::printf("translate_bench: threads=%d (BLAS threads %d), host %s, %ld online CPUs\n",
              f.threads, kernels::cpu::BlasThreads(), host, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("OpenBLAS core: %s\n", kernels::cpu::BlasCoreName().c_str());
  std::printf("cpu kernels: %s\n", CpuKernels().c_str());
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) {
    std::printf("load average at start: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    put("load_start", absl::StrCat(load[0]));
  }
  {
    // OpenBLAS 0.3.21's DYNAMIC_ARCH does not know every recent Xeon and then falls back to
    // an SSE3 ("Prescott") kernel; kernels/cpu/gemm.cc overrides that, this reports it.
    const std::string core = kernels::cpu::BlasCoreName();
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const bool avx512_core = core.find("Skylake") != std::string::npos ||
                             core.find("Cooperlake") != std::string::npos ||
                             core.find("SapphireRapids") != std::string::npos;
    if (avx512 && !avx512_core) {
      std::printf("note: this CPU has AVX-512 but OpenBLAS runs its %s kernels (OPENBLAS_CORETYPE="
                  "SkylakeX or Cooperlake overrides the detection)\n", core.c_str());
    }
    put("cpu_avx512", avx512 ? "1" : "0");
  }
  put("threads", absl::StrCat(f.threads));
  put("out_len", absl::StrCat(f.out_len));
  put("workload", absl::StrCat(f.sentences, " sources x ", f.src_len, " tokens, beam ", f.beam,
                               ", ", f.batch, " sentences per batch, outputs ", f.out_len,
                               " tokens"));
  put("blas_core", kernels::cpu::BlasCoreName());
  put("cpu_kernels", CpuKernels());

  if (f.translate) {
    const ModelConfig config = BaseConfig(f.vocab);
    absl::StatusOr<Placement> placement = Placement::Parse(f.device, f.dtype);
    if (!placement.ok()) return std::fprintf(stderr, "%s\n", placement.status().ToString().c_str()), 1;
    const bool gpu = placement->device == Device::kCuda;
    const auto tb = Clock::now();
    RandomModel gen(f.seed);
    auto map = gen.Build(config);
    if (!map.ok()) return std::fprintf(stderr, "%s\n", map.status().ToString().c_str()), 1;
    auto built = ModelWeights::Build(config, *std::move(map), "random");
    if (!built.ok()) return std::fprintf(stderr, "%s\n", built.status().ToString().c_str()), 1;
    ModelWeights packed_weights = *std::move(built);
    const auto sources = gen.Sources(config, f.sentences, f.src_len);
    const int64_t params = ParamCount(packed_weights);
    // As LoadModelDirectory does: the decode-step weights packed once for GemmPacked.
    const auto tp = Clock::now();
    if (f.packed && !gpu) packed_weights.PackForInference();
    const double pack_s = Seconds(tp, Clock::now());
    const ModelWeights weights = std::move(packed_weights);
    std::printf("model: %d+%d layers, d_model %d, d_ff %d, %d heads, vocab %d, %.1fM parameters "
                "(%.0f MiB fp32), built in %.1f s\n",
                config.encoder_layers, config.decoder_layers, config.d_model, config.d_ff,
                config.num_heads, config.vocab_size, params / 1e6, params * 4.0 / 1048576.0,
                Seconds(tb, Clock::now()));
    put("params", absl::StrCat(params));
    std::printf("packed weights for the decode steps: %.0f MiB in %.2f s%s\n",
                MiB(weights.PackedBytes() / 1024), pack_s,
                gpu        ? " (not used on the GPU)"
                : f.packed ? (weights.PackedBytes() > 0 ? "" : " (no packed kernel on this CPU)")
                           : " (--packed=false)");
    put("packed_mib", absl::StrCat(MiB(weights.PackedBytes() / 1024)));

    if (!f.export_dir.empty()) {
      const std::string& dir = f.export_dir;
      if (auto s = WriteText(dir + "/config.json", config.ToJson()); !s.ok()) {
        return std::fprintf(stderr, "%s (does --export %s exist?)\n", s.ToString().c_str(), dir.c_str()), 1;
      }
      if (auto s = WriteSafetensors(dir + "/model.safetensors", weights.ToTensors(config)); !s.ok()) {
        return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
      }
      if (auto s = WriteText(dir + "/sources.txt", IdLines(sources)); !s.ok()) {
        return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
      }
      std::printf("exported config.json, model.safetensors, sources.txt to %s\n", dir.c_str());
      if (f.export_only) return 0;
    }

    DecodeOptions opt;
    opt.beam_size = f.beam;
    opt.length_penalty = 0.6f;
    opt.min_length = f.out_len;
    opt.max_length = f.out_len;
    opt.n_best = 1;
    if (auto s = opt.Validate(); !s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;

    // The engine on its device: CPU (weights above) or the CUDA backend (weights copied once).
    std::unique_ptr<DecodeBackend> backend;
    if (!gpu) {
      backend = MakeCpuBackend(config, weights, placement->ToString());
    } else {
      const auto tu = Clock::now();
      CudaPlacement cp;
      cp.device = placement->index;
      cp.dtype = placement->dtype;
      cp.cuda_graphs = f.cuda_graphs;
      auto made = MakeCudaBackend(config, weights, cp);
      if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().ToString().c_str()), 1;
      backend = *std::move(made);
      std::printf("device: %s, weights %.0f MiB on the device, uploaded in %.2f s\n",
                  backend->Describe().c_str(), backend->weight_bytes() / 1048576.0,
                  Seconds(tu, Clock::now()));
    }
    put("device", placement->ToString() + (gpu && f.cuda_graphs ? " graphs" : "") + (FlatBeamRequested() ? " gpu-beam" : ""));
    absl::StatusOr<std::unique_ptr<StepModel>> step = backend->NewStepModel();
    if (!step.ok()) return std::fprintf(stderr, "%s\n", step.status().ToString().c_str()), 1;
    std::optional<BenchDecoder> decoder(MakeBenchDecoder(config, *std::move(step)));
    const int64_t rss_model_kib = ProcStatusKiB("VmRSS");
    const int64_t maxrss_build_kib = MaxRssKiB();
    // Warm-up (untimed): one short batch, so first-touch of the workspace and BLAS thread
    // start-up are not in the measurement (the same is done for the peer).
    {
      DecodeOptions warm = opt;
      warm.min_length = warm.max_length = 5;
      std::vector<std::vector<int32_t>> chunk(sources.begin(),
                                              sources.begin() + std::min<size_t>(f.batch, sources.size()));
      auto r = Decode(*decoder, chunk, warm);
      if (!r.ok()) return std::fprintf(stderr, "warm-up: %s\n", r.status().ToString().c_str()), 1;
    }
    const bool hwm_reset = ResetPeakRss();

    const double cpu0 = CpuSeconds();
    auto run = DecodeAll(*decoder, sources, opt, f.batch, f.out_len);
    const double cpu_s = CpuSeconds() - cpu0;
    if (!run.ok()) return std::fprintf(stderr, "decode: %s\n", run.status().ToString().c_str()), 1;
    const int64_t decode_hwm_kib = ProcStatusKiB("VmHWM");
    const int64_t maxrss_kib = std::max(MaxRssKiB(), maxrss_build_kib);

    const int64_t expected = static_cast<int64_t>(f.sentences) * f.out_len;
    const double tps = run->target_tokens / run->seconds;
    const Flops fl = WorkloadFlops(config, f.sentences, f.batch, f.beam, f.src_len, f.out_len);
    std::printf("\ndecode: %d sentences x %d source tokens, beam %d, %d sentences per call, "
                "output length fixed at %d (%d tokens + </s>)\n",
                f.sentences, f.src_len, f.beam, f.batch, f.out_len, f.out_len - 1);
    std::printf("  target tokens      %lld (sum of best-hypothesis ids + 1 for </s> each; "
                "expected %lld; sentences with another length: %d)\n",
                static_cast<long long>(run->target_tokens), static_cast<long long>(expected),
                run->bad_lengths);
    // CPU seconds per wall second: ~threads when the process had its cores (OpenBLAS
    // threads spin while waiting); lower means it was waiting for a CPU (machine busy).
    std::printf("  wall time          %.2f s (process CPU time %.2f s = %.2f cores busy)\n",
                run->seconds, cpu_s, cpu_s / run->seconds);
    std::printf("  throughput         %.1f target tokens/s (%.2f sentences/s)\n", tps,
                f.sentences / run->seconds);
    std::printf("  model FLOPs        %.1f GFLOP (encoder %.1f, decoder linears %.1f, cross K/V "
                "%.1f, logits %.1f, attention %.1f) -> %.1f GFLOP/s effective\n",
                fl.total() / 1e9, fl.encoder_linear / 1e9, fl.decoder_linear / 1e9,
                fl.cross_kv / 1e9, fl.logits / 1e9, fl.attention / 1e9,
                fl.total() / run->seconds / 1e9);
    std::printf("  RSS                model built %.0f MiB; decode peak %.0f MiB%s; process peak "
                "(ru_maxrss) %.0f MiB\n",
                MiB(rss_model_kib), MiB(decode_hwm_kib),
                hwm_reset ? "" : " (VmHWM reset unsupported: whole-process peak)", MiB(maxrss_kib));
    put("tokens", absl::StrCat(run->target_tokens));
    put("expected_tokens", absl::StrCat(expected));
    put("bad_lengths", absl::StrCat(run->bad_lengths));
    put("seconds", absl::StrCat(run->seconds));
    put("cpu_per_wall", absl::StrCat(cpu_s / run->seconds));
    if (getloadavg(load, 3) == 3) put("load_end", absl::StrCat(load[0]));
    put("tokens_per_s", absl::StrCat(tps));
    put("model_gflop", absl::StrCat(fl.total() / 1e9));
    put("effective_gflops", absl::StrCat(fl.total() / run->seconds / 1e9));
    put("rss_model_mib", absl::StrCat(MiB(rss_model_kib)));
    put("decode_peak_mib", absl::StrCat(MiB(decode_hwm_kib)));
    put("maxrss_mib", absl::StrCat(MiB(maxrss_kib)));

    if (!f.outputs_dir.empty()) {
      if (auto s = WriteText(f.outputs_dir + "/tnmt_beam.txt", ScoredLines(*run)); !s.ok()) {
        return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
      }
      if (f.check > 0) {
        DecodeOptions greedy = opt;
        greedy.beam_size = 1;
        std::vector<std::vector<int32_t>> chunk(
            sources.begin(), sources.begin() + std::min<size_t>(f.check, sources.size()));
        auto g = DecodeAll(*decoder, chunk, greedy, f.batch, f.out_len);
        if (!g.ok()) return std::fprintf(stderr, "greedy: %s\n", g.status().ToString().c_str()), 1;
        if (auto s = WriteText(f.outputs_dir + "/tnmt_greedy.txt", ScoredLines(*g)); !s.ok()) {
          return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
        }
      }
      std::printf("  wrote tnmt_beam.txt%s to %s\n", f.check > 0 ? ", tnmt_greedy.txt" : "",
                  f.outputs_dir.c_str());
    }
    if (run->bad_lengths > 0) {
      std::fprintf(stderr, "translate_bench: %d outputs are not %d tokens long; the token count "
                   "is not the workload's\n", run->bad_lengths, f.out_len);
      return 1;
    }
  }

  if (f.gemm) {
    const int rows = f.batch * f.beam;
    const int enc_rows = f.batch * f.src_len;
    struct Shape { std::string label; int m, n, k; };
    const std::vector<Shape> shapes = {
        {"dec self q/k/v", rows, 1536, 512}, {"dec out_proj, cross q", rows, 512, 512},
        {"dec fc1", rows, 2048, 512},        {"dec fc2", rows, 512, 2048},
        {"dec logits", rows, 8000, 512},     {"enc q/k/v", enc_rows, 1536, 512},
        {"enc fc1", enc_rows, 2048, 512},    {"enc fc2", enc_rows, 512, 2048},
        {"BLAS peak 2048^3", 2048, 2048, 2048},
    };
    std::vector<GemmResult> res, packed;
    for (const Shape& s : shapes) res.push_back(TimeGemmNT(s.label, s.m, s.n, s.k, f.gemm_seconds));
    for (size_t i = 0; i + 1 < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      packed.push_back(TimeGemmPacked(s.label, s.m, s.n, s.k, f.gemm_seconds));
    }
    const double peak = res.back().gflops;
    std::printf("\nGEMM (C[m,n] = A[m,k] B[n,k]^T, fp32, %d thread%s, >= %.1f s each): cblas_sgemm "
                "via GemmNT, and GemmPacked (B packed once, as the decoder's weights are)\n",
                f.threads, f.threads == 1 ? "" : "s", f.gemm_seconds);
    std::printf("  %-24s %6s %6s %6s %10s %8s %10s %8s\n", "shape", "m", "n", "k", "GFLOP/s",
                "of peak", "packed", "of peak");
    for (size_t i = 0; i < res.size(); ++i) {
      const GemmResult& r = res[i];
      std::printf("  %-24s %6d %6d %6d %10.1f %7.0f%%", r.label.c_str(), r.m, r.n, r.k, r.gflops,
                  100.0 * r.gflops / peak);
      if (i < packed.size() && packed[i].gflops > 0) {
        std::printf(" %10.1f %7.0f%%", packed[i].gflops, 100.0 * packed[i].gflops / peak);
      }
      std::printf("\n");
    }
    // Decode-weighted GEMM rate: the decoder-step shapes weighted by their FLOPs per step
    // (6 layers x (qkv + out + cross q + cross out + fc1 + fc2) + logits).
    const ModelConfig c = BaseConfig(8000);
    const double L = c.decoder_layers;
    const double w_flops[] = {L * 1536, L * 3 * 512, L * 2048, L * 2048, 8000.0};  // per m*k/2 unit
    double flops = 0, secs = 0;
    for (int i = 0; i < 5; ++i) {
      flops += w_flops[i];
      secs += w_flops[i] / res[i].gflops;
    }
    const double dec_rate = flops / secs;
    std::printf("  decoder-step mix (m=%d, FLOP-weighted): %.1f GFLOP/s = %.0f%% of the 2048^3 "
                "peak\n", rows, dec_rate, 100.0 * dec_rate / peak);
    if (packed[0].gflops > 0) {
      double psecs = 0;
      for (int i = 0; i < 5; ++i) psecs += w_flops[i] / packed[i].gflops;
      std::printf("  decoder-step mix, packed: %.1f GFLOP/s = %.0f%% of the 2048^3 peak\n",
                  flops / psecs, 100.0 * flops / psecs / peak);
      put("gemm_packed_decode_mix_gflops", absl::StrCat(flops / psecs));
      for (const GemmResult& r : packed) {
        put(absl::StrCat("gemmpacked_", r.m, "x", r.n, "x", r.k), absl::StrCat(r.gflops));
      }
    }
    put("gemm_peak_gflops", absl::StrCat(peak));
    put("gemm_decode_mix_gflops", absl::StrCat(dec_rate));
    for (size_t i = 0; i < res.size(); ++i) {
      put(absl::StrCat("gemm_", res[i].m, "x", res[i].n, "x", res[i].k), absl::StrCat(res[i].gflops));
    }
  }

  if (!f.result_file.empty()) {
    std::ostringstream os;
    for (const auto& [k, v] : result) os << k << "=" << v << "\n";
    if (auto s = WriteText(f.result_file, os.str()); !s.ok()) {
      return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tnmt::bench

int main(int argc, char** argv) { return tnmt::bench::Main(argc, argv); }

// GPU benchmark (docs/gpu.md): the card's copy bandwidth and matmul peak as measured ceilings,
// cuBLASLt TFLOP/s for the Transformer-base GEMMs (decode m = 128 and 512, encoder m = 4096;
// float32, TF32, float16, bfloat16), and the decode kernels (fused KV-cache attention, beam
// top-k, label-smoothed loss) against the copy bandwidth, and the device timeline's own cost
// and accounting (kernels/cuda/gpu_timeline.h). Random data throughout (never
// zeros); inputs rotate over enough buffer sets to exceed the L2 cache for small shapes.
//
// Each GEMM is timed two ways: "eager" = back-to-back calls from the host (what the engine
// does today, launch overhead included) and "graph" = the same calls captured in a CUDA graph
// and replayed (device time only); TFLOP/s use the graph time. Medians of several runs.
//   gpu_bench [--quick]
// Ends with "RESULT name value unit" lines that tests/gpu/check.sh summarizes.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gpu_timeline.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/random.h"
#include "kernels/cuda/topk.h"

namespace tnmt::kernels::cuda {
namespace {

#define CHECK_OK(expr)                                                                      \
  do {                                                                                      \
    const absl::Status s_ = (expr);                                                         \
    if (!s_.ok()) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.ToString().c_str());       \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define CHECK_CUDA(expr) CHECK_OK(TNMT_CUDA_CHECK(expr))

struct Result {
  std::string name, unit;
  double value;
};
std::vector<Result> results;
bool quick = false;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class Events {
 public:
  Events() {
    CHECK_CUDA(cudaEventCreate(&start_));
    CHECK_CUDA(cudaEventCreate(&stop_));
  }
  ~Events() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Milliseconds of the work fn queues on stream.
  double Time(cudaStream_t stream, const std::function<void()>& fn) {
    CHECK_CUDA(cudaEventRecord(start_, stream));
    fn();
    CHECK_CUDA(cudaEventRecord(stop_, stream));
    CHECK_CUDA(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_, stop_;
};

// Per-call microseconds: median over `reps` batches of `batch` eager calls.
double EagerMicros(Context& ctx, const std::function<void(int)>& call, int batch, int reps) {
  Events ev;
  for (int i = 0; i < 3; ++i) call(i);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    t.push_back(ev.Time(ctx.stream(), [&] {
      for (int i = 0; i < batch; ++i) call(i);
    }) * 1000.0 / batch);
  }
  return Median(t);
}

// Per-call microseconds: `batch` calls captured in one graph, median over `reps` replays.
double GraphMicros(Context& ctx, const std::function<void(int)>& call, int batch, int reps) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < batch; ++i) call(i);
  CHECK_CUDA(cudaStreamEndCapture(ctx.stream(), &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  Events ev;
  CHECK_CUDA(cudaGraphLaunch(exec, ctx.stream()));  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    t.push_back(ev.Time(ctx.stream(), [&] { CHECK_CUDA(cudaGraphLaunch(exec, ctx.stream())); }) *
                1000.0 / batch);
  }
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return Median(t);
}

// Enough input sets that one pass over them exceeds twice the L2 cache.
int SetsFor(Context& ctx, int64_t bytes_per_set) {
  const int64_t l2 = std::max<int64_t>(ctx.props().l2CacheSize, 1 << 20);
  return static_cast<int>(std::clamp<int64_t>((2 * l2 + bytes_per_set - 1) / bytes_per_set, 1, 16));
}

void Row(const char* kind, const std::string& name, const std::string& type, double eager_us,
         double graph_us, double rate, const char* unit, double fraction) {
  std::printf("%-10s %-30s %-9s %10.1f %10.1f %10.1f %-7s %6.1f%%\n", kind, name.c_str(),
              type.c_str(), eager_us, graph_us, rate, unit, 100.0 * fraction);
  std::fflush(stdout);
}

double CopyBandwidth(Context& ctx) {
  const size_t bytes = size_t{1} << 30;
  auto a = ctx.allocator().Buffer(bytes), b = ctx.allocator().Buffer(bytes);
  CHECK_OK(a.status());
  CHECK_OK(b.status());
  CHECK_OK(FillUniform(ctx, a->get(), DType::kFloat32, bytes / 4, -1.0f, 1.0f, 1));
  const double us = EagerMicros(
      ctx, [&](int) { CHECK_CUDA(cudaMemcpyAsync(b->get(), a->get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream())); },
      1, quick ? 3 : 10);
  const double gbps = 2.0 * bytes / (us * 1e-6) / 1e9;  // bytes read + written
  std::printf("device-to-device copy of 1 GiB: %.1f us, %.0f GB/s (read + written)\n", us, gbps);
  results.push_back({"copy_bandwidth", "GB/s", gbps});
  return gbps;
}

struct GemmShape {
  std::string name;
  int m, n, k;
};

struct GemmType {
  std::string name;
  DType ab;
  bool tf32;
};

// Returns TFLOP/s (graph time).
double BenchGemm(Context& ctx, const GemmShape& s, const GemmType& t, double peak, bool graph) {
  const int64_t eb = DTypeBytes(t.ab);
  const int64_t a_elems = int64_t{s.m} * s.k, b_elems = int64_t{s.n} * s.k, c_elems = int64_t{s.m} * s.n;
  const int sets = SetsFor(ctx, (a_elems + b_elems + c_elems) * eb);
  std::vector<DeviceBuffer> bufs;
  for (int i = 0; i < sets; ++i) {
    for (int64_t e : {a_elems, b_elems, c_elems}) {
      auto b = ctx.allocator().Buffer(e * eb);
      CHECK_OK(b.status());
      CHECK_OK(FillUniform(ctx, b->get(), t.ab, e, -1.0f, 1.0f, 1000 + bufs.size()));
      bufs.push_back(std::move(*b));
    }
  }
  GemmOptions o;
  o.ab_type = o.c_type = t.ab;
  o.tf32 = t.tf32;
  auto call = [&](int i) {
    const int set = i % sets;
    CHECK_OK(Gemm(ctx, false, true, s.m, s.n, s.k, 1.0f, bufs[3 * set].get(), s.k,
                  bufs[3 * set + 1].get(), s.k, 0.0f, bufs[3 * set + 2].get(), s.n, o));
  };
  const double flops = 2.0 * s.m * s.n * s.k;
  const bool big = flops > 1e11;
  const int batch = big ? 3 : 40, reps = quick ? 3 : (big ? 5 : 9);
  const double eager = EagerMicros(ctx, call, batch, reps);
  const double dev = graph ? GraphMicros(ctx, call, batch, reps) : eager;
  const double tflops = flops / (dev * 1e-6) / 1e12;
  char shape[64];
  std::snprintf(shape, sizeof(shape), "%s %dx%dx%d", s.name.c_str(), s.m, s.n, s.k);
  Row("gemm", shape, t.name, eager, graph ? dev : NAN, tflops, "TFLOP/s", peak > 0 ? tflops / peak : NAN);
  return tflops;
}

void BenchGemms(Context& ctx) {
  const GemmType types[] = {{"float32", DType::kFloat32, false},
                            {"tf32", DType::kFloat32, true},
                            {"float16", DType::kFloat16, false},
                            {"bfloat16", DType::kBFloat16, false}};
  // The card's matmul peak per type: a large square GEMM.
  std::printf("\n%-10s %-30s %-9s %10s %10s %10s %-7s %7s\n", "kind", "shape (m x n x k, NT)", "type",
              "eager us", "graph us", "rate", "unit", "of peak");
  double peak[4];
  for (int i = 0; i < 4; ++i) {
    peak[i] = BenchGemm(ctx, {"square", 8192, 8192, 8192}, types[i], 0.0, false);
    results.push_back({"gemm_peak_8192_" + types[i].name, "TFLOP/s", peak[i]});
  }
  // Transformer-base (d 512, ffn 2048, vocabulary 32000); x [m, k] times W [n, k]^T.
  std::vector<GemmShape> shapes;
  for (int m : {128, 512}) {
    const std::string p = "decode m=" + std::to_string(m) + " ";
    shapes.push_back({p + "qkv", m, 1536, 512});
    shapes.push_back({p + "ffn1", m, 2048, 512});
    shapes.push_back({p + "ffn2", m, 512, 2048});
    shapes.push_back({p + "logits", m, 32000, 512});
  }
  shapes.push_back({"encoder m=4096 qkv", 4096, 1536, 512});
  shapes.push_back({"encoder m=4096 ffn1", 4096, 2048, 512});
  shapes.push_back({"encoder m=4096 ffn2", 4096, 512, 2048});
  for (const GemmShape& s : shapes) {
    for (int i = 0; i < 4; ++i) {
      const double tf = BenchGemm(ctx, s, types[i], peak[i], true);
      if ((s.name == "decode m=128 logits" || s.name == "encoder m=4096 ffn1" ||
           s.name == "decode m=128 ffn1") &&
          (i == 0 || i == 3)) {
        std::string key = s.name;
        for (char& ch : key) ch = ch == ' ' || ch == '=' ? '_' : ch;
        results.push_back({"gemm_" + key + "_" + types[i].name, "TFLOP/s", tf});
      }
    }
  }
}

// Attention over an engine-layout KV cache: slots of [K(d) V(d)], per-row slot tables.
void BenchAttention(Context& ctx, double copy_gbps, const std::string& name, int rows, int k_len,
                    int heads, int d_head, int sources, bool random_slots, const char* key) {
  const int d = heads * d_head;
  const int groups = sources > 0 ? sources : rows;
  const int64_t slots = int64_t{groups} * k_len;
  auto cache = ctx.allocator().Buffer(slots * 2 * d * sizeof(float));
  auto q = ctx.allocator().Buffer(int64_t{rows} * d * sizeof(float));
  auto out = ctx.allocator().Buffer(int64_t{rows} * d * sizeof(float));
  CHECK_OK(cache.status());
  CHECK_OK(q.status());
  CHECK_OK(out.status());
  CHECK_OK(FillUniform(ctx, cache->get(), DType::kFloat32, slots * 2 * d, -1.0f, 1.0f, 7));
  CHECK_OK(FillUniform(ctx, q->get(), DType::kFloat32, int64_t{rows} * d, -1.0f, 1.0f, 8));
  std::vector<int32_t> table(slots), valid(groups, k_len), kv_index(rows);
  std::iota(table.begin(), table.end(), 0);
  if (random_slots) std::shuffle(table.begin(), table.end(), std::mt19937(5));
  for (int r = 0; r < rows; ++r) kv_index[r] = sources > 0 ? r % sources : r;
  auto dtable = ctx.allocator().Buffer(table.size() * 4), dvalid = ctx.allocator().Buffer(valid.size() * 4),
       dindex = ctx.allocator().Buffer(kv_index.size() * 4);
  CHECK_CUDA(cudaMemcpy(dtable->get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dvalid->get(), valid.data(), valid.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dindex->get(), kv_index.data(), kv_index.size() * 4, cudaMemcpyHostToDevice));
  AttentionArgs a;
  a.batch = rows;
  a.q_len = 1;
  a.k_len = k_len;
  a.num_heads = heads;
  a.d_head = d_head;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  a.kv_index = dindex->as<int32_t>();
  a.k_valid = dvalid->as<int32_t>();
  a.k_groups = dtable->as<int32_t>();
  a.k_groups_stride = k_len;
  const float* c = cache->as<float>();
  auto call = [&](int) {
    CHECK_OK(
        MultiHeadAttention(ctx, out->as<float>(), d, q->as<float>(), d, c, c + d, 0, 2 * d, a));
  };
  const double eager = EagerMicros(ctx, call, 20, quick ? 3 : 9);
  const double graph = GraphMicros(ctx, call, 20, quick ? 3 : 9);
  // Bytes each call must move: every row reads its keys and values once, plus q and out.
  const double bytes = double(rows) * k_len * 2 * d * 4 + 2.0 * rows * d * 4 + double(rows) * k_len * 4;
  const double gbps = bytes / (graph * 1e-6) / 1e9;
  Row("attention", name, "float32", eager, graph, gbps, "GB/s", gbps / copy_gbps);
  if (key != nullptr) results.push_back({key, "GB/s", gbps});
}

void BenchOthers(Context& ctx, double copy_gbps) {
  // Beam top-k over the logits of one decode step.
  for (auto [rows, k] : {std::pair<int, int>{128, 8}, {512, 8}, {128, 64}}) {
    const int vocab = 32000;
    auto x = ctx.allocator().Buffer(int64_t{rows} * vocab * 4);
    auto vals = ctx.allocator().Buffer(int64_t{rows} * k * 4), ids = ctx.allocator().Buffer(int64_t{rows} * k * 4);
    CHECK_OK(FillUniform(ctx, x->get(), DType::kFloat32, int64_t{rows} * vocab, -10.0f, 10.0f, 9));
    auto call = [&](int) {
      CHECK_OK(TopK(ctx, vals->as<float>(), ids->as<int32_t>(), x->as<float>(), rows, vocab, k, 1));
    };
    const double eager = EagerMicros(ctx, call, 20, quick ? 3 : 9);
    const double graph = GraphMicros(ctx, call, 20, quick ? 3 : 9);
    const double gbps = double(rows) * vocab * 4 / (graph * 1e-6) / 1e9;
    Row("topk", "rows=" + std::to_string(rows) + " vocab=32000 k=" + std::to_string(k), "float32", eager,
        graph, gbps, "GB/s", gbps / copy_gbps);
    if (rows == 128 && k == 8) results.push_back({"topk_128x32000_k8", "us", graph});
  }
  // Label-smoothed loss + gradient over a training batch's logits (4096 tokens).
  {
    const int rows = 4096, vocab = 32000;
    auto x = ctx.allocator().Buffer(int64_t{rows} * vocab * 4);
    auto sums = ctx.allocator().Buffer(3 * sizeof(double));
    std::vector<int32_t> t(rows);
    for (int i = 0; i < rows; ++i) t[i] = (i * 7919) % vocab;
    auto dt = ctx.allocator().Buffer(rows * 4);
    CHECK_CUDA(cudaMemcpy(dt->get(), t.data(), rows * 4, cudaMemcpyHostToDevice));
    CHECK_OK(FillUniform(ctx, x->get(), DType::kFloat32, int64_t{rows} * vocab, -10.0f, 10.0f, 9));
    auto call = [&](int) {
      CHECK_OK(LabelSmoothedCrossEntropy(ctx, x->as<float>(), dt->as<int32_t>(), rows, vocab, 0.1f, 1,
                                         sums->as<double>()));
    };
    // In place: later calls see gradients, not logits; the work per call is the same.
    const double eager = EagerMicros(ctx, call, 5, quick ? 3 : 7);
    const double gbps = 3.0 * rows * vocab * 4 / (eager * 1e-6) / 1e9;  // read twice, write once
    Row("loss", "label-smoothed CE 4096x32000", "float32", eager, NAN, gbps, "GB/s", gbps / copy_gbps);
  }
}

// The timeline on this card: the host cost of one timed call (the same eager memsets with
// timing off and on), and its accounting against two events around the whole run (device
// work + gaps = span), with the run's table.
void BenchTimeline(Context& ctx) {
  const size_t bytes = size_t{4} << 20;
  const int calls = quick ? 500 : 2000;
  auto buf = ctx.allocator().Buffer(bytes);
  CHECK_OK(buf.status());
  GpuTimeline& t = ctx.timeline();
  const bool was_on = t.enabled();
  Events outer;
  auto run = [&](bool on) {
    t.set_enabled(on);
    CHECK_OK(ctx.Synchronize());
    CHECK_OK(t.Take().status());
    const auto start = std::chrono::steady_clock::now();
    double device_ms = outer.Time(ctx.stream(), [&] {
      for (int i = 0; i < calls; ++i) {
        CHECK_OK(Timed(ctx, TimeCategory::kOther, [&] {
          return TNMT_CUDA_CHECK(cudaMemsetAsync(buf->get(), i & 0xff, bytes, ctx.stream()));
        }));
      }
    });
    const double host_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
    return std::make_pair(host_us, device_ms);
  };
  run(true);  // warm-up: the event pool grows here
  const auto [off_us, off_ms] = run(false);
  const auto [on_us, on_ms] = run(true);
  auto a = t.Take();
  CHECK_OK(a.status());
  std::printf("\ntimeline: %d timed 4 MiB memsets: host %.2f us/call with timing on, %.2f off (+%.2f); device %.3f ms "
              "on, %.3f off; accounted work %.3f + gaps %.3f = span %.3f ms against %.3f ms between two outer events\n",
              calls, on_us, off_us, on_us - off_us, on_ms, off_ms, a->WorkMs(), a->gap_ms, a->SpanMs(), on_ms);
  TimeWindow w;
  w.steps = 1;
  w.wall_ms = on_ms;
  w.step = "run";
  std::printf("%s", FormatTimeTable(*a, w).c_str());
  results.push_back({"timeline_host_us_per_call", "us", on_us - off_us});
  results.push_back({"timeline_span_over_outer", "%", on_ms > 0 ? 100.0 * a->SpanMs() / on_ms : NAN});
  t.set_enabled(was_on);
}

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) quick = quick || std::strcmp(argv[i], "--quick") == 0;
  auto ctx_or = Context::Create(0);
  if (!ctx_or.ok()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", ctx_or.status().ToString().c_str());
    return 0;
  }
  Context& ctx = **ctx_or;
  const cudaDeviceProp& p = ctx.props();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("gpu_bench on %s: %d SMs, %.1f GiB, L2 %d MiB, compute capability %d.%d, driver %d, runtime %d\n",
              p.name, p.multiProcessorCount, p.totalGlobalMem / double(1 << 30), p.l2CacheSize >> 20,
              p.major, p.minor, driver, runtime);
  const double copy = CopyBandwidth(ctx);
  BenchGemms(ctx);
  std::printf("\n%-10s %-30s %-9s %10s %10s %10s %-7s %7s\n", "kind", "case", "type", "eager us",
              "graph us", "rate", "unit", "of copy");
  // Long caches (the bandwidth case): 64 sentences x beam 4, 1024 cached positions.
  BenchAttention(ctx, copy, "self 256 rows x 1024, random slots", 256, 1024, 8, 64, 0, true,
                 "attention_256x1024_random_slots");
  BenchAttention(ctx, copy, "self 256 rows x 1024, contiguous", 256, 1024, 8, 64, 0, false, nullptr);
  BenchAttention(ctx, copy, "self 1024 rows x 512, random slots", 1024, 512, 8, 64, 0, true, nullptr);
  // Transformer-base decode steps as the engine runs them (launch-bound).
  BenchAttention(ctx, copy, "self 128 rows x 32 (beam 4)", 128, 32, 8, 64, 0, true, "attention_decode_128x32");
  BenchAttention(ctx, copy, "cross 128 rows, 32 src x 64", 128, 64, 8, 64, 32, true, nullptr);
  BenchOthers(ctx, copy);
  BenchTimeline(ctx);
  CHECK_OK(ctx.Synchronize());
  const auto stats = ctx.allocator().stats();
  std::printf("\nallocator: %lld cudaMalloc calls, %lld reuses, peak %.2f GiB\n",
              static_cast<long long>(stats.device_allocs), static_cast<long long>(stats.reuses),
              stats.peak_bytes / double(1 << 30));
  for (const Result& r : results) std::printf("RESULT %s %.1f %s\n", r.name.c_str(), r.value, r.unit.c_str());
  return 0;
}

}  // namespace
}  // namespace tnmt::kernels::cuda

int main(int argc, char** argv) { return tnmt::kernels::cuda::Main(argc, argv); }

// TimeAccount and its table; see time_account.h.
#include "kernels/time_account.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace tnmt::kernels {

const char* TimeCategoryName(TimeCategory c) {
  switch (c) {
    case TimeCategory::kGemm: return "gemm";
    case TimeCategory::kConvert: return "convert";
    case TimeCategory::kAttentionForward: return "attention_fwd";
    case TimeCategory::kAttentionBackward: return "attention_bwd";
    case TimeCategory::kLayerNormForward: return "layer_norm_fwd";
    case TimeCategory::kLayerNormBackward: return "layer_norm_bwd";
    case TimeCategory::kBiasGrad: return "bias_grad";
    case TimeCategory::kDropoutResidual: return "dropout_residual";
    case TimeCategory::kEmbeddingForward: return "embedding_fwd";
    case TimeCategory::kEmbeddingBackward: return "embedding_bwd";
    case TimeCategory::kLoss: return "loss";
    case TimeCategory::kOptimizer: return "optimizer";
    case TimeCategory::kAllReduce: return "all_reduce";
    case TimeCategory::kTopK: return "topk";
    case TimeCategory::kCopy: return "copy";
    case TimeCategory::kGraph: return "cuda_graph";
    case TimeCategory::kOther: return "other";
  }
  return "other";
}

void TimeAccount::AddHost(std::string_view name, double ms) {
  for (HostPhase& p : host) {
    if (p.name == name) {
      p.ms += ms;
      return;
    }
  }
  host.push_back({std::string(name), ms});
}

void TimeAccount::Merge(const TimeAccount& o) {
  for (int i = 0; i < kNumTimeCategories; ++i) {
    work[i].ms += o.work[i].ms;
    work[i].calls += o.work[i].calls;
  }
  gap_ms += o.gap_ms;
  between_ms += o.between_ms;
  betweens += o.betweens;
  for (const HostPhase& p : o.host) AddHost(p.name, p.ms);
  device_allocs += o.device_allocs;
  gemm_plans_built += o.gemm_plans_built;
  flushes += o.flushes;
  timing_host_ms += o.timing_host_ms;
}

void TimeAccount::Clear() {
  work = {};
  gap_ms = between_ms = 0;
  betweens = 0;
  for (HostPhase& p : host) p.ms = 0;
  device_allocs = gemm_plans_built = flushes = 0;
  timing_host_ms = 0;
}

double TimeAccount::WorkMs() const {
  double s = 0;
  for (const CategoryTime& t : work) s += t.ms;
  return s;
}

int64_t TimeAccount::Calls() const {
  int64_t n = 0;
  for (const CategoryTime& t : work) n += t.calls;
  return n;
}

namespace {

void Append(std::string* out, const char* format, ...) __attribute__((format(printf, 2, 3)));
void Append(std::string* out, const char* format, ...) {
  char line[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  *out += line;
}

}  // namespace

std::string FormatTimeTable(const TimeAccount& a, const TimeWindow& w) {
  const double steps = static_cast<double>(std::max<int64_t>(w.steps, 1));
  const double wall = w.wall_ms / steps;
  auto pct = [&](double ms) { return w.wall_ms > 0 ? 100.0 * ms / w.wall_ms : 0.0; };
  std::string out;
  Append(&out, "where every ms went, per %s: %lld %ss, %.3f ms wall each (device times from CUDA events)\n",
         w.step.c_str(), static_cast<long long>(w.steps), w.step.c_str(), wall);
  Append(&out, "  %-36s %10s %7s %10s %9s\n", "", "ms/step", "% wall", "calls/step", "us/call");
  // Categories by time, largest first.
  std::array<int, kNumTimeCategories> order;
  for (int i = 0; i < kNumTimeCategories; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a.work[x].ms > a.work[y].ms; });
  for (int i : order) {
    const CategoryTime& t = a.work[i];
    if (t.calls == 0) continue;
    Append(&out, "  %-36s %10.3f %6.1f%% %10.1f %9.1f\n", TimeCategoryName(static_cast<TimeCategory>(i)),
           t.ms / steps, pct(t.ms), t.calls / steps, 1000.0 * t.ms / t.calls);
  }
  const double work = a.WorkMs(), span = a.SpanMs();
  Append(&out, "  %-36s %10.3f %6.1f%% %10.1f\n", "= device work", work / steps, pct(work), a.Calls() / steps);
  Append(&out, "  %-36s %10.3f %6.1f%%\n", "+ gaps inside steps (idle, untimed)", a.gap_ms / steps, pct(a.gap_ms));
  char between[64];
  std::snprintf(between, sizeof(between), "+ gaps %s", w.between.c_str());
  Append(&out, "  %-36s %10.3f %6.1f%%   (%lld gaps)\n", between, a.between_ms / steps, pct(a.between_ms),
         static_cast<long long>(a.betweens));
  Append(&out, "  %-36s %10.3f %6.1f%%\n", "+ outside the device span (host)", (w.wall_ms - span) / steps,
         pct(w.wall_ms - span));
  Append(&out, "  %-36s %10.3f %6.1f%%\n", "= wall", wall, w.wall_ms > 0 ? 100.0 : 0.0);
  if (!a.host.empty()) {
    out += "  host, ms/step:";
    for (const HostPhase& p : a.host) Append(&out, " %s %.3f;", p.name.c_str(), p.ms / steps);
    out.back() = '\n';
  }
  Append(&out, "  counters: %lld cudaMalloc calls, %lld GEMM plans built, %lld timing flushes; recording the "
         "events took %.3f ms/step of host time\n",
         static_cast<long long>(a.device_allocs), static_cast<long long>(a.gemm_plans_built),
         static_cast<long long>(a.flushes), a.timing_host_ms / steps);
  return out;
}

}  // namespace tnmt::kernels

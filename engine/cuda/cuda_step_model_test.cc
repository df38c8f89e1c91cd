// CudaStepModel against CpuStepModel on the golden tiny models (post-norm/ReLU/sinusoidal/tied
// and pre-norm/GELU/learned/untied), in float32, float16 and bfloat16: the same calls on both
// (sources joining a running decode, beam-like reorders, a source leaving and its id reused)
// must give the same source ids and the same step scores: log-sum-exp, eos logit and the top
// k (values within the dtype's tolerance; ids equal except between near-equal values), and the
// gathered logits and whole distributions of forced decoding and ensembles, and alignments.
// Skips without a CUDA device.
#include "engine/cuda/cuda_step_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/cuda/cuda_backend.h"
#include "engine/cpu/cpu_step_model.h"
#include "engine/runtime/loaded_model.h"
#include "kernels/cuda/test_util.h"

namespace tnmt {
namespace {

struct Case {
  const char* model;
  DType dtype;
  double tolerance;  // max |gpu - cpu| / (1 + |cpu|) over every score
  bool graphs = false;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.model) + "_" + DTypeName(info.param.dtype) +
         (info.param.graphs ? "_graphs" : "");
}

class CudaStepModelTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string reason = kernels::cuda::testing::NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
    auto m = LoadModelDirectory(std::string("tests/golden/data/") + GetParam().model);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    auto backend =
        MakeCudaBackend(c(), model_->weights, {0, GetParam().dtype, GetParam().graphs});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    auto cpu = CpuStepModel::Create(c(), model_->weights);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    auto gpu = backend_->NewStepModel();
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }
  const ModelConfig& c() const { return model_->config; }

  // Random sources (ending in eos), padded with pad_id; the same on both models.
  std::vector<int32_t> AddSources(const std::vector<int>& lengths) {
    const int src_max = *std::max_element(lengths.begin(), lengths.end());
    std::vector<int32_t> ids(lengths.size() * src_max, c().pad_id);
    std::uniform_int_distribution<int> tok(4, c().vocab_size - 1);
    for (size_t b = 0; b < lengths.size(); ++b) {
      for (int j = 0; j + 1 < lengths[b]; ++j) ids[b * src_max + j] = tok(rng_);
      ids[b * src_max + lengths[b] - 1] = c().eos_id;
    }
    const int batch = static_cast<int>(lengths.size());
    auto a = cpu_->AddSources(ids.data(), lengths.data(), batch, src_max);
    auto b = gpu_->AddSources(ids.data(), lengths.data(), batch, src_max);
    EXPECT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!a.ok() || !b.ok()) return {};
    EXPECT_EQ(*a, *b) << "source ids differ";
    return *a;
  }

  void Reorder(const std::vector<int32_t>& parents, const std::vector<int32_t>& sources) {
    ASSERT_TRUE(cpu_->Reorder(parents, sources).ok());
    ASSERT_TRUE(gpu_->Reorder(parents, sources).ok());
    ASSERT_EQ(cpu_->rows(), gpu_->rows());
  }

  // One step on both; compares and returns the CPU's scores.
  StepScores Step(const std::vector<int32_t>& ids, int k, const std::string& where) {
    StepScores a, b;
    const absl::Status sa = cpu_->Step(ids.data(), k, &a);
    const absl::Status sb = gpu_->Step(ids.data(), k, &b);
    EXPECT_TRUE(sa.ok()) << sa;
    EXPECT_TRUE(sb.ok()) << where << ": " << sb;
    if (!sa.ok() || !sb.ok()) return a;
    Compare(a, b, where);
    return a;
  }

  void Compare(const StepScores& want, const StepScores& got, const std::string& where) {
    using kernels::cuda::testing::MaxScaledError;
    const double tol = GetParam().tolerance;
    ASSERT_EQ(got.rows, want.rows) << where;
    ASSERT_EQ(got.k, want.k) << where;
    EXPECT_LE(MaxScaledError(got.lse, want.lse), tol) << where << ": lse";
    EXPECT_LE(MaxScaledError(got.eos_logit, want.eos_logit), tol) << where << ": eos logit";
    EXPECT_LE(MaxScaledError(got.top_logit, want.top_logit), tol) << where << ": top values";
    worst_ = std::max({worst_, MaxScaledError(got.lse, want.lse),
                       MaxScaledError(got.top_logit, want.top_logit)});
    // Ids: equal, except where the CPU's value there has a near-equal neighbour (the order of
    // near-ties may flip within the tolerance), or at the last candidate, where the GPU may
    // pick the CPU's (k+1)-th token (not in the CPU's list) when it nearly ties the k-th.
    const int k = want.k;
    for (int r = 0; r < want.rows; ++r) {
      for (int i = 0; i < k; ++i) {
        const size_t at = static_cast<size_t>(r) * k + i;
        if (got.top_id[at] == want.top_id[at]) continue;
        const float v = want.top_logit[at];
        const double slack = 2 * tol * (1 + std::fabs(v));
        const bool near_prev = i > 0 && std::fabs(want.top_logit[at - 1] - v) <= slack;
        const bool near_next = i + 1 < k && std::fabs(want.top_logit[at + 1] - v) <= slack;
        const bool near_cut = i + 1 == k && std::fabs(got.top_logit[at] - v) <= slack;
        EXPECT_TRUE(near_prev || near_next || near_cut)
            << where << ": row " << r << " candidate " << i << ": id " << got.top_id[at]
            << " (value " << got.top_logit[at] << "), CPU id " << want.top_id[at] << " (value "
            << v << ")";
      }
    }
  }

  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<DecodeBackend> backend_;
  std::unique_ptr<StepModel> cpu_, gpu_;
  std::mt19937 rng_{29};
  double worst_ = 0.0;
};

TEST_P(CudaStepModelTest, StepScoresMatchCpuAcrossJoinsReordersAndReleases) {
  const int k = 9;  // beam 4: 2K + 1
  std::vector<int32_t> a = AddSources({5, 1, 12});
  ASSERT_EQ(a.size(), 3u);
  Reorder({}, a);
  std::vector<int32_t> ids(3, c().bos_id);
  std::vector<int32_t> row_source = a;
  std::vector<int32_t> b, cc;
  for (int t = 1; t <= 14; ++t) {
    const StepScores s = Step(ids, k, "step " + std::to_string(t));
    if (HasFailure()) return;
    // Beam-like: each source keeps up to 3 rows, children of random parents of the same
    // source, continuing with one of the parent's CPU top tokens.
    std::vector<int32_t> parents, next_ids, next_source;
    for (int r = 0; r < s.rows; ++r) {
      const int children = 1 + static_cast<int>(rng_() % 2);
      for (int ch = 0; ch < children; ++ch) {
        int count = 0;
        for (int32_t src : next_source) count += src == row_source[r];
        if (count >= 3) break;
        parents.push_back(r);
        next_ids.push_back(s.top_id[static_cast<size_t>(r) * k + rng_() % k]);
        next_source.push_back(row_source[r]);
      }
    }
    std::vector<int32_t> joining;
    if (t == 3) {  // two sentences join the running decode
      b = AddSources({7, 3});
      joining = b;
    }
    if (t == 6) {  // source a[1] leaves: drop its rows, then release it
      std::vector<int32_t> kept_parents, kept_ids, kept_source;
      for (size_t i = 0; i < parents.size(); ++i) {
        if (next_source[i] == a[1]) continue;
        kept_parents.push_back(parents[i]);
        kept_ids.push_back(next_ids[i]);
        kept_source.push_back(next_source[i]);
      }
      parents = kept_parents;
      next_ids = kept_ids;
      next_source = kept_source;
      Reorder(parents, {});
      ASSERT_TRUE(cpu_->ReleaseSource(a[1]).ok());
      ASSERT_TRUE(gpu_->ReleaseSource(a[1]).ok());
      parents.clear();
      for (size_t i = 0; i < next_ids.size(); ++i) parents.push_back(static_cast<int32_t>(i));
    }
    if (t == 8) {  // a longer sentence joins and reuses the released id
      cc = AddSources({20});
      ASSERT_EQ(cc.size(), 1u);
      EXPECT_EQ(cc[0], a[1]);
      joining = cc;
    }
    Reorder(parents, joining);
    for (int32_t src : joining) {
      next_ids.push_back(c().bos_id);
      next_source.push_back(src);
    }
    ids = next_ids;
    row_source = next_source;
  }
  std::printf("%s %s: worst scaled error %.2e (tolerance %.0e)\n", GetParam().model,
              DTypeName(GetParam().dtype).c_str(), worst_, GetParam().tolerance);
  // Every row gone, every source released: both models are empty again.
  Reorder({}, {});
  for (const std::vector<int32_t>* group : {&a, &b, &cc}) {
    for (int32_t src : *group) {
      if (src == a[1] && group == &a) continue;  // released above
      EXPECT_TRUE(cpu_->ReleaseSource(src).ok());
      EXPECT_TRUE(gpu_->ReleaseSource(src).ok());
    }
  }
  EXPECT_EQ(dynamic_cast<CudaStepModel&>(*gpu_).slots_in_use(), 0);
  StepScores empty;
  EXPECT_TRUE(gpu_->Step(nullptr, k, &empty).ok());
  EXPECT_EQ(empty.rows, 0);
}

// Forced decoding's gathered logits and an ensemble's whole distributions: scored on the host
// from the GPU's logits, as the CPU scores its own; alignments from the GPU's AttentionArgmax
// equal the CPU's; a layer out of range is refused, changing nothing.
TEST_P(CudaStepModelTest, GatheredLogitsAndDistributionsAsOnTheCpu) {
  using kernels::cuda::testing::MaxScaledError;
  std::vector<int32_t> a = AddSources({5, 9});
  ASSERT_EQ(a.size(), 2u);
  Reorder({}, a);
  std::vector<int32_t> ids(2, c().bos_id);
  for (int t = 0; t < 3; ++t) {
    StepScores want, got;
    for (StepScores* s : {&want, &got}) {
      s->gather_offsets = {0, 2, 3};
      s->gather_ids = {c().eos_id, 7, 11};
      s->want_logprobs = t != 1;
      s->want_lse = t != 2;
    }
    ASSERT_TRUE(cpu_->Step(ids.data(), 4, &want).ok());
    const absl::Status st = gpu_->Step(ids.data(), 4, &got);
    ASSERT_TRUE(st.ok()) << st;
    const std::string where = "forced step " + std::to_string(t);
    Compare(want, got, where);
    EXPECT_LE(MaxScaledError(got.gather_logit, want.gather_logit), GetParam().tolerance) << where;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << where;
    if (!want.logprobs.empty()) {
      EXPECT_LE(MaxScaledError(got.logprobs, want.logprobs), GetParam().tolerance) << where;
    }
    ids = {want.top_id[0], want.top_id[4]};
  }
  // Alignments of two layers (the step runs eagerly, also with graphs on), then a plain step.
  StepScores want, got;
  want.alignment_layers = got.alignment_layers = {0, static_cast<int32_t>(c().decoder_layers - 1)};
  ASSERT_TRUE(cpu_->Step(ids.data(), 4, &want).ok());
  const absl::Status st = gpu_->Step(ids.data(), 4, &got);
  ASSERT_TRUE(st.ok()) << st;
  Compare(want, got, "aligned step");
  EXPECT_EQ(got.aligned, want.aligned) << "alignments (layers 0 and last, 2 rows each)";
  StepScores bad;
  bad.alignment_layers = {c().decoder_layers};
  EXPECT_EQ(gpu_->Step(ids.data(), 4, &bad).code(), absl::StatusCode::kInvalidArgument);
  Step({want.top_id[0], want.top_id[4]}, 4, "after the aligned step");
}

TEST_P(CudaStepModelTest, ErrorsAsOnTheCpu) {
  const int V = c().vocab_size;
  StepScores s;
  EXPECT_EQ(gpu_->Step(nullptr, 0, &s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Step(nullptr, V, &s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->ReleaseSource(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Reorder({0}, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Reorder({}, {0}).code(), absl::StatusCode::kInvalidArgument);
  const int32_t bad_len = 0;
  const int32_t one = c().eos_id;
  EXPECT_EQ(gpu_->AddSources(&one, &bad_len, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int32_t bad_id = V, len = 1;
  EXPECT_EQ(gpu_->AddSources(&bad_id, &len, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto src = gpu_->AddSources(&one, &len, 1, 1);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_TRUE(gpu_->Reorder({}, *src).ok());
  EXPECT_EQ(gpu_->ReleaseSource((*src)[0]).code(), absl::StatusCode::kFailedPrecondition);
  const int32_t bad_step = -1;
  EXPECT_EQ(gpu_->Step(&bad_step, 1, &s).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Step(&one, V - 1 > 256 ? 257 : V, &s).code(), absl::StatusCode::kInvalidArgument);
  // The model is still usable after refused calls.
  EXPECT_TRUE(gpu_->Step(&one, 3, &s).ok());
  EXPECT_EQ(s.rows, 1);
}

// With graphs on and 16 rows (a whole bucket: no padding), replayed steps must give exactly
// the eager model's bits: same kernels, same shapes, same inputs.
TEST(CudaStepGraphTest, ReplaysGiveTheEagerStepsBits) {
  const std::string reason = kernels::cuda::testing::NoDeviceReason();
  if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
  auto m = LoadModelDirectory("tests/golden/data/tiny");
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config;
  auto eager_backend = MakeCudaBackend(c, (*m)->weights, {0, DType::kFloat32, false});
  auto graph_backend = MakeCudaBackend(c, (*m)->weights, {0, DType::kFloat32, true});
  ASSERT_TRUE(eager_backend.ok() && graph_backend.ok());
  auto eager = (*eager_backend)->NewStepModel();
  auto graph = (*graph_backend)->NewStepModel();
  ASSERT_TRUE(eager.ok() && graph.ok());
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> tok(4, c.vocab_size - 1);
  const std::vector<int32_t> lengths = {6, 9, 3, 9};
  std::vector<int32_t> ids(4 * 9, c.pad_id);
  for (int b = 0; b < 4; ++b) {
    for (int j = 0; j + 1 < lengths[b]; ++j) ids[b * 9 + j] = tok(rng);
    ids[b * 9 + lengths[b] - 1] = c.eos_id;
  }
  std::vector<int32_t> sources;
  for (auto* model : {&*eager, &*graph}) {
    auto s = (*model)->AddSources(ids.data(), lengths.data(), 4, 9);
    ASSERT_TRUE(s.ok()) << s.status();
    sources = *s;
  }
  std::vector<int32_t> joining;
  for (int32_t s : sources) joining.insert(joining.end(), 4, s);  // 16 rows, 4 per source
  for (auto* model : {&*eager, &*graph}) ASSERT_TRUE((*model)->Reorder({}, joining).ok());
  std::vector<int32_t> step_ids(16, c.bos_id);
  const int k = 9;
  for (int t = 0; t < 20; ++t) {
    StepScores a, b;
    ASSERT_TRUE((*eager)->Step(step_ids.data(), k, &a).ok());
    const absl::Status sb = (*graph)->Step(step_ids.data(), k, &b);
    ASSERT_TRUE(sb.ok()) << sb;
    EXPECT_EQ(a.lse, b.lse) << "step " << t;
    EXPECT_EQ(a.eos_logit, b.eos_logit) << "step " << t;
    EXPECT_EQ(a.top_logit, b.top_logit) << "step " << t;
    EXPECT_EQ(a.top_id, b.top_id) << "step " << t;
    // Each source's 4 rows continue from random parents of the same source.
    std::vector<int32_t> parents(16);
    for (int r = 0; r < 16; ++r) {
      parents[r] = (r / 4) * 4 + static_cast<int32_t>(rng() % 4);
      step_ids[r] = a.top_id[static_cast<size_t>(parents[r]) * k + rng() % k];
    }
    for (auto* model : {&*eager, &*graph}) ASSERT_TRUE((*model)->Reorder(parents, {}).ok());
  }
  const auto& stats = dynamic_cast<CudaStepModel&>(**graph).graph_stats();
  std::printf("graphs: %lld eager, %lld captured, %lld replayed, %lld failed captures\n",
              static_cast<long long>(stats.eager), static_cast<long long>(stats.captures),
              static_cast<long long>(stats.replays), static_cast<long long>(stats.failed));
  EXPECT_EQ(stats.failed, 0);
  EXPECT_GE(stats.captures, 2);
  EXPECT_GE(stats.replays, 4);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaStepModelTest,
    // Tolerances as measured on an H200 (bench/results/gpu-check-2026-12-04-H200-a.txt),
    // with about 2x room: worst scaled errors float32 1.8e-6, float16 1.1e-2 (tiny) and
    // 4.7e-4 (tiny_prenorm), bfloat16 9.5e-2 and 3.6e-3; bfloat16 keeps 8 significant bits
    // to float16's 11, so its bound is 8x float16's.
    ::testing::Values(Case{"tiny", DType::kFloat32, 1e-4}, Case{"tiny", DType::kFloat16, 2e-2},
                      Case{"tiny", DType::kBFloat16, 1.6e-1},
                      Case{"tiny_prenorm", DType::kFloat32, 1e-4},
                      Case{"tiny_prenorm", DType::kFloat16, 2e-2},
                      Case{"tiny_prenorm", DType::kBFloat16, 1.6e-1},
                      // Graphs: rows padded to a bucket, steps captured and replayed.
                      Case{"tiny", DType::kFloat32, 1e-4, true},
                      Case{"tiny_prenorm", DType::kFloat16, 2e-2, true}),
    Name);

}  // namespace
}  // namespace tnmt

// The compile-time contract of layer_ops.h: a type with every member passes, and dropping or
// mistyping any one member makes it fail (kIsLayerOps / kIsStepCache false), so the graph's
// static_asserts cannot pass a device that lacks an operation.
#include "engine/graph/layer_ops.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tnmt::graph {
namespace {

struct Lin {};
struct Norm {};
struct Layer {};
struct Tree {
  std::vector<Layer> encoder, decoder;
  Norm encoder_final_ln, decoder_final_ln;
};

// Every member of the contract; Drop selects one to leave out (0: none), Wrong one whose
// return type is wrong.
template <int Drop, int Wrong = 0>
struct FakeOps {
  using Weights = Tree;
  using LinearParams = Lin;
  using NormParams = Norm;
  const ModelConfig& config() const { return c; }
  const Tree& weights() const { return w; }
  template <int D = Drop, std::enable_if_t<D != 1, int> = 0>
  std::conditional_t<Wrong == 1, int, absl::Status> Linear(float*, const float*, int64_t,
                                                           const Lin&, bool) const {
    return {};
  }
  template <int D = Drop, std::enable_if_t<D != 2, int> = 0>
  absl::Status LayerNorm(float*, const float*, const float*, int64_t, const Norm&) const {
    return {};
  }
  template <int D = Drop, std::enable_if_t<D != 3, int> = 0>
  absl::Status Add(float*, const float*, int64_t) const {
    return {};
  }
  template <int D = Drop, std::enable_if_t<D != 4, int> = 0>
  absl::Status Embed(float*, const int32_t*, const int32_t*, int64_t, bool) const {
    return {};
  }
  template <int D = Drop, std::enable_if_t<D != 5, int> = 0>
  absl::Status Attention(float*, int64_t, const float*, int64_t, const float*, const float*,
                         int64_t, int64_t, const AttentionArgs&) const {
    return {};
  }
  template <int D = Drop, std::enable_if_t<D != 6, int> = 0>
  absl::Status ScatterRows(float*, int64_t, const int32_t*, const float*, int64_t,
                           const int32_t*, int64_t, int) const {
    return {};
  }
  // Wrong == 7: Logits takes the rows as a pointer.
  template <int D = Drop, std::enable_if_t<D != 7, int> = 0>
  absl::Status Logits(float*, const float*, std::conditional_t<Wrong == 7, int64_t*, int64_t>) const {
    return {};
  }
  ModelConfig c;
  Tree w;
};

static_assert(kIsLayerOps<FakeOps<0>>);
static_assert(CheckLayerOps<FakeOps<0>>());
static_assert(!kIsLayerOps<FakeOps<1>>);
static_assert(!kIsLayerOps<FakeOps<2>>);
static_assert(!kIsLayerOps<FakeOps<3>>);
static_assert(!kIsLayerOps<FakeOps<4>>);
static_assert(!kIsLayerOps<FakeOps<5>>);
static_assert(!kIsLayerOps<FakeOps<6>>);
static_assert(!kIsLayerOps<FakeOps<7>>);
static_assert(!kIsLayerOps<FakeOps<0, 1>>);  // Linear returns int
static_assert(!kIsLayerOps<FakeOps<0, 7>>);  // Logits cannot take int64_t rows
static_assert(!kIsLayerOps<int>);

struct NoFinalNorm {
  std::vector<Layer> encoder, decoder;
};
struct OpsWithoutFinalNorms : FakeOps<0> {
  using Weights = NoFinalNorm;
  const NoFinalNorm& weights() const { return n; }
  NoFinalNorm n;
};
static_assert(!kIsLayerOps<OpsWithoutFinalNorms>);

template <bool WithAfterCross>
struct FakeCache {
  float* self_pool(size_t) { return nullptr; }
  float* cross_pool(size_t) { return nullptr; }
  const int32_t* new_slots() const { return nullptr; }
  const AttentionArgs& self_args() const { return a; }
  const AttentionArgs& cross_args() const { return a; }
  template <bool B = WithAfterCross, std::enable_if_t<B, int> = 0>
  absl::Status AfterCrossAttention(size_t, const float*, const AttentionArgs&) {
    return {};
  }
  AttentionArgs a;
};
static_assert(kIsStepCache<FakeCache<true>>);
static_assert(CheckStepCache<FakeCache<true>>());
static_assert(!kIsStepCache<FakeCache<false>>);

TEST(LayerOpsTest, ContractIsCheckedAtCompileTime) {
  // The checks are the static_asserts above; this case records that the file compiled.
  EXPECT_TRUE(kIsLayerOps<FakeOps<0>>);
  EXPECT_FALSE(kIsLayerOps<FakeOps<5>>);
  EXPECT_FALSE(kIsStepCache<FakeCache<false>>);
}

}  // namespace
}  // namespace tnmt::graph

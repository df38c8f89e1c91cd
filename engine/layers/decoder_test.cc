// Incremental decoding with the KV cache equals full recomputation at every step, including
// after beam reordering (rows duplicated, dropped and permuted) and with rows that attend to
// different sources of different lengths.
#include "engine/layers/decoder.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/graph/transformer.h"
#include "engine/layers/cpu_layer_ops.h"
#include "engine/layers/encoder.h"
#include "kernels/cpu/parallel.h"
#include "engine/runtime/loaded_model.h"

namespace tnmt {
namespace {

// The graph's encoder over a padded batch, the reference the packed rows must equal: a.x:
// [batch * src_max, d]; positions[b * src_max + j] = j; padding masked as keys.
absl::Status EncodePadded(const CpuLayerOps& ops, const graph::Activations& a, const int32_t* ids,
                          const int32_t* positions, const int32_t* lengths, int batch, int src_max) {
  const int d = ops.config().d_model;
  graph::AttentionArgs args = graph::ModelAttention(ops.config());
  args.batch = batch;
  args.q_len = src_max;
  args.k_len = src_max;
  args.k_valid = lengths;
  return graph::EncodeRows(ops, a, ids, positions, static_cast<int64_t>(batch) * src_max, args,
                           static_cast<int64_t>(src_max) * 3 * d, 3 * d);
}

class DecoderCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto m = LoadModelDirectory("tests/golden/data/" + GetParam());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    const ModelConfig& c = model_->config;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> tok(4, c.vocab_size - 1);
    lengths_ = {5, 9, 2};
    src_max_ = 9;
    src_.assign(lengths_.size() * src_max_, c.pad_id);
    for (size_t b = 0; b < lengths_.size(); ++b) {
      for (int i = 0; i + 1 < lengths_[b]; ++i) src_[b * src_max_ + i] = tok(rng);
      src_[b * src_max_ + lengths_[b] - 1] = c.eos_id;
    }
    auto enc = Encode(c, model_->weights, src_.data(), lengths_.data(), lengths_.size(), src_max_, &ws_);
    ASSERT_TRUE(enc.ok());
    enc_ = *enc;
    for (int r = 0; r < 4; ++r) {
      std::vector<int32_t> seq = {c.bos_id};
      for (int t = 1; t < kSteps; ++t) seq.push_back(tok(rng));
      targets_.push_back(seq);
    }
  }

  // Logits of the last position of each sequence, recomputed from scratch.
  std::vector<float> Full(const std::vector<std::vector<int32_t>>& seqs, const std::vector<int32_t>& kv) {
    const ModelConfig& c = model_->config;
    const int t = seqs[0].size();
    auto state = DecoderState::Create(c, model_->weights, enc_, lengths_.data(), seqs.size(), kSteps);
    EXPECT_TRUE(state.ok());
    EXPECT_TRUE(state->Start(kv).ok());
    std::vector<int32_t> ids;
    for (const auto& s : seqs) ids.insert(ids.end(), s.begin(), s.end());
    std::vector<float> logits(seqs.size() * t * c.vocab_size);
    EXPECT_TRUE(DecoderForward(c, model_->weights, &*state, ids.data(), t, logits.data(), &ws_).ok());
    std::vector<float> last;
    for (size_t r = 0; r < seqs.size(); ++r) {
      const float* row = logits.data() + (r * t + t - 1) * c.vocab_size;
      last.insert(last.end(), row, row + c.vocab_size);
    }
    return last;
  }

  static constexpr int kSteps = 10;
  std::shared_ptr<const LoadedModel> model_;
  std::vector<int32_t> lengths_, src_;
  int src_max_ = 0;
  Tensor enc_;
  Workspace ws_;
  std::vector<std::vector<int32_t>> targets_;
};

TEST_P(DecoderCacheTest, IncrementalEqualsFullRecomputationWithReorders) {
  const ModelConfig& c = model_->config;
  auto state = DecoderState::Create(c, model_->weights, enc_, lengths_.data(), 6, kSteps);
  ASSERT_TRUE(state.ok());
  std::vector<int32_t> kv = {0, 1, 2, 1};
  ASSERT_TRUE(state->Start(kv).ok());
  std::vector<std::vector<int32_t>> prefixes(4);
  std::vector<std::vector<int32_t>> seqs = targets_;
  // Reorders applied before steps 3, 6 and 8: duplicate, drop, grow, permute.
  const std::map<int, std::vector<int32_t>> reorders = {
      {3, {1, 1, 0, 3, 2}}, {6, {4, 0, 2}}, {8, {2, 2, 1, 0, 1, 0}}};
  for (int t = 0; t < kSteps; ++t) {
    if (auto it = reorders.find(t); it != reorders.end()) {
      ASSERT_TRUE(state->Reorder(it->second).ok());
      std::vector<std::vector<int32_t>> next_seqs, next_prefixes;
      std::vector<int32_t> next_kv;
      for (int32_t p : it->second) {
        next_seqs.push_back(seqs[p]);
        next_prefixes.push_back(prefixes[p]);
        next_kv.push_back(kv[p]);
      }
      seqs = next_seqs, prefixes = next_prefixes, kv = next_kv;
      ASSERT_EQ(state->kv_index(), kv);
    }
    std::vector<int32_t> step_ids;
    for (size_t r = 0; r < seqs.size(); ++r) {
      step_ids.push_back(seqs[r][t]);
      prefixes[r].push_back(seqs[r][t]);
    }
    std::vector<float> logits(seqs.size() * c.vocab_size);
    ASSERT_TRUE(DecoderForward(c, model_->weights, &*state, step_ids.data(), 1, logits.data(), &ws_).ok());
    const std::vector<float> want = Full(prefixes, kv);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(logits[i], want[i], 1e-4 + 1e-4 * std::fabs(want[i])) << "step " << t << " index " << i;
    }
  }
  EXPECT_EQ(state->steps(), kSteps);
}

TEST_P(DecoderCacheTest, StepsBeyondCapacityAreAnError) {
  const ModelConfig& c = model_->config;
  auto state = DecoderState::Create(c, model_->weights, enc_, lengths_.data(), 1, 2);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(state->Start({0}).ok());
  std::vector<int32_t> ids = {c.bos_id, 5, 6};
  EXPECT_FALSE(DecoderForward(c, model_->weights, &*state, ids.data(), 3, nullptr, &ws_).ok());
  EXPECT_FALSE(state->Reorder({1}).ok());
  EXPECT_FALSE(state->Reorder({0}, {7}).ok());   // no such source
  EXPECT_FALSE(state->ReleaseSource(0).ok());    // a row still attends to it
  ASSERT_TRUE(state->Reorder({}).ok());
  EXPECT_TRUE(state->ReleaseSource(0).ok());
  EXPECT_FALSE(state->ReleaseSource(0).ok());    // already released
}

// Continuous batching: rows join at position 0 while others are mid-sentence, a finished
// source is released and its id and slots reused by a new sentence; every row's logits still
// equal a full recomputation of its own prefix.
TEST_P(DecoderCacheTest, RowsJoiningMidDecodeEqualFullRecomputation) {
  const ModelConfig& c = model_->config;
  auto state = DecoderState::Create(c, model_->weights, enc_, lengths_.data(), 0, kSteps);
  ASSERT_TRUE(state.ok());
  struct Row { std::vector<int32_t> prefix; int32_t source; int target; };
  std::vector<Row> rows = {{{}, 0, 0}};
  ASSERT_TRUE(state->Start({0}).ok());
  for (int t = 0; t < 8; ++t) {
    if (t == 2) {  // source 1 joins; the first row forks
      ASSERT_TRUE(state->Reorder({0, 0}, {1}).ok());
      rows = {rows[0], rows[0], {{}, 1, 1}};
      rows[1].target = 2;
    }
    if (t == 5) {  // source 0's rows finish; source 2 joins twice under a reused id
      ASSERT_TRUE(state->Reorder({2}).ok());
      rows = {rows[2]};
      ASSERT_TRUE(state->ReleaseSource(0).ok());
      const int32_t len = lengths_[2];
      auto enc = Encode(c, model_->weights, src_.data() + 2 * src_max_, &len, 1, src_max_, &ws_);
      ASSERT_TRUE(enc.ok());
      auto ids = state->AddSources(*enc, &len);
      ASSERT_TRUE(ids.ok());
      EXPECT_EQ((*ids)[0], 0);  // the released id
      ASSERT_TRUE(state->Reorder({0}, {0, 0}).ok());
      rows.push_back({{}, 2, 3});
      rows.push_back({{}, 2, 0});
    }
    std::vector<int32_t> step_ids;
    for (Row& r : rows) {
      r.prefix.push_back(targets_[r.target][r.prefix.size()]);
      step_ids.push_back(r.prefix.back());
    }
    std::vector<float> logits(rows.size() * c.vocab_size);
    ASSERT_TRUE(DecoderForward(c, model_->weights, &*state, step_ids.data(), 1, logits.data(), &ws_).ok());
    for (size_t r = 0; r < rows.size(); ++r) {
      ASSERT_EQ(state->position(r), static_cast<int>(rows[r].prefix.size()));
      const std::vector<float> want = Full({rows[r].prefix}, {rows[r].source});
      for (int i = 0; i < c.vocab_size; ++i) {
        ASSERT_NEAR(logits[r * c.vocab_size + i], want[i], 1e-4 + 1e-4 * std::fabs(want[i]))
            << "step " << t << " row " << r << " index " << i;
      }
    }
  }
}

// The encoder over the sentences packed without padding (EncodeRows) gives each valid position
// bit for bit the row the graph's padded Encode gives it, on 1 and 2 compute threads; the cross
// K/V it leads to (AddSourceRows) decode exactly as the padded batch's (AddSources).
TEST_P(DecoderCacheTest, PackedEncoderEqualsThePaddedGraphBitForBit) {
  const ModelConfig& c = model_->config;
  const int d = c.d_model;
  const int batch = static_cast<int>(lengths_.size());
  for (int threads : {1, 2}) {
    kernels::cpu::SetComputeThreads(threads);
    // The padded reference: the graph's encoder over every row of [batch, src_max].
    const int64_t rows = static_cast<int64_t>(batch) * src_max_;
    std::vector<float> x(rows * d), y(rows * d), qkv(rows * 3 * d), attn(rows * d), hidden(rows * c.d_ff);
    graph::Activations a;
    a.x = x.data(), a.y = y.data(), a.qkv = qkv.data(), a.attn = attn.data(), a.hidden = hidden.data();
    std::vector<int32_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>(r % src_max_);
    ASSERT_TRUE(EncodePadded(CpuLayerOps(c, model_->weights), a, src_.data(), positions.data(), lengths_.data(),
                             batch, src_max_)
                    .ok());
    auto packed = EncodeRows(c, model_->weights, src_.data(), lengths_.data(), batch, src_max_, &ws_);
    ASSERT_TRUE(packed.ok()) << packed.status();
    ASSERT_EQ(packed->dim(0), 5 + 9 + 2);
    ASSERT_EQ(packed->dim(1), d);
    int64_t row = 0;
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < lengths_[b]; ++j, ++row) {
        for (int i = 0; i < d; ++i) {
          ASSERT_EQ(packed->f32()[row * d + i], x[(static_cast<int64_t>(b) * src_max_ + j) * d + i])
              << "threads " << threads << " sentence " << b << " position " << j << " element " << i;
        }
      }
    }
    // The padded layout of Encode holds the same valid rows.
    auto padded = Encode(c, model_->weights, src_.data(), lengths_.data(), batch, src_max_, &ws_);
    ASSERT_TRUE(padded.ok());
    for (int b = 0; b < batch; ++b) {
      const int64_t at = static_cast<int64_t>(b) * src_max_ * d;
      ASSERT_EQ(0, std::memcmp(padded->f32() + at, x.data() + at, sizeof(float) * lengths_[b] * d)) << b;
    }
    // Decoding from the packed rows' K/V equals decoding from the padded batch's.
    auto from_padded = DecoderState::Create(c, model_->weights, kSteps, 3);
    auto from_rows = DecoderState::Create(c, model_->weights, kSteps, 3);
    ASSERT_TRUE(from_padded.ok() && from_rows.ok());
    ASSERT_TRUE(from_padded->AddSources(*padded, lengths_.data()).ok());
    auto ids = from_rows->AddSourceRows(*packed, lengths_.data(), batch);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, (std::vector<int32_t>{0, 1, 2}));
    ASSERT_TRUE(from_padded->Start({0, 1, 2}).ok());
    ASSERT_TRUE(from_rows->Start({0, 1, 2}).ok());
    for (int t = 0; t < 3; ++t) {
      std::vector<int32_t> step = {targets_[0][t], targets_[1][t], targets_[2][t]};
      std::vector<float> want(3 * c.vocab_size), got(3 * c.vocab_size);
      ASSERT_TRUE(DecoderForward(c, model_->weights, &*from_padded, step.data(), 1, want.data(), &ws_).ok());
      ASSERT_TRUE(DecoderForward(c, model_->weights, &*from_rows, step.data(), 1, got.data(), &ws_).ok());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size())) << "step " << t;
    }
  }
  kernels::cpu::SetComputeThreads(1);
}

TEST_P(DecoderCacheTest, PackedEncoderRefusesBadLengthsAndRowCounts) {
  const ModelConfig& c = model_->config;
  std::vector<int32_t> bad = {5, 10, 2};  // 10 > src_max 9
  auto enc = EncodeRows(c, model_->weights, src_.data(), bad.data(), 3, src_max_, &ws_);
  ASSERT_FALSE(enc.ok());
  EXPECT_NE(enc.status().message().find("source 1 has 10 positions, outside [1, 9]"), std::string::npos)
      << enc.status();
  bad = {5, 0, 2};
  EXPECT_FALSE(EncodeRows(c, model_->weights, src_.data(), bad.data(), 3, src_max_, &ws_).ok());
  auto packed = EncodeRows(c, model_->weights, src_.data(), lengths_.data(), 3, src_max_, &ws_);
  ASSERT_TRUE(packed.ok());
  auto state = DecoderState::Create(c, model_->weights, kSteps, 3);
  ASSERT_TRUE(state.ok());
  // Two sentences' lengths for three sentences' rows: refused, naming both counts.
  auto ids = state->AddSourceRows(*packed, lengths_.data(), 2);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("16 rows for 14 source positions"), std::string::npos) << ids.status();
  EXPECT_EQ(state->live_sources(), 0);
  // A padded tensor is not rows.
  EXPECT_FALSE(state->AddSourceRows(enc_, lengths_.data(), 3).ok());
}

INSTANTIATE_TEST_SUITE_P(Models, DecoderCacheTest, ::testing::Values("tiny", "tiny_prenorm"));

}  // namespace
}  // namespace tnmt

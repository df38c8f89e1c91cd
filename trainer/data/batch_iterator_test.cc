// Tests for BatchIterator: token budget and padding layout, every pair once per epoch,
// determinism from the seed, exact resume with Seek, sharding, the validation order, errors.
#include "trainer/data/batch_iterator.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/dataset.h"

namespace tnmt::data {
namespace {

constexpr int32_t kPad = 0, kBos = 2, kEos = 3;

// Ids of pair i: recognisable values >= 4, so they never collide with the special ids.
std::vector<int32_t> SyntheticIds(int64_t pair, int length, int side) {
  std::vector<int32_t> ids(length);
  for (int k = 0; k < length; ++k)
    ids[k] = 4 + static_cast<int32_t>((pair * 31 + k * 7 + side) % 5000);
  return ids;
}

// `count` pairs with lengths 1..max_length (a few much longer ones when `outliers`).
std::unique_ptr<Dataset> MakeDataset(const std::string& name, int count, int max_length,
                                     bool outliers = false) {
  DatasetOptions options;
  options.max_length = 0;
  options.max_length_ratio = 0;
  absl::StatusOr<std::unique_ptr<DatasetWriter>> writer =
      DatasetWriter::Create(::testing::TempDir() + "/" + name + ".cache", options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::mt19937_64 rng(5);
  for (int i = 0; i < count; ++i) {
    int source_length = 1 + static_cast<int>(rng() % max_length);
    int target_length = std::max(1, source_length + static_cast<int>(rng() % 7) - 3);
    if (outliers && i % 97 == 0) source_length = 400;
    EXPECT_TRUE(
        (*writer)->Add(SyntheticIds(i, source_length, 0), SyntheticIds(i, target_length, 1)).ok());
  }
  absl::StatusOr<std::unique_ptr<Dataset>> dataset = (*writer)->Finish();
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return std::move(*dataset);
}

BatchOptions Options(int64_t max_tokens, uint64_t seed = 1) {
  BatchOptions options;
  options.max_tokens = max_tokens;
  options.seed = seed;
  options.sort_window_batches = 10;
  options.pad_id = kPad;
  options.bos_id = kBos;
  options.eos_id = kEos;
  return options;
}

std::unique_ptr<BatchIterator> MakeIterator(const Dataset* dataset, const BatchOptions& options) {
  absl::StatusOr<std::unique_ptr<BatchIterator>> iterator = BatchIterator::Create(dataset, options);
  EXPECT_TRUE(iterator.ok()) << iterator.status();
  return iterator.ok() ? std::move(*iterator) : nullptr;
}

// The pair indices of the next `count` batches.
std::vector<std::vector<int64_t>> NextBatches(BatchIterator* iterator, int64_t count) {
  std::vector<std::vector<int64_t>> batches;
  Batch batch;
  for (int64_t i = 0; i < count; ++i) {
    const absl::Status status = iterator->Next(&batch);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) break;
    batches.push_back(batch.pair_indices);
  }
  return batches;
}

TEST(BatchIteratorTest, BatchesRespectTheBudgetAndThePaddingLayout) {
  std::unique_ptr<Dataset> dataset = MakeDataset("layout", 1500, 60, /*outliers=*/true);
  const int64_t max_tokens = 300;
  std::unique_ptr<BatchIterator> iterator = MakeIterator(dataset.get(), Options(max_tokens));
  ASSERT_NE(iterator, nullptr);
  int64_t padded = 0, real = 0, singles_over_budget = 0;
  Batch batch;
  std::vector<int32_t> source, target;
  for (int64_t step = 0; step < 2 * iterator->batches_per_epoch(); ++step) {
    ASSERT_TRUE(iterator->Next(&batch).ok());
    const int b = batch.batch_size;
    ASSERT_GT(b, 0);
    const int64_t cost = static_cast<int64_t>(b) * std::max(batch.src_len, batch.tgt_len);
    if (b == 1 && cost > max_tokens) {
      ++singles_over_budget;
    } else {
      EXPECT_LE(cost, max_tokens) << "batch of " << b;
    }
    ASSERT_EQ(batch.src.size(), static_cast<size_t>(b) * batch.src_len);
    ASSERT_EQ(batch.tgt_in.size(), static_cast<size_t>(b) * batch.tgt_len);
    ASSERT_EQ(batch.tgt_out.size(), static_cast<size_t>(b) * batch.tgt_len);
    ASSERT_EQ(batch.src_lengths.size(), static_cast<size_t>(b));
    ASSERT_EQ(batch.pair_indices.size(), static_cast<size_t>(b));
    int longest_source = 0, longest_target = 0;
    int64_t src_tokens = 0, tgt_tokens = 0;
    for (int r = 0; r < b; ++r) {
      ASSERT_TRUE(dataset->ReadPair(batch.pair_indices[r], &source, &target).ok());
      const int s = static_cast<int>(source.size()), t = static_cast<int>(target.size());
      longest_source = std::max(longest_source, s);
      longest_target = std::max(longest_target, t);
      src_tokens += s + 1;
      tgt_tokens += t + 1;
      EXPECT_EQ(batch.src_lengths[r], s + 1);
      const int32_t* src = &batch.src[static_cast<size_t>(r) * batch.src_len];
      const int32_t* tgt_in = &batch.tgt_in[static_cast<size_t>(r) * batch.tgt_len];
      const int32_t* tgt_out = &batch.tgt_out[static_cast<size_t>(r) * batch.tgt_len];
      for (int k = 0; k < batch.src_len; ++k) {
        const int32_t want = k < s ? source[k] : (k == s ? kEos : kPad);
        ASSERT_EQ(src[k], want) << "src row " << r << " col " << k;
      }
      for (int k = 0; k < batch.tgt_len; ++k) {
        const int32_t want_in = k == 0 ? kBos : (k <= t ? target[k - 1] : kPad);
        const int32_t want_out = k < t ? target[k] : (k == t ? kEos : kPad);
        ASSERT_EQ(tgt_in[k], want_in) << "tgt_in row " << r << " col " << k;
        ASSERT_EQ(tgt_out[k], want_out) << "tgt_out row " << r << " col " << k;
      }
    }
    EXPECT_EQ(batch.src_len, longest_source + 1);
    EXPECT_EQ(batch.tgt_len, longest_target + 1);
    EXPECT_EQ(batch.src_tokens, src_tokens);
    EXPECT_EQ(batch.tgt_tokens, tgt_tokens);
    padded += cost;
    real += std::max(src_tokens, tgt_tokens);
  }
  EXPECT_GT(singles_over_budget, 0);  // the 400-piece outliers
  // Bucketing keeps padding low (random batches of 1..60 lengths would waste about half).
  EXPECT_GT(static_cast<double>(real) / padded, 0.8);
}

TEST(BatchIteratorTest, EachPairAppearsExactlyOncePerEpoch) {
  std::unique_ptr<Dataset> dataset = MakeDataset("once", 2000, 50);
  std::unique_ptr<BatchIterator> iterator = MakeIterator(dataset.get(), Options(400));
  ASSERT_NE(iterator, nullptr);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    ASSERT_EQ(iterator->Position().epoch, epoch == 0 ? 0 : epoch - 1);
    std::vector<int> seen(dataset->size(), 0);
    Batch batch;
    ASSERT_TRUE(iterator->Next(&batch).ok());
    ASSERT_EQ(iterator->Position().epoch, epoch);
    const int64_t batches = iterator->batches_per_epoch();
    for (int64_t k = 0;; ++k) {
      for (int64_t pair : batch.pair_indices) ++seen[pair];
      if (k + 1 == batches) break;
      ASSERT_TRUE(iterator->Next(&batch).ok());
    }
    EXPECT_EQ(iterator->Position().batch_in_epoch, batches);
    for (int64_t i = 0; i < dataset->size(); ++i) ASSERT_EQ(seen[i], 1) << "pair " << i;
  }
}

TEST(BatchIteratorTest, SameSeedSameBatchesDifferentSeedDifferentOrder) {
  std::unique_ptr<Dataset> dataset = MakeDataset("seeds", 1200, 40);
  std::unique_ptr<BatchIterator> a = MakeIterator(dataset.get(), Options(500, /*seed=*/7));
  std::unique_ptr<BatchIterator> b = MakeIterator(dataset.get(), Options(500, /*seed=*/7));
  std::unique_ptr<BatchIterator> c = MakeIterator(dataset.get(), Options(500, /*seed=*/8));
  const int64_t count = 2 * a->batches_per_epoch() + 5;
  const auto batches_a = NextBatches(a.get(), count);
  EXPECT_EQ(batches_a, NextBatches(b.get(), count));
  EXPECT_NE(batches_a, NextBatches(c.get(), count));
  // Epochs differ from each other too.
  std::unique_ptr<BatchIterator> d = MakeIterator(dataset.get(), Options(500, /*seed=*/7));
  const auto epoch0 = NextBatches(d.get(), d->batches_per_epoch());
  const auto epoch1_start = NextBatches(d.get(), 10);
  EXPECT_EQ(d->Position().epoch, 1);
  EXPECT_NE(std::vector<std::vector<int64_t>>(epoch0.begin(), epoch0.begin() + 10), epoch1_start);
}

TEST(BatchIteratorTest, SeekToASavedPositionReproducesTheContinuation) {
  std::unique_ptr<Dataset> dataset = MakeDataset("seek", 1000, 40);
  std::unique_ptr<BatchIterator> original = MakeIterator(dataset.get(), Options(350, 3));
  const int64_t per_epoch = original->batches_per_epoch();
  for (const int64_t consumed :
       {int64_t{0}, per_epoch / 2, per_epoch, per_epoch + 3, 2 * per_epoch + per_epoch / 3}) {
    std::unique_ptr<BatchIterator> uninterrupted = MakeIterator(dataset.get(), Options(350, 3));
    NextBatches(uninterrupted.get(), consumed);
    const DataPosition saved = uninterrupted->Position();
    const auto expected = NextBatches(uninterrupted.get(), 2 * per_epoch);

    std::unique_ptr<BatchIterator> resumed = MakeIterator(dataset.get(), Options(350, 3));
    NextBatches(resumed.get(), 7);  // a resumed iterator may have been used before
    ASSERT_TRUE(resumed->Seek(saved).ok()) << "epoch " << saved.epoch;
    EXPECT_EQ(resumed->Position().epoch, saved.epoch);
    EXPECT_EQ(resumed->Position().batch_in_epoch, saved.batch_in_epoch);
    EXPECT_EQ(NextBatches(resumed.get(), 2 * per_epoch), expected) << "after " << consumed;
  }
}

// Subword sampling: batches hold the segmentations drawn for their epoch (padded to the drawn
// lengths), replay exactly after a seek, and change with the epoch.
TEST(BatchIteratorTest, SampledSegmentationsReplayAfterASeekAndChangeWithTheEpoch) {
  DatasetOptions options;
  options.max_length = 0;
  options.max_length_ratio = 0;
  options.subword_nbest = 3;
  options.subword_alpha = 0.0f;  // uniform over the three
  auto writer = DatasetWriter::Create(::testing::TempDir() + "/sampled_batches.cache", options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const auto segs = [](int pair, int side, int length) {
    std::vector<Tokenizer::Segmentation> out;
    for (int c = 0; c < 3; ++c) out.push_back({SyntheticIds(pair * 3 + c, length + c, side), -1.0f * c});
    return out;
  };
  for (int i = 0; i < 300; ++i) ASSERT_TRUE((*writer)->AddSegmentations(segs(i, 0, 5 + i % 9), segs(i, 1, 4 + i % 7)).ok());
  auto dataset = (*writer)->Finish();
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const auto contents = [](BatchIterator* it, int64_t count) {
    std::vector<std::vector<int32_t>> out;
    Batch batch;
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_TRUE(it->Next(&batch).ok());
      int longest = 0;
      for (int32_t len : batch.src_lengths) longest = std::max(longest, static_cast<int>(len));
      EXPECT_EQ(batch.src_len, longest) << "padded to the drawn lengths";
      out.push_back(batch.src);
      out.push_back(batch.tgt_out);
    }
    return out;
  };
  std::unique_ptr<BatchIterator> first = MakeIterator(dataset->get(), Options(200, 4));
  const int64_t per_epoch = first->batches_per_epoch();
  contents(first.get(), per_epoch / 2);
  const DataPosition saved = first->Position();
  const auto expected = contents(first.get(), per_epoch);
  std::unique_ptr<BatchIterator> resumed = MakeIterator(dataset->get(), Options(200, 4));
  ASSERT_TRUE(resumed->Seek(saved).ok());
  EXPECT_EQ(contents(resumed.get(), per_epoch), expected);

  // The same pair in two epochs: some pairs read other segmentations.
  std::vector<int32_t> a_src, a_tgt, b_src, b_tgt;
  int differ = 0;
  for (int i = 0; i < (*dataset)->size(); ++i) {
    ASSERT_TRUE((*dataset)->ReadSampledPair(i, 4, 0, &a_src, &a_tgt).ok());
    ASSERT_TRUE((*dataset)->ReadSampledPair(i, 4, 1, &b_src, &b_tgt).ok());
    differ += a_src != b_src;
  }
  EXPECT_GT(differ, 100);  // uniform over 3: about 2/3 of the pairs
}

TEST(BatchIteratorTest, SeekRejectsPositionsOutsideTheEpoch) {
  std::unique_ptr<Dataset> dataset = MakeDataset("seek_errors", 300, 20);
  std::unique_ptr<BatchIterator> iterator = MakeIterator(dataset.get(), Options(200));
  EXPECT_EQ(iterator->Seek({0, iterator->batches_per_epoch() + 1}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(iterator->Seek({-1, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(iterator->Seek({0, -2}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(iterator->Seek({5, 1}).ok());
  EXPECT_EQ(iterator->Position().epoch, 5);
}

TEST(BatchIteratorTest, ShardedRanksPartitionTheGlobalBatches) {
  std::unique_ptr<Dataset> dataset = MakeDataset("shards", 1500, 50);
  const int world = 3;
  std::unique_ptr<BatchIterator> global = MakeIterator(dataset.get(), Options(450, 9));
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE(global->Seek({epoch, 0}).ok());
    const auto global_epoch = NextBatches(global.get(), global->batches_per_epoch());
    const int64_t per_rank = static_cast<int64_t>(global_epoch.size()) / world;
    ASSERT_GT(per_rank, 0);
    std::set<int64_t> union_pairs;
    int64_t total_rows = 0;
    for (int rank = 0; rank < world; ++rank) {
      BatchOptions options = Options(450, 9);
      options.rank = rank;
      options.world_size = world;
      std::unique_ptr<BatchIterator> shard = MakeIterator(dataset.get(), options);
      ASSERT_TRUE(shard->Seek({epoch, 0}).ok());
      EXPECT_EQ(shard->batches_per_epoch(), per_rank);
      const auto mine = NextBatches(shard.get(), per_rank);
      for (int64_t k = 0; k < per_rank; ++k) {
        EXPECT_EQ(mine[k], global_epoch[rank + k * world]) << "rank " << rank << " batch " << k;
        union_pairs.insert(mine[k].begin(), mine[k].end());
        total_rows += static_cast<int64_t>(mine[k].size());
      }
      // All ranks cross into the next epoch together.
      Batch batch;
      ASSERT_TRUE(shard->Next(&batch).ok());
      EXPECT_EQ(shard->Position().epoch, epoch + 1);
      EXPECT_EQ(shard->Position().batch_in_epoch, 1);
    }
    EXPECT_EQ(static_cast<int64_t>(union_pairs.size()), total_rows);  // disjoint
    int64_t expected_rows = 0;
    for (int64_t k = 0; k < per_rank * world; ++k) expected_rows += global_epoch[k].size();
    EXPECT_EQ(total_rows, expected_rows);
  }
}

TEST(BatchIteratorTest, UnshuffledOrderIsSortedAndTheSameEveryEpoch) {
  std::unique_ptr<Dataset> dataset = MakeDataset("validation", 700, 40);
  BatchOptions options = Options(300);
  options.shuffle = false;
  std::unique_ptr<BatchIterator> iterator = MakeIterator(dataset.get(), options);
  const int64_t per_epoch = iterator->batches_per_epoch();
  const auto first = NextBatches(iterator.get(), per_epoch);
  const auto second = NextBatches(iterator.get(), per_epoch);
  EXPECT_EQ(first, second);
  int previous = 0;
  for (const auto& batch : first) {
    for (int64_t pair : batch) {
      const int length = std::max(dataset->source_length(pair), dataset->target_length(pair));
      EXPECT_GE(length, previous);
      previous = length;
    }
  }
}

TEST(BatchIteratorTest, RejectsBadOptionsAndTooLittleData) {
  std::unique_ptr<Dataset> dataset = MakeDataset("errors", 20, 10);
  EXPECT_EQ(BatchIterator::Create(dataset.get(), Options(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  BatchOptions bad_rank = Options(100);
  bad_rank.world_size = 2;
  bad_rank.rank = 2;
  EXPECT_EQ(BatchIterator::Create(dataset.get(), bad_rank).status().code(),
            absl::StatusCode::kInvalidArgument);
  BatchOptions too_many_ranks = Options(100000);  // one batch, two ranks
  too_many_ranks.world_size = 2;
  EXPECT_EQ(BatchIterator::Create(dataset.get(), too_many_ranks).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<Dataset> empty = MakeDataset("empty", 0, 10);
  EXPECT_EQ(BatchIterator::Create(empty.get(), Options(100)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tnmt::data

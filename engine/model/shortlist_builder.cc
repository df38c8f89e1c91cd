// IBM Model 1 shortlist estimation; see shortlist_builder.h.
#include "engine/model/shortlist_builder.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace tnmt {

namespace {

uint64_t Key(int32_t source, int32_t target) {
  return (static_cast<uint64_t>(source) << 32) | static_cast<uint32_t>(target);
}
int32_t SourceOf(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t TargetOf(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

}  // namespace

absl::Status ShortlistBuilder::Add(const std::vector<int32_t>& source, const std::vector<int32_t>& target) {
  if (source.empty() || target.empty()) return absl::OkStatus();
  for (const std::vector<int32_t>* side : {&source, &target}) {
    for (int32_t id : *side) {
      if (id < 0 || id >= vocab_) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is outside [0, ", vocab_, ")"));
      }
    }
  }
  src_.insert(src_.end(), source.begin(), source.end());
  tgt_.insert(tgt_.end(), target.begin(), target.end());
  src_offsets_.push_back(static_cast<int64_t>(src_.size()));
  tgt_offsets_.push_back(static_cast<int64_t>(tgt_.size()));
  return absl::OkStatus();
}

absl::StatusOr<Shortlist> ShortlistBuilder::Build(const ShortlistBuildOptions& o) const {
  if (o.per_source < 0 || o.frequent < 0 || o.iterations < 0) {
    return absl::InvalidArgumentError("per_source, frequent and iterations must be >= 0");
  }
  Shortlist s = Shortlist::Empty(vocab_);
  // The most frequent target pieces (ties: the smaller id).
  std::vector<int64_t> freq(vocab_, 0);
  for (int32_t id : tgt_) ++freq[id];
  std::vector<int32_t> order(vocab_);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return freq[a] > freq[b]; });
  for (int32_t id : order) {
    if (static_cast<int>(s.frequent.size()) >= o.frequent || freq[id] == 0) break;
    if (id != pad_) s.frequent.push_back(id);
  }
  std::sort(s.frequent.begin(), s.frequent.end());

  // One table entry per (source, target) co-occurring in a pair; source vocab_ is NULL. t starts
  // as the pair counts (the ranking without EM) and is uniform for EM's first iteration.
  const int32_t null_source = vocab_;
  absl::flat_hash_map<uint64_t, int32_t> slot_of;
  std::vector<uint64_t> keys;
  std::vector<float> t;
  std::vector<int32_t> distinct_src, distinct_tgt;
  for (int64_t p = 0; p < pairs(); ++p) {
    distinct_src.assign(src_.begin() + src_offsets_[p], src_.begin() + src_offsets_[p + 1]);
    distinct_src.push_back(null_source);
    distinct_tgt.assign(tgt_.begin() + tgt_offsets_[p], tgt_.begin() + tgt_offsets_[p + 1]);
    for (std::vector<int32_t>* d : {&distinct_src, &distinct_tgt}) {
      std::sort(d->begin(), d->end());
      d->erase(std::unique(d->begin(), d->end()), d->end());
    }
    for (int32_t f : distinct_src) {
      for (int32_t e : distinct_tgt) {
        auto [it, inserted] = slot_of.try_emplace(Key(f, e), static_cast<int32_t>(keys.size()));
        if (inserted) {
          keys.push_back(Key(f, e));
          t.push_back(0.0f);
        }
        t[it->second] += 1.0f;
      }
    }
  }
  if (o.iterations > 0) std::fill(t.begin(), t.end(), 1.0f);
  std::vector<double> count(t.size()), total(static_cast<size_t>(vocab_) + 1);
  std::vector<int32_t> slots;
  for (int it = 0; it < o.iterations; ++it) {
    std::fill(count.begin(), count.end(), 0.0);
    for (int64_t p = 0; p < pairs(); ++p) {
      const int64_t f0 = src_offsets_[p], f1 = src_offsets_[p + 1];
      for (int64_t j = tgt_offsets_[p]; j < tgt_offsets_[p + 1]; ++j) {
        const int32_t e = tgt_[j];
        slots.clear();
        for (int64_t i = f0; i < f1; ++i) slots.push_back(slot_of.at(Key(src_[i], e)));
        slots.push_back(slot_of.at(Key(null_source, e)));
        double sum = 0;
        for (int32_t sl : slots) sum += t[sl];
        for (int32_t sl : slots) count[sl] += t[sl] / sum;
      }
    }
    std::fill(total.begin(), total.end(), 0.0);
    for (size_t sl = 0; sl < keys.size(); ++sl) total[SourceOf(keys[sl])] += count[sl];
    for (size_t sl = 0; sl < keys.size(); ++sl) {
      const double z = total[SourceOf(keys[sl])];
      t[sl] = z > 0 ? static_cast<float>(count[sl] / z) : 0.0f;
    }
  }

  // Each source's per_source best targets (ties: the smaller id), pad excluded.
  std::vector<int32_t> by_key(keys.size());
  std::iota(by_key.begin(), by_key.end(), 0);
  std::sort(by_key.begin(), by_key.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  std::vector<int32_t> best;
  for (size_t b = 0; b < by_key.size();) {
    const int32_t f = SourceOf(keys[by_key[b]]);
    size_t e = b;
    while (e < by_key.size() && SourceOf(keys[by_key[e]]) == f) ++e;
    if (f != null_source) {
      std::vector<int32_t> group(by_key.begin() + b, by_key.begin() + e);
      std::stable_sort(group.begin(), group.end(), [&](int32_t x, int32_t y) { return t[x] > t[y]; });
      best.clear();
      for (int32_t sl : group) {
        if (static_cast<int>(best.size()) >= o.per_source) break;
        if (TargetOf(keys[sl]) != pad_ && t[sl] > 0) best.push_back(TargetOf(keys[sl]));
      }
      if (absl::Status st = s.SetTargets(f, best); !st.ok()) return st;
    }
    b = e;
  }
  return s;
}

}  // namespace tnmt

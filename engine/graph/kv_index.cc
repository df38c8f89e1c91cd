// KV-cache bookkeeping; see kv_index.h.
#include "engine/graph/kv_index.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace tnmt::graph {

absl::Status KvIndex::Reserve(PoolId id, int64_t more, const Grow& grow) {
  Pool& p = pools_[id];
  if (static_cast<int64_t>(p.free.size()) >= more) return absl::OkStatus();
  const int64_t need = static_cast<int64_t>(p.capacity) + more - static_cast<int64_t>(p.free.size());
  const int64_t grown = std::max<int64_t>(need, std::max<int64_t>(64, 2 * static_cast<int64_t>(p.capacity)));
  if (grown > std::numeric_limits<int32_t>::max()) {
    return absl::ResourceExhaustedError(absl::StrCat(what_, ": ",
                                                     id == kSelf ? "self-attention" : "cross-attention",
                                                     " KV cache of ", grown, " slots is too large"));
  }
  TNMT_RETURN_IF_ERROR(grow(p.capacity, static_cast<int>(grown)));
  for (int64_t s = grown - 1; s >= p.capacity; --s) p.free.push_back(static_cast<int32_t>(s));
  p.capacity = static_cast<int>(grown);
  return absl::OkStatus();
}

int32_t KvIndex::TakeSlot(PoolId id) {
  Pool& p = pools_[id];
  const int32_t slot = p.free.back();
  p.free.pop_back();
  return slot;
}

absl::StatusOr<int64_t> KvIndex::SourcePositions(const int32_t* lengths, int batch, int src_max) {
  int64_t total = 0;
  for (int b = 0; b < batch; ++b) {
    if (lengths[b] < 1 || lengths[b] > src_max) {
      return absl::InvalidArgumentError(
          absl::StrCat("source ", b, " has ", lengths[b], " positions, outside [1, ", src_max, "]"));
    }
    total += lengths[b];
  }
  return total;
}

absl::StatusOr<std::vector<int32_t>> KvIndex::AddSources(const int32_t* lengths, int batch,
                                                         int src_max) {
  TNMT_ASSIGN_OR_RETURN(const int64_t total, SourcePositions(lengths, batch, src_max));
  if (free_slots(kCross) < total) {
    return absl::FailedPreconditionError(absl::StrCat(what_, ": cross-attention slots not reserved"));
  }
  if (src_max > src_stride_) {  // widen the per-source slot tables
    std::vector<int32_t> wider(sources_.size() * static_cast<size_t>(src_max), 0);
    for (size_t i = 0; i < sources_.size(); ++i) {
      std::copy_n(src_slots_.begin() + i * src_stride_, src_stride_, wider.begin() + i * src_max);
    }
    src_slots_ = std::move(wider);
    src_stride_ = src_max;
  }
  std::vector<int32_t> ids(batch);
  for (int b = 0; b < batch; ++b) {
    int32_t id;
    if (!free_sources_.empty()) {
      id = free_sources_.back();
      free_sources_.pop_back();
    } else {
      id = static_cast<int32_t>(sources_.size());
      sources_.emplace_back();
      src_lengths_.push_back(0);
      src_slots_.resize(sources_.size() * static_cast<size_t>(src_stride_), 0);
    }
    sources_[id].live = true;
    src_lengths_[id] = lengths[b];
    for (int j = 0; j < lengths[b]; ++j) {
      src_slots_[static_cast<int64_t>(id) * src_stride_ + j] = TakeSlot(kCross);
    }
    ids[b] = id;
    ++live_sources_;
  }
  return ids;
}

void KvIndex::Forget(int32_t source) {
  Source& src = sources_[source];
  Pool& self = pools_[kSelf];
  self.free.insert(self.free.end(), src.self_slots.begin(), src.self_slots.end());
  for (int j = 0; j < src_lengths_[source]; ++j) pools_[kCross].free.push_back(src_slot(source, j));
  src = Source{};
  src_lengths_[source] = 0;
  free_sources_.push_back(source);
  --live_sources_;
}

absl::Status KvIndex::ReleaseSource(int32_t source) {
  if (!live(source)) return absl::InvalidArgumentError(absl::StrCat(what_, ": no live source ", source));
  for (int32_t s : row_source_) {
    if (s == source) return absl::FailedPreconditionError(absl::StrCat(what_, ": source still has live rows"));
  }
  Forget(source);
  return absl::OkStatus();
}

absl::Status KvIndex::Reorder(const std::vector<int32_t>& parents,
                              const std::vector<int32_t>& new_sources) {
  const int old_rows = rows();
  for (int32_t p : parents) {
    if (p < 0 || p >= old_rows) return absl::InvalidArgumentError(absl::StrCat(what_, "::Reorder: bad parent"));
  }
  for (int32_t s : new_sources) {
    if (!live(s)) return absl::InvalidArgumentError(absl::StrCat(what_, "::Reorder: no live source ", s));
  }
  const size_t n = parents.size() + new_sources.size();
  spare_source_.resize(n);
  spare_pos_.resize(n);
  spare_map_.resize(n);
  for (size_t i = 0; i < parents.size(); ++i) {
    spare_source_[i] = row_source_[parents[i]];
    spare_pos_[i] = row_pos_[parents[i]];
    spare_map_[i] = row_map_[parents[i]];
  }
  for (size_t i = 0; i < new_sources.size(); ++i) {
    spare_source_[parents.size() + i] = new_sources[i];
    spare_pos_[parents.size() + i] = 0;
    spare_map_[parents.size() + i] = -1;
  }
  std::swap(row_source_, spare_source_);
  std::swap(row_pos_, spare_pos_);
  std::swap(row_map_, spare_map_);
  return absl::OkStatus();
}

int32_t KvIndex::TakeRowSlot(int row) {
  const int32_t slot = TakeSlot(kSelf);
  sources_[row_source_[row]].self_slots.push_back(slot);
  return slot;
}

void KvIndex::TablesGathered() {
  for (int r = 0; r < rows(); ++r) row_map_[r] = r;
}

void KvIndex::Advance(int positions) {
  for (int32_t& p : row_pos_) p += positions;
}

}  // namespace tnmt::graph

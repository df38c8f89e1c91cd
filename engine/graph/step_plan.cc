// The host side of a decoder step; see step_plan.h.
#include "engine/graph/step_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/graph/transformer.h"

namespace tnmt::graph {

absl::Status PlanStep(KvIndex& index, int t_new, int padded, int max_steps, const KvIndex::Grow& grow_self,
                      std::vector<int32_t>* pad_slots, StepPlan* p) {
  const int n = index.rows();
  const std::vector<int32_t>& row_pos = index.row_pos();
  p->rows = n;
  p->padded = std::max(padded, n);
  p->t_new = t_new;
  p->start = n > 0 ? row_pos[0] : 0;
  p->furthest = 0;
  p->src_longest = 0;
  for (int r = 0; r < n; ++r) {
    if (t_new > 1 && row_pos[r] != p->start) {
      return absl::InvalidArgumentError("DecoderForward: several positions at once need rows at the same position");
    }
    if (row_pos[r] + t_new > max_steps) {
      return absl::OutOfRangeError(absl::StrCat("decoder cache holds ", max_steps, " positions; position ",
                                                row_pos[r] + t_new, " requested"));
    }
    p->furthest = std::max(p->furthest, row_pos[r] + t_new);
    p->src_longest = std::max(p->src_longest, index.src_lengths()[index.row_source()[r]]);
  }
  const int B = p->padded;
  const int64_t pads_missing =
      std::max<int64_t>(0, static_cast<int64_t>(B - n) * t_new - static_cast<int64_t>(pad_slots->size()));
  TNMT_RETURN_IF_ERROR(index.Reserve(KvIndex::kSelf, static_cast<int64_t>(n) * t_new + pads_missing, grow_self));
  for (int64_t i = 0; i < pads_missing; ++i) pad_slots->push_back(index.TakeSlot(KvIndex::kSelf));
  p->pos.resize(B);
  p->sources.resize(B);
  p->valid.resize(B);
  p->map.resize(B);
  p->first_slot.resize(B);
  p->positions.resize(static_cast<size_t>(B) * t_new);
  p->slots.resize(static_cast<size_t>(B) * t_new);
  for (int r = 0; r < B; ++r) {
    const bool live = r < n;
    p->pos[r] = live ? row_pos[r] : 0;
    p->sources[r] = index.row_source()[live ? r : 0];  // padding attends to a live source
    p->valid[r] = p->pos[r] + t_new;
    p->map[r] = live ? index.row_map()[r] : -1;
    for (int i = 0; i < t_new; ++i) {
      const int64_t q = static_cast<int64_t>(r) * t_new + i;
      p->positions[q] = p->pos[r] + i;
      p->slots[q] = live ? index.TakeRowSlot(r) : (*pad_slots)[(r - n) * t_new + i];
    }
    p->first_slot[r] = p->slots[static_cast<int64_t>(r) * t_new];
  }
  return absl::OkStatus();
}

StepAttention PlanAttention(const ModelConfig& c, const StepPlan& p, int max_steps, const int32_t* tables,
                            const int32_t* valid, const int32_t* sources, const int32_t* src_lengths,
                            const int32_t* src_slots, int src_stride, bool fixed_bounds) {
  StepAttention a;
  a.self = ModelAttention(c);
  a.self.batch = p.padded;
  a.self.q_len = p.t_new;
  a.self.k_len = fixed_bounds ? max_steps : p.furthest;
  a.self.k_valid = valid;
  a.self.causal_offset = p.t_new > 1 ? p.start : -1;  // one new position: k_valid suffices
  a.self.k_groups = tables;
  a.self.k_groups_stride = max_steps;
  a.cross = a.self;
  a.cross.k_len = fixed_bounds ? src_stride : p.src_longest;
  a.cross.causal_offset = -1;
  a.cross.kv_index = sources;
  a.cross.k_valid = src_lengths;
  a.cross.k_groups = src_slots;
  a.cross.k_groups_stride = src_stride;
  return a;
}

}  // namespace tnmt::graph

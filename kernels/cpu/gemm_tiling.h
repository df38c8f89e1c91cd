// Row tiling and per-call scratch shared by the packed GEMM kernels (gemm_packed.cc,
// gemm_int8.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tnmt::kernels::cpu {

// Row tiles of a block of rows: `tiles` tiles of base or base + 1 rows (the first `extra`),
// each at most max_mr rows, so that m = 128 runs as 13/12-row tiles rather than 9 x 14 and a
// 2-row remainder.
struct Tiling {
  int tiles, base, extra;
  Tiling(int rows, int max_mr) {
    tiles = (rows + max_mr - 1) / max_mr;
    base = rows / tiles;
    extra = rows % tiles;
  }
  int rows(int t) const { return base + (t < extra ? 1 : 0); }
  int start(int t) const { return t * base + std::min(t, extra); }
};

// x rounded up to a multiple of `to`.
inline int RoundUp(int x, int to) { return (x + to - 1) / to * to; }

// At least n elements of a reused per-thread buffer, uninitialized as far as the caller is
// concerned: it only grows, so calls of alternating sizes (k = 256 and 1024 layers in turn) do
// not zero-fill the difference on every call as vector::resize would.
template <class T>
T* GrowScratch(std::vector<T>* buffer, size_t n) {
  if (buffer->size() < n) buffer->resize(n);
  return buffer->data();
}

}  // namespace tnmt::kernels::cpu

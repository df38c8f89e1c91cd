// AMX tile set-up shared by the int8 (gemm_int8.cc) and bfloat16 (gemm_bf16.cc) kernels. Both
// use one configuration: all eight tiles 16 rows x 64 bytes. tmm0-3 hold float32/int32 sums of
// rows 0-15 / 16-31 x a panel's columns 0-15 / 16-31, tmm4-5 the left operand's rows 0-15 /
// 16-31, tmm6-7 the right operand's columns 0-15 / 16-31 (16 rows of 4 bytes per column: a
// group of 4 int8 or a pair of bfloat16 along k). Callers check UseAmxInt8 / UseAmxBf16
// (cpu_features.h) first.
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

constexpr int kAmxRows = 16;   // rows per tile register
constexpr int kAmxBytes = 64;  // bytes per tile row
// Rows of c per kernel call: two tile registers' worth (tmm0-1 and tmm2-3).
constexpr int kAmxTileRows = 2 * kAmxRows;

struct alignas(64) AmxConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace tnmt::kernels::cpu

#if defined(__x86_64__)
#include <immintrin.h>

#define TNMT_AMX_TILE_TARGET __attribute__((target("amx-tile")))

namespace tnmt::kernels::cpu {

// Loads the configuration on the calling thread; AmxEnd releases the tile state again. Written
// as asm rather than _tile_loadconfig, whose operand tells GCC 12 that only the first 8 bytes
// of the configuration are read; the "memory" clobber also orders the operands' stores before
// the tile loads, whose asm (GCC's _tile_loadd) names no memory operand.
TNMT_AMX_TILE_TARGET inline void AmxBegin() {
  AmxConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kAmxRows;
    config.colsb[t] = kAmxBytes;
  }
  asm volatile("ldtilecfg %0" : : "m"(config) : "memory");
}

TNMT_AMX_TILE_TARGET inline void AmxEnd() { asm volatile("tilerelease" ::: "memory"); }

// The tile product of the int8 (tdpbusd) and bfloat16 (tdpbf16ps) kernels: tmm0-1 (and tmm2-3
// when `two`) += the left operand's rows 0-15 (16-31 at a + a_rows16 bytes) times the right
// operand's columns 0-15 (16-31 at b + b_half bytes), over `chunks` steps along k; a and b
// advance by a_step and b_step bytes per step. The sums must already be in tmm0-3.
// With kPrefetchA, each step asks for the next step's rows of a in L1 while its products run:
// for a left operand that comes from L2 (a packed block of many row tiles), a tile load
// would otherwise wait for it, and the products after it (no tile register to load ahead
// into) with it; the bfloat16 training GEMMs at d_model 256 ran 10-20% faster.
enum class AmxDot { kInt8, kBf16 };

template <AmxDot kDot, bool kPrefetchA = false>
__attribute__((target("amx-tile,amx-int8,amx-bf16"))) inline void AmxTileProduct(
    int chunks, const char* a, int64_t stride_a, int64_t a_rows16, int64_t a_step, const char* b, int64_t stride_b,
    int64_t b_half, int64_t b_step, bool two) {
  for (int ch = 0; ch < chunks; ++ch, a += a_step, b += b_step) {
    if constexpr (kPrefetchA) {
      if (ch + 1 < chunks) {
        const char* next = a + a_step;
        for (int r = 0; r < kAmxRows; ++r) __builtin_prefetch(next + r * stride_a, 0, 3);
        if (two) {
          for (int r = 0; r < kAmxRows; ++r) __builtin_prefetch(next + a_rows16 + r * stride_a, 0, 3);
        }
      }
    }
    _tile_loadd(6, b, stride_b);
    _tile_loadd(7, b + b_half, stride_b);
    _tile_loadd(4, a, stride_a);
    if constexpr (kDot == AmxDot::kInt8) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
    }
    if (two) {
      _tile_loadd(5, a + a_rows16, stride_a);
      if constexpr (kDot == AmxDot::kInt8) {
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
      } else {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
}

// Stores tmm0-1 (and tmm2-3 when `two`) as rows 0-15 (16-31) x columns 0-15, 16-31 of 4-byte
// elements at c (row stride stride_c bytes); AmxLoadSums loads them from there, AmxZeroSums
// zeroes them.
TNMT_AMX_TILE_TARGET inline void AmxStoreSums(void* c, int64_t stride_c, bool two) {
  char* p = static_cast<char*>(c);
  _tile_stored(0, p, stride_c);
  _tile_stored(1, p + 64, stride_c);
  if (two) {
    _tile_stored(2, p + kAmxRows * stride_c, stride_c);
    _tile_stored(3, p + kAmxRows * stride_c + 64, stride_c);
  }
}

TNMT_AMX_TILE_TARGET inline void AmxLoadSums(const void* c, int64_t stride_c, bool two) {
  const char* p = static_cast<const char*>(c);
  _tile_loadd(0, p, stride_c);
  _tile_loadd(1, p + 64, stride_c);
  if (two) {
    _tile_loadd(2, p + kAmxRows * stride_c, stride_c);
    _tile_loadd(3, p + kAmxRows * stride_c + 64, stride_c);
  }
}

TNMT_AMX_TILE_TARGET inline void AmxZeroSums(bool two) {
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
}

}  // namespace tnmt::kernels::cpu

#endif  // defined(__x86_64__)

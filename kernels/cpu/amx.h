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

struct alignas(64) AmxConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace tnmt::kernels::cpu

#if defined(__x86_64__)
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

}  // namespace tnmt::kernels::cpu

#endif  // defined(__x86_64__)

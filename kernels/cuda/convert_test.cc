// cuda::Convert against an independent host reference: every float16/bfloat16 value is decoded
// exactly into a double, and narrowing picks the nearest representable value by binary search
// over those (ties to the even bit pattern, beyond the largest finite value by the same rule
// with infinity standing one step above it). Exact bits are compared, including NaN
// (canonical), infinities, signed zeros, subnormals and every rounding tie.
#include "kernels/cuda/convert.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// A 16-bit format with 1 sign bit, `exp_bits` exponent bits and the rest mantissa (float16:
// 5, bfloat16: 8), decoded and rounded to exactly.
struct HalfFormat {
  int exp_bits;
  uint16_t canonical_nan;

  int mant_bits() const { return 15 - exp_bits; }
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint16_t inf_bits() const { return static_cast<uint16_t>(((1 << exp_bits) - 1) << mant_bits()); }
  bool IsNaN(uint16_t h) const {
    return (h & 0x7fff) > inf_bits();
  }
  // Magnitude of a non-negative pattern up to inf_bits(); inf_bits() itself is treated as the
  // next step above the largest finite value (2^(emax+1)), which is what rounding needs.
  double Magnitude(uint16_t h) const {
    const int e = (h >> mant_bits()) & ((1 << exp_bits) - 1);
    const int m = h & ((1 << mant_bits()) - 1);
    if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias() - mant_bits());
    return std::ldexp(static_cast<double>((1 << mant_bits()) + m), e - bias() - mant_bits());
  }
  // Exact value (NaN and inf as such).
  double Decode(uint16_t h) const {
    if (IsNaN(h)) return std::numeric_limits<double>::quiet_NaN();
    const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
    if ((h & 0x7fff) == inf_bits()) return sign * std::numeric_limits<double>::infinity();
    return sign * Magnitude(h & 0x7fff);
  }
  // Round to nearest, ties to even, of an exact value (a double holding a float or a decoded
  // 16-bit value).
  uint16_t Encode(double v) const {
    if (std::isnan(v)) return canonical_nan;
    const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
    const double a = std::fabs(v);
    if (a >= Magnitude(inf_bits())) return sign | inf_bits();
    // Largest pattern p in [0, inf_bits()) with Magnitude(p) <= a (magnitudes grow with p).
    uint16_t lo = 0, hi = inf_bits();  // Magnitude(lo) <= a < Magnitude(hi)
    while (hi - lo > 1) {
      const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
      if (Magnitude(mid) <= a) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const double below = a - Magnitude(lo), above = Magnitude(hi) - a;
    uint16_t pick;
    if (below < above) {
      pick = lo;
    } else if (above < below) {
      pick = hi;
    } else {
      pick = (lo & 1) == 0 ? lo : hi;
    }
    return sign | pick;
  }
};

constexpr HalfFormat kHalf{5, 0x7e00};
constexpr HalfFormat kBFloat16{8, 0x7fc0};

const HalfFormat& Format(DType t) { return t == DType::kFloat16 ? kHalf : kBFloat16; }

uint32_t ReferenceToFloat(const HalfFormat& f, uint16_t h) {
  if (f.IsNaN(h)) return 0x7fc00000u;
  return FloatBits(static_cast<float>(f.Decode(h)));
}

// Float32 inputs that exercise every rounding case of both 16-bit formats.
std::vector<float> Float32Inputs() {
  std::vector<float> v;
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, 65504.0f, 65519.996f, 65520.0f, 65536.0f,
                  -65520.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::denorm_min(), std::ldexp(1.0f, -24),
                  std::ldexp(1.0f, -25), std::ldexp(3.0f, -25), std::ldexp(1.0f, -26),
                  std::ldexp(1.0f, -14), std::ldexp(1023.0f, -24), std::ldexp(2047.0f, -25)}) {
    v.push_back(x);
  }
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu,
                        0x7fffffffu, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu,
                        0x7f7f8000u, 0x7f7f7fffu, 0x00008000u, 0x00018000u, 0x80400000u}) {
    v.push_back(BitsFloat(bits));
  }
  // Every finite 16-bit value of both formats, the midpoints to the next value and their
  // float32 neighbours (ties and just-off-ties), with both signs.
  for (const HalfFormat* f : {&kHalf, &kBFloat16}) {
    for (uint32_t h = 0; h < f->inf_bits(); ++h) {
      const double lo = f->Magnitude(static_cast<uint16_t>(h));
      const double mid = 0.5 * (lo + f->Magnitude(static_cast<uint16_t>(h + 1)));
      const float m = static_cast<float>(mid);
      for (float x : {static_cast<float>(lo), m, std::nextafter(m, 0.0f), std::nextafter(m, inf)}) {
        v.push_back(x);
        v.push_back(-x);
      }
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) v.push_back(BitsFloat(static_cast<uint32_t>(rng())));
  return v;
}

std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> v(1 << 16);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

// The reference itself, on values known by heart (runs without a GPU).
TEST(ConvertReference, KnownValues) {
  EXPECT_EQ(kHalf.Encode(1.0), 0x3c00);
  EXPECT_EQ(kHalf.Encode(-2.0), 0xc000);
  EXPECT_EQ(kHalf.Encode(65504.0), 0x7bff);
  EXPECT_EQ(kHalf.Encode(65519.99), 0x7bff);
  EXPECT_EQ(kHalf.Encode(65520.0), 0x7c00);  // tie with the odd 0x7bff: to infinity
  EXPECT_EQ(kHalf.Encode(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(kHalf.Encode(std::ldexp(1.0, -25)), 0x0000);  // tie: to even zero
  EXPECT_EQ(kHalf.Encode(-std::ldexp(1.0, -25)), 0x8000);
  EXPECT_EQ(kHalf.Encode(std::ldexp(3.0, -25)), 0x0002);  // tie between 1 and 2: to 2
  EXPECT_EQ(kHalf.Encode(std::ldexp(1.0, -14)), 0x0400);
  EXPECT_EQ(kHalf.Encode(1.0 + std::ldexp(1.0, -11)), 0x3c00);   // tie: to even
  EXPECT_EQ(kHalf.Encode(1.0 + std::ldexp(3.0, -11)), 0x3c02);   // tie: to even
  EXPECT_EQ(kHalf.Encode(std::nan("")), 0x7e00);
  EXPECT_EQ(kHalf.Encode(-std::numeric_limits<double>::infinity()), 0xfc00);
  EXPECT_EQ(kBFloat16.Encode(1.0), 0x3f80);
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x3f808000u)), 0x3f80);
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x3f818000u)), 0x3f82);
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x3f808001u)), 0x3f81);
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x7f7f8000u)), 0x7f80);  // tie with odd max: infinity
  EXPECT_EQ(kBFloat16.Encode(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x00008000u)), 0x0000);  // tie: to even
  EXPECT_EQ(kBFloat16.Encode(BitsFloat(0x00018000u)), 0x0002);
  EXPECT_EQ(kBFloat16.Encode(std::nan("")), 0x7fc0);
  EXPECT_EQ(ReferenceToFloat(kHalf, 0x0001), FloatBits(std::ldexp(1.0f, -24)));
  EXPECT_EQ(ReferenceToFloat(kHalf, 0xfc00), 0xff800000u);
  EXPECT_EQ(ReferenceToFloat(kHalf, 0x7d00), 0x7fc00000u);
  EXPECT_EQ(ReferenceToFloat(kBFloat16, 0x3f80), 0x3f800000u);
  EXPECT_EQ(ReferenceToFloat(kBFloat16, 0x8001), 0x80010000u);
  // Decoding then encoding every finite pattern gives it back.
  for (const HalfFormat* f : {&kHalf, &kBFloat16}) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
      if (f->IsNaN(static_cast<uint16_t>(h))) continue;
      ASSERT_EQ(f->Encode(f->Decode(static_cast<uint16_t>(h))), h) << f->exp_bits;
    }
  }
}

class ConvertTest : public testing::CudaTest {
 protected:
  // Runs Convert on a device copy of src (starting `offset` elements into the buffer, so odd
  // addresses are covered) and returns the result, whose buffer was poisoned first.
  template <typename D, typename S>
  std::vector<D> Run(DType dst_type, const std::vector<S>& src, DType src_type, int offset = 0) {
    std::vector<S> padded(offset, S{});
    padded.insert(padded.end(), src.begin(), src.end());
    const S* d_src = ToDevice(padded) + offset;
    D* d_dst = Alloc<D>(src.size() + offset) + offset;
    Poison(d_dst, src.size() * sizeof(D));
    const absl::Status s =
        Convert(*ctx_, d_dst, dst_type, d_src, src_type, static_cast<int64_t>(src.size()));
    EXPECT_TRUE(s.ok()) << s;
    return ToHost(d_dst, src.size());
  }
};

TEST_F(ConvertTest, Float32ToHalfTypes) {
  const std::vector<float> in = Float32Inputs();
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    std::vector<uint16_t> want(in.size());
    for (size_t i = 0; i < in.size(); ++i) want[i] = Format(t).Encode(in[i]);
    for (int offset : {0, 1}) {
      const std::vector<uint16_t> got = Run<uint16_t>(t, in, DType::kFloat32, offset);
      int64_t bad = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        if (got[i] != want[i] && ++bad <= 10) {
          ADD_FAILURE() << DTypeName(t) << " from float32 bits 0x" << std::hex << FloatBits(in[i])
                        << ": got 0x" << got[i] << ", want 0x" << want[i];
        }
      }
      EXPECT_EQ(bad, 0) << DTypeName(t) << " offset " << offset;
    }
  }
}

TEST_F(ConvertTest, HalfTypesToEveryType) {
  const std::vector<uint16_t> in = AllPatterns();
  for (DType from : {DType::kFloat16, DType::kBFloat16}) {
    const HalfFormat& f = Format(from);
    const std::vector<uint32_t> wide = Run<uint32_t>(DType::kFloat32, in, from, 1);
    int64_t bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (wide[i] != ReferenceToFloat(f, in[i]) && ++bad <= 10) {
        ADD_FAILURE() << DTypeName(from) << " 0x" << std::hex << in[i] << " to float32: got 0x"
                      << wide[i] << ", want 0x" << ReferenceToFloat(f, in[i]);
      }
    }
    EXPECT_EQ(bad, 0) << DTypeName(from) << " to float32";

    const DType to = from == DType::kFloat16 ? DType::kBFloat16 : DType::kFloat16;
    const std::vector<uint16_t> other = Run<uint16_t>(to, in, from);
    bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t want = Format(to).Encode(f.Decode(in[i]));
      if (other[i] != want && ++bad <= 10) {
        ADD_FAILURE() << DTypeName(from) << " 0x" << std::hex << in[i] << " to " << DTypeName(to)
                      << ": got 0x" << other[i] << ", want 0x" << want;
      }
    }
    EXPECT_EQ(bad, 0) << DTypeName(from) << " to " << DTypeName(to);

    // Same type: a copy that keeps every bit, NaN payloads included.
    EXPECT_EQ(Run<uint16_t>(from, in, from, 1), in);
  }
}

TEST_F(ConvertTest, Float32CopyKeepsBits) {
  std::vector<uint32_t> in = {0x7f800001u, 0xffc12345u, 0x80000000u, 0x00000001u, 0x3f800000u};
  std::mt19937 rng(3);
  for (int i = 0; i < 1001; ++i) in.push_back(static_cast<uint32_t>(rng()));
  EXPECT_EQ(Run<uint32_t>(DType::kFloat32, in, DType::kFloat32, 1), in);
}

TEST_F(ConvertTest, EmptyAndInvalid) {
  EXPECT_TRUE(Convert(*ctx_, nullptr, DType::kFloat16, nullptr, DType::kFloat32, 0).ok());
  float* d = Alloc<float>(4);
  EXPECT_EQ(Convert(*ctx_, d, DType::kFloat16, d, DType::kFloat32, -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Convert(*ctx_, d, DType::kFloat32, d, DType::kFloat32, 4).ok());
  EXPECT_TRUE(ctx_->Synchronize().ok());
}

}  // namespace
}  // namespace tnmt::kernels::cuda

// Single-precision GEMM on the CPU: GemmNT/NN/TN through OpenBLAS (the only BLAS tnmt uses;
// loaded at run time, see gemm.cc), and GemmPacked, tnmt's own AVX-512 and AVX2 kernels for a weight
// operand packed once (gemm_packed.cc; the decoder steps' linears).
// Row-major throughout. Thread count is process-wide and set once by the runtime
// (SetBlasThreads); kernels never change it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tnmt::kernels::cpu {

// c: [m, n] = alpha * a: [m, k] · b^T + beta * c, with b stored [n, k] (torch Linear layout).
// lda/ldb/ldc are row strides in elements.
void GemmNT(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);

// c: [m, n] = alpha * a: [m, k] · b: [k, n] + beta * c.
void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);

// c: [m, n] = alpha * a^T · b + beta * c, with a stored [k, m] and b stored [k, n].
void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);

// Mixed-precision GEMM for training: c: [m, n] = op(a) · op(b) (+ bias[n] when bias is not null)
// (+ c when accumulate), every element of a and b rounded to bfloat16 (to nearest, ties to even)
// and the products summed in float32. op(a) is a: [m, k] (row stride lda), or a stored [k, m]
// when trans_a; op(b) is b: [k, n], or b stored [n, k] when trans_b. So GemmNT is (false, true),
// GemmNN (false, false) and GemmTN (true, false). On CPUs with AVX-512 BF16 (HasBf16Gemm) it runs
// tnmt's kernel at twice the float32 multiply-add rate; elsewhere it rounds copies of the
// operands and runs the float32 GEMM (the same products, no faster: for tests and completeness). Sums of the kernel's
// pairs of products may round differently from the copies' sequential sums. Each call packs
// both operands; the kernel's results depend neither on the thread count nor on m.
void GemmBf16(bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
              const float* bias, bool accumulate, float* c, int ldc);
// GemmBf16 with a given as bfloat16 values (their bits; the row stride lda in elements), e.g. a
// gradient stored as bfloat16 by the loss (LabelSmoothedCrossEntropyBf16): the result is bit for
// bit GemmBf16's on those values as float32. On CPUs with AMX-BF16 (UseAmxBf16) the kernel packs a
// from the bfloat16 values directly (half the bytes to read); elsewhere a is first expanded to a
// float32 copy.
void GemmBf16A(bool trans_a, bool trans_b, int m, int n, int k, const uint16_t* a, int lda, const float* b, int ldb,
               const float* bias, bool accumulate, float* c, int ldc);
// Whether GemmBf16 runs its own kernel here: the CPU has AVX-512 BF16 and the active
// instruction-set level (cpu_features.h) is avx512.
bool HasBf16Gemm();
// x rounded to the nearest bfloat16 (ties to even), as a float; NaN stays NaN.
float RoundToBfloat16(float x);

struct PackedInt8;  // gemm_int8.cc

// A weight matrix b: [n, k] (torch Linear layout) packed once, for GemmPacked: panels of 32
// output columns, each [k, 32] contiguous (the layout the AVX-512 kernel streams, so GEMMs
// with it never re-pack b as cblas_sgemm does on every call). Immutable and cheap to copy
// (copies share the data); it does not follow later changes to b.
// PackInt8 stores b quantized to int8 instead (one scale per output column); GemmPacked with
// such a matrix quantizes each row of a to int8 (one scale per row) and multiplies in
// integers (gemm_int8.cc).
class PackedMatrix {
 public:
  PackedMatrix() = default;
  // Packs b ([n, k], row stride ldb). Works on every CPU (kernels for AVX-512, AVX2 + FMA and
  // portable code); empty only for an empty shape or when memory is short: callers then use
  // GemmNT on b.
  static PackedMatrix Pack(int n, int k, const float* b, int ldb);
  // Quantizes and packs b for int8 GEMMs: w[j, k] ~ s[j] * q[j, k], s[j] = max_k |w[j, k]| / 63,
  // q = round(w / s[j]) in [-63, 63] (7 bits, as the activations, so that AVX2's byte products
  // cannot saturate; see gemm_int8.cc). Works on every CPU (kernels for AVX-512 VNNI, AVX2 and
  // portable code); empty only for an empty shape or when memory is short.
  static PackedMatrix PackInt8(int n, int k, const float* b, int ldb);

  bool empty() const { return data_ == nullptr && int8_ == nullptr; }
  bool is_int8() const { return int8_ != nullptr; }
  int n() const { return n_; }
  int k() const { return k_; }
  int64_t bytes() const;  // memory held
  const float* data() const { return data_.get(); }
  const PackedInt8* int8_data() const { return int8_.get(); }
  // Every weight is finite (float32 packing), so a zero activation's products are all zero.
  bool finite() const { return finite_; }

 private:
  std::shared_ptr<const float> data_;
  std::shared_ptr<const PackedInt8> int8_;
  int n_ = 0, k_ = 0;
  bool finite_ = false;
};

// c: [m, n] = a: [m, k] · b^T (+ bias[n] when bias is not null) (+ c when accumulate), with
// b packed by PackedMatrix::Pack or PackInt8 (not empty; a's width is b.k()); with relu, each
// element is then x > 0 ? x : 0 (BiasActivation's ReLU: NaN and -0 give +0), applied as c is
// stored. Splits output-column panels over the compute threads (parallel.h); results do not
// depend on the split or on m, nor (for either kind of b) on which instruction-set path runs.
// Mostly-zero activations (a ReLU's output, the feed-forward's second product) cost less: with
// float32 weights, all finite, a k step at which every row of a register tile is zero is
// skipped. Its products are all ±0, and adding ±0 changes no element but one exactly zero,
// whose sign it may set: that sign is all a skip can change, so values still do not depend
// on the batch, the split or the path.
void GemmPacked(int m, const float* a, int lda, const PackedMatrix& b, const float* bias,
                bool accumulate, float* c, int ldc, bool relu = false);
// GemmPacked's int8 half (b.is_int8()).
void GemmPackedInt8(int m, const float* a, int lda, const PackedMatrix& b, const float* bias,
                    bool accumulate, float* c, int ldc);
int64_t PackedInt8Bytes(const PackedInt8& p, int n);

// Whether GemmPacked is the faster choice for m rows times b (else GemmNT on the row-major
// weights): measured per shape class, see gemm_packed.cc.
bool PreferPacked(int m, const PackedMatrix& b);

// Sets the BLAS thread pool size and the compute threads (parallel.h) for the whole process
// (call once, before any GEMM): the one place that decides threads.
void SetBlasThreads(int threads);
int BlasThreads();
// The kernel family OpenBLAS runs (e.g. "SkylakeX"); see gemm.cc for how it is chosen.
std::string BlasCoreName();

}  // namespace tnmt::kernels::cpu

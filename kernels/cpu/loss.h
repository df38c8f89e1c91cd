// The training losses on the CPU, each turning the logits into their gradient in place: the
// label-smoothed cross-entropy and R-Drop's consistency term (the CUDA kernels:
// kernels/cuda/loss.h). Raw pointers, outputs first.
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

// Label-smoothed cross-entropy over logits: [rows, vocab], in place: logits become
// d(loss)/d(logits) for the summed loss. Target distribution: 1 - eps + eps/(V-1) on the
// target, eps/(V-1) on every other token except pad, 0 on pad. Rows whose target is pad are
// ignored (gradient 0). Returns the summed smoothed loss; *nll_sum gets the summed negative
// log-likelihood of the targets and *count the number of non-pad targets.
double LabelSmoothedCrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab,
                                 float eps, int32_t pad, double* nll_sum, int64_t* count);

// LabelSmoothedCrossEntropy with the gradient stored as bfloat16 in place of the logits: row r's
// vocab values at reinterpret_cast<uint16_t*>(logits) + r * 2 * vocab (the first half of the
// row's bytes; the second half is left holding scratch values), each the float32 value
// LabelSmoothedCrossEntropy gives rounded to bfloat16 as the bfloat16 GEMMs round their operands
// (GemmBf16A reads it: the bfloat16 trainer's logit gradient, half the bytes to write and
// read). Same loss and sums.
double LabelSmoothedCrossEntropyBf16(float* logits, const int32_t* targets, int64_t rows, int vocab,
                                     float eps, int32_t pad, double* nll_sum, int64_t* count);

// R-Drop's consistency term (Liang et al., 2021) between the two halves of a doubled batch:
// logits: [2 * pairs, vocab], row r and row r + pairs are the same target token run through
// two dropout masks, with softmax distributions p and q. In place, the logits become the
// gradient of h * (KL(p || q) + KL(q || p)), h = alpha / 2, for every pair whose target is not
// pad (targets: [2 * pairs]; pad pairs get a zero gradient); returns that term summed over
// the pairs. With p = softmax(x), q = softmax(y) and d = log p - log q:
//   dx = h * (p * (d - KL(p || q)) + p - q),   dy = h * (q * (-d - KL(q || p)) + q - p).
double RDropConsistency(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                        float alpha, int32_t pad);

// LabelSmoothedCrossEntropy of a doubled batch (logits: [2 * pairs, vocab], row r and row
// pairs + r the same target token under two dropout masks; targets: [2 * pairs]) plus
// RDropConsistency between its halves: in place, the logits become the gradient of both; returns
// the summed loss with the term, *nll_sum and *count as LabelSmoothedCrossEntropy's. Both read
// the raw logits, so blocks of block_pairs pairs (0: as many as 8 MiB holds) go in turn: the
// block's rows of both halves are copied, the copy becomes the term's gradient, the rows the
// loss's, and the copy is added. Every element is the one the two kernels give over the whole
// batch (a copy of it, then Add); only the sums are taken block by block.
double LabelSmoothedCrossEntropyWithRDrop(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                          float eps, float alpha, int32_t pad, double* nll_sum, int64_t* count,
                                          int64_t block_pairs = 0);

// LabelSmoothedCrossEntropyWithRDrop with the gradient stored as bfloat16 in place, laid out and
// rounded as LabelSmoothedCrossEntropyBf16 stores it (each value the float32 call's, rounded).
double LabelSmoothedCrossEntropyWithRDropBf16(float* logits, const int32_t* targets, int64_t pairs, int vocab,
                                              float eps, float alpha, int32_t pad, double* nll_sum, int64_t* count,
                                              int64_t block_pairs = 0);

}  // namespace tnmt::kernels::cpu

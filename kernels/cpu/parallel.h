// ParallelFor: splits [0, n) into contiguous chunks over the process's compute threads (set
// once with SetComputeThreads, normally together with the BLAS threads). Between calls a worker
// polls for 50 us (a decoder step's next call usually comes sooner), then sleeps on a condition
// variable, so an idle pool does not spin against OpenBLAS's or a server's threads.
// Each index is processed by exactly one thread; results must not depend on the split.
#pragma once

#include <cstdint>
#include <functional>

namespace tnmt::kernels::cpu {

void SetComputeThreads(int threads);
int ComputeThreads();

// Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done.
// Runs inline when n is small or one thread is configured. Safe to call from several threads
// and from inside fn: a call made while another one uses the workers runs inline, on its
// caller's thread (as one chunk).
void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

// ParallelFor when the work is worth a parallel call (n * work_per_index >= 2^15 elements, a
// parallel call costing a few microseconds); otherwise fn(0, n) on the caller (nothing for
// n <= 0).
void ParallelForLarge(int64_t n, int64_t work_per_index, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tnmt::kernels::cpu

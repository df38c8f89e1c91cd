// The training loop: data → batches → forward/backward → gradient all-reduce → Adam, with
// validation (dev loss and dev BLEU through the engine's beam search), atomic checkpoints and
// exact resume (parameters, Adam moments, step, data position, float16 loss scale; dropout
// masks are a function of (seed, step, micro-batch, rank), so no RNG state needs saving).
// The step itself runs in a TrainEngine (trainer/model/train_engine.h) for cfg.device and
// cfg.dtype: the CPU, or a GPU (with several ranks, NCCL over the collective's ranks does the
// per-step reductions; the collective then only bootstraps NCCL and syncs checkpoints).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "trainer/collective/collective.h"
#include "trainer/train_config.h"

namespace tnmt::train {

struct TrainHooks {
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGTERM): checkpoint and return
  bool progress_line = false;               // live one-line progress on stderr (rank 0)
};

// Makes freed memory stay in the process for reuse: every training step allocates and frees
// the same large activation and gradient buffers (the logits alone are tokens x vocab floats,
// ~100 MB), which glibc otherwise maps and unmaps each time, paying page faults and zeroing
// (measured: +12-15% training tokens/s on 1 thread, same peak RSS). For processes that train;
// call it before starting threads that allocate (a thread's own arena would still map and unmap
// its large blocks: strace counts ~80 mmap/munmap calls per update for a second CPU rank
// otherwise, and none with it).
void KeepFreedMemory();

// Trains until max_steps / max_epochs or a stop request; resumes from the newest checkpoint in
// cfg.save_dir if there is one. Every rank of `collective` must call it with the same config.
// Ranks may be threads of one process (RunInProcessGroup): a call keeps its state to itself,
// only rank 0 writes to save_dir (each rank its own data cache) and stderr, and the ranks may
// share hooks.stop (they agree on it through the collective).
absl::Status RunTraining(const TrainConfig& cfg, Collective* collective, const TrainHooks& hooks);

}  // namespace tnmt::train

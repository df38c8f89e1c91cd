// CUDA graphs of a repeated kernel sequence (the decode step), keyed by everything the
// sequence bakes into its launches: sizes and every device pointer it touches. A graph is
// replayed only for an identical key, so a replay reads and writes exactly the buffers an
// eager run would; the inputs that change from call to call must live in device memory at
// fixed addresses (part of the key) and be uploaded before Run.
//
// Policy: the first time a key is seen the sequence runs eagerly (which also creates cached
// state such as cuBLASLt plans); the second time it is captured (stream capture, thread-local
// mode) and launched; later times the graph is replayed. If capture fails the key is marked
// and always runs eagerly. At most kMaxGraphs are kept (least recently used dropped).
// One GraphCache per stream and host thread at a time (as its Context).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace tnmt::cuda_engine {

class GraphCache {
 public:
  static constexpr int kMaxGraphs = 32;
  struct Stats {
    int64_t eager = 0;     // runs without a graph
    int64_t captures = 0;  // graphs captured and instantiated
    int64_t replays = 0;   // launches of a cached graph (captures excluded)
    int64_t failed = 0;    // captures that failed (those keys run eagerly from then on)
  };

  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache();

  // Queues `enqueue`'s work on `stream`, as a graph when the policy above allows.
  // `enqueue` must only queue work on `stream` (no allocation, no synchronization, no host
  // reads of device results) and queue the same work for the same key.
  absl::Status Run(const std::vector<uint64_t>& key, cudaStream_t stream,
                   const std::function<absl::Status()>& enqueue);
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    std::vector<uint64_t> key;
    int seen = 0;
    bool failed = false;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };
  Entry& Find(const std::vector<uint64_t>& key);
  // Captures enqueue into entry.exec; false (and the stream usable again) if that failed.
  bool Capture(Entry& entry, cudaStream_t stream, const std::function<absl::Status()>& enqueue);

  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace tnmt::cuda_engine

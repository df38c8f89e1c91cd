// GraphCache; see graph_cache.h.
#include "engine/cuda/graph_cache.h"

#include <algorithm>

#include "kernels/cuda/check.h"

namespace tnmt::cuda_engine {

GraphCache::~GraphCache() {
  // An executable graph still running is freed when it completes (CUDA's contract).
  for (Entry& e : entries_) {
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  }
}

GraphCache::Entry& GraphCache::Find(const std::vector<uint64_t>& key) {
  ++clock_;
  for (Entry& e : entries_) {
    if (e.key == key) {
      e.last_use = clock_;
      return e;
    }
  }
  if (static_cast<int>(entries_.size()) >= kMaxGraphs) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    if (oldest->exec != nullptr) cudaGraphExecDestroy(oldest->exec);
    entries_.erase(oldest);
  }
  Entry e;
  e.key = key;
  e.last_use = clock_;
  entries_.push_back(std::move(e));
  return entries_.back();
}

bool GraphCache::Capture(Entry& e, cudaStream_t stream,
                         const std::function<absl::Status()>& enqueue) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const absl::Status queued = enqueue();
  cudaGraph_t graph = nullptr;
  // Always ends the capture, so the stream takes work again whatever happened.
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  bool ok = queued.ok() && ended == cudaSuccess && graph != nullptr;
  if (ok) ok = cudaGraphInstantiate(&e.exec, graph, 0) == cudaSuccess;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!ok) {
    e.exec = nullptr;
    cudaGetLastError();  // the capture's errors are not the caller's: it runs eagerly next
  }
  return ok;
}

absl::Status GraphCache::Run(const std::vector<uint64_t>& key, cudaStream_t stream,
                             const std::function<absl::Status()>& enqueue) {
  Entry& e = Find(key);
  ++e.seen;
  if (e.exec != nullptr) {
    ++stats_.replays;
    return TNMT_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
  }
  if (!e.failed && e.seen >= 2) {
    if (Capture(e, stream, enqueue)) {
      ++stats_.captures;
      return TNMT_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
    }
    e.failed = true;
    ++stats_.failed;
  }
  ++stats_.eager;
  return enqueue();
}

}  // namespace tnmt::cuda_engine

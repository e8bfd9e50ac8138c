// The signal sink of a comm whose signal words are GPU memory (its symmetric heap): signals that
// arrive over the network are applied on the GPU by a one-thread kernel on a stream of their own,
// as a release store or a release add at system scope, so a kernel polling the word with
// ld.acquire.sys sees the data that preceded the signal (the engine applies a signal only after
// the data fenced before it has landed). The CPU cannot add atomically to GPU memory, hence a
// kernel; it needs one free block slot, so a kernel that fills every SM while it waits for a
// network signal would wait forever (docs/network.md). The kernel is loaded when the sink is
// made, not lazily at the first signal: a lazy load waits for the kernels running on the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "proxy/net_engine.h"

namespace gshmem::proxy {

class GpuSignalSink {
 public:
  explicit GpuSignalSink(int device);
  ~GpuSignalSink();
  GpuSignalSink(const GpuSignalSink&) = delete;
  GpuSignalSink& operator=(const GpuSignalSink&) = delete;

  // A SignalSink (net_engine.h) with `arg` = this sink. Asynchronous; throws on a launch failure.
  static void apply(void* arg, uint64_t* word, uint64_t value, SignalUpdate update);

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace gshmem::proxy

// The sink of a comm whose memory that the network writes is GPU memory (its symmetric heap and
// windows): signals and atomics that arrive over the network are applied on the GPU by
// one-thread kernels on a stream of their own, in the order they arrive. The CPU cannot update
// GPU memory atomically, hence kernels.
//   signals  a release store or a release add at system scope, so a kernel polling the word
//            with ld.acquire.sys sees the data that preceded the signal (the engine applies a
//            signal only after the data fenced before it has landed);
//   atomics  a system-scope compare-and-swap loop (amo.h), which writes the old value to pinned
//            host memory that the engine polls (done()) before it answers the requester; a
//            value put's signal follows in the same kernel, as a signal above;
//   writes   an inline put's bytes (at most kInlineBytes) travel in the kernel's parameters, so
//            nothing of the engine's must outlive the launch; its signal follows in the kernel.
// A kernel needs one free block slot, so a kernel that fills every SM while it waits for a
// network signal or atomic would wait forever (docs/network.md). The kernels are loaded when the
// sink is made, not lazily at the first arrival: a lazy load waits for the kernels running on
// the GPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gshmem/proxy_queue.h"
#include "proxy/net_engine.h"

namespace gshmem::proxy {

class GpuSink final : public AtomicSink {
 public:
  explicit GpuSink(int device);
  ~GpuSink() override;
  GpuSink(const GpuSink&) = delete;
  GpuSink& operator=(const GpuSink&) = delete;

  // Makes this sink the one `engine` applies arriving signals and atomics with; it must outlive
  // the engine. Before the engine's first region is registered.
  void serve(NetEngine& engine);

  // A SignalSink (net_engine.h) with `arg` = this sink. Asynchronous; throws on a launch failure.
  static void apply(void* arg, uint64_t* word, uint64_t value, SignalUpdate update);

  // AtomicSink: at most kAtomicsInFlight started and not yet done; start throws on a launch
  // failure.
  bool full() const override { return started_ - finished_ >= kAtomicsInFlight; }
  uint64_t start(void* word, const Atomic& a, const SignalWord* then) override;
  uint64_t start_write(void* dst, const void* data, size_t bytes,
                       const SignalWord* then) override;
  bool done(uint64_t id, uint64_t* old) override;

  static constexpr uint64_t kAtomicsInFlight = 4096;

 private:
  // Launches kernel(result slot, ticket) on the sink's stream for the next id (`what`: what it
  // applies, for errors); throws when kAtomicsInFlight are in flight or the launch failed.
  template <class Launch>
  uint64_t launch(const char* what, Launch kernel);

  int device_;
  cudaStream_t stream_ = nullptr;
  ResultSlot* outcomes_ = nullptr;  // [kAtomicsInFlight], pinned host memory mapped into the GPU
  uint64_t started_ = 0;            // atomics started: the next id
  uint64_t finished_ = 0;           // ids below this were reported done
};

}  // namespace gshmem::proxy

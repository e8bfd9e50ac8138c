// ProxyChannel: what one comm's proxy path owns: the descriptor queue and the completion words,
// in memory its producers can reach, and the proxy thread that drains the queue onto a network
// engine (proxy.h). A host object; kernels get plain views of it (queue(), completion()).
//
// Producers::kGpu (kernels append, gshmem/device/proxy.cuh): the slots, head and completion
// words are pinned host memory mapped into the GPU, the ticket counter (tail) is GPU memory,
// where the producers' atomics are; so are the counters when a `counter_sink` is given (kernels
// add to them as well: windows' CounterInc on load/store peers; the proxy adds through the sink),
// else they are mapped host memory the proxy adds to.
// Producers::kHost (host threads; the CPU tests): ordinary memory, and try_push appends.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "gshmem/proxy_queue.h"
#include "proxy/net_engine.h"
#include "proxy/proxy.h"

namespace gshmem::proxy {

enum class Producers { kHost, kGpu };

class ProxyChannel {
 public:
  // `device`: the CUDA device of a kGpu channel's memory and of the data its descriptors name,
  // which the proxy thread works on (-1: none, for a kHost channel on host memory). `cpus`:
  // where the proxy thread runs (empty: anywhere). `counter_sink` (kGpu only): the counters are
  // GPU memory and the proxy adds to them through it.
  ProxyChannel(NetEngine& engine, uint64_t capacity, uint64_t counters, Producers producers,
               int device, std::vector<int> cpus = {}, SignalSink counter_sink = nullptr,
               void* counter_arg = nullptr);
  ~ProxyChannel();  // stops the thread, then frees the memory it used
  ProxyChannel(const ProxyChannel&) = delete;
  ProxyChannel& operator=(const ProxyChannel&) = delete;

  Producers producers() const { return producers_; }
  const QueueView& queue() const { return queue_; }
  const CompletionWords& completion() const { return completion_; }

  // A host producer's descriptor: its ticket, or nothing when the queue is full. Usage error on
  // a kGpu channel.
  std::optional<uint64_t> try_push(const Command& c);
  // The value ticket `ticket` fetched (kAtomic with fetch, kGetValue), once it is there; the
  // slot is reused by ticket + capacity. Usage error on a kGpu channel.
  std::optional<uint64_t> result(uint64_t ticket) const;
  // Descriptors retired so far; local completions counted by counter `i` (of a kGpu channel:
  // read from the GPU, synchronously).
  uint64_t retired() const;
  uint64_t counter(uint64_t i) const;
  // Blocks until `n` descriptors retired; throws the proxy thread's error, or
  // GSHMEM_ERROR_TIMEOUT after `timeout` seconds.
  void wait_retired(uint64_t n, double timeout) const;
  // Throws the error the proxy thread stopped on, if it did.
  void check() const;
  // Stops the thread after the descriptors it already took.
  void stop();
  // The engine's id of the region descriptors name kHeapRegion (Proxy::set_heap_region).
  void set_heap_region(int region) { proxy_->set_heap_region(region); }

 private:
  void allocate(uint64_t capacity, uint64_t counters);
  void release() noexcept;

  Producers producers_;
  int device_;
  void* block_ = nullptr;  // the slots, then head, retired, failed (and kHost: the counters)
  uint64_t* tail_ = nullptr;
  bool gpu_counters_wanted_ = false;
  uint64_t* gpu_counters_ = nullptr;  // kGpu with a counter sink
  QueueView queue_{};
  CompletionWords completion_{};
  std::unique_ptr<Proxy> proxy_;
};

}  // namespace gshmem::proxy

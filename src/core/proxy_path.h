// ProxyPath: how one comm reaches the PEs that its loads and stores do not (docs/network.md).
// It owns the network engine (UCX, on the comm's bootstrap), the comm's symmetric heap
// registered with it (again after every growth, so descriptors may name any heap address), the
// proxy channel that the comm's kernels feed, the sink that applies signals arriving for this
// PE to its heap on its GPU, and (GSHMEM_PROXY_STAGING) the pinned chunks GPU memory is staged
// through. Kernels reach it through gshmem_device_t's proxy_* fields. Windows (core/window.h)
// register their memory with its engine and take their counters from its pool: counters the
// proxy adds to (through the sink) and kernels add to (load/store peers), in GPU memory.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "bootstrap/tcp_bootstrap.h"
#include "heap/allocator.h"
#include "heap/symmetric_heap.h"
#include "proxy/channel.h"
#include "proxy/gpu_sink.h"
#include "proxy/net_engine.h"
#include "proxy/staging.h"

namespace gshmem {

class ProxyPath {
 public:
  // Collective over `bs`: engine, heap registration, proxy thread pinned near `device`.
  // `capacity`: descriptors in the queue. Throws gshmem::Error (UCX missing, a peer failing).
  ProxyPath(Bootstrap& bs, SymmetricHeap& heap, int device, uint64_t capacity, double timeout);
  ~ProxyPath();  // stops the thread first, then the engine, then the sink it calls
  ProxyPath(const ProxyPath&) = delete;
  ProxyPath& operator=(const ProxyPath&) = delete;

  // Collective (the heap's grow hook): registers the heap's new extent.
  void register_heap();
  const proxy::QueueView& queue() const { return channel_->queue(); }
  const proxy::CompletionWords& completion() const { return channel_->completion(); }
  // Throws the error the proxy thread stopped on, if it did.
  void check() const { channel_->check(); }

  // Collective: [base, base + bytes) of this PE (GPU memory) as a region descriptors can name
  // (its engine id, below proxy::kHeapRegion); throws the same error on every PE when a PE's
  // memory cannot be registered.
  int register_region(void* base, size_t bytes);
  // Collective: every operation issued so far complete, then the region is no target any more.
  void deregister_region(int region) { engine_->deregister_region(region); }
  // Returns once the proxy thread has taken and issued every descriptor kernels appended before
  // (call after synchronising the GPU); throws the proxy's error, or after `timeout` seconds.
  void drain(double timeout) const;
  // drain(), then every operation issued so far complete at its target (its signals applied
  // there included); throws the proxy's or the engine's error.
  void quiet(double timeout) const;
  // `n` (>= 1) consecutive counters of the pool, zeroed: the index of the first; throws when
  // the pool (64K counters) has no room. give_counters returns them.
  uint64_t take_counters(uint64_t n);
  void give_counters(uint64_t first) noexcept;

 private:
  SymmetricHeap& heap_;
  std::mutex counters_mu_;
  Allocator counter_pool_;  // indices into completion().counters
  std::unique_ptr<proxy::GpuSink> sink_;
  std::unique_ptr<proxy::Staging> staging_;  // outlives the engine that uses it
  std::unique_ptr<proxy::NetEngine> engine_;
  std::unique_ptr<proxy::ProxyChannel> channel_;
};

}  // namespace gshmem

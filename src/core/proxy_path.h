// ProxyPath: how one comm reaches the PEs that its loads and stores do not (docs/network.md).
// It owns the network engine (UCX, on the comm's bootstrap), the comm's symmetric heap
// registered with it (again after every growth, so descriptors may name any heap address), the
// proxy channel that the comm's kernels feed, the sink that applies signals arriving for this
// PE to its heap on its GPU, and (GSHMEM_PROXY_STAGING) the pinned chunks GPU memory is staged
// through. Kernels reach it through gshmem_device_t's proxy_* fields.
#pragma once

#include <cstdint>
#include <memory>

#include "bootstrap/tcp_bootstrap.h"
#include "heap/symmetric_heap.h"
#include "proxy/channel.h"
#include "proxy/gpu_signal_sink.h"
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

 private:
  SymmetricHeap& heap_;
  std::unique_ptr<proxy::GpuSignalSink> sink_;
  std::unique_ptr<proxy::Staging> staging_;  // outlives the engine that uses it
  std::unique_ptr<proxy::NetEngine> engine_;
  std::unique_ptr<proxy::ProxyChannel> channel_;
};

}  // namespace gshmem

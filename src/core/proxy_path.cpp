#include "core/proxy_path.h"

#include <string>
#include <vector>

#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"

namespace gshmem {
namespace {

// Staging chunks (GSHMEM_PROXY_STAGING): 4 MiB parts, 4 in flight each way (32 MiB pinned).
constexpr size_t kStagingChunk = size_t{4} << 20;
constexpr int kStagingChunks = 4;

std::vector<int> cpus_near(int device) {
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) return {};
  return proxy::cpus_near_pci_device(bus_id);
}

}  // namespace

ProxyPath::ProxyPath(Bootstrap& bs, SymmetricHeap& heap, int device, uint64_t capacity,
                     double timeout)
    : heap_(heap) {
  sink_ = std::make_unique<proxy::GpuSignalSink>(device);
  engine_ = proxy::make_ucx_engine(bs, timeout);
  engine_->set_signal_sink(&proxy::GpuSignalSink::apply, sink_.get());
  if (env::proxy_staging()) {
    staging_ = proxy::make_gpu_staging(device, kStagingChunk, kStagingChunks);
    engine_->set_staging(staging_.get());
  }
  // Counters are for windows (not yet): the heap path completes through quiet.
  channel_ = std::make_unique<proxy::ProxyChannel>(*engine_, capacity, 0, proxy::Producers::kGpu,
                                                   device, cpus_near(device));
  register_heap();
  heap_.set_grow_hook([this] { register_heap(); });
  log_debug(bs.rank(), "proxy path up: %s engine, %llu-descriptor queue", engine_->name(),
            static_cast<unsigned long long>(capacity));
}

ProxyPath::~ProxyPath() {
  heap_.set_grow_hook(nullptr);
  channel_.reset();
  engine_.reset();
  staging_.reset();
  sink_.reset();
}

void ProxyPath::register_heap() {
  // Earlier registrations stay: descriptors already issued on them may still be in flight, and
  // they cover a prefix of the heap, which does not move.
  const int region = engine_->register_region(heap_.base(), heap_.mapped());
  channel_->set_heap_region(region);
}

}  // namespace gshmem

#include "core/proxy_path.h"

#include <optional>
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
// Windows' counters (8 bytes of GPU memory each): 64K, for example 64 windows of 16 contexts x
// 64 counters.
constexpr uint64_t kWindowCounters = uint64_t{1} << 16;

std::vector<int> cpus_near(int device) {
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) return {};
  return proxy::cpus_near_pci_device(bus_id);
}

}  // namespace

ProxyPath::ProxyPath(Bootstrap& bs, SymmetricHeap& heap, int device, uint64_t capacity,
                     double timeout)
    : heap_(heap) {
  sink_ = std::make_unique<proxy::GpuSink>(device);
  engine_ = proxy::make_ucx_engine(bs, timeout, env::proxy_bulk_min(proxy::kDefaultBulkBytes),
                                   env::proxy_part(proxy::kDefaultPartBytes),
                                   env::proxy_local_shm());
  sink_->serve(*engine_);
  if (env::proxy_staging()) {
    staging_ = proxy::make_gpu_staging(device, kStagingChunk, kStagingChunks);
    engine_->set_staging(staging_.get());
  }
  // Counters are for windows: the heap path completes through quiet.
  channel_ = std::make_unique<proxy::ProxyChannel>(
      *engine_, capacity, kWindowCounters, proxy::Producers::kGpu, device, cpus_near(device),
      &proxy::GpuSink::apply, sink_.get());
  counter_pool_.grow(kWindowCounters);
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

int ProxyPath::register_region(void* base, size_t bytes) {
  const int region = engine_->register_region(base, bytes);
  if (region >= proxy::kHeapRegion) {  // the same on every PE: ids are handed out in order
    engine_->deregister_region(region);
    throw_error(GSHMEM_ERROR_USAGE,
                "the proxy path's engine has handed out every region id a descriptor can name "
                "(each window registration and each heap growth takes one for the comm's life)");
  }
  return region;
}

uint64_t ProxyPath::take_counters(uint64_t n) {
  GSHMEM_REQUIRE(n >= 1, "a window takes at least one counter");
  std::optional<uint64_t> first;
  {
    std::lock_guard<std::mutex> lock(counters_mu_);
    first = counter_pool_.allocate(n, 1);
  }
  if (!first) {
    throw_error(GSHMEM_ERROR_USAGE,
                "the proxy path's window counters are used up (" +
                    std::to_string(kWindowCounters) + " in all; this window asks for " +
                    std::to_string(n) + "): deregister windows no longer used");
  }
  const proxy::CompletionWords& c = channel_->completion();
  if (cudaMemset(c.counters + *first, 0, n * sizeof(uint64_t)) != cudaSuccess) {
    cudaGetLastError();
    give_counters(*first);
    throw_error(GSHMEM_ERROR_CUDA, "cudaMemset of a window's counters failed");
  }
  return *first;
}

void ProxyPath::drain(double timeout) const {
  uint64_t appended = 0;  // tickets handed out: the GPU's tail word
  cuda::check(cudaMemcpy(&appended, channel_->queue().tail, sizeof appended,
                         cudaMemcpyDeviceToHost),
              "reading the proxy queue's tail");
  channel_->wait_retired(appended, timeout);
}

void ProxyPath::quiet(double timeout) const {
  drain(timeout);
  engine_->flush();  // the engine serialises this with the proxy thread's calls
}

void ProxyPath::give_counters(uint64_t first) noexcept {
  std::lock_guard<std::mutex> lock(counters_mu_);
  try {
    counter_pool_.release(first);
  } catch (...) {  // not a block of the pool: nothing to give back
  }
}

}  // namespace gshmem

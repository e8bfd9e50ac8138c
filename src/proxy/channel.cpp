#include "proxy/channel.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "common/cuda_api.h"
#include "common/error.h"
#include "proxy/descriptor_queue.h"

namespace gshmem::proxy {

ProxyChannel::ProxyChannel(NetEngine& engine, uint64_t capacity, uint64_t counters,
                           Producers producers, int device, std::vector<int> cpus,
                           SignalSink counter_sink, void* counter_arg)
    : producers_(producers), device_(device) {
  GSHMEM_REQUIRE(valid_capacity(capacity),
                 "a proxy queue's capacity must be a power of two >= 2, got " +
                     std::to_string(capacity));
  GSHMEM_REQUIRE(producers != Producers::kGpu || device >= 0,
                 "a proxy channel fed by kernels needs their CUDA device");
  gpu_counters_wanted_ = producers == Producers::kGpu && counter_sink != nullptr;
  allocate(capacity, counters);
  if (gpu_counters_wanted_) {
    completion_.counter_sink = counter_sink;
    completion_.counter_arg = counter_arg;
  }
  try {
    proxy_ = std::make_unique<Proxy>(engine, queue_, completion_, std::move(cpus), device);
  } catch (...) {
    release();
    throw;
  }
}

ProxyChannel::~ProxyChannel() {
  proxy_.reset();  // the thread first: it writes into the memory released next
  release();
}

void ProxyChannel::allocate(uint64_t capacity, uint64_t counters) {
  // One block: the slots, their results, their inline data, then head, retired and failed a
  // cache line each (the two sides write them), then the counters unless they are GPU memory.
  const bool gpu = producers_ == Producers::kGpu;
  const bool in_block = !gpu_counters_wanted_;
  const size_t bytes = capacity * (sizeof(Descriptor) + sizeof(ResultSlot) + kInlineBytes) +
                       (8 * 3 + (in_block ? counters : 0)) * sizeof(uint64_t);
  if (gpu) {
    cuda::DeviceGuard guard(device_);
    cuda::check(cudaHostAlloc(&block_, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                "cudaHostAlloc (proxy queue)");
    if (cudaMalloc(reinterpret_cast<void**>(&tail_), sizeof(uint64_t)) != cudaSuccess ||
        cudaMemset(tail_, 0, sizeof(uint64_t)) != cudaSuccess ||
        (!in_block && counters != 0 &&
         (cudaMalloc(reinterpret_cast<void**>(&gpu_counters_), counters * 8) != cudaSuccess ||
          cudaMemset(gpu_counters_, 0, counters * 8) != cudaSuccess))) {
      release();
      throw_error(GSHMEM_ERROR_CUDA, "cudaMalloc/cudaMemset of the proxy queue's tail or "
                                     "counters failed");
    }
  } else {
    block_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (block_ == nullptr) throw_errno("allocating the proxy queue");
    tail_ = new uint64_t(0);
  }
  std::memset(block_, 0, bytes);
  auto* results = reinterpret_cast<ResultSlot*>(static_cast<Descriptor*>(block_) + capacity);
  auto* inline_data = reinterpret_cast<uint8_t*>(results + capacity);
  auto* after = reinterpret_cast<uint64_t*>(inline_data + capacity * kInlineBytes);
  queue_ = {static_cast<Descriptor*>(block_), tail_, after, capacity, inline_data};
  completion_ = {after + 8, after + 16, in_block ? after + 24 : gpu_counters_, counters, results};
}

void ProxyChannel::release() noexcept {
  if (producers_ == Producers::kGpu) {
    if (block_ != nullptr) cudaFreeHost(block_);  // nothing more to do if teardown fails
    if (tail_ != nullptr) cudaFree(tail_);
    if (gpu_counters_ != nullptr) cudaFree(gpu_counters_);
  } else {
    std::free(block_);
    delete tail_;
  }
  block_ = nullptr;
  tail_ = nullptr;
  gpu_counters_ = nullptr;
}

std::optional<uint64_t> ProxyChannel::try_push(const Command& c) {
  GSHMEM_REQUIRE(producers_ == Producers::kHost,
                 "this proxy channel's producers are kernels (its ticket counter is GPU memory)");
  const bool carried = c.op == Op::kPutInline || c.op == Op::kPutInlineSignal;
  GSHMEM_REQUIRE(!carried || c.bytes <= kInlineBytes,
                 "an inline put carries at most " + std::to_string(kInlineBytes) + " bytes, not " +
                     std::to_string(c.bytes));
  Command sent = c;
  if (carried) sent.local = 0;  // the bytes travel in the queue (proxy_queue.h)
  uint64_t words[kPayloadWords];
  encode(sent, words);
  uint64_t ticket = 0;
  if (!try_reserve(queue_, ticket)) return std::nullopt;
  if (carried && c.bytes != 0) {
    std::memcpy(inline_slot(queue_, ticket), reinterpret_cast<const void*>(c.local), c.bytes);
  }
  publish(queue_, ticket, words);
  return ticket;
}

std::optional<uint64_t> ProxyChannel::result(uint64_t ticket) const {
  GSHMEM_REQUIRE(producers_ == Producers::kHost,
                 "this proxy channel's results are read by the kernels that produce");
  const ResultSlot& slot = completion_.results[ticket & (queue_.capacity - 1)];
  if (__atomic_load_n(&slot.ticket, __ATOMIC_ACQUIRE) != ticket + 1) return std::nullopt;
  return __atomic_load_n(&slot.value, __ATOMIC_RELAXED);
}

uint64_t ProxyChannel::retired() const {
  return __atomic_load_n(completion_.retired, __ATOMIC_ACQUIRE);
}

uint64_t ProxyChannel::counter(uint64_t i) const {
  GSHMEM_REQUIRE(i < completion_.n_counters,
                 "no proxy counter " + std::to_string(i) + " of " +
                     std::to_string(completion_.n_counters));
  if (gpu_counters_ != nullptr) {  // after every stream's work: the sink's adds too
    uint64_t value = 0;
    cuda::DeviceGuard guard(device_);
    cuda::check(cudaDeviceSynchronize(), "waiting for the GPU before reading a proxy counter");
    cuda::check(cudaMemcpy(&value, &completion_.counters[i], sizeof value, cudaMemcpyDeviceToHost),
                "reading a proxy counter");
    return value;
  }
  return __atomic_load_n(&completion_.counters[i], __ATOMIC_ACQUIRE);
}

void ProxyChannel::wait_retired(uint64_t n, double timeout) const {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  while (retired() < n) {
    check();
    if (std::chrono::steady_clock::now() > end) {
      throw_error(GSHMEM_ERROR_TIMEOUT, "the proxy retired " + std::to_string(retired()) +
                                            " of " + std::to_string(n) + " descriptors in " +
                                            std::to_string(timeout) + " s");
    }
    std::this_thread::yield();
  }
}

void ProxyChannel::check() const {
  gshmem_result_t code;
  std::string message;
  if (proxy_->failed(&code, &message)) throw_error(code, message);
}

void ProxyChannel::stop() { proxy_->stop(); }

}  // namespace gshmem::proxy

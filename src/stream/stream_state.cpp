#include "stream/stream_state.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "core/comm.h"
#include "stream/kernels.h"

namespace gshmem::stream {

// Measured on 4 H200s (NV18), graph-captured back-to-back puts and gets, 2026-11-21
// (docs/on-stream.md): the one-block kernel moved 1.26x / 1.49x / 1.24x the copy engine's bytes
// for puts of 1 / 4 / 16 KiB and 0.84x at 64 KiB; gets cross over earlier (1.24x at 1 and 4 KiB,
// 0.92x at 16 KiB). 16 KiB keeps every size where puts gain, the common case (ring permutes).
constexpr uint64_t kDefaultKernelMaxBytes = 16 << 10;

uint64_t kernel_max_bytes_from_env() {
  const char* v = std::getenv("GSHMEM_STREAM_KERNEL_MAX_BYTES");
  if (v == nullptr || *v == '\0') return kDefaultKernelMaxBytes;
  return env::parse_size(v, "GSHMEM_STREAM_KERNEL_MAX_BYTES");
}

StreamState::StreamState(Comm& comm) : kernel_max_bytes_(kernel_max_bytes_from_env()) {
  const int n = comm.nranks();
  // Same layout as the device API's sync area: [0, n) arrivals written by peers, [n, 2n) tallies.
  void* counters = comm.heap().malloc(2 * sizeof(uint64_t) * static_cast<uint64_t>(n), 256, true);
  barrier_device_ = comm.device_state().device();
  barrier_device_.sync = reinterpret_cast<uint64_t>(counters);

  const auto& d = cuda::driver();
  cuda::DeviceGuard guard(comm.device());
  CUdevice dev{};
  cuda::check(d.device_get(&dev, comm.device()), "cuDeviceGet");
  int memops = 0;
  if (d.device_attribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) !=
      CUDA_SUCCESS) {
    memops = 0;  // a driver that does not know the attribute: use the kernel paths
  }
  memops_ = memops != 0;
  const char* wait = std::getenv("GSHMEM_STREAM_WAIT");
  const std::string how = wait ? wait : "";
  GSHMEM_REQUIRE(how.empty() || how == "memop" || how == "kernel",
                 "GSHMEM_STREAM_WAIT='" + how + "' must be 'memop' (default) or 'kernel'");
  wait_kernel_ = how == "kernel";
  device_ = comm.device();
  cuda::check(cudaStreamCreateWithFlags(&release_stream_, cudaStreamNonBlocking),
              "creating the stream that releases on-stream waits");
  kernels::preload();
}

StreamState::~StreamState() {
  try {
    cuda::DeviceGuard guard(device_);
    cudaStreamDestroy(release_stream_);  // nothing more to do if it fails during teardown
  } catch (const Error&) {
  }
}

void StreamState::note_wait(uint64_t* sig, uint64_t satisfying) {
  std::lock_guard<std::mutex> lock(waits_mutex_);
  for (const NotedWait& w : waits_) {
    if (w.sig == sig && w.value == satisfying) return;
  }
  waits_[next_wait_++ % kNotedWaits] = {sig, satisfying};
}

void StreamState::release_waits() noexcept {
  using std::chrono::milliseconds;
  std::lock_guard<std::mutex> lock(waits_mutex_);
  if (waits_[0].sig == nullptr) return;  // no on-stream wait was ever queued
  try {
    cuda::DeviceGuard guard(device_);
    if (!isolated_) {
      for (const NotedWait& w : waits_) {
        if (w.sig == nullptr) continue;
        cuda::check(cuda::driver().stream_write_value64(reinterpret_cast<CUstream>(release_stream_),
                                                        reinterpret_cast<CUdeviceptr>(w.sig),
                                                        w.value, CU_STREAM_WRITE_VALUE_DEFAULT),
                    "cuStreamWriteValue64 (releasing on-stream waits)");
      }
      if (cuda::stream_idle_within(release_stream_, milliseconds(50))) return;
      isolated_ = std::make_unique<cuda::IsolatedStream>(device_);
    }
    for (const NotedWait& w : waits_) {
      if (w.sig != nullptr) isolated_->write_value64(w.sig, w.value);
    }
    // The comm may unmap the heap right after this: let the writes land first (the release
    // stream's too, which run once the streams they sat behind go on), but never wait long for
    // a GPU that may be wedged.
    isolated_->idle_within(milliseconds(1000));
    cuda::stream_idle_within(release_stream_, milliseconds(1000));
  } catch (const Error&) {
    // Best effort: a failure here cannot be reported to anyone waiting.
  }
}

}  // namespace gshmem::stream

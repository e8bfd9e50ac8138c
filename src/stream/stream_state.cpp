#include "stream/stream_state.h"

#include <cstdlib>

#include "common/cuda_api.h"
#include "common/env.h"
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
  kernels::preload();
}

}  // namespace gshmem::stream

// CurrentDevice: makes the comm's GPU current while an on-stream call enqueues work, and restores
// the caller's device afterwards (stream 0 and kernel launches go to the current device).
// Unlike cuda::DeviceGuard it never touches the context (cudaFree(nullptr)), which may be
// refused while a stream is being captured; the comm created the context already.
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda_api.h"

namespace gshmem::stream {

class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    cuda::check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) cuda::check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CurrentDevice() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace gshmem::stream

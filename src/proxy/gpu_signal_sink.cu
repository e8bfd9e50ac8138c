#include "proxy/gpu_signal_sink.h"

#include "common/cuda_api.h"
#include "common/error.h"

namespace gshmem::proxy {
namespace {

__global__ void apply_signal(unsigned long long* word, unsigned long long value, bool set) {
  if (set) {
    asm volatile("st.release.sys.global.b64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
  } else {
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
  }
}

}  // namespace

GpuSignalSink::GpuSignalSink(int device) : device_(device) {
  cuda::DeviceGuard guard(device);
  // Loaded now: a lazy load at the first signal waits for the kernels running on this GPU, and
  // one of them may be the very kernel waiting for that signal.
  cuda::preload(apply_signal, "loading the kernel that applies network signals");
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
              "creating the stream that applies network signals");
}

GpuSignalSink::~GpuSignalSink() {
  try {
    cuda::DeviceGuard guard(device_);
    cudaStreamDestroy(stream_);  // nothing more to do if it fails during teardown
  } catch (const Error&) {
  }
}

void GpuSignalSink::apply(void* arg, uint64_t* word, uint64_t value, SignalUpdate update) {
  auto* self = static_cast<GpuSignalSink*>(arg);
  cuda::DeviceGuard guard(self->device_);
  apply_signal<<<1, 1, 0, self->stream_>>>(reinterpret_cast<unsigned long long*>(word),
                                           static_cast<unsigned long long>(value),
                                           update == SignalUpdate::kSet);
  cuda::check(cudaGetLastError(), "launching the kernel that applies a network signal");
}

}  // namespace gshmem::proxy

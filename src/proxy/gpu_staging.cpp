#include <cuda_runtime_api.h>

#include <unordered_map>
#include <vector>

#include "common/cuda_api.h"
#include "common/error.h"
#include "proxy/staging.h"

namespace gshmem::proxy {
namespace {

class GpuStaging final : public Staging {
 public:
  GpuStaging(int device, size_t chunk_bytes, int chunks) : Staging(chunk_bytes), device_(device) {
    GSHMEM_REQUIRE(chunk_bytes > 0 && chunks > 0, "staging needs chunks of some size");
    cuda::DeviceGuard guard(device);
    for (cudaStream_t& s : streams_) {
      cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                  "creating a network staging stream");
    }
    for (int direction = 0; direction < 2; ++direction) {
      for (int i = 0; i < chunks; ++i) {
        void* p = nullptr;
        cuda::check(cudaHostAlloc(&p, chunk_bytes, cudaHostAllocPortable),
                    "allocating pinned network staging chunks");
        cudaEvent_t done = nullptr;
        const cudaError_t made = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
        if (made != cudaSuccess) cudaFreeHost(p);
        cuda::check(made, "creating a network staging event");
        events_[p] = done;
        add_chunk(p, direction == 0);
      }
    }
  }

  ~GpuStaging() override {
    // Nothing more to do if a call fails during teardown.
    for (auto& [chunk, done] : events_) {
      cudaEventDestroy(done);
      cudaFreeHost(chunk);
    }
    for (cudaStream_t s : streams_) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }

  bool staged(const void* p) const override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();  // not CUDA's: plain host memory
      return false;
    }
    return attr.type == cudaMemoryTypeDevice;
  }

  void start_copy(void* chunk, void* dst, const void* src, size_t bytes) override {
    cuda::DeviceGuard guard(device_);
    cudaStream_t stream = streams_[dst == chunk ? 0 : 1];  // out of the GPU, into it
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                "copying a network staging chunk");
    cuda::check(cudaEventRecord(events_.at(chunk), stream), "copying a network staging chunk");
  }

  bool copied(void* chunk) override {
    const cudaError_t st = cudaEventQuery(events_.at(chunk));
    if (st == cudaErrorNotReady) return false;
    cuda::check(st, "copying a network staging chunk");
    return true;
  }

 private:
  int device_;
  cudaStream_t streams_[2] = {nullptr, nullptr};
  std::unordered_map<void*, cudaEvent_t> events_;  // every chunk, and its copy's event
};

}  // namespace

std::unique_ptr<Staging> make_gpu_staging(int device, size_t chunk_bytes, int chunks) {
  return std::make_unique<GpuStaging>(device, chunk_bytes, chunks);
}

}  // namespace gshmem::proxy

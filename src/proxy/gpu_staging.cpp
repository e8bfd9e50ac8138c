#include <cuda_runtime_api.h>

#include <vector>

#include "common/cuda_api.h"
#include "common/error.h"
#include "proxy/staging.h"

namespace gshmem::proxy {
namespace {

class GpuStaging final : public Staging {
 public:
  GpuStaging(int device, size_t chunk_bytes, int chunks) : device_(device), chunk_(chunk_bytes) {
    GSHMEM_REQUIRE(chunk_bytes > 0 && chunks > 0, "staging needs chunks of some size");
    cuda::DeviceGuard guard(device);
    cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                "creating the network staging stream");
    for (int direction = 0; direction < 2; ++direction) {
      for (int i = 0; i < chunks; ++i) {
        void* p = nullptr;
        cuda::check(cudaHostAlloc(&p, chunk_bytes, cudaHostAllocPortable),
                    "allocating pinned network staging chunks");
        all_.push_back(p);
        free_[direction].push_back(p);
      }
    }
  }

  ~GpuStaging() override {
    for (void* p : all_) cudaFreeHost(p);  // nothing more to do if it fails during teardown
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  bool staged(const void* p) const override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();  // not CUDA's: plain host memory
      return false;
    }
    return attr.type == cudaMemoryTypeDevice;
  }

  size_t chunk_bytes() const override { return chunk_; }

  void* take(bool outgoing) override {
    std::vector<void*>& pool = free_[outgoing ? 0 : 1];
    if (pool.empty()) return nullptr;
    void* p = pool.back();
    pool.pop_back();
    return p;
  }

  void give_back(void* chunk, bool outgoing) override {
    free_[outgoing ? 0 : 1].push_back(chunk);
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    cuda::DeviceGuard guard(device_);
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_),
                "copying a network staging chunk");
    cuda::check(cudaStreamSynchronize(stream_), "copying a network staging chunk");
  }

 private:
  int device_;
  size_t chunk_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> all_;
  std::vector<void*> free_[2];  // outgoing, incoming
};

}  // namespace

std::unique_ptr<Staging> make_gpu_staging(int device, size_t chunk_bytes, int chunks) {
  return std::make_unique<GpuStaging>(device, chunk_bytes, chunks);
}

}  // namespace gshmem::proxy

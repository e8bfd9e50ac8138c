#include <cuda_runtime.h>

#include "gshmem/device.cuh"
#include "permute_ll.cuh"

namespace gshmem::jax {
namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads)
    permute_ll_kernel(gshmem::Device dev, LLLayout ll, const uint32_t* in, uint32_t* out, size_t words, int dst,
                      int src) {
  __shared__ uint64_t epoch;
  const int me = dev.my_pe;
  if (threadIdx.x == 0) {
    epoch = *ll.epoch() + 1;
    // the receiver must have read what this PE last sent it before its lines are rewritten
    if (dst >= 0 && dst != me) {
      const uint64_t need = ll.last_sent()[dst];
      while (*reinterpret_cast<volatile uint64_t*>(ll.consumed() + dst) < need) {
      }
    }
  }
  __syncthreads();
  const uint64_t flag = static_cast<uint32_t>(epoch);
  if (dst >= 0 && dst != me) {
    volatile uint64_t* remote = gshmem::ptr(dev, ll.lines(me), dst);
    for (size_t i = threadIdx.x; i < words; i += kThreads) remote[i] = (flag << 32) | in[i];
  } else if (src == me) {
    for (size_t i = threadIdx.x; i < words; i += kThreads) out[i] = in[i];
  }
  if (src >= 0 && src != me) {
    const volatile uint64_t* mine = ll.lines(src);
    for (size_t i = threadIdx.x; i < words; i += kThreads) {
      uint64_t v;
      do {
        v = mine[i];
      } while ((v >> 32) != flag);
      out[i] = static_cast<uint32_t>(v);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (src >= 0 && src != me) {  // every line read: the sender may rewrite them
      __threadfence_system();
      *reinterpret_cast<volatile uint64_t*>(gshmem::ptr(dev, ll.consumed() + me, src)) = epoch;
    }
    if (dst >= 0 && dst != me) ll.last_sent()[dst] = epoch;
    *ll.epoch() = epoch;
  }
}

}  // namespace

cudaError_t permute_ll(const gshmem_device_t& dev, const LLLayout& ll, const uint32_t* in, uint32_t* out,
                       size_t words, int dst, int src, cudaStream_t stream) {
  permute_ll_kernel<<<1, kThreads, 0, stream>>>(dev, ll, in, out, words, dst, src);
  return cudaGetLastError();
}

}  // namespace gshmem::jax

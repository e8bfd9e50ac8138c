// A CUDA C++ kernel using the gshmem device API, built by plain CMake (see CMakeLists.txt): no
// -rdc, no device link step, no gshmem library to link. Each PE sends its buffer to its right
// neighbour with put_signal, waits for its left neighbour's data, then all PEs meet in a device
// barrier. The host entry point takes the gshmem_device_t as bytes, so any launcher can drive it
// (run.py uses Python and ctypes; a C++ host program would call gshmem_comm_device()).
#include <cuda_runtime.h>

#include <cstring>
#include <gshmem/device.cuh>

__global__ void ring_kernel(gshmem::Device dev, const float* send, float* recv, size_t n,
                            uint64_t* arrived) {
  const int right = (gshmem::my_pe(dev) + 1) % gshmem::n_pes(dev);
  const int left = (gshmem::my_pe(dev) + gshmem::n_pes(dev) - 1) % gshmem::n_pes(dev);
  // Data first, then the signal with release semantics: the receiver's acquire wait then sees it.
  gshmem::put_signal<gshmem::Block>(dev, recv, send, n * sizeof(float), arrived, 1,
                                    gshmem::SignalOp::Add, right);
  // Bounded waits (they take `dev`): if the left PE died or never comes, the wait gives up after
  // GSHMEM_TIMEOUT and the host's next gshmem call raises, instead of this kernel hanging.
  if (!gshmem::signal_wait_until<gshmem::Block>(dev, arrived, gshmem::Cmp::GE, 1, left)) return;
  gshmem::barrier_all<gshmem::Block>(dev);
}

// Returns a cudaError_t (0 on success). `state` holds `state_size` bytes of gshmem_device_t.
extern "C" int ring_launch(const void* state, size_t state_size, const float* send, float* recv,
                           size_t n, uint64_t* arrived, cudaStream_t stream) {
  gshmem::Device dev;
  if (state_size != sizeof dev) return cudaErrorInvalidValue;
  std::memcpy(&dev, state, sizeof dev);
  ring_kernel<<<1, 512, 0, stream>>>(dev, send, recv, n, arrived);
  return cudaGetLastError();
}

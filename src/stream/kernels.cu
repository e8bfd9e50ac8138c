#include "stream/kernels.h"

#include "common/cuda_api.h"
#include "gshmem/device.cuh"
#include "gshmem/gshmem.h"

namespace gshmem::stream::kernels {
namespace {

static_assert(GSHMEM_SIGNAL_SET == static_cast<int>(SignalOp::Set) &&
                  GSHMEM_SIGNAL_ADD == static_cast<int>(SignalOp::Add),
              "the C ABI's signal operations are the device API's");
static_assert(GSHMEM_CMP_EQ == static_cast<int>(Cmp::EQ) &&
                  GSHMEM_CMP_NE == static_cast<int>(Cmp::NE) &&
                  GSHMEM_CMP_GT == static_cast<int>(Cmp::GT) &&
                  GSHMEM_CMP_GE == static_cast<int>(Cmp::GE) &&
                  GSHMEM_CMP_LT == static_cast<int>(Cmp::LT) &&
                  GSHMEM_CMP_LE == static_cast<int>(Cmp::LE),
              "the C ABI's comparisons are the device API's");

// Kernel boundaries order these with the stream's other work: a kernel starts after everything
// earlier on the stream is complete, and its writes are visible to later stream work when it
// ends. Inside, the device API gives the data-before-signal order (put_signal: release).
// A PE on the proxy path is reached the same way: put, get and put_signal wait for their
// transfer, and signal_op_kernel waits for its update, so the kernel boundary still completes
// them.

__global__ void put_kernel(Device dev, void* dst, const void* src, size_t bytes, int pe) {
  gshmem::put<Block>(dev, dst, src, bytes, pe);
}

__global__ void get_kernel(Device dev, void* dst, const void* src, size_t bytes, int pe) {
  gshmem::get<Block>(dev, dst, src, bytes, pe);
}

__global__ void put_signal_kernel(Device dev, void* dst, const void* src, size_t bytes,
                                  uint64_t* sig, uint64_t value, int op, int pe) {
  gshmem::put_signal<Block>(dev, dst, src, bytes, sig, value, static_cast<SignalOp>(op), pe);
}

// Release at system scope: the stream's earlier work (complete when this kernel starts, copy
// engine writes included) is visible to `pe` before the new value.
__global__ void signal_op_kernel(Device dev, uint64_t* sig, uint64_t value, int op, int pe) {
  gshmem::signal_op(dev, sig, value, static_cast<SignalOp>(op), pe);
  if (gshmem::detail::via_proxy(dev, pe)) gshmem::detail::proxy_quiet(dev);
}

__global__ void wait_until_kernel(Device dev, const uint64_t* sig, int cmp, uint64_t value) {
  gshmem::signal_wait_until<Thread>(dev, sig, static_cast<Cmp>(cmp), value);
}

__global__ void barrier_kernel(Device dev) { gshmem::barrier<Block>(dev, dev.world); }

}  // namespace

void put(const gshmem_device_t& dev, void* dst_sym, const void* src, size_t bytes, int pe,
         cudaStream_t stream) {
  put_kernel<<<1, kCopyThreads, 0, stream>>>(dev, dst_sym, src, bytes, pe);
  cuda::check_launch("launching the on-stream put kernel");
}

void get(const gshmem_device_t& dev, void* dst, const void* src_sym, size_t bytes, int pe,
         cudaStream_t stream) {
  get_kernel<<<1, kCopyThreads, 0, stream>>>(dev, dst, src_sym, bytes, pe);
  cuda::check_launch("launching the on-stream get kernel");
}

void put_signal(const gshmem_device_t& dev, void* dst_sym, const void* src, size_t bytes,
                uint64_t* sig_sym, uint64_t value, int op, int pe, cudaStream_t stream) {
  put_signal_kernel<<<1, kCopyThreads, 0, stream>>>(dev, dst_sym, src, bytes, sig_sym, value, op,
                                                    pe);
  cuda::check_launch("launching the on-stream put_signal kernel");
}

void signal_op(const gshmem_device_t& dev, uint64_t* sig_sym, uint64_t value, int op, int pe,
               cudaStream_t stream) {
  signal_op_kernel<<<1, 1, 0, stream>>>(dev, sig_sym, value, op, pe);
  cuda::check_launch("launching the on-stream signal kernel");
}

void wait_until(const gshmem_device_t& dev, const uint64_t* sig, int cmp, uint64_t value,
                cudaStream_t stream) {
  wait_until_kernel<<<1, 1, 0, stream>>>(dev, sig, cmp, value);
  cuda::check_launch("launching the on-stream wait kernel");
}

void barrier(const gshmem_device_t& dev, cudaStream_t stream) {
  barrier_kernel<<<1, kBarrierThreads, 0, stream>>>(dev);
  cuda::check_launch("launching the on-stream barrier kernel");
}

void preload() {
  cuda::preload(put_kernel, "loading the on-stream kernels");
  cuda::preload(get_kernel, "loading the on-stream kernels");
  cuda::preload(put_signal_kernel, "loading the on-stream kernels");
  cuda::preload(signal_op_kernel, "loading the on-stream kernels");
  cuda::preload(wait_until_kernel, "loading the on-stream kernels");
  cuda::preload(barrier_kernel, "loading the on-stream kernels");
}

}  // namespace gshmem::stream::kernels

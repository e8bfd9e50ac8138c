// put, get, put_signal on a stream. Bulk data goes through the copy engines: cudaMemcpyAsync
// between this GPU's buffer and the peer's heap as mapped into this GPU's address space (the
// heap maps every reachable PE's memory, src/heap/), so no SM runs and the copy is captured into
// a CUDA graph as an ordinary memcpy node. Messages of at most GSHMEM_STREAM_KERNEL_MAX_BYTES go
// through a one-block kernel instead, where launching it is cheaper than a copy-engine copy.
#include "common/cuda_api.h"
#include "core/comm.h"
#include "stream/kernels.h"
#include "stream/ops.h"
#include "stream/validate.h"

namespace gshmem::stream {
namespace {

// Small messages, and every message to a PE on the proxy path (the kernel's thread 0 appends the
// descriptor and waits for its completion: the device API routes it).
bool by_kernel(Comm& comm, size_t bytes, int pe) {
  return bytes <= comm.stream_state().kernel_max_bytes() || comm.via_proxy(pe);
}

}  // namespace

void put(Comm& comm, void* dst_sym, const void* src, size_t bytes, int pe, cudaStream_t stream) {
  constexpr const char* op = "put_on_stream";
  require_reachable(comm, op, pe);
  if (bytes == 0) return;
  require_symmetric(comm, op, "dst_sym", dst_sym, bytes);
  require_local(op, "src", src);
  cuda::DeviceGuard current(comm.device());
  if (by_kernel(comm, bytes, pe)) {
    kernels::put(comm.device_state().device(), dst_sym, src, bytes, pe, stream);
    return;
  }
  cuda::check(cudaMemcpyAsync(comm.heap().peer_ptr(dst_sym, pe), src, bytes,
                              cudaMemcpyDeviceToDevice, stream),
              "put_on_stream: cudaMemcpyAsync to the peer's heap");
}

void get(Comm& comm, void* dst, const void* src_sym, size_t bytes, int pe, cudaStream_t stream) {
  constexpr const char* op = "get_on_stream";
  require_reachable(comm, op, pe);
  if (bytes == 0) return;
  require_symmetric(comm, op, "src_sym", src_sym, bytes);
  require_local(op, "dst", dst);
  cuda::DeviceGuard current(comm.device());
  if (by_kernel(comm, bytes, pe)) {
    kernels::get(comm.device_state().device(), dst, src_sym, bytes, pe, stream);
    return;
  }
  cuda::check(cudaMemcpyAsync(dst, comm.heap().peer_ptr(src_sym, pe), bytes,
                              cudaMemcpyDeviceToDevice, stream),
              "get_on_stream: cudaMemcpyAsync from the peer's heap");
}

// Data before signal: the copy is complete when the stream reaches the signal update, which is a
// cuStreamWriteValue64 preceded by its memory barrier (SET) or a kernel's release reduction (ADD)
// (signal.cpp); on the kernel path put_signal<Block> releases the block's stores itself.
void put_signal(Comm& comm, void* dst_sym, const void* src, size_t bytes, uint64_t* sig_sym,
                uint64_t value, int op, int pe, cudaStream_t stream) {
  constexpr const char* name = "put_signal_on_stream";
  require_reachable(comm, name, pe);
  require_signal(comm, name, sig_sym);
  require_signal_op(name, op);
  if (bytes > 0) {
    require_symmetric(comm, name, "dst_sym", dst_sym, bytes);
    require_local(name, "src", src);
  }
  cuda::DeviceGuard current(comm.device());
  if (bytes > 0 && by_kernel(comm, bytes, pe)) {
    kernels::put_signal(comm.device_state().device(), dst_sym, src, bytes, sig_sym, value, op, pe,
                        stream);
    return;
  }
  if (bytes > 0) {
    cuda::check(cudaMemcpyAsync(comm.heap().peer_ptr(dst_sym, pe), src, bytes,
                                cudaMemcpyDeviceToDevice, stream),
                "put_signal_on_stream: cudaMemcpyAsync to the peer's heap");
  }
  enqueue_signal(comm, sig_sym, value, op, pe, stream);
}

}  // namespace gshmem::stream

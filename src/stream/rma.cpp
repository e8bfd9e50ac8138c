// put, get, put_2d, put_signal on a stream. Bulk data goes through the copy engines:
// cudaMemcpyAsync (2D for put_2d) between this GPU's buffer and the peer's heap as mapped into
// this GPU's address space (the heap maps every reachable PE's memory, src/heap/), so no SM runs
// and the copy is captured into a CUDA graph as an ordinary memcpy node. Messages of at most
// GSHMEM_STREAM_KERNEL_MAX_BYTES go through a one-block kernel instead, where launching it is
// cheaper than a copy-engine copy.
#include <string>

#include "common/cuda_api.h"
#include "common/error.h"
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

// Rows at a pitch: cudaMemcpy2DAsync handles every size on the copy engines (no kernel path);
// to a PE on the proxy path each row is a put, which that path carries.
void put_2d(Comm& comm, void* dst_sym, size_t dst_pitch, const void* src, size_t src_pitch,
            size_t width, size_t height, int pe, cudaStream_t stream) {
  constexpr const char* op = "put_2d_on_stream";
  require_reachable(comm, op, pe);
  if (width == 0 || height == 0) return;
  GSHMEM_REQUIRE(dst_pitch >= width && src_pitch >= width,
                 std::string(op) + ": dst_pitch " + std::to_string(dst_pitch) + " and src_pitch " +
                     std::to_string(src_pitch) + " must be at least width " +
                     std::to_string(width) + " (rows must not overlap)");
  require_symmetric(comm, op, "dst_sym", dst_sym, dst_pitch * (height - 1) + width);
  require_local(op, "src", src);
  if (comm.via_proxy(pe)) {
    for (size_t i = 0; i < height; ++i) {
      put(comm, static_cast<char*>(dst_sym) + i * dst_pitch,
          static_cast<const char*>(src) + i * src_pitch, width, pe, stream);
    }
    return;
  }
  cuda::DeviceGuard current(comm.device());
  cuda::check(cudaMemcpy2DAsync(comm.heap().peer_ptr(dst_sym, pe), dst_pitch, src, src_pitch,
                                width, height, cudaMemcpyDeviceToDevice, stream),
              "put_2d_on_stream: cudaMemcpy2DAsync to the peer's heap");
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

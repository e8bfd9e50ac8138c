// Host-initiated operations on a CUDA stream (DESIGN.md §2.6, docs/on-stream.md): the C ABI's
// gshmem_*_on_stream calls (include/gshmem/gshmem.h states their contracts) after the handle has
// been resolved. Each checks its arguments (validate.h), makes the comm's GPU current and
// enqueues; none waits for the GPU or for a peer.
//
//   rma.cpp      put, get, put_2d, put_signal: copy engine (cudaMemcpyAsync between this
//                GPU's address and the peer's mapping of the symmetric object), or the one-block
//                kernels for messages of at most GSHMEM_STREAM_KERNEL_MAX_BYTES
//   signal.cpp   signal_op, signal_wait_until: cuStreamWriteValue64 / cuStreamWaitValue64, or the
//                one-thread kernels for what those cannot express
//   sync.cpp     quiet (nothing to enqueue), barrier (one-warp kernel)
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gshmem {

class Comm;

namespace stream {

void put(Comm& comm, void* dst_sym, const void* src, size_t bytes, int pe, cudaStream_t stream);
void get(Comm& comm, void* dst, const void* src_sym, size_t bytes, int pe, cudaStream_t stream);
void put_2d(Comm& comm, void* dst_sym, size_t dst_pitch, const void* src, size_t src_pitch,
            size_t width, size_t height, int pe, cudaStream_t stream);
void put_signal(Comm& comm, void* dst_sym, const void* src, size_t bytes, uint64_t* sig_sym,
                uint64_t value, int op, int pe, cudaStream_t stream);
void signal_op(Comm& comm, uint64_t* sig_sym, uint64_t value, int op, int pe,
               cudaStream_t stream);
void signal_wait_until(Comm& comm, uint64_t* sig_sym, int cmp, uint64_t value,
                       cudaStream_t stream);
void quiet(Comm& comm, cudaStream_t stream);
void barrier(Comm& comm, cudaStream_t stream);

// Enqueues the signal update of signal_op/put_signal, arguments already checked and the comm's
// GPU current (signal.cpp).
void enqueue_signal(Comm& comm, uint64_t* sig_sym, uint64_t value, int op, int pe,
                    cudaStream_t stream);

}  // namespace stream
}  // namespace gshmem

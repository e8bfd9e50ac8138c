// The few operations on stream that need SMs, each a small kernel built on the device API
// (include/gshmem/device.cuh) and launched on the caller's stream by src/stream/ops.cpp.
// The caller has validated every argument and made the comm's GPU current; these functions only
// launch, and throw gshmem::Error when the launch itself fails.
//
//   put / get / put_signal   one block of kCopyThreads threads: the small-message path
//                            (GSHMEM_STREAM_KERNEL_MAX_BYTES), the device API's
//                            put/get/put_signal<Block>.
//   signal_op                one thread: signal ADD (no stream memory operation adds), and SET
//                            where the GPU has no 64-bit stream memory operations.
//   wait_until               one thread polling with acquire loads (the device API's bounded
//                            signal_wait_until): comparisons that cuStreamWaitValue64 cannot
//                            express (NE, LT, LE, large GE/GT), and every wait under
//                            GSHMEM_STREAM_WAIT=kernel.
//   barrier                  one warp: the device API's barrier<Block> over the world team,
//                            with dev.sync pointing at the stream barriers' own counters.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gshmem/device_state.h"

namespace gshmem::stream::kernels {

constexpr unsigned kCopyThreads = 512;
constexpr unsigned kBarrierThreads = 32;

// op: GSHMEM_SIGNAL_SET/ADD; cmp: GSHMEM_CMP_*; pe: a reachable world PE.
void put(const gshmem_device_t& dev, void* dst_sym, const void* src, size_t bytes, int pe,
         cudaStream_t stream);
void get(const gshmem_device_t& dev, void* dst, const void* src_sym, size_t bytes, int pe,
         cudaStream_t stream);
void put_signal(const gshmem_device_t& dev, void* dst_sym, const void* src, size_t bytes,
                uint64_t* sig_sym, uint64_t value, int op, int pe, cudaStream_t stream);
void signal_op(const gshmem_device_t& dev, uint64_t* sig_sym, uint64_t value, int op, int pe,
               cudaStream_t stream);
void wait_until(const gshmem_device_t& dev, const uint64_t* sig, int cmp, uint64_t value,
                cudaStream_t stream);
void barrier(const gshmem_device_t& dev, cudaStream_t stream);

// Loads every kernel above on the current device now. With lazy module loading (the default
// since CUDA 12) a kernel is otherwise loaded at its first launch, which may come while the
// stream is being captured into a graph, and which adds the loading time to a first timed call.
void preload();

}  // namespace gshmem::stream::kernels

// What the MoE kernels (kernels.cu: high-throughput, low_latency.cu) share: the launch shape, the
// fp32 accumulation of 16-byte vectors of bf16/fp16, and the completion counters.
//
// Completion counters only grow. Each block of a sending kernel adds 1 to `counters[me]` at every
// rank of the team once its stores are done (release: the block's stores happen-before thread
// 0's update through bar.sync, and release is cumulative); a receiver waits until every rank's
// counter reached (calls so far) x (blocks per kernel), so nothing is ever reset and a late
// reader cannot be confused by an early writer of the next call.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "gshmem/device.cuh"

namespace gshmem_moe {

constexpr int kWarp = 32;
constexpr int kThreads = 512;
constexpr int kMaxTopk = 8;       // routing.MAX_TOPK
constexpr int kMaxWorld = 32;      // buffer.MAX_WORLD: a warp's lanes, one per rank
constexpr int kMaxExperts = 1024;  // routing.MAX_EXPERTS: a block scans every expert's count

// Records `what` and the error in the library's last-error text; 0 if `e` is success, else 1.
int check(cudaError_t e, const char* what);

// Waits until every rank's counter reached `target` (thread t polls rank t's). Bounded like the
// device API's waits (gshmem/device/deadline.cuh): after GSHMEM_TIMEOUT, on comm.abort() or once
// another wait of the comm failed, the wait for world PE pes[t] is recorded and the block goes on
// (results undefined); the host raises gshmem.FaultError at the comm's next call.
__device__ inline void wait_counters(const gshmem::Device& dev, const int32_t* pes,
                                     const uint64_t* counters, int world, uint64_t target) {
  if (threadIdx.x < world) {
    const uint64_t* counter = counters + threadIdx.x;
    const gshmem::detail::Waited what{GSHMEM_WAIT_MOE, pes[threadIdx.x],
                                      static_cast<int>(gshmem::Cmp::GE), counter, target};
    gshmem::Deadline deadline;
    uint64_t seen;
    while ((seen = gshmem::signal_fetch(counter)) < target) {
      if (deadline.expired(dev, what, seen)) break;
    }
  }
  __syncthreads();  // extends every waiter's acquire to the whole block
}

__device__ inline void add_to_all(const gshmem::Device& dev, const int32_t* pes, int world, int me,
                                  uint64_t* counters) {
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int q = 0; q < world; ++q) {
      gshmem::signal_op(dev, counters + me, 1, gshmem::SignalOp::Add, pes[q]);
    }
  }
}

// A warp's copy of one row of 16-byte vectors, 8 loads per lane in flight (a few thousand bytes
// per warp: with a few hundred warps, enough to cover the latency of local or NVLink memory).
__device__ inline void copy_row(int4* dst, const int4* src, int64_t row_vecs, int lane) {
  constexpr int kDepth = 8;
  int64_t i = lane;
  for (; i + (kDepth - 1) * kWarp < row_vecs; i += kDepth * kWarp) {
    int4 v[kDepth];
#pragma unroll
    for (int j = 0; j < kDepth; ++j) v[j] = __ldg(src + i + j * kWarp);
#pragma unroll
    for (int j = 0; j < kDepth; ++j) dst[i + j * kWarp] = v[j];
  }
  for (; i < row_vecs; i += kWarp) dst[i] = __ldg(src + i);
}

// How many of flat[0, end) equal e (the whole warp gets the answer).
__device__ inline int count_equal(const int32_t* flat, int end, int32_t e, int lane) {
  int n = 0;
  for (int base = 0; base < end; base += kWarp) {
    const int i = base + lane;
    n += __popc(__ballot_sync(0xffffffffu, i < end && flat[i] == e));
  }
  return n;
}

// start[0..n]: the exclusive prefix sums of counts[0..n) (n <= kMaxExperts), in shared
// memory, computed by the whole block.
__device__ inline void scan_counts(const int32_t* counts, int n, int* start) {
  constexpr int kPer = kMaxExperts / kThreads;
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage temp;
  int items[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x * kPer + j;
    items[j] = i < n ? counts[i] : 0;
  }
  int total;
  Scan(temp).ExclusiveSum(items, items, total);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x * kPer + j;
    if (i < n) start[i] = items[j];
  }
  if (threadIdx.x == 0) start[n] = total;
  __syncthreads();
}

template <class T>
struct Vec8;  // 8 elements of T in one 16-byte load
template <>
struct Vec8<__nv_bfloat16> {
  static __device__ inline void add(float* acc, const int4& v, float w) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      acc[2 * i] += w * f.x;
      acc[2 * i + 1] += w * f.y;
    }
  }
  static __device__ inline int4 pack(const float* acc) {
    int4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    return v;
  }
};
template <>
struct Vec8<__half> {
  static __device__ inline void add(float* acc, const int4& v, float w) {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      acc[2 * i] += w * f.x;
      acc[2 * i + 1] += w * f.y;
    }
  }
  static __device__ inline int4 pack(const float* acc) {
    int4 v;
    __half2* h = reinterpret_cast<__half2*>(&v);
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(acc[2 * i], acc[2 * i + 1]);
    return v;
  }
};

// A warp's FP8 copy of one row of T (row_vecs vectors of 8): e4m3 values (8 bytes per vector)
// in dst's first row_vecs * 8 bytes, then one float scale per 128 elements (16 vectors, half a
// warp): scale = amax / 448 (e4m3's largest finite value), each value rounded to nearest and
// saturated. Needs row_vecs % 16 == 0 (hidden a multiple of 128).
template <class T>
__device__ inline void quantize_row(uint8_t* dst, const int4* src, int64_t row_vecs, int lane) {
  constexpr float kE4m3Max = 448.0f;
  float* scales = reinterpret_cast<float*>(dst + row_vecs * 8);
  for (int64_t base = 0; base < row_vecs; base += kWarp) {
    const int64_t v = base + lane;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (v < row_vecs) Vec8<T>::add(f, __ldg(src + v), 1.0f);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
    for (int off = 8; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = fmaxf(amax, 1e-30f) / kE4m3Max, inv = 1.0f / scale;
    uint2 packed;
    uint16_t* pairs = reinterpret_cast<uint16_t*>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      pairs[i] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * i] * inv, f[2 * i + 1] * inv),
                                          __NV_SATFINITE, __NV_E4M3);
    }
    if (v < row_vecs) {
      reinterpret_cast<uint2*>(dst)[v] = packed;
      if (lane % 16 == 0) scales[v / 16] = scale;
    }
  }
}

}  // namespace gshmem_moe

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
#include <type_traits>

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

// The grid's warps numbered block-fastest: consecutive work items go to different SMs, so items
// fewer than the warps spread over every SM, not the first blocks'.
__device__ inline int grid_warp() { return threadIdx.x / kWarp * gridDim.x + blockIdx.x; }
__device__ inline int grid_warps() { return gridDim.x * (blockDim.x / kWarp); }

// Rows of row_vecs vectors cut into `parts` of part_vecs, a multiple of align_vecs (the last parts
// may be shorter, or empty): about `items` work items over all `rows`, no part shorter than
// min_part_vecs, so a few rows still keep every warp of a large grid busy.
// Item i is part i % parts of row i / parts: vectors [begin(i), end(i)).
struct RowParts {
  int64_t parts, part_vecs, row_vecs;
  __device__ int64_t row(int64_t item) const { return item / parts; }
  __device__ int64_t begin(int64_t item) const { return item % parts * part_vecs; }
  __device__ int64_t end(int64_t item) const {
    const int64_t e = begin(item) + part_vecs;
    return e < row_vecs ? e : row_vecs;
  }
};
__device__ inline RowParts split_rows(int64_t rows, int64_t row_vecs, int64_t items,
                                      int64_t min_part_vecs, int64_t align_vecs = 1) {
  const int64_t wanted = rows > 0 ? items / rows : 1, most = row_vecs / min_part_vecs;
  const int64_t parts = wanted < 1 || most < 1 ? 1 : (wanted < most ? wanted : most);
  const int64_t part = (row_vecs + parts - 1) / parts;
  return {parts, (part + align_vecs - 1) / align_vecs * align_vecs, row_vecs};
}

// A warp's shuffle of any 4- or 8-byte value, pointers included (every lane takes src's).
template <class V>
__device__ inline V shfl(V v, int src) {
  if constexpr (std::is_pointer_v<V>) {
    const auto bits = reinterpret_cast<unsigned long long>(v);
    return reinterpret_cast<V>(__shfl_sync(0xffffffffu, bits, src));
  } else {
    return __shfl_sync(0xffffffffu, v, src);
  }
}

// The values `mine` of the lanes set in `held` (at most kMaxTopk of them), in lane order, into
// out[0, popc(held)); `none` after them. Every lane of the warp gets them, in registers when the
// caller indexes `out` in unrolled loops.
template <class V>
__device__ inline void gather_lanes(V mine, unsigned held, V none, V (&out)[kMaxTopk]) {
#pragma unroll
  for (int c = 0; c < kMaxTopk; ++c) {
    const V v = shfl(mine, held ? __ffs(held) - 1 : 0);
    out[c] = held ? v : none;
    held &= held - 1;
  }
}

// A warp's copy of one row of 16-byte vectors to dst[0, n) (n <= kMaxTopk places: a token's
// receivers), each vector loaded once: 8 loads per lane in flight (a few thousand bytes per
// warp: with a few hundred warps, enough to cover the latency of local or NVLink memory), then
// stored to every place. The row's tail is one predicated round, not a loop of single loads.
__device__ inline void copy_row_to(int4* const (&dst)[kMaxTopk], int n, const int4* src,
                                   int64_t row_vecs, int lane) {
  constexpr int kDepth = 8;
  for (int64_t base = lane; base < row_vecs; base += kDepth * kWarp) {
    int4 v[kDepth];
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      if (base + j * kWarp < row_vecs) v[j] = __ldg(src + base + j * kWarp);
    }
#pragma unroll
    for (int c = 0; c < kMaxTopk; ++c) {
      if (c >= n) break;
#pragma unroll
      for (int j = 0; j < kDepth; ++j) {
        if (base + j * kWarp < row_vecs) dst[c][base + j * kWarp] = v[j];
      }
    }
  }
}

// copy_row_to one place.
__device__ inline void copy_row(int4* dst, const int4* src, int64_t row_vecs, int lane) {
  int4* const one[kMaxTopk] = {dst};
  copy_row_to(one, 1, src, row_vecs, lane);
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

// Two elements of T as one value, and their conversions from and to a pair of floats.
template <class T>
struct Pair2;
template <>
struct Pair2<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  static __device__ inline float2 widen(Type h) { return __bfloat1622float2(h); }
  static __device__ inline Type round(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <>
struct Pair2<__half> {
  using Type = __half2;
  static __device__ inline float2 widen(Type h) { return __half22float2(h); }
  static __device__ inline Type round(float a, float b) { return __floats2half2_rn(a, b); }
};

// 8 elements of T (bf16 or fp16) in one 16-byte load, accumulated in fp32.
template <class T>
struct Vec8 {
  using Pair = typename Pair2<T>::Type;
  static __device__ inline void add(float* acc, const int4& v, float w) {
    const Pair* h = reinterpret_cast<const Pair*>(&v);
    for (int i = 0; i < 4; ++i) {
      const float2 f = Pair2<T>::widen(h[i]);
      acc[2 * i] += w * f.x;
      acc[2 * i + 1] += w * f.y;
    }
  }
  static __device__ inline int4 pack(const float* acc) {
    int4 v;
    Pair* h = reinterpret_cast<Pair*>(&v);
    for (int i = 0; i < 4; ++i) h[i] = Pair2<T>::round(acc[2 * i], acc[2 * i + 1]);
    return v;
  }
};

// dst[v] = the sum over c < n of w[c] * src[c][v] for every vector v of a row, by one warp: fp32
// accumulation in c's order, one rounding. kRows * kUnroll = 8 loads per lane in flight: fewer
// rows, more vectors at once (a row of the combine has ~2 pairs at 4 GPUs, top-8 of 256).
template <class T, int kRows, int kUnroll>
__device__ inline void sum_rows_by(int4* dst, const int4* const (&src)[kMaxTopk],
                                   const float (&w)[kMaxTopk], int n, int64_t row_vecs, int lane) {
  for (int64_t base = lane; base < row_vecs; base += kUnroll * kWarp) {
    int4 v[kRows][kUnroll];
#pragma unroll
    for (int c = 0; c < kRows; ++c) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (c < n && base + u * kWarp < row_vecs) v[c][u] = src[c][base + u * kWarp];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kWarp >= row_vecs) break;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int c = 0; c < kRows; ++c) {
        if (c < n) Vec8<T>::add(acc, v[c][u], w[c]);
      }
      dst[base + u * kWarp] = Vec8<T>::pack(acc);
    }
  }
}

// sum_rows_by for n <= kMaxTopk rows (zeros when n is 0).
template <class T>
__device__ inline void sum_rows(int4* dst, const int4* const (&src)[kMaxTopk],
                                const float (&w)[kMaxTopk], int n, int64_t row_vecs, int lane) {
  if (n <= 2) {
    sum_rows_by<T, 2, 4>(dst, src, w, n, row_vecs, lane);
  } else if (n <= 4) {
    sum_rows_by<T, 4, 2>(dst, src, w, n, row_vecs, lane);
  } else {
    sum_rows_by<T, 8, 1>(dst, src, w, n, row_vecs, lane);
  }
}

// A warp's FP8 copy of vectors [begin, end) of one row of T (row_vecs vectors of 8) to dst[0, n)
// (n <= kMaxTopk places, each the start of the row's place; quantized once): e4m3 values (8 bytes
// per vector) in a place's first row_vecs * 8 bytes, then one float scale per 128 elements (16
// vectors, half a warp): scale = amax / 448 (e4m3's largest finite value), each value rounded
// to nearest and saturated. row_vecs, begin and end multiples of kFp8GroupVecs (hidden a
// multiple of 128).
constexpr int kFp8GroupVecs = 16;
template <class T>
__device__ inline void quantize_row_to(uint8_t* const (&dst)[kMaxTopk], int n, const int4* src,
                                       int64_t row_vecs, int64_t begin, int64_t end, int lane) {
  constexpr float kE4m3Max = 448.0f;
  for (int64_t base = begin; base < end; base += kWarp) {
    const int64_t v = base + lane;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (v < end) Vec8<T>::add(f, __ldg(src + v), 1.0f);
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
    if (v < end) {
#pragma unroll
      for (int c = 0; c < kMaxTopk; ++c) {
        if (c >= n) break;
        reinterpret_cast<uint2*>(dst[c])[v] = packed;
        if (lane % kFp8GroupVecs == 0) {
          reinterpret_cast<float*>(dst[c] + row_vecs * 8)[v / kFp8GroupVecs] = scale;
        }
      }
    }
  }
}

// quantize_row_to places given as rows of 16-byte vectors (the receive buffers' type).
template <class T>
__device__ inline void quantize_row_to(int4* const (&dst)[kMaxTopk], int n, const int4* src,
                                       int64_t row_vecs, int64_t begin, int64_t end, int lane) {
  uint8_t* bytes[kMaxTopk];
#pragma unroll
  for (int c = 0; c < kMaxTopk; ++c) bytes[c] = reinterpret_cast<uint8_t*>(dst[c]);
  quantize_row_to<T>(bytes, n, src, row_vecs, begin, end, lane);
}

}  // namespace gshmem_moe

// Element types and reduction operators of the reducing collectives (all_reduce, reduce_scatter).
//
// Compile-time cost: kernels are instantiated once per (algorithm, element type); the operator
// (sum, prod, min, max) is a run-time switch inside the inner loop (uniform across the grid, so
// the branch is free next to the memory traffic). 16-bit floats accumulate in fp32 and round
// once at the end; integers wrap (two's complement, as torch does) instead of overflowing into
// undefined behaviour; float min/max ignore NaN operands (fminf/fmaxf).
//
// Members are combined in team order (PE 0 first) on every PE, so every member computes the
// same bits for the same inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "gshmem/gshmem.h"

namespace gshmem::coll::device {

// Per element type: U, the bits in memory; A, the accumulator; to/from convert.
struct F32 {
  using U = float;
  using A = float;
  __device__ static A to(U v) { return v; }
  __device__ static U from(A a) { return a; }
};
struct BF16 {
  using U = unsigned short;
  using A = float;
  __device__ static A to(U v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
  __device__ static U from(A a) { return __bfloat16_as_ushort(__float2bfloat16_rn(a)); }
};
struct F16 {
  using U = unsigned short;
  using A = float;
  __device__ static A to(U v) { return __half2float(__ushort_as_half(v)); }
  __device__ static U from(A a) { return __half_as_ushort(__float2half_rn(a)); }
};
struct I32 {
  using U = int;
  using A = int;
  __device__ static A to(U v) { return v; }
  __device__ static U from(A a) { return a; }
};
struct I64 {
  using U = long long;
  using A = long long;
  __device__ static A to(U v) { return v; }
  __device__ static U from(A a) { return a; }
};

template <class A>
__device__ inline A apply(A a, A b, int op) {
  if constexpr (std::is_integral_v<A>) {
    using W = std::make_unsigned_t<A>;
    switch (op) {
      case GSHMEM_SUM: return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
      case GSHMEM_PROD: return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
      case GSHMEM_MIN: return a < b ? a : b;
      default: return a > b ? a : b;  // GSHMEM_MAX
    }
  } else {
    switch (op) {
      case GSHMEM_SUM: return a + b;
      case GSHMEM_PROD: return a * b;
      case GSHMEM_MIN: return fminf(a, b);
      default: return fmaxf(a, b);  // GSHMEM_MAX
    }
  }
}

// A word W (uint4: 16 bytes, unsigned long long: 8, or one element) seen as lanes of type E.
template <class E, class W>
struct Lanes {
  static constexpr int N = sizeof(W) / sizeof(typename E::U);
  union Bits {
    W w;
    typename E::U u[N];
  };
  typename E::A a[N];

  __device__ void set(W w) {
    Bits b;
    b.w = w;
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = E::to(b.u[i]);
  }
  __device__ void combine(W w, int op) {
    Bits b;
    b.w = w;
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = apply(a[i], E::to(b.u[i]), op);
  }
  __device__ W get() const {
    Bits b;
#pragma unroll
    for (int i = 0; i < N; ++i) b.u[i] = E::from(a[i]);
    return b.w;
  }
};

// out[i] = op over team members t (in order) of src(t)[i], for i in [lo, hi), elements of E;
// `src(t)` gives member t's data. Made by the CTA: 16-byte words when every pointer allows,
// else element by element. Each element is read and written by the same thread, so out may be
// one of the sources (in place).
template <class E, class Src>
__device__ inline void reduce_range(typename E::U* out, int members, Src src, size_t lo,
                                    size_t hi, int op) {
  using U = typename E::U;
  constexpr size_t kPerWord = sizeof(uint4) / sizeof(U);
  bool aligned = reinterpret_cast<uintptr_t>(out + lo) % sizeof(uint4) == 0;
  for (int t = 0; t < members; ++t) {
    aligned = aligned && reinterpret_cast<uintptr_t>(src(t) + lo) % sizeof(uint4) == 0;
  }
  size_t i = lo + threadIdx.x * kPerWord;
  if (aligned) {
    for (; i + kPerWord <= hi; i += static_cast<size_t>(blockDim.x) * kPerWord) {
      Lanes<E, uint4> acc;
      acc.set(*reinterpret_cast<const uint4*>(src(0) + i));
      for (int t = 1; t < members; ++t) {
        acc.combine(*reinterpret_cast<const uint4*>(src(t) + i), op);
      }
      *reinterpret_cast<uint4*>(out + i) = acc.get();
    }
    // The tail (fewer than kPerWord elements): only the thread whose word straddles `hi` still
    // has i < hi, and finishes it element by element.
    if (i < hi) {
      for (size_t k = i; k < hi; ++k) {
        Lanes<E, U> acc;
        acc.set(src(0)[k]);
        for (int t = 1; t < members; ++t) acc.combine(src(t)[k], op);
        out[k] = acc.get();
      }
    }
    return;
  }
  for (size_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
    Lanes<E, U> acc;
    acc.set(src(0)[k]);
    for (int t = 1; t < members; ++t) acc.combine(src(t)[k], op);
    out[k] = acc.get();
  }
}

}  // namespace gshmem::coll::device

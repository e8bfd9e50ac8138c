// Element types and reduction operators of the reducing collectives (all_reduce, reduce_scatter),
// on top of the device API's (gshmem/device/reduce.cuh, which says what each type and operator
// computes).
//
// Compile-time cost: kernels are instantiated once per (algorithm, element type); the operator
// (sum, prod, min, max) is a run-time switch inside the inner loop (uniform across the grid, so
// the branch is free next to the memory traffic).
//
// Members are combined in team order (PE 0 first) on every PE, so every member computes the
// same bits for the same inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gshmem/device/reduce.cuh"
#include "gshmem/gshmem.h"

namespace gshmem::coll::device {

// Element types of the collective kernels: the device API's Reduce<T> (gshmem/device/reduce.cuh:
// the bits an element moves in, its accumulator, how Sum/Prod/Min/Max combine), named by a tag
// the kernels are instantiated on. U: the bits in memory.
template <class Type>
struct Elem {
  using T = Type;
  using U = typename gshmem::detail::Reduce<Type>::Bits;
};
using F32 = Elem<float>;
using BF16 = Elem<__nv_bfloat16>;
using F16 = Elem<__half>;
using I32 = Elem<int32_t>;
using I64 = Elem<int64_t>;

// A word W (uint4: 16 bytes, unsigned long long: 8, or one element) seen as lanes of E, combined
// with a run-time operator (gshmem_redop_t): one kernel per element type, not per operator.
template <class E, class W>
struct Lanes : gshmem::detail::Lanes<typename E::T, W> {
  using Base = gshmem::detail::Lanes<typename E::T, W>;
  __device__ void combine(W w, int op) {
    switch (op) {
      case GSHMEM_SUM: return Base::template combine<ReduceOp::Sum>(w);
      case GSHMEM_PROD: return Base::template combine<ReduceOp::Prod>(w);
      case GSHMEM_MIN: return Base::template combine<ReduceOp::Min>(w);
      default: return Base::template combine<ReduceOp::Max>(w);  // GSHMEM_MAX
    }
  }
};

// Members whose 16-byte words a thread loads before it combines them: the loads are independent,
// so they are all in flight at once instead of one after the other (each a round trip over
// NVLink when the sources are peers' memory, as in the pulled two-shot).
constexpr int kWordsInFlight = 8;

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
      for (int first = 0; first < members; first += kWordsInFlight) {
        uint4 words[kWordsInFlight];
#pragma unroll
        for (int k = 0; k < kWordsInFlight; ++k) {
          if (first + k < members) words[k] = *reinterpret_cast<const uint4*>(src(first + k) + i);
        }
#pragma unroll
        for (int k = 0; k < kWordsInFlight; ++k) {
          if (first + k == 0) {
            acc.set(words[k]);
          } else if (first + k < members) {
            acc.combine(words[k], op);
          }
        }
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

// Calls f(E{}) with the element type of `dtype` (validated by the caller): host code
// choosing the kernel instantiated for that type.
template <class F>
void with_type(gshmem_dtype_t dtype, F&& f) {
  switch (dtype) {
    case GSHMEM_FLOAT32: return f(F32{});
    case GSHMEM_BFLOAT16: return f(BF16{});
    case GSHMEM_FLOAT16: return f(F16{});
    case GSHMEM_INT32: return f(I32{});
    case GSHMEM_INT64: return f(I64{});
  }
}

}  // namespace gshmem::coll::device

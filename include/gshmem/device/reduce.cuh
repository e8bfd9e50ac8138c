// What reducing elements of type T means, for the reducing collectives of coll.cuh.
//
//   ReduceOp       Sum, Prod, Min, Max.
//   Reduce<T>      per element type: Bits, the word an element is moved in; Acc, the type
//                  elements are combined in; to_acc/from_acc; combine<Op>(Acc, Acc).
//   Lanes<T, W>    a memory word W (a 16-byte uint4, or one element's Bits) as Acc lanes.
//
// Element types and what combining them does:
//   float                       fp32 arithmetic.
//   __half, __nv_bfloat16       accumulate in fp32, rounded to nearest even once, at the end.
//   int32_t, int64_t            sum and prod wrap modulo 2^bits (two's complement: unsigned
//                               arithmetic, never signed overflow, which C++ leaves undefined).
// Float min/max are fminf/fmaxf: a NaN operand is ignored. Every other type fails to compile
// (Reduce<T> is incomplete).
//
// The 16-bit floats need <cuda_fp16.h> and <cuda_bf16.h>: nvcc always finds them; NVRTC only
// with the CUDA toolkit's include directory among its -I options (CuPy usually adds it).
// Without them the other types still work, and naming __half or __nv_bfloat16 is the compile
// error.
#pragma once

#include "types.cuh"

#if __has_include(<cuda_fp16.h>) && __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define GSHMEM_HAVE_FP16 1
#endif

namespace gshmem {

enum class ReduceOp : int { Sum, Prod, Min, Max };

namespace detail {

template <class T> struct Reduce;

struct ReduceFloat {
  using Acc = float;
  template <ReduceOp Op>
  __device__ static float combine(float a, float b) {
    if constexpr (Op == ReduceOp::Sum) {
      return a + b;
    } else if constexpr (Op == ReduceOp::Prod) {
      return a * b;
    } else if constexpr (Op == ReduceOp::Min) {
      return fminf(a, b);
    } else {
      return fmaxf(a, b);
    }
  }
};

template <> struct Reduce<float> : ReduceFloat {
  using Bits = float;
  __device__ static float to_acc(float b) { return b; }
  __device__ static float from_acc(float a) { return a; }
};

#ifdef GSHMEM_HAVE_FP16
template <> struct Reduce<__half> : ReduceFloat {
  using Bits = unsigned short;  // moved as bits: __half has constructors, which unions refuse
  __device__ static float to_acc(unsigned short b) { return __half2float(__ushort_as_half(b)); }
  __device__ static unsigned short from_acc(float a) {
    return __half_as_ushort(__float2half_rn(a));
  }
};

template <> struct Reduce<__nv_bfloat16> : ReduceFloat {
  using Bits = unsigned short;
  __device__ static float to_acc(unsigned short b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  __device__ static unsigned short from_acc(float a) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(a));
  }
};
#endif

// S: a signed integer type; U: its unsigned twin, in which sum and prod wrap.
template <class S, class U>
struct ReduceInteger {
  using Bits = S;
  using Acc = S;
  __device__ static S to_acc(S b) { return b; }
  __device__ static S from_acc(S a) { return a; }
  template <ReduceOp Op>
  __device__ static S combine(S a, S b) {
    if constexpr (Op == ReduceOp::Sum) {
      return static_cast<S>(static_cast<U>(a) + static_cast<U>(b));
    } else if constexpr (Op == ReduceOp::Prod) {
      return static_cast<S>(static_cast<U>(a) * static_cast<U>(b));
    } else if constexpr (Op == ReduceOp::Min) {
      return b < a ? b : a;
    } else {
      return a < b ? b : a;
    }
  }
};

template <> struct Reduce<int32_t> : ReduceInteger<int32_t, uint32_t> {};
template <> struct Reduce<int64_t> : ReduceInteger<int64_t, uint64_t> {};

template <class T, class W>
struct Lanes {
  using R = Reduce<T>;
  using Bits = typename R::Bits;
  static constexpr int kCount = sizeof(W) / sizeof(Bits);
  static_assert(kCount * sizeof(Bits) == sizeof(W), "a word holds whole elements");
  // Bit casts through a union, as ptx.cuh does (nvcc and NVRTC both support the punning).
  union Word {
    W word;
    Bits bits[kCount];
  };

  typename R::Acc acc[kCount];

  __device__ void set(W w) {
    const Word u{w};
#pragma unroll
    for (int i = 0; i < kCount; ++i) acc[i] = R::to_acc(u.bits[i]);
  }
  template <ReduceOp Op>
  __device__ void combine(W w) {
    const Word u{w};
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      acc[i] = R::template combine<Op>(acc[i], R::to_acc(u.bits[i]));
    }
  }
  __device__ W get() const {
    Word u;
#pragma unroll
    for (int i = 0; i < kCount; ++i) u.bits[i] = R::from_acc(acc[i]);
    return u.word;
  }
};

}  // namespace detail
}  // namespace gshmem

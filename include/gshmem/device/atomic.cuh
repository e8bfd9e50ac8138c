// Atomics on PE `pe`'s copy of a symmetric variable (OpenSHMEM AMOs), made by the calling thread:
// 32- and 64-bit integers (int, unsigned, long, unsigned long, long long, unsigned long long,
// hence int32_t ... uint64_t), float and double for fetch/set/swap/compare_swap/add/fetch_add.
//
// PTX: atom.relaxed.sys / red.relaxed.sys (a red when the old value is not wanted: the SM does not
// wait for a reply), ld.relaxed.sys for atomic_fetch, st.relaxed.sys for atomic_set. System scope
// makes them atomic with respect to every GPU's SMs and the host; relaxed means they are not
// ordered with other memory operations: use fence/quiet, or signal_op, when they must be.
// Atomics are performed at the memory's home GPU over NVLink, so contended updates from all PEs
// and threads give exact totals.
//
// On a PE beyond load/store reach (the comm's proxy path, proxy.cuh) the calling thread appends a
// descriptor and the target's proxy applies the atomic on its GPU (a system-scope
// compare-and-swap, so it is atomic with that GPU's own and its peers' atomics). The forms that
// return a value (atomic_fetch, the fetch_ forms, swap, compare_swap) wait for the answer; the
// others return at once and are complete once quiet(dev) returned, like put_nbi. Operations to
// one proxy PE are not ordered among themselves, even on one address (an atomic_set and a later
// atomic_fetch of the same word may pass each other), until a fence(dev) or quiet(dev). A wait
// that gives up (deadline.cuh) returns 0 and leaves the comm's fault record saying why.
#pragma once

#include "proxy.cuh"
#include "ptr.cuh"
#include "ptx.cuh"

namespace gshmem {
namespace detail {

// The PTX operand type for arithmetic and bitwise atomics on T (two's complement: signed and
// unsigned integers share the unsigned instructions). Unsupported types fail to compile.
template <class T> struct Amo;
template <> struct Amo<int> { using type = unsigned int; };
template <> struct Amo<unsigned int> { using type = unsigned int; };
template <> struct Amo<long> { using type = unsigned long long; };
template <> struct Amo<unsigned long> { using type = unsigned long long; };
template <> struct Amo<long long> { using type = unsigned long long; };
template <> struct Amo<unsigned long long> { using type = unsigned long long; };
template <> struct Amo<float> { using type = float; };
template <> struct Amo<double> { using type = double; };

template <class T>
__device__ inline typename Amo<T>::type* amo_target(const Device& dev, T* dest, int pe) {
  return reinterpret_cast<typename Amo<T>::type*>(peer(dev, dest, pe));
}
template <class T>
__device__ inline typename Amo<T>::type amo_value(T v) {
  return static_cast<typename Amo<T>::type>(v);
}

// The proxy's name for an operand type.
template <class U> struct AmoTypeOf;
template <> struct AmoTypeOf<unsigned int> {
  static constexpr proxy::AmoType value = proxy::AmoType::kU32;
};
template <> struct AmoTypeOf<unsigned long long> {
  static constexpr proxy::AmoType value = proxy::AmoType::kU64;
};
template <> struct AmoTypeOf<float> {
  static constexpr proxy::AmoType value = proxy::AmoType::kF32;
};
template <> struct AmoTypeOf<double> {
  static constexpr proxy::AmoType value = proxy::AmoType::kF64;
};

// Through the proxy: `op` with `operand` (and `compare`) on PE pe's *dest as operand type U; the
// old value when `fetch`, else 0 (also 0 when a wait gave up).
template <class U>
__device__ inline U proxy_amo(const Device& dev, void* dest, proxy::AmoOp op, U operand, int pe,
                              bool fetch, U compare = U{}) {
  uint64_t old = 0;
  proxy_atomic(dev, dest, op, AmoTypeOf<U>::value, to_bits(operand), to_bits(compare), pe,
               fetch ? &old : nullptr);
  return from_bits<U>(static_cast<typename UInt<sizeof(U)>::type>(old));
}

// Word-level operand for fetch/set/swap/compare_swap (the bit pattern of any 4- or 8-byte T).
template <class T>
__device__ inline typename UInt<sizeof(T)>::type* word_target(const Device& dev, T* dest, int pe) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics work on 4- and 8-byte types");
  return reinterpret_cast<typename UInt<sizeof(T)>::type*>(peer(dev, dest, pe));
}

}  // namespace detail

// Returns PE pe's *source.
template <class T>
__device__ inline T atomic_fetch(const Device& dev, const T* source, int pe) {
  if (detail::via_proxy(dev, pe)) return detail::proxy_g(dev, source, pe);
  return detail::from_bits<T>(
      detail::ld_relaxed(detail::word_target(dev, const_cast<T*>(source), pe)));
}

// PE pe's *dest = value.
template <class T>
__device__ inline void atomic_set(const Device& dev, T* dest, T value, int pe) {
  if (detail::via_proxy(dev, pe)) {
    detail::proxy_put_value(dev, dest, value, pe);
    return;
  }
  detail::st_relaxed(detail::word_target(dev, dest, pe), detail::to_bits(value));
}

// PE pe's *dest = value; returns the old value.
template <class T>
__device__ inline T atomic_swap(const Device& dev, T* dest, T value, int pe) {
  if (detail::via_proxy(dev, pe)) {
    return detail::from_bits<T>(
        detail::proxy_amo(dev, dest, proxy::AmoOp::kSwap, detail::to_bits(value), pe, true));
  }
  return detail::from_bits<T>(
      detail::atom_exch(detail::word_target(dev, dest, pe), detail::to_bits(value)));
}

// If PE pe's *dest == cond (bitwise), *dest = value; returns the old value either way.
template <class T>
__device__ inline T atomic_compare_swap(const Device& dev, T* dest, T cond, T value, int pe) {
  if (detail::via_proxy(dev, pe)) {
    return detail::from_bits<T>(detail::proxy_amo(dev, dest, proxy::AmoOp::kCompareSwap,
                                                  detail::to_bits(value), pe, true,
                                                  detail::to_bits(cond)));
  }
  return detail::from_bits<T>(detail::atom_cas(detail::word_target(dev, dest, pe),
                                               detail::to_bits(cond), detail::to_bits(value)));
}

// PE pe's *dest += value; atomic_fetch_add also returns the old value.
template <class T>
__device__ inline void atomic_add(const Device& dev, T* dest, T value, int pe) {
  if (detail::via_proxy(dev, pe)) {
    detail::proxy_amo(dev, dest, proxy::AmoOp::kAdd, detail::amo_value(value), pe, false);
    return;
  }
  detail::red_add_relaxed(detail::amo_target(dev, dest, pe), detail::amo_value(value));
}
template <class T>
__device__ inline T atomic_fetch_add(const Device& dev, T* dest, T value, int pe) {
  if (detail::via_proxy(dev, pe)) {
    return static_cast<T>(
        detail::proxy_amo(dev, dest, proxy::AmoOp::kAdd, detail::amo_value(value), pe, true));
  }
  return static_cast<T>(
      detail::atom_add(detail::amo_target(dev, dest, pe), detail::amo_value(value)));
}

// PE pe's *dest += 1 (integers).
template <class T>
__device__ inline void atomic_inc(const Device& dev, T* dest, int pe) {
  atomic_add(dev, dest, T(1), pe);
}
template <class T>
__device__ inline T atomic_fetch_inc(const Device& dev, T* dest, int pe) {
  return atomic_fetch_add(dev, dest, T(1), pe);
}

// Bitwise and/or/xor on integers; the fetch_ forms return the old value.
#define GSHMEM_BITWISE_AMO(OP, PROXY_OP)                                                        \
  template <class T>                                                                            \
  __device__ inline void atomic_##OP(const Device& dev, T* dest, T value, int pe) {            \
    if (detail::via_proxy(dev, pe)) {                                                           \
      detail::proxy_amo(dev, dest, proxy::AmoOp::PROXY_OP, detail::amo_value(value), pe, false); \
      return;                                                                                   \
    }                                                                                           \
    detail::red_##OP##_relaxed(detail::amo_target(dev, dest, pe), detail::amo_value(value));   \
  }                                                                                             \
  template <class T>                                                                            \
  __device__ inline T atomic_fetch_##OP(const Device& dev, T* dest, T value, int pe) {         \
    if (detail::via_proxy(dev, pe)) {                                                           \
      return static_cast<T>(detail::proxy_amo(dev, dest, proxy::AmoOp::PROXY_OP,               \
                                              detail::amo_value(value), pe, true));             \
    }                                                                                           \
    return static_cast<T>(                                                                      \
        detail::atom_##OP(detail::amo_target(dev, dest, pe), detail::amo_value(value)));       \
  }
GSHMEM_BITWISE_AMO(and, kAnd)
GSHMEM_BITWISE_AMO(or, kOr)
GSHMEM_BITWISE_AMO(xor, kXor)
#undef GSHMEM_BITWISE_AMO

}  // namespace gshmem

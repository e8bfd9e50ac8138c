// The PTX every other header is built from: strong loads and stores with explicit semantics, and
// atomics, all at system scope (.sys), because the other party is another GPU's SMs (or the host),
// which .gpu scope does not cover. Internal: use the public headers.
//
//   ld.relaxed.sys / st.relaxed.sys   strong but unordered: never torn, never served from a stale
//                                     L1 line; what p/g, atomic_fetch/atomic_set and polling use.
//   ld.acquire.sys                    later reads of this thread (and, through bar.sync, of its
//                                     block) see everything the writer released.
//   st.release.sys / red.release.sys  this thread's earlier writes, and those it has observed
//                                     (release is cumulative), are visible before the store/add.
//   atom/red.relaxed.sys              atomic with respect to every GPU and the host; no ordering
//                                     of other memory operations (use fence/quiet for that).
#pragma once

#include "types.cuh"

namespace gshmem {
namespace detail {

// The unsigned integer of N bytes that carries a value of that size through a strong access.
template <int N> struct UInt;
template <> struct UInt<1> { using type = unsigned char; };
template <> struct UInt<2> { using type = unsigned short; };
template <> struct UInt<4> { using type = unsigned int; };
template <> struct UInt<8> { using type = unsigned long long; };

// Bit casts through a union: nvcc and NVRTC both support this punning, while NVRTC has no
// memcpy builtin and C++20's std::bit_cast is not available under C++17.
template <class T>
__device__ inline typename UInt<sizeof(T)>::type to_bits(T v) {
  union {
    T value;
    typename UInt<sizeof(T)>::type bits;
  } u{v};
  return u.bits;
}

template <class T, class B>
__device__ inline T from_bits(B b) {
  static_assert(sizeof(T) == sizeof(B), "size mismatch");
  union {
    B bits;
    T value;
  } u{b};
  return u.value;
}

// ---- strong loads and stores: ld_<sem>(p), st_<sem>(p, v) on 1-, 2-, 4- and 8-byte words ----
// (an 8-bit access goes through a 16-bit register, which PTX allows for .b8)
#define GSHMEM_PTX_LDST(SEM_LD, SEM_ST, CT, BITS, RT, REG)                                   \
  __device__ inline CT ld_##SEM_LD(const CT* p) {                                           \
    RT v;                                                                                   \
    asm volatile("ld." #SEM_LD ".sys.global.b" #BITS " %0, [%1];"                           \
                 : "=" REG(v) : "l"(p) : "memory");                                          \
    return static_cast<CT>(v);                                                              \
  }                                                                                         \
  __device__ inline void st_##SEM_ST(CT* p, CT v) {                                         \
    asm volatile("st." #SEM_ST ".sys.global.b" #BITS " [%0], %1;"                           \
                 :: "l"(p), REG(static_cast<RT>(v)) : "memory");                            \
  }

GSHMEM_PTX_LDST(relaxed, relaxed, unsigned char, 8, unsigned short, "h")
GSHMEM_PTX_LDST(relaxed, relaxed, unsigned short, 16, unsigned short, "h")
GSHMEM_PTX_LDST(relaxed, relaxed, unsigned int, 32, unsigned int, "r")
GSHMEM_PTX_LDST(relaxed, relaxed, unsigned long long, 64, unsigned long long, "l")
GSHMEM_PTX_LDST(acquire, release, unsigned short, 16, unsigned short, "h")
GSHMEM_PTX_LDST(acquire, release, unsigned int, 32, unsigned int, "r")
GSHMEM_PTX_LDST(acquire, release, unsigned long long, 64, unsigned long long, "l")
#undef GSHMEM_PTX_LDST

// Typed forms: any trivially copyable T of 1, 2, 4 or 8 bytes (2, 4, 8 for acquire/release).
template <class T>
__device__ inline T load_relaxed(const T* p) {
  using B = typename UInt<sizeof(T)>::type;
  return from_bits<T>(ld_relaxed(reinterpret_cast<const B*>(p)));
}
template <class T>
__device__ inline T load_acquire(const T* p) {
  using B = typename UInt<sizeof(T)>::type;
  return from_bits<T>(ld_acquire(reinterpret_cast<const B*>(p)));
}
template <class T>
__device__ inline void store_relaxed(T* p, T v) {
  using B = typename UInt<sizeof(T)>::type;
  st_relaxed(reinterpret_cast<B*>(p), to_bits(v));
}
template <class T>
__device__ inline void store_release(T* p, T v) {
  using B = typename UInt<sizeof(T)>::type;
  st_release(reinterpret_cast<B*>(p), to_bits(v));
}

// ---- atomics: atom_<op>(p, v) returns the old value; red_<op>(p, v) returns nothing ----
#define GSHMEM_PTX_ATOM(OP, PTXOP, CT, PTXT, REG)                                            \
  __device__ inline CT atom_##OP(CT* p, CT v) {                                             \
    CT old;                                                                                 \
    asm volatile("atom.relaxed.sys.global." PTXOP "." PTXT " %0, [%1], %2;"                 \
                 : "=" REG(old) : "l"(p), REG(v) : "memory");                                \
    return old;                                                                             \
  }
#define GSHMEM_PTX_RED(OP, SEM, PTXOP, CT, PTXT, REG)                                        \
  __device__ inline void red_##OP##_##SEM(CT* p, CT v) {                                    \
    asm volatile("red." #SEM ".sys.global." PTXOP "." PTXT " [%0], %1;"                     \
                 :: "l"(p), REG(v) : "memory");                                             \
  }
#define GSHMEM_PTX_ATOM_RED(OP, CT, PTXT, REG)                                               \
  GSHMEM_PTX_ATOM(OP, #OP, CT, PTXT, REG)                                                    \
  GSHMEM_PTX_RED(OP, relaxed, #OP, CT, PTXT, REG)

GSHMEM_PTX_ATOM_RED(add, unsigned int, "u32", "r")
GSHMEM_PTX_ATOM_RED(add, unsigned long long, "u64", "l")
GSHMEM_PTX_ATOM_RED(add, float, "f32", "f")
GSHMEM_PTX_ATOM_RED(add, double, "f64", "d")
GSHMEM_PTX_ATOM_RED(and, unsigned int, "b32", "r")
GSHMEM_PTX_ATOM_RED(and, unsigned long long, "b64", "l")
GSHMEM_PTX_ATOM_RED(or, unsigned int, "b32", "r")
GSHMEM_PTX_ATOM_RED(or, unsigned long long, "b64", "l")
GSHMEM_PTX_ATOM_RED(xor, unsigned int, "b32", "r")
GSHMEM_PTX_ATOM_RED(xor, unsigned long long, "b64", "l")
GSHMEM_PTX_ATOM(exch, "exch", unsigned int, "b32", "r")
GSHMEM_PTX_ATOM(exch, "exch", unsigned long long, "b64", "l")
// The signal add: a release reduction (see signal.cuh).
GSHMEM_PTX_RED(add, release, "add", unsigned long long, "u64", "l")
#undef GSHMEM_PTX_ATOM_RED
#undef GSHMEM_PTX_RED
#undef GSHMEM_PTX_ATOM

#define GSHMEM_PTX_CAS(CT, PTXT, REG)                                                       \
  __device__ inline CT atom_cas(CT* p, CT expected, CT desired) {                           \
    CT old;                                                                                 \
    asm volatile("atom.relaxed.sys.global.cas." PTXT " %0, [%1], %2, %3;"                   \
                 : "=" REG(old) : "l"(p), REG(expected), REG(desired) : "memory");           \
    return old;                                                                             \
  }
GSHMEM_PTX_CAS(unsigned int, "b32", "r")
GSHMEM_PTX_CAS(unsigned long long, "b64", "l")
#undef GSHMEM_PTX_CAS

}  // namespace detail
}  // namespace gshmem

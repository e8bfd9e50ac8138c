// One-sided RMA: put, get, their non-blocking forms, single elements (p, g) and strided (iput,
// iget), at Thread, Warp or Block scope (scope.cuh: a scoped call is made by every thread of the
// scope, which synchronises on entry so the scope's earlier writes to the source are read).
//
// On load/store-reachable PEs the calling threads move the data themselves (copy.cuh: 16-byte
// words when the two addresses allow), so:
//   put / get          blocking: on return (after the scope's exit barrier) the source may be
//                      reused and, for get, the destination holds the data for every thread of
//                      the scope. A put is not yet ordered before later operations: follow it by
//                      fence/quiet, or use put_signal, before a peer may read the data.
//   put_nbi / get_nbi  the same data movement without the exit barrier; the source may be reused
//                      and the destination read once quiet<Scope>(dev) has returned.
//
// On a PE beyond load/store reach (the comm's proxy path, proxy.cuh) thread 0 of the scope
// appends one descriptor and the network moves the data: put_nbi/get_nbi return at once (the
// source and destination belong to the transfer until quiet<Scope>(dev)); put/get add that
// quiet (none for zero bytes), so on return the transfer is complete at both ends. Sources and
// destinations there must be memory the network can reach (this GPU's memory, or pinned host
// memory).
//   p / g              one element of 1, 2, 4 or 8 bytes, as a strong (relaxed, system-scope)
//                      store/load: never torn, never a stale cached value, so g can poll and
//                      `put; fence; p(flag)` is a valid release pattern. On the proxy path p
//                      appends one descriptor that carries the value (complete after
//                      quiet<Scope>(dev)); g appends one and waits for the value to come back.
//   iput / iget        dst[i * dst_stride] = src[i * src_stride] for i < nelems (strides in
//                      elements), weak element accesses, blocking as put/get. On the proxy path
//                      every element is one descriptor (a p or a g): strided access over the
//                      network is for small counts; pack into a put for bulk.
// Symmetric addresses (dst of put, src of get) must lie in the symmetric heap. Every call takes
// any world rank that is load/store-reachable or on the proxy path.
#pragma once

#include "copy.cuh"
#include "order.cuh"
#include "proxy.cuh"
#include "ptr.cuh"
#include "ptx.cuh"
#include "scope.cuh"

namespace gshmem {
namespace detail {

// What put/put_nbi and get/get_nbi do between the scope's barriers: the calling threads copy,
// or (proxy PE) thread 0 appends a descriptor and, when `complete`, waits for it. The route is
// decided once, before the copy, so that nothing of the proxy path stays live across it.
template <class Scope>
__device__ inline void put_body(const Device& dev, void* dst, const void* src, size_t bytes,
                                int pe, bool complete) {
  if (!via_proxy(dev, pe)) {
    copy<Scope>(peer(dev, dst, pe), src, bytes);
  } else if (Scope::rank() == 0 && bytes != 0 && proxy_put(dev, dst, src, bytes, pe) &&
             complete) {
    proxy_quiet(dev);
  }
}

template <class Scope>
__device__ inline void get_body(const Device& dev, void* dst, const void* src, size_t bytes,
                                int pe, bool complete) {
  if (!via_proxy(dev, pe)) {
    copy<Scope>(dst, peer(dev, src, pe), bytes);
  } else if (Scope::rank() == 0 && bytes != 0 && proxy_get(dev, dst, src, bytes, pe) &&
             complete) {
    proxy_quiet(dev);
  }
}

}  // namespace detail

template <class Scope = Thread>
__device__ inline void put_nbi(const Device& dev, void* dst, const void* src, size_t bytes,
                               int pe) {
  Scope::sync();
  detail::put_body<Scope>(dev, dst, src, bytes, pe, false);
}

template <class Scope = Thread>
__device__ inline void put(const Device& dev, void* dst, const void* src, size_t bytes, int pe) {
  Scope::sync();
  detail::put_body<Scope>(dev, dst, src, bytes, pe, true);
  Scope::sync();
}

template <class Scope = Thread>
__device__ inline void get_nbi(const Device& dev, void* dst, const void* src, size_t bytes,
                               int pe) {
  Scope::sync();
  detail::get_body<Scope>(dev, dst, src, bytes, pe, false);
}

template <class Scope = Thread>
__device__ inline void get(const Device& dev, void* dst, const void* src, size_t bytes, int pe) {
  Scope::sync();
  detail::get_body<Scope>(dev, dst, src, bytes, pe, true);
  Scope::sync();
}

// Single element, made by the calling thread alone.
template <class T>
__device__ inline void p(const Device& dev, T* dst, T value, int pe) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "p stores elements of 1, 2, 4 or 8 bytes");
  if (detail::via_proxy(dev, pe)) {
    detail::proxy_put_value(dev, dst, value, pe);
    return;
  }
  detail::store_relaxed(detail::peer(dev, dst, pe), value);
}

template <class T>
__device__ inline T g(const Device& dev, const T* src, int pe) {
  if (detail::via_proxy(dev, pe)) return detail::proxy_g(dev, src, pe);
  return detail::load_relaxed(detail::peer(dev, src, pe));
}

namespace detail {

// An element of 1, 2, 4 or 8 bytes travels in its descriptor (p, g); a wider one as a put or get
// of its bytes, complete at the scope's quiet.
template <class T>
constexpr bool kValueElement = sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8;

}  // namespace detail

template <class Scope = Thread, class T>
__device__ inline void iput(const Device& dev, T* dst, const T* src, ptrdiff_t dst_stride,
                            ptrdiff_t src_stride, size_t nelems, int pe) {
  Scope::sync();
  if (detail::via_proxy(dev, pe)) {
    for (size_t i = Scope::rank(); i < nelems; i += Scope::size()) {
      T* to = dst + static_cast<ptrdiff_t>(i) * dst_stride;
      const T* from = src + static_cast<ptrdiff_t>(i) * src_stride;
      if constexpr (detail::kValueElement<T>) {
        detail::proxy_put_value(dev, to, *from, pe);
      } else {
        detail::proxy_put(dev, to, from, sizeof(T), pe);
      }
    }
    Scope::sync();  // every element's descriptor appended before the quiet
    if (Scope::rank() == 0 && nelems != 0) detail::proxy_quiet(dev);
  } else {
    T* remote = detail::peer(dev, dst, pe);
    for (size_t i = Scope::rank(); i < nelems; i += Scope::size()) {
      remote[static_cast<ptrdiff_t>(i) * dst_stride] = src[static_cast<ptrdiff_t>(i) * src_stride];
    }
  }
  Scope::sync();
}

template <class Scope = Thread, class T>
__device__ inline void iget(const Device& dev, T* dst, const T* src, ptrdiff_t dst_stride,
                            ptrdiff_t src_stride, size_t nelems, int pe) {
  Scope::sync();
  if (detail::via_proxy(dev, pe)) {
    for (size_t i = Scope::rank(); i < nelems; i += Scope::size()) {
      T* to = dst + static_cast<ptrdiff_t>(i) * dst_stride;
      const T* from = src + static_cast<ptrdiff_t>(i) * src_stride;
      if constexpr (detail::kValueElement<T>) {
        *to = detail::proxy_g(dev, from, pe);
      } else {
        detail::proxy_get(dev, to, from, sizeof(T), pe);
      }
    }
    if constexpr (!detail::kValueElement<T>) {
      Scope::sync();  // every element's get appended before the quiet
      if (Scope::rank() == 0 && nelems != 0) detail::proxy_quiet(dev);
    }
  } else {
    const T* remote = detail::peer(dev, src, pe);
    for (size_t i = Scope::rank(); i < nelems; i += Scope::size()) {
      dst[static_cast<ptrdiff_t>(i) * dst_stride] = remote[static_cast<ptrdiff_t>(i) * src_stride];
    }
  }
  Scope::sync();
}

}  // namespace gshmem

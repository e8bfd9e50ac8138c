// Ordering: fence and quiet (OpenSHMEM semantics, DESIGN.md §4).
//
// On load/store-reachable peers every put, get, atomic and signal is executed by the calling
// threads' own loads and stores, so "outstanding" operations are only those the memory system
// has not yet made visible. Both calls are therefore memory fences at system scope (the peer's
// SMs, like ours, are outside gpu scope):
//
//   fence()  fence.acq_rel.sys  Orders this thread's earlier memory operations before its later
//                               ones, for every observer that synchronises with a later strong
//                               (signal, atomic, p) operation: `put; fence; p(flag)` is a release
//                               pattern in the PTX memory model.
//   quiet()  fence.sc.sys       Everything above, plus a single total order with every other
//                               fence.sc: earlier operations are complete and visible to all
//                               threads of the system (other GPUs, the host) when it returns.
//
// With a proxy path (PEs beyond load/store reach, proxy.cuh) use the forms that take the Device:
//   fence(dev)  also appends a fence descriptor: the network keeps each PE's operations in order.
//   quiet(dev)  also waits until every descriptor this PE appended before it is complete at its
//               target (bounded: false, to the whole scope, when the wait gave up).
// Without a proxy path they cost what fence()/quiet() cost, plus one branch.
//
// Scoped forms are made by the whole scope: the scope synchronises (bar.sync / bar.warp.sync,
// which make every thread's earlier writes happen-before the fence of thread 0), thread 0 fences
// (fences are cumulative: they order what the thread has observed, including those writes), and
// the scope synchronises again so no thread runs ahead of the fence.
#pragma once

#include "proxy.cuh"
#include "scope.cuh"

namespace gshmem {
namespace detail {

__device__ inline void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ inline void fence_sc_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }

template <class Scope, void (*Fence)()>
__device__ inline void scoped_fence() {
  Scope::sync();
  if (Scope::rank() == 0) Fence();
  Scope::sync();
}

}  // namespace detail

// Orders the scope's earlier puts/atomics/signals to each PE before its later ones. Not blocking.
template <class Scope = Thread>
__device__ inline void fence() {
  detail::scoped_fence<Scope, detail::fence_acq_rel_sys>();
}

// Returns once the scope's earlier puts/atomics/signals are complete and visible everywhere.
template <class Scope = Thread>
__device__ inline void quiet() {
  detail::scoped_fence<Scope, detail::fence_sc_sys>();
}

template <class Scope = Thread>
__device__ inline void fence(const Device& dev) {
  Scope::sync();
  if (Scope::rank() == 0) {
    detail::fence_acq_rel_sys();
    if (dev.proxy_capacity != 0) detail::proxy_fence(dev);
  }
  Scope::sync();
}

template <class Scope = Thread>
__device__ inline bool quiet(const Device& dev) {
  Scope::sync();
  bool done = true;
  if (Scope::rank() == 0) {
    detail::fence_sc_sys();
    if (dev.proxy_capacity != 0) done = detail::proxy_quiet(dev);
  }
  return Scope::all(done);
}

}  // namespace gshmem

// Signals: 64-bit words in the symmetric heap that carry "data has arrived" (OpenSHMEM 1.5
// put_with_signal). The rule (DESIGN.md §4): data stores first, then a release update of the
// signal at system scope; the receiver's acquire load of the signal then makes the data visible.
//
//   signal_op(SET)  st.release.sys.global.b64   release: every write this thread made or observed
//   signal_op(ADD)  red.release.sys.global.add.u64   before it is visible before the new value.
//   put_signal      the scope copies (weak stores), bar.sync (so every thread's stores
//                   happen-before thread 0's next instruction), then thread 0 does signal_op:
//                   release is cumulative, so the whole scope's data precedes the signal.
//   signal_fetch    ld.acquire.sys of a local signal.
//   signal_wait_until  thread 0 polls with ld.acquire.sys until the comparison holds, then the
//                   scope's broadcast (a barrier) extends the acquire to every thread.
// signal_wait_until has a bounded form, taking the Device first (deadline.cuh, sync.cuh).
// On a PE beyond load/store reach (the proxy path, proxy.cuh) signal_op and put_signal are one
// descriptor each; the target's proxy applies the signal on its GPU after the data has landed,
// with the same release store or add, so the receiver's side is unchanged.
#pragma once

#include "copy.cuh"
#include "deadline.cuh"
#include "proxy.cuh"
#include "ptr.cuh"
#include "ptx.cuh"
#include "scope.cuh"

namespace gshmem {

// Updates PE `pe`'s copy of symmetric signal `sig`, ordered after this thread's earlier writes
// (and those it has observed). Made by the calling thread alone. Not blocking.
__device__ inline void signal_op(const Device& dev, uint64_t* sig, uint64_t value, SignalOp op,
                                 int pe) {
  if (detail::via_proxy(dev, pe)) {
    detail::proxy_signal(dev, sig, value, op, pe);
    return;
  }
  unsigned long long* remote = reinterpret_cast<unsigned long long*>(detail::peer(dev, sig, pe));
  if (op == SignalOp::Set) {
    detail::st_release(remote, static_cast<unsigned long long>(value));
  } else {
    detail::red_add_release(remote, static_cast<unsigned long long>(value));
  }
}

// put_nbi of `bytes` to PE `pe`, then signal_op on its `sig`: a receiver that sees the new signal
// value (signal_wait_until, wait_until, signal_fetch) sees all the data. On return the source may
// be reused after quiet<Scope>() (the non-blocking form) or at once (put_signal).
namespace detail {

// put_signal/put_signal_nbi after the entry barrier: the copy, the scope's barrier and thread
// 0's signal, or (proxy PE) thread 0's descriptor and, when `complete`, the wait for it. The
// route is decided once, before the copy (rma.cuh put_body).
template <class Scope>
__device__ inline void put_signal_body(const Device& dev, void* dst, const void* src,
                                       size_t bytes, uint64_t* sig, uint64_t value, SignalOp op,
                                       int pe, bool complete) {
  if (!via_proxy(dev, pe)) {
    copy<Scope>(peer(dev, dst, pe), src, bytes);
    Scope::sync();
    if (Scope::rank() == 0) signal_op(dev, sig, value, op, pe);
  } else if (Scope::rank() == 0 && proxy_put(dev, dst, src, bytes, pe, sig, value, op) &&
             complete) {
    proxy_quiet(dev);
  }
}

}  // namespace detail

template <class Scope = Thread>
__device__ inline void put_signal_nbi(const Device& dev, void* dst, const void* src, size_t bytes,
                                      uint64_t* sig, uint64_t value, SignalOp op, int pe) {
  Scope::sync();
  detail::put_signal_body<Scope>(dev, dst, src, bytes, sig, value, op, pe, false);
}

template <class Scope = Thread>
__device__ inline void put_signal(const Device& dev, void* dst, const void* src, size_t bytes,
                                  uint64_t* sig, uint64_t value, SignalOp op, int pe) {
  Scope::sync();
  detail::put_signal_body<Scope>(dev, dst, src, bytes, sig, value, op, pe, true);
  Scope::sync();
}

__device__ inline uint64_t signal_fetch(const uint64_t* sig) {
  return detail::ld_acquire(reinterpret_cast<const unsigned long long*>(sig));
}

// Blocks until this PE's `*sig <cmp> value` holds; returns the value that satisfied it (the same
// for every thread of the scope). Everything written before the signal update that satisfied it
// is visible to every thread of the scope afterwards.
template <class Scope = Thread>
__device__ inline uint64_t signal_wait_until(const uint64_t* sig, Cmp cmp, uint64_t value) {
  uint64_t seen = 0;
  if (Scope::rank() == 0) {
    do {
      seen = signal_fetch(sig);
    } while (!detail::compare(seen, cmp, value));
  }
  return Scope::broadcast(seen);
}

// Bounded: blocks until this PE's `*sig <cmp> value` and returns true, or gives up (GSHMEM_TIMEOUT,
// comm.abort(), another failed wait) and returns false; the same for every thread of the scope.
// `from_pe` names the PE expected to signal, for the fault record the host reports.
template <class Scope = Thread>
__device__ inline bool signal_wait_until(const Device& dev, const uint64_t* sig, Cmp cmp,
                                         uint64_t value, int from_pe = -1) {
  bool done = true;
  if (Scope::rank() == 0) {
    const detail::Waited what{GSHMEM_WAIT_SIGNAL, from_pe, static_cast<int>(cmp), sig, value};
    Deadline deadline;
    uint64_t seen;
    while (!detail::compare(seen = signal_fetch(sig), cmp, value)) {
      if (deadline.expired(dev, what, seen)) {
        done = false;
        break;
      }
    }
  }
  return Scope::broadcast(done);
}

}  // namespace gshmem

// Windows: one-sided puts into memory every PE registered (the GPU-initiated networking
// vocabulary of NCCL's GIN, docs/windows.md), where sizes may differ per PE and completion is
// tracked by numbered signals and counters instead of symmetric addresses.
//
//   WindowContext w(dev, win, ctx);   one of the window's contexts: its own signals and counters
//   w.put<Scope>(offset, src, bytes, pe, SignalAdd{id}, CounterInc{id})
//   w.put_value(offset, value, pe, SignalAdd{id})
//   w.signal(pe, SignalAdd{id})       a signal alone
//   w.flush<Scope>()                  every earlier put of the scope complete at its target
//   w.wait_signal<Scope>(id, value)   bounded: this PE's signal id >= value
//   w.read_signal(id), w.reset_signal(id), w.read_counter(id), w.wait_counter<Scope>(id, value),
//   w.reset_counter(id), w.local(offset), w.barrier<Scope>()
//
// Ordering: a SignalAdd is a release add into the target's signal made after the scope's copy
// (bar.sync, then thread 0's red.release.sys): a PE whose wait_signal saw it sees the data. A
// CounterInc counts on this PE once the source may be reused: the scope's loads of it are done.
// Puts without a signal are ordered with nothing: flush(), then a signal, to publish them.
// Contexts share nothing: kernels (or blocks) on different contexts never see each other's
// signals and counters, so independent flows need no coordination.
//
// A load/store peer's put is the scope's stores into its mapping. A PE beyond load/store reach
// (another host, through the comm's proxy path: proxy.cuh) gets a descriptor instead: the proxy
// thread moves the data over the network, then applies the SignalAdd at the target, and counts
// the CounterInc here once the source may be reused. So for such a peer put() returns before
// the data has left: reuse the source once its CounterInc counted or flush() returned. flush()
// waits for every descriptor this PE appended before it to complete. A put past the end of the
// target's window, or to a PE outside the world, prints what was asked and traps.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cstdio>  // device printf (NVRTC declares it itself)
#endif

#include "barrier.cuh"
#include "copy.cuh"
#include "order.cuh"
#include "proxy.cuh"
#include "ptx.cuh"
#include "scope.cuh"
#include "signal.cuh"
#include "types.cuh"

namespace gshmem {

using Window = gshmem_window_t;

// Add `value` to the target PE's signal `id` (of the context) once the data has landed.
struct SignalAdd {
  int id;
  uint64_t value = 1;
};
// Add 1 to this PE's counter `id` (of the context) once the source may be reused.
struct CounterInc {
  int id;
};
struct NoSignal {};
struct NoCounter {};

class WindowContext {
 public:
  __device__ WindowContext(const Device& dev, const Window& win, int ctx)
      : dev_(dev), win_(win), ctx_(ctx) {
    if (ctx < 0 || ctx >= win.n_contexts) {
      printf("gshmem window: context %d is outside [0, %d)\n", ctx, win.n_contexts);
      __trap();
    }
  }

  // The scope copies `bytes` from `src` (this GPU) to PE `pe`'s window at `offset`, then signals
  // and counts as asked. Made by the whole scope; for a load/store peer the source may be reused
  // when it returns (for a proxy peer: above). False only when a proxy queue stayed full past
  // the deadline (docs/reliability.md).
  template <class Scope = Thread, class Sig = NoSignal, class Ctr = NoCounter>
  __device__ bool put(size_t offset, const void* src, size_t bytes, int pe, Sig sig = {},
                      Ctr ctr = {}) const {
    char* dst = target(pe, offset, bytes);
    Scope::sync();
    if (detail::via_proxy(dev_, pe)) {
      bool ok = true;
      if (Scope::rank() == 0) ok = proxy_put(pe, offset, src, bytes, sig, counter_index(ctr));
      return Scope::all(ok);
    }
    detail::copy<Scope>(dst, src, bytes);
    Scope::sync();
    if (Scope::rank() == 0) {
      add_signal(pe, sig);
      count(ctr);
    }
    return true;
  }

  // Stores `value` (1, 2, 4 or 8 bytes, naturally aligned in the target) at `offset` of PE
  // `pe`'s window, then signals as asked. Made by the calling thread.
  template <class T, class Sig = NoSignal>
  __device__ bool put_value(size_t offset, T value, int pe, Sig sig = {}) const {
    T* dst = reinterpret_cast<T*>(target(pe, offset, sizeof(T)));
    if (detail::via_proxy(dev_, pe)) {
      // the signal goes after the value (a kSignal is fenced behind earlier descriptors)
      return detail::proxy_put_value_to(dev_, data_remote(offset), value, pe) &&
             proxy_signal(pe, sig);
    }
    detail::store_relaxed(dst, value);
    add_signal(pe, sig);
    return true;
  }

  // Adds to PE `pe`'s signal, ordered after every write this thread made or observed (and,
  // for a proxy peer, after every descriptor this PE appended before it).
  __device__ bool signal(int pe, SignalAdd sig) const {
    check_pe(pe);
    if (detail::via_proxy(dev_, pe)) return proxy_signal(pe, sig);
    add_signal(pe, sig);
    return true;
  }

  // Returns once the scope's earlier puts are complete and visible at their targets (with a
  // proxy path: every descriptor this PE appended before it, too). False when that wait gave up.
  template <class Scope = Thread>
  __device__ bool flush() const {
    return quiet<Scope>(dev_);
  }

  // Bounded: until this PE's signal `id` >= `value` (true), or the wait gave up (false,
  // docs/reliability.md); the data of every put whose SignalAdd it saw is visible afterwards.
  template <class Scope = Thread>
  __device__ bool wait_signal(int id, uint64_t value, int from_pe = -1) const {
    return signal_wait_until<Scope>(dev_, own_signal(id), Cmp::GE, value, from_pe);
  }
  __device__ uint64_t read_signal(int id) const { return signal_fetch(own_signal(id)); }
  // Not ordered with puts in flight: reset a signal only when no peer adds to it any more.
  __device__ void reset_signal(int id) const {
    detail::store_release(own_signal(id), uint64_t{0});
  }

  __device__ uint64_t read_counter(int id) const { return signal_fetch(counter(id)); }
  // Bounded, like wait_signal, for this PE's counter `id` >= `value`.
  template <class Scope = Thread>
  __device__ bool wait_counter(int id, uint64_t value) const {
    return signal_wait_until<Scope>(dev_, counter(id), Cmp::GE, value, dev_.my_pe);
  }
  __device__ void reset_counter(int id) const {
    detail::store_release(counter(id), uint64_t{0});
  }

  // This PE's own window at `offset`.
  __device__ void* local(size_t offset) const {
    return reinterpret_cast<char*>(base(dev_.my_pe)) + offset;
  }

  // Bounded barrier over every PE (the window's group is the world); the scope's earlier puts
  // are complete first. False when it gave up.
  template <class Scope = Block>
  __device__ bool barrier() const {
    return barrier_all<Scope>(dev_);
  }

 private:
  __device__ void check_pe(int pe) const {
    if (pe < 0 || pe >= win_.n_pes) {
      printf("gshmem window: PE %d is outside [0, %d)\n", pe, win_.n_pes);
      __trap();
    }
  }
  __device__ uint64_t base(int pe) const {
    return reinterpret_cast<const uint64_t*>(win_.bases)[pe];
  }
  __device__ char* target(int pe, size_t offset, size_t bytes) const {
    check_pe(pe);
    const uint64_t size = reinterpret_cast<const uint64_t*>(win_.sizes)[pe];
    if (offset > size || bytes > size - offset) {
      printf("gshmem window: a put of %llu bytes at offset %llu to PE %d passes the end of its "
             "%llu-byte window\n",
             static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(offset), pe,
             static_cast<unsigned long long>(size));
      __trap();
    }
    return reinterpret_cast<char*>(base(pe)) + offset;
  }
  __device__ uint64_t* slot(uint64_t array, int id, int n, const char* what) const {
    if (id < 0 || id >= n) {
      printf("gshmem window: %s %d is outside [0, %d)\n", what, id, n);
      __trap();
    }
    return reinterpret_cast<uint64_t*>(array) + static_cast<size_t>(ctx_) * n + id;
  }
  __device__ uint64_t* own_signal(int id) const { return signal_of(dev_.my_pe, id); }
  __device__ uint64_t signal_base(int pe) const {
    return reinterpret_cast<const uint64_t*>(win_.signals)[pe];
  }
  __device__ uint64_t* signal_of(int pe, int id) const {
    return slot(signal_base(pe), id, win_.n_signals, "signal");
  }
  __device__ uint64_t* counter(int id) const {
    return slot(win_.counters, id, win_.n_counters, "counter");
  }
  // Proxy peers: `offset` in the window's region; signal `id` in the symmetric heap (the signal
  // arrays are heap blocks: the same offset on every PE).
  __device__ detail::Remote data_remote(size_t offset) const {
    return {static_cast<uint16_t>(win_.proxy_region), offset};
  }
  __device__ detail::Remote signal_remote(int id) const {
    const uint64_t own = reinterpret_cast<uint64_t>(own_signal(id));  // checks the id
    return {proxy::kHeapRegion, win_.signal_offset + (own - signal_base(dev_.my_pe))};
  }
  __device__ bool proxy_put(int pe, size_t offset, const void* src, size_t bytes, NoSignal,
                            uint64_t counter) const {
    return detail::proxy_put_to(dev_, data_remote(offset), src, bytes, pe, nullptr, 0,
                                SignalOp::Add, counter);
  }
  __device__ bool proxy_put(int pe, size_t offset, const void* src, size_t bytes, SignalAdd sig,
                            uint64_t counter) const {
    const detail::Remote s = signal_remote(sig.id);
    return detail::proxy_put_to(dev_, data_remote(offset), src, bytes, pe, &s, sig.value,
                                SignalOp::Add, counter);
  }
  __device__ bool proxy_signal(int, NoSignal) const { return true; }
  __device__ bool proxy_signal(int pe, SignalAdd sig) const {
    return detail::proxy_signal_to(dev_, signal_remote(sig.id), sig.value, SignalOp::Add, pe);
  }
  __device__ uint64_t counter_index(NoCounter) const { return 0; }
  __device__ uint64_t counter_index(CounterInc ctr) const {
    counter(ctr.id);  // checks the id
    return win_.counter_first + static_cast<uint64_t>(ctx_) * win_.n_counters + ctr.id + 1;
  }

  __device__ void add_signal(int, NoSignal) const {}
  __device__ void add_signal(int pe, SignalAdd sig) const {
    detail::red_add_release(reinterpret_cast<unsigned long long*>(signal_of(pe, sig.id)),
                            static_cast<unsigned long long>(sig.value));
  }
  __device__ void count(NoCounter) const {}
  __device__ void count(CounterInc ctr) const {
    detail::red_add_release(reinterpret_cast<unsigned long long*>(counter(ctr.id)), 1ull);
  }

  const Device& dev_;
  const Window& win_;
  int ctx_;
};

}  // namespace gshmem

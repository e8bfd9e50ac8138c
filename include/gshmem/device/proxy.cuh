// A GPU thread as a producer on the proxy queue (gshmem/proxy_queue.h): the path to peers that no
// load or store reaches. The comm's proxy thread takes the descriptor and executes it on the
// network (UCX). Ordering: the payload is written with relaxed system-scope stores, then the
// slot's sequence word with a release store, so the host, which reads the sequence word with
// acquire, sees the whole payload. The ticket comes from a compare-and-swap on `tail` (GPU
// memory) that only succeeds while the queue has room: a full queue refuses rather than
// overwrite a slot the proxy has not taken.
//
// The Device-level calls below are what rma.cuh, atomic.cuh, signal.cuh, order.cuh and
// barrier.cuh use for a PE that via_proxy() names; they are made by one thread (the scope's
// thread 0, or the thread that calls an atomic or g). Every wait is
// bounded (deadline.cuh, GSHMEM_WAIT_PROXY): a proxy that stopped, an abort or GSHMEM_TIMEOUT
// makes it give up, record the fault and return false.
#pragma once

#include "../proxy_queue.h"
#include "copy.cuh"
#include "deadline.cuh"
#include "ptx.cuh"
#include "types.cuh"

namespace gshmem {
namespace proxy {

// Appends `c` if the queue has room and stores its ticket in *ticket (when not null); false when
// the queue is full (the proxy frees slots as it takes them: try again, under a deadline). Made
// by the calling thread alone. Not blocking. `carried` (kPutInline): c.bytes from there are
// copied into the ticket's inline data before the descriptor is published.
__device__ inline bool try_push(const QueueView& q, const Command& c,
                                unsigned long long* ticket = nullptr,
                                const void* carried = nullptr) {
  auto* tail = reinterpret_cast<unsigned long long*>(q.tail);
  const auto* head = reinterpret_cast<const unsigned long long*>(q.head);
  unsigned long long t = detail::ld_relaxed(tail);
  for (;;) {
    if (t - detail::ld_acquire(head) >= q.capacity) return false;
    const unsigned long long seen = detail::atom_cas(tail, t, t + 1);
    if (seen == t) break;
    t = seen;
  }
  if (carried != nullptr) {  // weak stores: the release that publishes below orders them
    detail::copy_split(q.inline_data + (t & (q.capacity - 1)) * kInlineBytes, carried, c.bytes, 0,
                       1);
  }
  uint64_t words[kPayloadWords];
  encode(c, words);
  Descriptor* d = &q.slots[t & (q.capacity - 1)];
  for (size_t i = 0; i < kPayloadWords; ++i) {
    detail::st_relaxed(reinterpret_cast<unsigned long long*>(&d->words[i]),
                       static_cast<unsigned long long>(words[i]));
  }
  detail::st_release(reinterpret_cast<unsigned long long*>(&d->seq),
                     static_cast<unsigned long long>(t + 1));
  if (ticket != nullptr) *ticket = t;
  return true;
}

}  // namespace proxy

namespace detail {

// Whether operations on `pe` go through the proxy: `pe` is another PE that no load or store
// reaches and the comm has a proxy path. On the direct path one predictable branch on the PE
// table entry the address computation reads anyway.
__device__ inline bool via_proxy(const Device& dev, int pe) {
  return pe != dev.my_pe && reinterpret_cast<const int32_t*>(dev.local_index)[pe] < 0 &&
         dev.proxy_capacity != 0;
}

__device__ inline proxy::QueueView proxy_queue(const Device& dev) {
  return {reinterpret_cast<proxy::Descriptor*>(dev.proxy_slots),
          reinterpret_cast<uint64_t*>(dev.proxy_tail), reinterpret_cast<uint64_t*>(dev.proxy_head),
          dev.proxy_capacity, reinterpret_cast<uint8_t*>(dev.proxy_inline)};
}

// Where a descriptor's data or signal lands at the target: a region the engine knows (a window,
// or kHeapRegion: the comm's symmetric heap) and an offset in it.
struct Remote {
  uint16_t region;
  uint64_t offset;
};

// Symmetric `p`: the same heap offset on every PE.
__device__ inline Remote heap_remote(const Device& dev, const void* p) {
  return {proxy::kHeapRegion, reinterpret_cast<uint64_t>(p) - dev.heap_base};
}

// A descriptor of `op` to `pe` naming symmetric `p` (the heap region, p's offset in it).
__device__ inline proxy::Command heap_command(const Device& dev, proxy::Op op, const void* p,
                                              int pe) {
  proxy::Command c;
  c.op = op;
  c.pe = static_cast<uint32_t>(pe);
  const Remote at = heap_remote(dev, p);
  c.region = at.region;
  c.offset = at.offset;
  return c;
}

// Appends `c`, waiting (bounded) for room; false when the wait gave up. Earlier writes of this
// thread (and, through a preceding bar.sync, of its scope) are visible to the proxy and to the
// network's reads of the source before the descriptor is: the release store that publishes it
// is cumulative at system scope.
__device__ inline bool proxy_push(const Device& dev, const proxy::Command& c,
                                  unsigned long long* ticket = nullptr,
                                  const void* carried = nullptr) {
  const proxy::QueueView q = proxy_queue(dev);
  const Waited what{GSHMEM_WAIT_PROXY, static_cast<int>(c.pe), -1,
                    reinterpret_cast<const void*>(dev.proxy_head), 0};
  Deadline deadline;
  while (!proxy::try_push(q, c, ticket, carried)) {
    if (deadline.expired(dev, what, 0)) return false;
  }
  return true;
}

// Returns once every descriptor appended before this call (by any thread of this PE) is complete
// at its target: a kQuiet descriptor retires only after the engine's flush. False when it gave up.
__device__ inline bool proxy_quiet(const Device& dev) {
  proxy::Command c;
  c.op = proxy::Op::kQuiet;
  unsigned long long t = 0;
  if (!proxy_push(dev, c, &t)) return false;
  const auto* retired = reinterpret_cast<const unsigned long long*>(dev.proxy_retired);
  const Waited what{GSHMEM_WAIT_PROXY, -1, static_cast<int>(Cmp::GT),
                    reinterpret_cast<const void*>(dev.proxy_retired), t};
  Deadline deadline;
  unsigned long long seen;
  while ((seen = ld_acquire(retired)) <= t) {
    if (deadline.expired(dev, what, seen)) return false;
  }
  return true;
}

// A put (kPut) or put-with-signal (kPutSignal when `sig` is given: `value` added to it, or
// stored) of `bytes` from local `src` to `dst` on `pe`; `counter` (index + 1, 0: none) counts
// here once the source may be reused. Otherwise the source may be reused once proxy_quiet()
// returned. 4 or 8 bytes, aligned at both ends, travel in the descriptor (kPutValue,
// kPutValueSignal), and up to kInlineBytes in the queue's inline data (kPutInline,
// kPutInlineSignal): the target applies them from one message, with no copy into its memory by
// the network and no flush before the signal.
__device__ inline bool proxy_put_to(const Device& dev, Remote dst, const void* src, size_t bytes,
                                    int pe, const Remote* sig = nullptr, uint64_t value = 0,
                                    SignalOp op = SignalOp::Add, uint64_t counter = 0) {
  proxy::Command c;
  const bool value_carried = (bytes == 4 || bytes == 8) && dst.offset % bytes == 0 &&
                             reinterpret_cast<unsigned long long>(src) % bytes == 0;
  const bool inline_carried = !value_carried && bytes >= 1 && bytes <= proxy::kInlineBytes;
  if (value_carried) {
    c.op = sig != nullptr ? proxy::Op::kPutValueSignal : proxy::Op::kPutValue;
    c.local = bytes == 4 ? *static_cast<const uint32_t*>(src) : *static_cast<const uint64_t*>(src);
  } else if (inline_carried) {
    c.op = sig != nullptr ? proxy::Op::kPutInlineSignal : proxy::Op::kPutInline;
  } else {
    c.op = sig != nullptr ? proxy::Op::kPutSignal : proxy::Op::kPut;
    c.local = reinterpret_cast<uint64_t>(src);
  }
  c.pe = static_cast<uint32_t>(pe);
  c.region = dst.region;
  c.offset = dst.offset;
  c.bytes = bytes;
  c.counter = counter;
  if (sig != nullptr) {
    c.signal_region = sig->region;
    c.signal_offset = sig->offset;
    c.signal_value = value;
    c.signal_set = op == SignalOp::Set;
  }
  return proxy_push(dev, c, nullptr, inline_carried ? src : nullptr);
}

// The same to symmetric `dst` (and signal `sig`) on `pe`.
__device__ inline bool proxy_put(const Device& dev, void* dst, const void* src, size_t bytes,
                                 int pe, const uint64_t* sig = nullptr, uint64_t value = 0,
                                 SignalOp op = SignalOp::Add) {
  const Remote s = sig != nullptr ? heap_remote(dev, sig) : Remote{};
  return proxy_put_to(dev, heap_remote(dev, dst), src, bytes, pe, sig != nullptr ? &s : nullptr,
                      value, op);
}

// Stores `value` (1, 2, 4 or 8 bytes) at `dst` on `pe`: the value travels in the descriptor, so
// nothing of the caller's must stay valid. Complete once proxy_quiet() returned.
template <class T>
__device__ inline bool proxy_put_value_to(const Device& dev, Remote dst, T value, int pe) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "a value put stores 1, 2, 4 or 8 bytes");
  proxy::Command c;
  c.op = proxy::Op::kPutValue;
  c.pe = static_cast<uint32_t>(pe);
  c.region = dst.region;
  memcpy(&c.local, &value, sizeof(T));  // c.local is 0: the high bytes stay 0
  c.offset = dst.offset;
  c.bytes = sizeof(T);
  return proxy_push(dev, c);
}

template <class T>
__device__ inline bool proxy_put_value(const Device& dev, T* dst, T value, int pe) {
  return proxy_put_value_to(dev, heap_remote(dev, dst), value, pe);
}

// A get of `bytes` from symmetric `src` on `pe` into local `dst`, there once proxy_quiet()
// returned.
__device__ inline bool proxy_get(const Device& dev, void* dst, const void* src, size_t bytes,
                                 int pe) {
  proxy::Command c = heap_command(dev, proxy::Op::kGet, src, pe);
  c.local = reinterpret_cast<uint64_t>(dst);
  c.bytes = bytes;
  return proxy_push(dev, c);
}

// A signal update of `sig` on `pe`. The proxy fences before it, so it lands after every earlier
// descriptor's data (the release of signal_op on the direct path).
__device__ inline bool proxy_signal_to(const Device& dev, Remote sig, uint64_t value, SignalOp op,
                                       int pe) {
  proxy::Command c;
  c.op = proxy::Op::kSignal;
  c.pe = static_cast<uint32_t>(pe);
  c.signal_region = sig.region;
  c.signal_offset = sig.offset;
  c.signal_value = value;
  c.signal_set = op == SignalOp::Set;
  return proxy_push(dev, c);
}

__device__ inline bool proxy_signal(const Device& dev, const uint64_t* sig, uint64_t value,
                                    SignalOp op, int pe) {
  return proxy_signal_to(dev, heap_remote(dev, sig), value, op, pe);
}

// Waits (bounded) for the value that this thread's descriptor with ticket `t` fetched
// (gshmem/proxy_queue.h: Results) and stores it in *value; false when the wait gave up.
__device__ inline bool proxy_result(const Device& dev, unsigned long long t, uint64_t* value) {
  const auto* slot = reinterpret_cast<const proxy::ResultSlot*>(dev.proxy_results) +
                     (t & (dev.proxy_capacity - 1));
  const auto* ticket = reinterpret_cast<const unsigned long long*>(&slot->ticket);
  const Waited what{GSHMEM_WAIT_PROXY, -1, static_cast<int>(Cmp::EQ), ticket, t + 1};
  Deadline deadline;
  unsigned long long seen;
  while ((seen = ld_acquire(ticket)) != t + 1) {
    if (deadline.expired(dev, what, seen)) return false;
  }
  *value = ld_relaxed(reinterpret_cast<const unsigned long long*>(&slot->value));
  return true;
}

// Appends `c`; with `value` (not null), waits for the value it fetches and stores it there.
// False when a wait gave up.
__device__ inline bool proxy_fetch(const Device& dev, const proxy::Command& c, uint64_t* value) {
  unsigned long long t = 0;
  if (!proxy_push(dev, c, &t)) return false;
  return value == nullptr || proxy_result(dev, t, value);
}

// The atomic `op` with `operand` (and `compare`: kCompareSwap) on the `type` word at symmetric
// `dst` on `pe`. With `old` (not null) it waits for the target's answer and stores the old value
// there; without, it is complete once proxy_quiet() returned. False when a wait gave up.
__device__ inline bool proxy_atomic(const Device& dev, void* dst, proxy::AmoOp op,
                                    proxy::AmoType type, uint64_t operand, uint64_t compare,
                                    int pe, uint64_t* old) {
  proxy::Command c = heap_command(dev, proxy::Op::kAtomic, dst, pe);
  c.local = operand;
  c.amo = op;
  c.amo_type = type;
  c.fetch = old != nullptr;
  c.compare = compare;
  return proxy_fetch(dev, c, old);
}

// Reads `bytes` (1, 2, 4 or 8) at symmetric `src` on `pe` into *value (zero-extended): waits for
// the target's answer. False when a wait gave up.
__device__ inline bool proxy_get_value(const Device& dev, const void* src, size_t bytes, int pe,
                                       uint64_t* value) {
  proxy::Command c = heap_command(dev, proxy::Op::kGetValue, src, pe);
  c.bytes = bytes;
  return proxy_fetch(dev, c, value);
}

// The T (1, 2, 4 or 8 bytes) at symmetric `src` on `pe`, read through the proxy: what g and
// atomic_fetch return for a proxy PE (0 when the wait gave up).
template <class T>
__device__ inline T proxy_g(const Device& dev, const T* src, int pe) {
  uint64_t v = 0;
  proxy_get_value(dev, src, sizeof(T), pe, &v);
  return from_bits<T>(static_cast<typename UInt<sizeof(T)>::type>(v));
}

// Orders the descriptors appended before it before those appended after it, per PE.
__device__ inline bool proxy_fence(const Device& dev) {
  proxy::Command c;
  c.op = proxy::Op::kFence;
  return proxy_push(dev, c);
}

}  // namespace detail
}  // namespace gshmem

// The proxy path's descriptor queue (issue: windows + proxy beyond one host; the GIN paper's
// Proxy backend): producers (GPU threads, or host threads in the tests) append fixed-size
// 64-byte descriptors to a ring in host-visible memory; one consumer thread (the comm's proxy)
// takes them in order and executes them on the network.
//
// Layout: `capacity` slots (a power of two), each one cache line: a sequence word, then 7 words
// of payload. Slot i % capacity holds ticket i once its sequence word reads i + 1, so a slot's
// previous generation (ticket i - capacity) can never pass for the current one.
//
//   reserve  a producer takes ticket t = tail by compare-and-swap, only while t - head <
//            capacity: a full queue refuses (returns false) instead of handing out a ticket that
//            would overwrite an unread slot, so a GPU producer can wait with a deadline.
//   publish  the producer stores the payload, then the sequence word t + 1 with release order.
//   pop      the consumer waits for slot h's sequence word to read h + 1 (acquire), copies the
//            payload, then stores head = h + 1 (release): the slot is free for ticket h + capacity.
// Many producers, one consumer; each producer's descriptors come out in the order it published
// them (tickets grow), descriptors of different producers in ticket order.
//
// Where the words live: `tail` is the producers' counter (GPU memory when the producers are
// kernels: atomics among GPU threads), `head` and the slots are host memory mapped into the GPU
// (the consumer writes head with plain stores; producers only read it). The functions are plain
// C++ here for host producers; the device form differs only in its atomics.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gshmem::proxy {

constexpr size_t kPayloadWords = 7;

struct alignas(64) Descriptor {
  uint64_t seq;  // ticket + 1 once published; anything else: not (yet) this ticket's
  uint64_t words[kPayloadWords];
};
static_assert(sizeof(Descriptor) == 64, "a descriptor is one cache line");

// The queue as both sides see it (by value; the memory is owned elsewhere).
struct QueueView {
  Descriptor* slots;
  uint64_t* tail;  // tickets handed out
  uint64_t* head;  // descriptors consumed
  uint64_t capacity;  // power of two
};

// Whether `n` can be a capacity.
inline bool valid_capacity(uint64_t n) { return n >= 2 && (n & (n - 1)) == 0; }

// Takes the next ticket if the queue has room; false when it is full (try again later).
inline bool try_reserve(const QueueView& q, uint64_t& ticket) {
  uint64_t t = __atomic_load_n(q.tail, __ATOMIC_RELAXED);
  for (;;) {
    const uint64_t h = __atomic_load_n(q.head, __ATOMIC_ACQUIRE);
    if (t - h >= q.capacity) return false;
    if (__atomic_compare_exchange_n(q.tail, &t, t + 1, true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
      ticket = t;
      return true;
    }
  }
}

// Writes ticket's descriptor and makes it visible to the consumer.
inline void publish(const QueueView& q, uint64_t ticket, const uint64_t (&words)[kPayloadWords]) {
  Descriptor& d = q.slots[ticket & (q.capacity - 1)];
  for (size_t i = 0; i < kPayloadWords; ++i) d.words[i] = words[i];
  __atomic_store_n(&d.seq, ticket + 1, __ATOMIC_RELEASE);
}

// The consumer's next descriptor, if it has been published: copies it out, frees its slot and
// advances `next` (the consumer's own count, equal to *head). One consumer only.
inline bool try_pop(const QueueView& q, uint64_t& next, uint64_t (&words)[kPayloadWords]) {
  const Descriptor& d = q.slots[next & (q.capacity - 1)];
  if (__atomic_load_n(&d.seq, __ATOMIC_ACQUIRE) != next + 1) return false;
  for (size_t i = 0; i < kPayloadWords; ++i) words[i] = d.words[i];
  ++next;
  __atomic_store_n(q.head, next, __ATOMIC_RELEASE);  // after the copy: the slot may be reused
  return true;
}

}  // namespace gshmem::proxy

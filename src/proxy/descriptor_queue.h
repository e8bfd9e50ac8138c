// The proxy queue's operations for host threads (gshmem/proxy_queue.h has the layout and the
// protocol): producers in the CPU tests, and the proxy thread, the one consumer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gshmem/proxy_queue.h"

namespace gshmem::proxy {

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

// Ticket's inline data (kPutInline: proxy_queue.h).
inline uint8_t* inline_slot(const QueueView& q, uint64_t ticket) {
  return q.inline_data + (ticket & (q.capacity - 1)) * kInlineBytes;
}

// The consumer's next descriptor, if it has been published: copies it out, leaving its slot
// (and inline data) taken until release(). One consumer only. The slot is read through
// volatile: a GPU producer writes it behind the compiler's back.
inline bool try_peek(const QueueView& q, uint64_t next, uint64_t (&words)[kPayloadWords]) {
  const Descriptor& d = q.slots[next & (q.capacity - 1)];
  if (__atomic_load_n(&d.seq, __ATOMIC_ACQUIRE) != next + 1) return false;
  const volatile uint64_t* payload = d.words;
  for (size_t i = 0; i < kPayloadWords; ++i) words[i] = payload[i];
  return true;
}

// Frees the slot of ticket `next` once the consumer is done reading it, and advances `next`
// (the consumer's own count, equal to *head): ticket next + capacity may take the slot.
inline void release(const QueueView& q, uint64_t& next) {
  ++next;
  __atomic_store_n(q.head, next, __ATOMIC_RELEASE);
}

// try_peek, then release.
inline bool try_pop(const QueueView& q, uint64_t& next, uint64_t (&words)[kPayloadWords]) {
  if (!try_peek(q, next, words)) return false;
  release(q, next);
  return true;
}

}  // namespace gshmem::proxy

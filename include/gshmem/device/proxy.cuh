// A GPU thread as a producer on the proxy queue (gshmem/proxy_queue.h): the path to peers that no
// load or store reaches. The comm's proxy thread takes the descriptor and executes it on the
// network (UCX). Ordering: the payload is written with relaxed system-scope stores, then the
// slot's sequence word with a release store, so the host, which reads the sequence word with
// acquire, sees the whole payload. The ticket comes from a compare-and-swap on `tail` (GPU
// memory) that only succeeds while the queue has room: a full queue refuses rather than
// overwrite a slot the proxy has not taken.
#pragma once

#include "../proxy_queue.h"
#include "ptx.cuh"

namespace gshmem {
namespace proxy {

// Appends `c` if the queue has room; false when it is full (the proxy frees slots as it takes
// them: try again, under a deadline). Made by the calling thread alone. Not blocking.
__device__ inline bool try_push(const QueueView& q, const Command& c) {
  auto* tail = reinterpret_cast<unsigned long long*>(q.tail);
  const auto* head = reinterpret_cast<const unsigned long long*>(q.head);
  unsigned long long t = detail::ld_relaxed(tail);
  for (;;) {
    if (t - detail::ld_acquire(head) >= q.capacity) return false;
    const unsigned long long seen = detail::atom_cas(tail, t, t + 1);
    if (seen == t) break;
    t = seen;
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
  return true;
}

}  // namespace proxy
}  // namespace gshmem

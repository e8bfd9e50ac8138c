// Device side of the permute's memory (permute_sync.h): the per-region counters, the packet
// slots and the bounded credit wait, shared by the permute (kernels_permute.cu) and the reducing
// collectives' packets (kernels_reduce.cu), which exchange a message with every other member
// through the same slots and counters, so that their calls interleave.
#pragma once

#include "coll/permute_sync.h"
#include "coll/protocol.cuh"

namespace gshmem::coll::device {

// Region b's entry for world PE q in one of PermuteSync's [kPermuteRegions][n_pes] arrays.
__device__ inline unsigned long long* cta_entry(uint64_t* array, const PermuteSync& s, int b,
                                                int q) {
  return reinterpret_cast<unsigned long long*>(array) + static_cast<size_t>(b) * s.n_pes + q;
}

// The calling thread waits until *flag >= want, a flag that PE `from` writes (bounded; see
// deadline.cuh), starting from `seen`, a look at *flag it has already taken.
template <bool kAcquire>
__device__ inline void poll_at_least(const Device& dev, const unsigned long long* flag, int from,
                                     unsigned long long want, unsigned long long seen) {
  const gshmem::detail::Waited what{GSHMEM_WAIT_COLLECTIVE, from, static_cast<int>(Cmp::GE), flag,
                                    want};
  gshmem::Deadline deadline;
  while (seen < want) {
    if (deadline.expired(dev, what, seen)) break;
    seen = kAcquire ? gshmem::detail::ld_acquire(flag) : gshmem::detail::ld_relaxed(flag);
  }
}

// This PE's packet slot that world PE `src` fills with its message j (by j's parity).
__device__ inline uint4* packet_slot_of(const PermuteSync& s, unsigned long long j, int src) {
  return packet_slot_in(s.packets, s.packet_bytes, s.n_pes, static_cast<unsigned>(j & 1), src);
}

}  // namespace gshmem::coll::device

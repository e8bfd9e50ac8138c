// Device side of the permute's memory (permute_sync.h): the per-region counters, the packet
// slots and the bounded waits, shared by the permute (kernels_permute.cu) and the collectives'
// packets (kernels_packets.cu), which exchange a message with every other member through the
// same slots and counters, so that their calls interleave.
//
// Packets (LL, the device API's gshmem/device/packet.cuh): 16 bytes {data lo, epoch, data hi,
// epoch} written by one st.volatile.v4.u32; the reader polls each packet with ld.volatile.v4.u32
// until both epochs equal epoch_of(j) for the message j it expects (j mod 2^32 - 1, plus 1). Each
// 8-byte half is written atomically, so matching epochs prove the data beside them arrived; no
// signal and no fence. Packet slots only ever hold packets, so old data cannot pass for new (an
// epoch value comes back only after 2^32 - 1 messages of that region, into the other parity's
// slot).
#pragma once

#include "coll/permute_sync.h"
#include "coll/protocol.cuh"

namespace gshmem::coll::device {

using gshmem::detail::load8;
using gshmem::detail::store_packet;
using gshmem::detail::store8;

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

// The epoch of a region's message j: 1 .. 2^32 - 1, never 0, the value of packet slots nobody
// has written yet.
__device__ inline unsigned epoch_of(unsigned long long j) {
  return static_cast<unsigned>(j % 0xffffffffull) + 1u;
}

// This PE's packet slot that world PE `src` fills with its message j (by j's parity).
__device__ inline uint4* packet_slot_of(const PermuteSync& s, unsigned long long j, int src) {
  return reinterpret_cast<uint4*>(
      s.packets + ((j & 1) * static_cast<size_t>(s.n_pes) + src) * s.packet_bytes);
}

// Region b's message j to world PE q, word i: once q's credit says it has read message j - 2
// (`seen`: a look at the credit already taken), `data` as a packet into q's slot for this PE
// (`shift`: q's peer_shift).
__device__ inline void send_packet(const Device& dev, const PermuteSync& s, int b, int q,
                                   unsigned long long j, unsigned long long seen, long long shift,
                                   size_t i, unsigned long long data) {
  if (j >= 2) poll_at_least<false>(dev, cta_entry(s.credits, s, b, q), q, j - 1, seen);
  store_packet(gshmem::detail::shifted(packet_slot_of(s, j, dev.my_pe), shift) + i, data,
               epoch_of(j));
}

// Region b's credit to world PE q (`shift`: its peer_shift): this PE has read q's message k.
// Made after every read of the message has returned, so no fence: q's later overwrite cannot
// change what was read.
__device__ inline void return_credit(const Device& dev, const PermuteSync& s, int b,
                                     long long shift, unsigned long long k) {
  gshmem::detail::st_relaxed(gshmem::detail::shifted(cta_entry(s.credits, s, b, dev.my_pe), shift),
                             k + 1);
}

// Packet p's data once it carries `flag` (from world PE `from`); bounded like every wait here.
__device__ inline unsigned long long load_packet(const Device& dev, const uint4* p, unsigned flag,
                                                 int from) {
  unsigned long long data;
  gshmem::Deadline deadline;
  gshmem::detail::await_packet(&dev, deadline, p, flag, GSHMEM_WAIT_COLLECTIVE, from, data);
  return data;
}

}  // namespace gshmem::coll::device

// The per-comm memory of the packet permute (kernels_permute.cu), as its kernel receives it (by
// value). Filled by CollState; its own region of the collectives' zeroed heap allocation, apart
// from Sync's, because a permute exchanges with two PEs, not with every member (protocol.cuh's
// reuse rule does not hold for it).
//
// Layout, all in the symmetric heap:
//   packets  [2][n_pes][kPacketSlotBytes]  packets from PE q, by the parity of its message count
//   credits  uint64[n_pes]                 messages of this PE that PE q has read (written by q)
//   done     uint64[n_pes]                 CTAs that finished reading a message from q (local)
//   sent     uint64[kPermuteCtas][n_pes]   messages this PE's CTA b has sent to q (local)
//   got      uint64[kPermuteCtas][n_pes]   messages from q this PE's CTA b has read (local)
// A message to q is number j = sent[b][q] (equal for every CTA: the grid is always
// kPermuteCtas), lies in q's packets[j & 1][me] with epoch j mod (2^32 - 1) + 1, and is written
// only once credits[q] >= j - 1, i.e. once q has read message j - 2 from the same parity slot.
// Counters only grow, so CUDA graphs replay it with nothing host-side baked in.
#pragma once

#include <cstdint>

#include "coll/sync.h"

namespace gshmem::coll {

constexpr int kPermuteCtas = 8;
constexpr uint64_t kPermuteMaxBytes = kPacketSlotBytes / 2;  // a message's data: 64 KiB

struct PermuteSync {
  char* packets;
  uint64_t* credits;
  uint64_t* done;
  uint64_t* sent;
  uint64_t* got;
  uint64_t packet_bytes;  // bytes of one packet slot (16-byte packets, 8 data bytes each)
  int32_t n_pes;
};

}  // namespace gshmem::coll

// The per-comm memory of the packet permute (kernels_permute.cu), as its kernel receives it (by
// value). Filled by CollState; its own region of the collectives' zeroed heap allocation, apart
// from Sync's, because a permute exchanges with two PEs, not with every member (protocol.cuh's
// reuse rule does not hold for it).
//
// Layout, all in the symmetric heap:
//   packets  [2][n_pes][kPacketSlotBytes]  packets from PE q, by the parity of its message count
//   credits  uint64[kPermuteCtas][n_pes]   messages of this PE's CTA b that q's CTA b has read
//                                          (written by q)
//   sent     uint64[kPermuteCtas][n_pes]   messages this PE's CTA b has sent to q (local)
//   got      uint64[kPermuteCtas][n_pes]   messages from q this PE's CTA b has read (local)
// CTA b owns words [b, b + 1) x kPermuteCtaWords of every packet slot, on the sender and on the
// receiver alike, and a message runs only the CTAs its words reach, so each CTA pair keeps its
// own count and no other CTA ever writes its region (its epochs only grow): CTA b's message j to
// q (j = sent[b][q]) lies in its region of q's packets[j & 1][me] with epoch
// j mod (2^32 - 1) + 1, and is written only once credits[b][q] >= j - 1, i.e. once q's CTA b has
// read its message j - 2 from that region.
// Counters only grow, so CUDA graphs replay it with nothing host-side baked in.
#pragma once

#include <cstdint>

#include "coll/sync.h"

namespace gshmem::coll {

constexpr int kPermuteCtas = 8;
constexpr uint64_t kPermuteMaxBytes = kPacketSlotBytes / 2;  // a message's data: 64 KiB
constexpr uint64_t kPermuteCtaWords = kPermuteMaxBytes / 8 / kPermuteCtas;  // 1024: 8 KiB each

struct PermuteSync {
  char* packets;
  uint64_t* credits;
  uint64_t* sent;
  uint64_t* got;
  uint64_t packet_bytes;  // bytes of one packet slot (16-byte packets, 8 data bytes each)
  int32_t n_pes;
};

}  // namespace gshmem::coll

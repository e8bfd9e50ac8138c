// The per-comm memory of the packet permute (kernels_permute.cu), as its kernel receives it (by
// value). Filled by CollState; its own region of the collectives' zeroed heap allocation, apart
// from Sync's, because a permute exchanges with two PEs, not with every member (protocol.cuh's
// reuse rule does not hold for it).
//
// Layout, all in the symmetric heap:
//   packets  [2][n_pes][kPermuteSlotBytes] packets from PE q, by the parity of its message count
//   credits  uint64[kPermuteCtas][n_pes]   messages of this PE's CTA b that q's CTA b has read
//                                          (written by q)
//   sent     uint64[kPermuteCtas][n_pes]   messages this PE's CTA b has sent to q (local)
//   got      uint64[kPermuteCtas][n_pes]   messages from q this PE's CTA b has read (local)
// A call's data goes in chunks of kPermuteChunkWords 8-byte words, each a message here. CTA b
// owns words [b, b + 1) x kPermuteCtaWords of every packet slot, on the sender and on the
// receiver alike, and moves only the chunks that reach its region, so each CTA pair keeps its
// own count and no other CTA ever writes its region (its epochs only grow): CTA b's message j to
// q (j = sent[b][q]) lies in its region of q's packets[j & 1][me] with epoch
// j mod (2^32 - 1) + 1, and is written only once credits[b][q] >= j - 1, i.e. once q's CTA b has
// read its message j - 2 from that region.
// Counters only grow, so CUDA graphs replay it with nothing host-side baked in.
#pragma once

#include <cstdint>


namespace gshmem::coll {

// 32 regions of 8 KiB: a CTA's chunk waits for the credit of its chunk two before, so the data in
// flight is 2 x 8 KiB per CTA; with 8 CTAs (a 64 KiB chunk) large messages moved at ~24 GB/s.
constexpr int kPermuteCtas = 32;
constexpr uint64_t kPermuteCtaWords = 1024;  // 8-byte words: 8 KiB of data per CTA and chunk
constexpr uint64_t kPermuteChunkWords = kPermuteCtas * kPermuteCtaWords;  // 256 KiB of data
constexpr uint64_t kPermuteSlotBytes = kPermuteChunkWords * 16;           // as packets: 512 KiB

// The copy-engine permute's signals (permute.cpp), n_pes each, in the same zeroed allocation:
//   ready[q]    PE q may now store its message into this PE's `out` (set by q's receiver side:
//               q's `out` is free); the sender waits for it, then resets it
//   arrived[q]  PE q's message has landed in this PE's `out` (set after q's copy)
// Each goes 0 -> 1 -> 0 within a call, so a graph replays it without the host.
struct PermuteFlags {
  uint64_t* ready;
  uint64_t* arrived;
};

// Where the reductions through the proxy land (exchange.cpp): slot q holds what world PE q sent
// this PE, `slot_bytes` each, n_pes slots; its own region of the zeroed allocation, made only on
// comms with a proxy path (every PE has one or none), else base is null.
struct ExchangeSlots {
  char* base;
  uint64_t slot_bytes;
};

struct PermuteSync {
  char* packets;
  uint64_t* credits;
  uint64_t* sent;
  uint64_t* got;
  uint64_t packet_bytes;  // bytes of one packet slot (16-byte packets, 8 data bytes each)
  int32_t n_pes;
};

}  // namespace gshmem::coll

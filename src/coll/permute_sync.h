// The per-comm memory of the permute kernel (kernels_permute.cu), as its kernel receives it (by
// value). Filled by CollState; its own region of the collectives' zeroed heap allocation, apart
// from Sync's, because a permute exchanges with two PEs, not with every member (protocol.cuh's
// reuse rule does not hold for it). Every small collective's packets (kernels_packets.cu) use
// it too, as a permute to every other member at once: a call is one message of packets per pair
// and region, so both kinds of call interleave on the same counts.
//
// Layout, all in the symmetric heap:
//   packets  [2][n_pes][kPermuteSlotBytes] packets from PE q, by the parity of its message count
//   bulk     [2][n_pes][kPermuteBulkSlotBytes] plain data from PE q (the bulk protocol), by parity
//   credits  uint64[kPermuteRegions][n_pes]  messages of this PE's region b that q has read
//                                            (written by q)
//   sent     uint64[kPermuteRegions][n_pes]  messages of region b this PE has sent to q (local)
//   got      uint64[kPermuteRegions][n_pes]  messages of region b from q this PE has read (local)
//   arrived  uint64[kPermuteRegions][n_pes]  j + 1 once q has stored region b of its bulk message
//                                            j here (written by q, with release)
// A call's data goes in chunks, each a message here, by one of two protocols chosen by the
// call's size (the same on both ends): packets (chunks of kPermuteChunkWords 8-byte words, LL
// packets polled by the receiver) or bulk (chunks of kPermuteBulkChunkBytes, plain stores, then
// a fence and a release store of `arrived`, which the receiver acquires). Region b of a chunk
// (kPermuteCtaWords words of packets, kPermuteBulkCtaBytes of bulk) is moved by the same CTA
// index b on the sender and on the receiver, into region b of the slot, and only chunks that
// reach region b count there, so each region keeps one count of messages of both protocols and
// no other CTA ever writes it (its epochs only grow): region b's message j to q (j =
// sent[b][q]) lies in region b of q's packets[j & 1][me] (epoch j mod (2^32 - 1) + 1) or
// bulk[j & 1][me], and is written only once credits[b][q] >= j - 1, i.e. once q has read
// region b of message j - 2. The two protocols have separate slots: plain data left in a packet
// slot could pass for a later packet whose epoch it happens to hold.
// Counters only grow, so CUDA graphs replay it with nothing host-side baked in.
#pragma once

#include <cstdint>

namespace gshmem::coll {

// 256 regions of 1 KiB (a 256 KiB chunk), one CTA of 128 threads each, one word a thread: a
// CTA's stores reach NVLink slowly (bulk, below), so a small message's latency grows with the
// bytes one CTA stores. Two PEs in one process, graphs of 200 permutes (benchmarks/
// graph_chain.py, 2 x H200, 2026-11-28): 4 KiB 2.9 us, 32 KiB 3.1, 64 KiB 3.3, 256 KiB 4.5,
// against 3.6 / 4.7 / 4.8 / 5.8 with 32 regions of 8 KiB; 128 regions (128 KiB chunks) were as
// fast to 128 KiB and 6.0 us at 256 KiB (two chunks a CTA).
constexpr int kPermuteCtas = 256;
constexpr uint64_t kPermuteCtaWords = 128;  // 8-byte words: 1 KiB of data per CTA and chunk
constexpr uint64_t kPermuteChunkWords = kPermuteCtas * kPermuteCtaWords;  // 256 KiB of data
constexpr uint64_t kPermuteSlotBytes = kPermuteChunkWords * 16;           // as packets: 512 KiB
// Bulk: 64 regions of 32 KiB (2 MiB chunks). A CTA's stores reach NVLink at ~7 GB/s, so the
// rate grows with the CTAs that store: 32 CTAs of 64 KiB moved 230 GB/s at 256 MiB (4 x H200),
// and a fence per warp instead of per CTA did not help (204 GB/s).
constexpr int kPermuteBulkCtas = 64;
constexpr uint64_t kPermuteBulkCtaBytes = 32 * 1024;
constexpr uint64_t kPermuteBulkChunkBytes = kPermuteBulkCtas * kPermuteBulkCtaBytes;
// Rows of the per-region counter arrays: the larger of the two protocols' region counts.
constexpr int kPermuteRegions = kPermuteBulkCtas > kPermuteCtas ? kPermuteBulkCtas : kPermuteCtas;
constexpr uint64_t kPermuteBulkSlotBytes = kPermuteBulkChunkBytes;

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
  char* bulk;
  uint64_t* credits;
  uint64_t* sent;
  uint64_t* got;
  uint64_t* arrived;
  uint64_t packet_bytes;  // bytes of one packet slot (16-byte packets, 8 data bytes each)
  int32_t n_pes;
};

}  // namespace gshmem::coll

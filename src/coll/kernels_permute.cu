// The permute (kernels.h: permute): one point-to-point exchange stored straight into the
// receiver, by one of two protocols (permute_sync.h), each one kernel of one CTA per region of a
// chunk (at most kPermuteCtas of packets, kPermuteBulkCtas of bulk); a message of packets that
// fits one chunk, between two other PEs, takes permute_chunk_kernel, the same protocol with a
// shorter path:
// - packets: LL packets (protocol.cuh's 16-byte packets, 8 data bytes and two epoch words) that
//   the receiver polls; no signal phase, so a small message costs one NVLink crossing, but half
//   of every packet is flags (~89 GB/s);
// - bulk: plain 16-byte stores into the receiver's bulk slot, then per CTA and chunk one release
//   store of its arrival count, which the receiving CTA acquires before it copies the
//   slot out: one more crossing per chunk, every stored byte data. Out of place, separate CTAs
//   send and receive, so a sender's release and its receiving twin's wait and copy do not stall
//   each other's stores; in place, one CTA does both, in order (below).
// Larger messages go in chunks through the same slots. Reuse of a CTA's region of a parity slot
// waits for the receiving CTA's credit for the chunk two before, which a pipelined sequence of
// small calls has long received. Credits are plain stores, per CTA, so no fence or atomic sits on
// the packets' path.
#include <algorithm>

#include "coll/kernels.h"
#include "coll/permute_protocol.cuh"
#include "common/cuda_api.h"

namespace gshmem::coll::kernels {
namespace {

using namespace gshmem::coll::device;

// One protocol's chunk geometry: region b (of `regions`) is bytes [b, b + 1) x cta_bytes of every
// chunk.
struct Geometry {
  size_t cta_bytes, chunk_bytes;
  int regions;
};
constexpr Geometry kPackets{kPermuteCtaWords * 8, kPermuteChunkWords * 8, kPermuteCtas};
constexpr Geometry kBulk{kPermuteBulkCtaBytes, kPermuteBulkChunkBytes, kPermuteBulkCtas};

// The regions that a message of `bytes` reaches: one CTA each (or two: a sender, a receiver).
inline int permute_ctas(size_t bytes, const Geometry& g) {
  return static_cast<int>(
      std::clamp<size_t>((bytes + g.cta_bytes - 1) / g.cta_bytes, 1, g.regions));
}

// Thread 0 waits until *flag >= want (poll_at_least from its first look). kAcquire: the CTA's
// loads after the next barrier see what `from` stored before its release. Without it the poll is
// relaxed, enough for a credit: the stores that reuse the slot come after the barrier that
// follows, and a GPU does not store speculatively.
template <bool kAcquire>
__device__ inline void wait_at_least(const Device& dev, const unsigned long long* flag, int from,
                                     unsigned long long want) {
  if (threadIdx.x != 0) return;
  poll_at_least<kAcquire>(
      dev, flag, from, want,
      kAcquire ? gshmem::detail::ld_acquire(flag) : gshmem::detail::ld_relaxed(flag));
}

// This PE's bulk slot that world PE `src` fills with its message j (by j's parity).
__device__ inline char* bulk_slot_of(const PermuteSync& s, unsigned long long j, int src) {
  return s.bulk + ((j & 1) * s.n_pes + src) * kPermuteBulkSlotBytes;
}

// The chunk's bytes [lo, hi) of the message (of `bytes`), `chunk` bytes into the message.
struct Part {
  size_t lo, hi, chunk;
};

__device__ inline void send_packets(uint4* slot, const char* in, size_t bytes, const Part& p,
                                    unsigned long long j) {
  for (size_t i = p.lo / 8 + threadIdx.x; i < (p.hi + 7) / 8; i += blockDim.x) {
    store_packet(slot + (i - p.chunk / 8), load8(in, i, bytes), epoch_of(j));
  }
}

__device__ inline void receive_packets(const Device& dev, const uint4* slot, char* out,
                                       size_t bytes, const Part& p, unsigned long long k, int src) {
  for (size_t i = p.lo / 8 + threadIdx.x; i < (p.hi + 7) / 8; i += blockDim.x) {
    store8(out, i, bytes, load_packet(dev, slot + (i - p.chunk / 8), epoch_of(k), src));
  }
}

// The message goes in chunks of the protocol's chunk_bytes, each a message of the protocol
// (permute_sync.h); region b of every chunk is moved by CTA b, or, when the grid has 2 x `ctas`
// CTAs, sent by CTA b and received by CTA ctas + b. A CTA that does both sends a region before it
// receives the same region (and its threads' reads end at a barrier), so in == out is safe.
template <bool kBulkProtocol>
__global__ void __launch_bounds__(kThreads)
    permute_kernel(Device dev, PermuteSync s, const char* in, char* out, size_t bytes, int dst,
                   int src, int ctas) {
  constexpr Geometry g = kBulkProtocol ? kBulk : kPackets;
  const int b = static_cast<int>(blockIdx.x) % ctas;
  const bool split = static_cast<int>(gridDim.x) != ctas;
  const bool sender = !split || static_cast<int>(blockIdx.x) < ctas, receiver = !split || !sender;
  const bool sends = sender && dst >= 0 && dst != dev.my_pe;
  const bool receives = receiver && src >= 0 && src != dev.my_pe;
  const bool self = receiver && src == dev.my_pe;
  const bool zeros = receiver && src < 0;  // nobody sends here, as jax.lax.ppermute
  const unsigned long long sent = sends ? *cta_entry(s.sent, s, b, dst) : 0;
  const unsigned long long got = receives ? *cta_entry(s.got, s, b, src) : 0;
  // Where the two peers' copies are, loaded with the counts: taken after a wait, each load of
  // local_index stood between the wait and the store after it (8 B 3.16 against 3.24-3.29 us,
  // 4 KiB 3.73 against 4.03-4.06: benchmarks/graph_chain.py, 2 x H200).
  const long long to_dst = sends ? gshmem::detail::peer_shift(dev, dst) : 0;
  const long long to_src = receives ? gshmem::detail::peer_shift(dev, src) : 0;
  const size_t region = b * g.cta_bytes;  // this CTA's region of a chunk and of a slot
  unsigned long long n = 0;               // this CTA's chunks so far
  for (size_t chunk = 0; chunk < bytes; chunk += g.chunk_bytes, ++n) {
    const size_t lo = chunk + region;
    if (lo >= bytes) break;
    const Part p{lo, lo + g.cta_bytes < bytes ? lo + g.cta_bytes : bytes, chunk};
    if (sends) {
      const unsigned long long j = sent + n;
      if (j >= 2) wait_at_least<false>(dev, cta_entry(s.credits, s, b, dst), dst, j - 1);
      __syncthreads();  // every thread's stores come after the credit
      if constexpr (kBulkProtocol) {
        copy(gshmem::detail::shifted(bulk_slot_of(s, j, dev.my_pe) + region, to_dst), in + p.lo,
             p.hi - p.lo);
        // Every thread's stores happen-before thread 0's release, which is cumulative over them:
        // no separate fence (protocol.cuh arrive_and_wait).
        __syncthreads();
        if (threadIdx.x == 0) {
          gshmem::detail::st_release(
              gshmem::detail::shifted(cta_entry(s.arrived, s, b, dev.my_pe), to_dst), j + 1);
        }
      } else {
        send_packets(gshmem::detail::shifted(packet_slot_of(s, j, dev.my_pe), to_dst), in, bytes,
                     p, j);
      }
    }
    if (receives) {
      const unsigned long long k = got + n;
      if constexpr (kBulkProtocol) {
        wait_at_least<true>(dev, cta_entry(s.arrived, s, b, src), src, k + 1);
        __syncthreads();  // extends thread 0's acquire to the CTA
        copy(out + p.lo, bulk_slot_of(s, k, src) + region, p.hi - p.lo);
      } else {
        receive_packets(dev, packet_slot_of(s, k, src), out, bytes, p, k, src);
      }
      // Every value this CTA read from the slot has returned (each was stored to out), so the
      // credit needs no fence: the sender's later overwrite cannot change what was read.
      __syncthreads();
      if (threadIdx.x == 0) return_credit(dev, s, b, to_src, k);
    } else if (self) {
      copy(out + p.lo, in + p.lo, p.hi - p.lo);
    } else if (zeros) {
      for (size_t i = p.lo / 8 + threadIdx.x; i < (p.hi + 7) / 8; i += blockDim.x) {
        store8(out, i, bytes, 0ull);
      }
    }
  }
  // Every thread read the counts before the first chunk's barrier.
  if (threadIdx.x == 0) {
    if (sends) *cta_entry(s.sent, s, b, dst) = sent + n;
    if (receives) *cta_entry(s.got, s, b, src) = got + n;
  }
}

// A message of one chunk (at most kPermuteChunkWords words) to or from peers: permute_kernel's
// packets for a message of one chunk (the same slots, epochs, counts and credits, so the two
// kernels' calls interleave), written for the shortest path from the kernel's start to its
// packet stores and from the packets' arrival to its end. CTA b moves region b, one word a
// thread (blockDim.x == kPermuteCtaWords), and each thread loads what it needs itself, all at
// once: the counts, its word, the peer's address and a first look at the credit (no barrier
// hands the counts out); it then awaits the credit itself (its store follows its own look: no
// barrier before it). One barrier at the end: every thread has read the counts and the slot
// before thread 0 advances the counts and returns the credit.
static_assert(kPermuteCtaWords >= 32 && kPermuteCtaWords <= 1024 && kPermuteCtaWords % 32 == 0,
              "permute_chunk_kernel runs a thread per word of a region");
__global__ void __launch_bounds__(kPermuteCtaWords)
    permute_chunk_kernel(Device dev, PermuteSync s, const char* in, char* out, size_t bytes,
                         int dst, int src) {
  const int b = static_cast<int>(blockIdx.x);
  const size_t i = static_cast<size_t>(b) * kPermuteCtaWords + threadIdx.x;  // this thread's word
  const bool sends = dst >= 0, receives = src >= 0;
  unsigned long long* sent_at = cta_entry(s.sent, s, b, sends ? dst : 0);
  unsigned long long* got_at = cta_entry(s.got, s, b, receives ? src : 0);
  const long long to_src = threadIdx.x == 0 && receives ? gshmem::detail::peer_shift(dev, src) : 0;
  unsigned long long j = 0, k = 0;
  if (i < (bytes + 7) / 8) {
    if (sends) {
      j = *sent_at;
      const unsigned long long data = load8(in, i, bytes);
      const long long to_dst = gshmem::detail::peer_shift(dev, dst);
      const unsigned long long seen = gshmem::detail::ld_relaxed(cta_entry(s.credits, s, b, dst));
      send_packet(dev, s, b, dst, j, seen, to_dst, i, data);
    }
    if (receives) {
      k = *got_at;
      store8(out, i, bytes, load_packet(dev, packet_slot_of(s, k, src) + i, epoch_of(k), src));
    } else {  // nobody sends here, as jax.lax.ppermute
      store8(out, i, bytes, 0ull);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (receives) {
      return_credit(dev, s, b, to_src, k);
      *got_at = k + 1;
    }
    if (sends) *sent_at = j + 1;
  }
}

}  // namespace

void permute(const PermuteLaunch& l, const void* in, void* out, size_t bytes, int dst, int src,
             bool bulk) {
  auto* from = static_cast<const char*>(in);
  auto* to = static_cast<char*>(out);
  if (bulk) {
    const int ctas = permute_ctas(bytes, kBulk);
    const int grid = in == out ? ctas : 2 * ctas;
    permute_kernel<true><<<grid, kThreads, 0, l.stream>>>(l.dev, l.sync, from, to, bytes, dst, src,
                                                          ctas);
  } else if (bytes <= kPackets.chunk_bytes && dst != l.dev.my_pe) {
    permute_chunk_kernel<<<permute_ctas(bytes, kPackets), kPermuteCtaWords, 0, l.stream>>>(
        l.dev, l.sync, from, to, bytes, dst, src);
  } else {
    const int ctas = permute_ctas(bytes, kPackets);
    permute_kernel<false><<<ctas, kPermuteCtaWords, 0, l.stream>>>(l.dev, l.sync, from, to, bytes,
                                                                   dst, src, ctas);
  }
  cuda::check_launch("launching the permute kernel");
}

void preload_permute() {
  cuda::preload(permute_kernel<false>, "loading the collective kernels");
  cuda::preload(permute_kernel<true>, "loading the collective kernels");
  cuda::preload(permute_chunk_kernel, "loading the collective kernels");
}

}  // namespace gshmem::coll::kernels

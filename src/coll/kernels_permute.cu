// The packet permute (kernels.h: permute): one point-to-point exchange as LL packets
// (protocol.cuh's 16-byte packets, 8 data bytes and two epoch words) stored straight into the
// receiver, which polls them: one kernel of one CTA per 8 KiB (at most kPermuteCtas), no signal
// phase, so a small message costs one NVLink crossing. Larger messages go in 256 KiB chunks
// through the same slots. Reuse of a CTA's region of a parity slot waits for the receiving CTA's
// credit for the chunk two before (permute_sync.h), which a pipelined sequence of small calls
// has long received. Credits are plain stores, per CTA, so no fence or atomic sits on the path.
#include <algorithm>

#include "coll/kernels.h"
#include "coll/protocol.cuh"
#include "common/cuda_api.h"

namespace gshmem::coll::kernels {
namespace {

using namespace gshmem::coll::device;

// This PE's packet slot that world PE `src` fills with its messages of parity `par`.
__device__ inline uint4* permute_slot(const PermuteSync& s, unsigned long long par, int src) {
  return packet_slot_in(s.packets, s.packet_bytes, s.n_pes, static_cast<unsigned>(par), src);
}

// The CTAs that carry a message of `bytes`: one per kPermuteCtaWords words, at most kPermuteCtas.
inline int permute_ctas(size_t bytes) {
  const size_t words = (bytes + 7) / 8;
  return static_cast<int>(std::clamp<size_t>((words + kPermuteCtaWords - 1) / kPermuteCtaWords, 1,
                                             kPermuteCtas));
}

// Thread 0: waits until PE `dst`'s CTA has read this CTA's message j - 2 (bounded; see
// deadline.cuh). A relaxed poll suffices: the stores that reuse the slot come after the barrier
// that follows it, and a GPU does not store speculatively.
__device__ inline void wait_credit(const Device& dev, const unsigned long long* credit, int dst,
                                   unsigned long long j) {
  if (threadIdx.x != 0 || j < 2) return;
  const gshmem::detail::Waited what{GSHMEM_WAIT_COLLECTIVE, dst, static_cast<int>(Cmp::GE),
                                    credit, j - 1};
  gshmem::Deadline deadline;
  unsigned long long seen;
  while ((seen = gshmem::detail::ld_relaxed(credit)) < j - 1) {
    if (deadline.expired(dev, what, seen)) break;
  }
}

// The message goes in chunks of kPermuteChunkWords words, each a message of the protocol
// (permute_sync.h); CTA b moves its region of every chunk. A thread sends word i of a chunk
// before it receives word i, so in == out is safe.
__global__ void __launch_bounds__(kThreads)
    permute_kernel(Device dev, PermuteSync s, const char* in, char* out, size_t bytes, int dst,
                   int src) {
  const size_t words = (bytes + 7) / 8;
  const size_t mine = static_cast<size_t>(blockIdx.x) * s.n_pes;
  const bool sends = dst >= 0 && dst != dev.my_pe, receives = src >= 0 && src != dev.my_pe;
  const bool self = src == dev.my_pe;  // else nobody sends here: zeros, as jax.lax.ppermute
  const unsigned long long sent = sends ? s.sent[mine + dst] : 0;
  const unsigned long long got = receives ? s.got[mine + src] : 0;
  unsigned long long n = 0;  // this CTA's chunks so far
  for (size_t base = 0; base < words; base += kPermuteChunkWords, ++n) {
    const size_t lo = base + blockIdx.x * kPermuteCtaWords;
    if (lo >= words) break;
    const size_t hi = lo + kPermuteCtaWords < words ? lo + kPermuteCtaWords : words;
    if (sends) {
      const unsigned long long j = sent + n;
      wait_credit(dev, reinterpret_cast<const unsigned long long*>(s.credits + mine + dst), dst,
                  j);
      __syncthreads();  // every thread's stores come after the credit
      uint4* slot = gshmem::detail::peer(dev, permute_slot(s, j & 1, dev.my_pe), dst);
      for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        store_packet(slot + (i - base), load8(in, i, bytes), epoch_of(j));
      }
    }
    if (receives) {
      const unsigned long long k = got + n;
      const uint4* slot = permute_slot(s, k & 1, src);
      for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        store8(out, i, bytes, load_packet(dev, slot + (i - base), epoch_of(k), src));
      }
      // Every packet this CTA read has returned its value (each was stored to out), so the
      // credit needs no fence: the sender's later overwrite cannot change what was read.
      __syncthreads();
      if (threadIdx.x == 0) {
        gshmem::detail::st_relaxed(
            gshmem::detail::peer(dev, reinterpret_cast<unsigned long long*>(s.credits) + mine +
                                          dev.my_pe, src),
            k + 1);
      }
    } else {
      for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        store8(out, i, bytes, self ? load8(in, i, bytes) : 0ull);
      }
    }
  }
  // Every thread read the counts before the first chunk's barrier.
  if (threadIdx.x == 0) {
    if (sends) s.sent[mine + dst] = sent + n;
    if (receives) s.got[mine + src] = got + n;
  }
}

}  // namespace

void permute(const PermuteLaunch& l, const void* in, void* out, size_t bytes, int dst, int src) {
  permute_kernel<<<permute_ctas(bytes), kThreads, 0, l.stream>>>(
      l.dev, l.sync, static_cast<const char*>(in), static_cast<char*>(out), bytes, dst, src);
  cuda::check_launch("launching the permute kernel");
}

void preload_permute() { cuda::preload(permute_kernel, "loading the collective kernels"); }

}  // namespace gshmem::coll::kernels

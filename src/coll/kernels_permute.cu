// The packet permute (kernels.h: permute): one point-to-point exchange of at most
// kPermuteMaxBytes as LL packets (protocol.cuh's 16-byte packets, 8 data bytes and two epoch
// words), one kernel of one CTA per 8 KiB, no signal phase: the receiver polls the packets
// themselves, so a message costs one NVLink crossing. Reuse of a CTA's region of a parity slot
// waits for the receiving CTA's credit for the message two before (permute_sync.h), which a
// pipelined sequence of calls has long received. Credits are plain stores, per CTA, so no fence
// or atomic sits on a call's path.
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

// The CTAs that carry a message of `bytes`: one per kPermuteCtaWords words (permute_sync.h).
inline int permute_ctas(size_t bytes) {
  const size_t per_cta = 8 * kPermuteCtaWords;
  return static_cast<int>(std::max<size_t>(1, (bytes + per_cta - 1) / per_cta));
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

// Word i of the message is sent and received by the same thread, so in == out is safe. CTA b
// handles its region of the slot on both sides and keeps its own counts and credits
// (permute_sync.h).
__global__ void __launch_bounds__(kThreads)
    permute_kernel(Device dev, PermuteSync s, const char* in, char* out, size_t bytes, int dst,
                   int src) {
  const size_t words = (bytes + 7) / 8, lo = blockIdx.x * kPermuteCtaWords;
  const Range r{lo, lo + kPermuteCtaWords < words ? lo + kPermuteCtaWords : words};
  const size_t mine = static_cast<size_t>(blockIdx.x) * s.n_pes;
  const bool sends = dst >= 0 && dst != dev.my_pe, receives = src >= 0 && src != dev.my_pe;
  if (sends) {
    const unsigned long long j = s.sent[mine + dst];
    wait_credit(dev, reinterpret_cast<const unsigned long long*>(s.credits + mine + dst), dst, j);
    __syncthreads();  // every thread's stores come after the credit (and after every read of j)
    uint4* slot = gshmem::detail::peer(dev, permute_slot(s, j & 1, dev.my_pe), dst);
    for (size_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
      store_packet(slot + i, load8(in, i, bytes), epoch_of(j));
    }
    if (threadIdx.x == 0) s.sent[mine + dst] = j + 1;
  }
  if (receives) {
    const unsigned long long k = s.got[mine + src];
    const uint4* slot = permute_slot(s, k & 1, src);
    for (size_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
      store8(out, i, bytes, load_packet(dev, slot + i, epoch_of(k), src));
    }
    // Every packet this CTA read has returned its value (each was stored to out), so the credit
    // needs no fence: the sender's later overwrite cannot change what was read.
    __syncthreads();
    if (threadIdx.x == 0) {
      s.got[mine + src] = k + 1;
      gshmem::detail::st_relaxed(
          gshmem::detail::peer(dev, reinterpret_cast<unsigned long long*>(s.credits) + mine +
                                        dev.my_pe, src),
          k + 1);
    }
  } else {
    const bool self = src == dev.my_pe;  // nobody sends here: zeros, as jax.lax.ppermute
    for (size_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
      store8(out, i, bytes, self ? load8(in, i, bytes) : 0ull);
    }
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

// The packet permute (kernels.h: permute): one point-to-point exchange of at most
// kPermuteMaxBytes as LL packets (protocol.cuh's 16-byte packets, 8 data bytes and two epoch
// words), one kernel of kPermuteCtas CTAs, no signal phase: the receiver polls the packets
// themselves, so a message costs one NVLink crossing. Reuse of a parity slot waits for the
// receiver's credit for the message two before (permute_sync.h), which a pipelined sequence of
// calls has long received.
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

// Thread 0: waits until PE `dst` has read this PE's message j - 2 (bounded; see deadline.cuh).
__device__ inline void wait_credit(const Device& dev, const PermuteSync& s, int dst,
                                   unsigned long long j) {
  if (threadIdx.x != 0 || j < 2) return;
  const unsigned long long* credit = reinterpret_cast<const unsigned long long*>(s.credits + dst);
  const gshmem::detail::Waited what{GSHMEM_WAIT_COLLECTIVE, dst, static_cast<int>(Cmp::GE),
                                    credit, j - 1};
  gshmem::Deadline deadline;
  unsigned long long seen;
  while ((seen = gshmem::detail::ld_acquire(credit)) < j - 1) {
    if (deadline.expired(dev, what, seen)) break;
  }
}

// Thread 0, after its CTA has read its share of message k from `src`: the last CTA to finish
// hands PE `src` its credit (k + 1 messages read).
__device__ inline void give_credit(const Device& dev, const PermuteSync& s, int src,
                                   unsigned long long k) {
  if (threadIdx.x != 0) return;
  __threadfence();  // this CTA's reads are done before the count says so
  unsigned long long* done = reinterpret_cast<unsigned long long*>(s.done + src);
  if (atomicAdd(done, 1ull) + 1 != (k + 1) * kPermuteCtas) return;
  __threadfence();  // every CTA's count (and so every read) is seen before the credit
  gshmem::detail::st_release(
      gshmem::detail::peer(dev, reinterpret_cast<unsigned long long*>(s.credits) + dev.my_pe, src),
      k + 1);
}

// Word i of the message is sent and received by the same thread, so in == out is safe.
__global__ void __launch_bounds__(kThreads)
    permute_kernel(Device dev, PermuteSync s, const char* in, char* out, size_t bytes, int dst,
                   int src) {
  const Range r = cta_range((bytes + 7) / 8, 1, blockIdx.x, kPermuteCtas);
  const size_t mine = static_cast<size_t>(blockIdx.x) * s.n_pes;
  const bool sends = dst >= 0 && dst != dev.my_pe, receives = src >= 0 && src != dev.my_pe;
  if (sends) {
    const unsigned long long j = s.sent[mine + dst];
    wait_credit(dev, s, dst, j);
    __syncthreads();  // thread 0's acquire orders every thread's stores after the credit
    uint4* slot = gshmem::detail::peer(dev, permute_slot(s, j & 1, dev.my_pe), dst);
    for (size_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
      store_packet(slot + i, load8(in, i, bytes), epoch_of(j));
    }
  }
  if (receives) {
    const unsigned long long k = s.got[mine + src];
    const uint4* slot = permute_slot(s, k & 1, src);
    for (size_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
      store8(out, i, bytes, load_packet(dev, slot + i, epoch_of(k), src));
    }
    __syncthreads();
    give_credit(dev, s, src, k);
  } else {
    const bool self = src == dev.my_pe;  // nobody sends here: zeros, as jax.lax.ppermute
    for (size_t i = r.lo + threadIdx.x; i < r.hi; i += blockDim.x) {
      store8(out, i, bytes, self ? load8(in, i, bytes) : 0ull);
    }
  }
  __syncthreads();  // nobody reads the counters after they change
  if (threadIdx.x == 0) {
    if (sends) s.sent[mine + dst] += 1;
    if (receives) s.got[mine + src] += 1;
  }
}

}  // namespace

void permute(const PermuteLaunch& l, const void* in, void* out, size_t bytes, int dst, int src) {
  permute_kernel<<<kPermuteCtas, kThreads, 0, l.stream>>>(
      l.dev, l.sync, static_cast<const char*>(in), static_cast<char*>(out), bytes, dst, src);
  cuda::check_launch("launching the permute kernel");
}

void preload_permute() { cuda::preload(permute_kernel, "loading the collective kernels"); }

}  // namespace gshmem::coll::kernels

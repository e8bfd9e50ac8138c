// The collectives' packets (LL), behind every small all_reduce, reduce_scatter, all_gather and
// all_to_all: one kernel on the permute's slots and counters (permute_protocol.cuh). A call is
// one message of packets per member pair and 1 KiB region, as a permute to every other member at
// once: no signal phase, no fence, and region b counts only the calls that reach it, alike on
// both ends (no idle CTA's count to advance); the calls interleave with permutes.
//
// Block t of the input (in + t * in_stride) goes to member t. What a member does with what
// arrives is the kernel's type parameter: Gather stores member t's packets at out + t *
// out_stride (and its own block there too); an element type E reduces every member's, in team
// order, into out (the same bits on every member). CTA b moves region b, one 8-byte word a
// thread, and each thread loads what it needs itself, kPeersInFlight peers at once (counts,
// words, addresses, a first look at the credits; permute_chunk_kernel's shortest path,
// kernels_permute.cu). One barrier at the end: every thread has read the counts and the slots
// before they advance and the credits go back. Word i of every block is sent and received by the
// same thread, sends first, so in place is safe.
#include <type_traits>

#include "coll/kernels.h"
#include "coll/permute_protocol.cuh"
#include "coll/reduce.cuh"
#include "common/cuda_api.h"

namespace gshmem::coll::kernels {
namespace {

using namespace gshmem::coll::device;

constexpr int kPeersInFlight = 8;

struct Gather {};  // the receive of all_gather and all_to_all

// Word i of block t to every other member t: the loads of a batch of peers first, together.
__device__ inline void send_words(const Device& dev, const Team& team, const PermuteSync& s,
                                  int b, size_t i, const char* in, size_t in_stride,
                                  size_t bytes) {
  const int others = team.size - 1;
  for (int first = 0; first < others; first += kPeersInFlight) {
    unsigned long long sent[kPeersInFlight], seen[kPeersInFlight], data[kPeersInFlight];
    long long shift[kPeersInFlight];
    int pe[kPeersInFlight];
#pragma unroll
    for (int k = 0; k < kPeersInFlight; ++k) {
      if (first + k >= others) break;
      const int t = push_target(team, first + k);
      pe[k] = world(team, t);
      sent[k] = *cta_entry(s.sent, s, b, pe[k]);
      data[k] = load8(in + t * in_stride, i, bytes);
      shift[k] = gshmem::detail::peer_shift(dev, pe[k]);
      seen[k] = gshmem::detail::ld_relaxed(cta_entry(s.credits, s, b, pe[k]));
    }
#pragma unroll
    for (int k = 0; k < kPeersInFlight; ++k) {
      if (first + k >= others) break;
      send_packet(dev, s, b, pe[k], sent[k], seen[k], shift[k], i, data[k]);
    }
  }
}

// f(t, v) for every member t in team order, v its word i: this PE's from its own block, the
// others' from their packets (each batch's counts loaded together).
template <class F>
__device__ inline void receive_words(const Device& dev, const Team& team, const PermuteSync& s,
                                     int b, size_t i, const char* own, size_t bytes, F&& f) {
  for (int first = 0; first < team.size; first += kPeersInFlight) {
    unsigned long long got[kPeersInFlight];
#pragma unroll
    for (int k = 0; k < kPeersInFlight; ++k) {
      if (first + k >= team.size) break;
      const int q = world(team, first + k);
      got[k] = q == dev.my_pe ? 0 : *cta_entry(s.got, s, b, q);
    }
#pragma unroll
    for (int k = 0; k < kPeersInFlight; ++k) {
      if (first + k >= team.size) break;
      const int q = world(team, first + k);
      f(first + k, q == dev.my_pe
                       ? load8(own, i, bytes)
                       : load_packet(dev, packet_slot_of(s, got[k], q) + i, epoch_of(got[k]), q));
    }
  }
}

template <class Recv>
__global__ void __launch_bounds__(kPermuteCtaWords)
    packets_kernel(Device dev, Team team, PermuteSync s, const char* in, size_t in_stride,
                   char* out, size_t out_stride, size_t bytes, int op) {
  const int b = static_cast<int>(blockIdx.x);
  const size_t i = static_cast<size_t>(b) * kPermuteCtaWords + threadIdx.x;  // this thread's word
  if (i < (bytes + 7) / 8) {
    send_words(dev, team, s, b, i, in, in_stride, bytes);
    const char* own = in + team.my_pe * in_stride;
    if constexpr (std::is_same_v<Recv, Gather>) {
      receive_words(dev, team, s, b, i, own, bytes, [&](int t, unsigned long long v) {
        char* to = out + t * out_stride;
        if (t != team.my_pe || to != own) store8(to, i, bytes, v);  // in place: already there
      });
    } else {
      Lanes<Recv, unsigned long long> acc;
      receive_words(dev, team, s, b, i, own, bytes, [&](int t, unsigned long long v) {
        if (t == 0) {
          acc.set(v);
        } else {
          acc.combine(v, op);
        }
      });
      store8(out, i, bytes, acc.get());
    }
  }
  __syncthreads();
  // Every value read from the slots has returned (each was stored to out or combined into what
  // was): the credits go back.
  for (int t = threadIdx.x; t < team.size; t += blockDim.x) {
    const int q = world(team, t);
    if (q == dev.my_pe) continue;
    unsigned long long* got = cta_entry(s.got, s, b, q);
    const unsigned long long k = *got;
    return_credit(dev, s, b, gshmem::detail::peer_shift(dev, q), k);
    *got = k + 1;
    *cta_entry(s.sent, s, b, q) += 1;
  }
}

template <class Recv>
void launch_packets(const PacketLaunch& l, const void* in, size_t in_stride, void* out,
                    size_t out_stride, size_t bytes, int op) {
  const uint64_t words = (bytes + 7) / 8;
  const int ctas = static_cast<int>((words + kPermuteCtaWords - 1) / kPermuteCtaWords);
  packets_kernel<Recv><<<ctas, kPermuteCtaWords, 0, l.stream>>>(
      l.dev, l.team, l.sync, static_cast<const char*>(in), in_stride, static_cast<char*>(out),
      out_stride, bytes, op);
  cuda::check_launch("launching the packet collective kernel");
}

}  // namespace

void reduce_packets(const PacketLaunch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                    const void* in, void* out, size_t count, size_t stride) {
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    constexpr size_t kSize = sizeof(typename E::U);
    launch_packets<E>(l, in, stride * kSize, out, 0, count * kSize, op);
  });
}

void move_packets(const PacketLaunch& l, const void* in, size_t in_stride, void* out,
                  size_t out_stride, size_t bytes) {
  launch_packets<Gather>(l, in, in_stride, out, out_stride, bytes, 0);
}

void preload_packets() {
  cuda::preload(packets_kernel<Gather>, "loading the collective kernels");
  for (gshmem_dtype_t dtype : {GSHMEM_FLOAT32, GSHMEM_BFLOAT16, GSHMEM_FLOAT16, GSHMEM_INT32,
                               GSHMEM_INT64}) {
    with_type(dtype, [&](auto e) {
      cuda::preload(packets_kernel<decltype(e)>, "loading the collective kernels");
    });
  }
}

}  // namespace gshmem::coll::kernels

// The reducing collectives: all_reduce (packet, one-shot, two-shot pushed or pulled) and
// reduce_scatter (packet, one-shot); the packet kernel serves both. One kernel per (algorithm,
// element type): 5 x 5
// instantiations; the operator is a run-time switch (reduce.cuh). Synchronisation and staging:
// protocol.cuh; the packets: permute_protocol.cuh.
#include <algorithm>

#include "coll/kernels.h"
#include "coll/permute_protocol.cuh"
#include "coll/reduce.cuh"
#include "common/cuda_api.h"

namespace gshmem::coll::kernels {
namespace {

using namespace gshmem::coll::device;

// Elements per 16 bytes: CTA ranges start on 16-byte boundaries.
template <class E>
constexpr size_t kUnit = sizeof(uint4) / sizeof(typename E::U);

__device__ inline int world(const Team& team, int t) { return gshmem_team_world_pe(&team, t); }

// Elements of shard t of `count` in shards of `shard` (the last may be shorter or empty).
__device__ inline size_t shard_length(size_t count, size_t shard, int t) {
  const size_t lo = static_cast<size_t>(t) * shard;
  return lo >= count ? 0 : (count - lo < shard ? count - lo : shard);
}

// ---- packets (LL) on the permute's slots and counters (permute_protocol.cuh): each call is one
// message of packets per member pair and region, as a permute to every other member at once, so
// no signal phase, no fence and no idle CTA's count to advance: region b counts only the calls
// that reach it, alike on both ends. Block t of the input (in + t * stride) goes to member t;
// each member reduces its own block in team order (the same bits on every member).
// reduce_scatter passes its block stride; all_reduce passes stride 0, which sends the whole input
// to everyone and reduces all of it. CTA b moves region b, one word a thread, and each thread
// loads what it needs itself, kPeersInFlight peers at once (counts, words, addresses, a first
// look at the credits; permute_chunk_kernel's shortest path, kernels_permute.cu). One barrier at
// the end: every thread has read the counts and the slots before they advance and the credits
// go back. Word i of every block is sent and reduced by the same thread, so out == in + me *
// stride (in place) is safe.
constexpr int kPeersInFlight = 8;

template <class E>
__global__ void __launch_bounds__(kPermuteCtaWords)
    reduce_packet_kernel(Device dev, Team team, PermuteSync s, const typename E::U* in,
                         typename E::U* out, size_t count, size_t stride, int op) {
  const size_t bytes = count * sizeof(typename E::U);
  const int b = static_cast<int>(blockIdx.x);
  const size_t i = static_cast<size_t>(b) * kPermuteCtaWords + threadIdx.x;  // this thread's word
  auto block = [&](int t) { return reinterpret_cast<const char*>(in + t * stride); };
  if (i < (bytes + 7) / 8) {
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
        data[k] = load8(block(t), i, bytes);
        shift[k] = gshmem::detail::peer_shift(dev, pe[k]);
        seen[k] = gshmem::detail::ld_relaxed(cta_entry(s.credits, s, b, pe[k]));
      }
#pragma unroll
      for (int k = 0; k < kPeersInFlight; ++k) {
        if (first + k >= others) break;
        if (sent[k] >= 2) {
          poll_at_least<false>(dev, cta_entry(s.credits, s, b, pe[k]), pe[k], sent[k] - 1,
                               seen[k]);
        }
        store_packet(gshmem::detail::shifted(packet_slot_of(s, sent[k], dev.my_pe), shift[k]) + i,
                     data[k], epoch_of(sent[k]));
      }
    }
    Lanes<E, unsigned long long> acc;
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
        const unsigned long long v =
            q == dev.my_pe
                ? load8(block(team.my_pe), i, bytes)
                : load_packet(dev, packet_slot_of(s, got[k], q) + i, epoch_of(got[k]), q);
        if (first + k == 0) {
          acc.set(v);
        } else {
          acc.combine(v, op);
        }
      }
    }
    store8(reinterpret_cast<char*>(out), i, bytes, acc.get());
  }
  __syncthreads();
  // Every value read from the slots has returned (each went into out), so the credits need no
  // fence: a sender's later overwrite cannot change what was read.
  for (int t = threadIdx.x; t < team.size; t += blockDim.x) {
    const int q = world(team, t);
    if (q == dev.my_pe) continue;
    unsigned long long* got = cta_entry(s.got, s, b, q);
    const unsigned long long k = *got;
    gshmem::detail::st_relaxed(gshmem::detail::peer(dev, cta_entry(s.credits, s, b, dev.my_pe), q),
                               k + 1);
    *got = k + 1;
    *cta_entry(s.sent, s, b, q) += 1;
  }
}

// ---- one-shot: push the whole input to every other member's slot, one signal phase, then every
// member reduces all inputs locally (its own straight from `in`).
template <class E>
__global__ void __launch_bounds__(kThreads)
    all_reduce_one_shot_kernel(Device dev, Team team, Sync s, const typename E::U* in,
                               typename E::U* out, size_t count, int op) {
  using U = typename E::U;
  const Range r = cta_range(count, kUnit<E>, blockIdx.x, s.ctas);
  for (int k = 0; k + 1 < team.size; ++k) {
    const int q = world(team, push_target(team, k));
    copy(remote_slot(s, dev, q) + r.lo * sizeof(U), in + r.lo, r.size() * sizeof(U));
  }
  arrive_and_wait(s, dev, team, 1);
  auto source = [&](int t) {
    const int q = world(team, t);
    return q == dev.my_pe ? in : reinterpret_cast<const U*>(local_slot(s, q));
  };
  reduce_range<E>(out, team.size, source, r.lo, r.hi, op);
  end_call(s, dev, team, 1);
}

// ---- two-shot: reduce-scatter (member t's shard to member t, which reduces it) and all-gather
// (each member pushes its reduced shard to every other member), two signal phases. Staged: a
// slot's first half holds phase 1's shard, its second half phase 2's, copied out at the end.
// Direct (`out` is a symmetric heap object): phase 2 stores the reduced shard straight into the
// members' `out`. That is safe without another phase: member q's CTA b signalled phase 1 after
// its kernel started (its `out` is free) and after pushing its `in` range that this CTA now
// overwrites when in == out (CTA b's range of a shard is the same in both phases).
template <class E>
__global__ void __launch_bounds__(kThreads)
    all_reduce_two_shot_kernel(Device dev, Team team, Sync s, const typename E::U* in,
                               typename E::U* out, size_t count, size_t shard, int op,
                               bool direct) {
  using U = typename E::U;
  const size_t half = s.slot_bytes / 2;
  auto shard_len = [&](int t) { return shard_length(count, shard, t); };
  const int mine = team.my_pe;
  for (int k = 0; k + 1 < team.size; ++k) {
    const int t = push_target(team, k);
    const Range r = cta_range(shard_len(t), kUnit<E>, blockIdx.x, s.ctas);
    copy(remote_slot(s, dev, world(team, t)) + r.lo * sizeof(U), in + t * shard + r.lo,
         r.size() * sizeof(U));
  }
  arrive_and_wait(s, dev, team, 1);
  const Range r = cta_range(shard_len(mine), kUnit<E>, blockIdx.x, s.ctas);
  const U* own = in + mine * shard;
  U* reduced = out + mine * shard;
  auto source = [&](int t) {
    const int q = world(team, t);
    return q == dev.my_pe ? own : reinterpret_cast<const U*>(local_slot(s, q));
  };
  reduce_range<E>(reduced, team.size, source, r.lo, r.hi, op);
  __syncthreads();  // the pushes below read what other threads of this CTA reduced
  for (int k = 0; k + 1 < team.size; ++k) {
    const int q = world(team, push_target(team, k));
    char* dst = direct ? reinterpret_cast<char*>(gshmem::detail::peer(dev, reduced, q))
                       : remote_slot(s, dev, q) + half;
    copy(dst + r.lo * sizeof(U), reduced + r.lo, r.size() * sizeof(U));
  }
  arrive_and_wait(s, dev, team, 2);
  if (!direct) {
    for (int t = 0; t < team.size; ++t) {
      const int q = world(team, t);
      if (q == dev.my_pe) continue;
      const Range rt = cta_range(shard_len(t), kUnit<E>, blockIdx.x, s.ctas);
      copy(out + t * shard + rt.lo, local_slot(s, q) + half + rt.lo * sizeof(U),
           rt.size() * sizeof(U));
    }
  }
  end_call(s, dev, team, 2);
}

// ---- pull two-shot (`in` and `out` symmetric on every member): no slots. Phase 1 says every
// member has started (its `in` is written and its `out` free: stream order; a relaxed signal,
// protocol.cuh Arrival); member t then reduces shard t, loading the others' shard t straight
// from their `in`, and stores the result into every member's `out`; phase 2 says every member is
// done with this one's `in` and `out`, so the kernel leaves nothing in flight. One launch at any
// size. In place is safe: only member t reads or writes anyone's shard t, and its CTA b reads its
// range before it stores there.
template <class E>
__global__ void __launch_bounds__(kThreads)
    all_reduce_pull_kernel(Device dev, Team team, Sync s, const typename E::U* in,
                           typename E::U* out, size_t count, size_t shard, int op) {
  using U = typename E::U;
  const int mine = team.my_pe;
  const size_t lo = static_cast<size_t>(mine) * shard;
  arrive_and_wait(s, dev, team, 1, Arrival::kStarted);
  const Range r = cta_range(shard_length(count, shard, mine), kUnit<E>, blockIdx.x, s.ctas);
  const U* own = in + lo;
  U* reduced = out + lo;
  auto source = [&](int t) {
    const int q = world(team, t);
    return q == dev.my_pe ? own : gshmem::detail::peer(dev, own, q);
  };
  reduce_range<E>(reduced, team.size, source, r.lo, r.hi, op);
  __syncthreads();  // the stores below read what other threads of this CTA reduced
  for (int k = 0; k + 1 < team.size; ++k) {
    const int q = world(team, push_target(team, k));
    copy(gshmem::detail::peer(dev, reduced, q) + r.lo, reduced + r.lo, r.size() * sizeof(U));
  }
  arrive_and_wait(s, dev, team, 2);
  end_call(s, dev, team, 2);
}

// ---- reduce_scatter: member t's block to member t (one push per member), one phase, reduce.
template <class E>
__global__ void __launch_bounds__(kThreads)
    reduce_scatter_kernel(Device dev, Team team, Sync s, const typename E::U* in,
                          typename E::U* out, size_t count, size_t stride, int op) {
  using U = typename E::U;
  const Range r = cta_range(count, kUnit<E>, blockIdx.x, s.ctas);
  for (int k = 0; k + 1 < team.size; ++k) {
    const int t = push_target(team, k);
    copy(remote_slot(s, dev, world(team, t)) + r.lo * sizeof(U), in + t * stride + r.lo,
         r.size() * sizeof(U));
  }
  arrive_and_wait(s, dev, team, 1);
  const U* own = in + team.my_pe * stride;
  auto source = [&](int t) {
    const int q = world(team, t);
    return q == dev.my_pe ? own : reinterpret_cast<const U*>(local_slot(s, q));
  };
  reduce_range<E>(out, team.size, source, r.lo, r.hi, op);
  end_call(s, dev, team, 1);
}

// ---- the reductions through the proxy (exchange.cpp): every other member's block already in
// this PE's exchange slots, by world PE; a plain local reduction, no synchronisation.
template <class E>
__global__ void __launch_bounds__(kThreads)
    reduce_slots_kernel(Team team, int my_pe, const typename E::U* own, const char* slots,
                        uint64_t slot_bytes, typename E::U* out, size_t count, int op) {
  using U = typename E::U;
  const Range r = cta_range(count, kUnit<E>, blockIdx.x, gridDim.x);
  auto source = [&](int t) -> const U* {
    const int q = world(team, t);
    return q == my_pe ? own : reinterpret_cast<const U*>(slots + q * slot_bytes);
  };
  reduce_range<E>(out, team.size, source, r.lo, r.hi, op);
}

// Calls f(E{}) with the element type of `dtype` (validated by the caller).
template <class F>
void with_type(gshmem_dtype_t dtype, F&& f) {
  switch (dtype) {
    case GSHMEM_FLOAT32: return f(F32{});
    case GSHMEM_BFLOAT16: return f(BF16{});
    case GSHMEM_FLOAT16: return f(F16{});
    case GSHMEM_INT32: return f(I32{});
    case GSHMEM_INT64: return f(I64{});
  }
}

template <class E>
const typename E::U* as(const void* p) {
  return static_cast<const typename E::U*>(p);
}
template <class E>
typename E::U* as(void* p) {
  return static_cast<typename E::U*>(p);
}

}  // namespace


void all_reduce_one_shot(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                         const void* in, void* out, size_t count) {
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    all_reduce_one_shot_kernel<E><<<l.sync.ctas, kThreads, 0, l.stream>>>(
        l.dev, l.team, l.sync, as<E>(in), as<E>(out), count, op);
  });
  cuda::check_launch("launching the one-shot all_reduce kernel");
}

void all_reduce_two_shot(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                         const void* in, void* out, size_t count, size_t shard, bool direct) {
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    all_reduce_two_shot_kernel<E><<<l.sync.ctas, kThreads, 0, l.stream>>>(
        l.dev, l.team, l.sync, as<E>(in), as<E>(out), count, shard, op, direct);
  });
  cuda::check_launch("launching the two-shot all_reduce kernel");
}

void all_reduce_pull(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op, const void* in,
                     void* out, size_t count, size_t shard) {
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    all_reduce_pull_kernel<E><<<l.sync.ctas, kThreads, 0, l.stream>>>(
        l.dev, l.team, l.sync, as<E>(in), as<E>(out), count, shard, op);
  });
  cuda::check_launch("launching the pull all_reduce kernel");
}

void reduce_packets(const PacketLaunch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                    const void* in, void* out, size_t count, size_t stride) {
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    const uint64_t words = (count * sizeof(typename E::U) + 7) / 8;  // one CTA per region
    const int ctas = static_cast<int>((words + kPermuteCtaWords - 1) / kPermuteCtaWords);
    reduce_packet_kernel<E><<<ctas, kPermuteCtaWords, 0, l.stream>>>(
        l.dev, l.team, l.sync, as<E>(in), as<E>(out), count, stride, op);
  });
  cuda::check_launch("launching the packet reduce kernel");
}

void reduce_scatter(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op, const void* in,
                    void* out, size_t count, size_t stride) {
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    reduce_scatter_kernel<E><<<l.sync.ctas, kThreads, 0, l.stream>>>(
        l.dev, l.team, l.sync, as<E>(in), as<E>(out), count, stride, op);
  });
  cuda::check_launch("launching the reduce_scatter kernel");
}

void reduce_slots(cudaStream_t stream, const gshmem_team_t& team, int my_pe,
                  gshmem_dtype_t dtype, gshmem_redop_t op, const void* own, const char* slots,
                  uint64_t slot_bytes, void* out, size_t count) {
  constexpr size_t kPerCta = 8 << 10;  // elements a CTA reduces, at most kMaxCtas CTAs
  const int ctas = static_cast<int>(std::min<size_t>(kMaxCtas, (count + kPerCta - 1) / kPerCta));
  with_type(dtype, [&](auto e) {
    using E = decltype(e);
    reduce_slots_kernel<E><<<ctas, kThreads, 0, stream>>>(team, my_pe, as<E>(own), slots,
                                                         slot_bytes, as<E>(out), count, op);
  });
  cuda::check_launch("launching the exchange's reduce kernel");
}

void preload_reduce() {
  for (gshmem_dtype_t dtype : {GSHMEM_FLOAT32, GSHMEM_BFLOAT16, GSHMEM_FLOAT16, GSHMEM_INT32,
                               GSHMEM_INT64}) {
    with_type(dtype, [&](auto e) {
      using E = decltype(e);
      cuda::preload(reduce_packet_kernel<E>, "loading the collective kernels");
      cuda::preload(all_reduce_one_shot_kernel<E>, "loading the collective kernels");
      cuda::preload(all_reduce_two_shot_kernel<E>, "loading the collective kernels");
      cuda::preload(all_reduce_pull_kernel<E>, "loading the collective kernels");
      cuda::preload(reduce_slots_kernel<E>, "loading the collective kernels");
      cuda::preload(reduce_scatter_kernel<E>, "loading the collective kernels");
    });
  }
}

}  // namespace gshmem::coll::kernels

// The reducing collectives beyond packets (kernels_packets.cu): all_reduce (one-shot, two-shot
// pushed or pulled) and reduce_scatter (one-shot), and the proxy path's local reduction. One
// kernel per (algorithm, element type): 5 x 5 instantiations; the operator is a run-time switch
// (reduce.cuh). Synchronisation and staging: protocol.cuh.
#include <algorithm>

#include "coll/kernels.h"
#include "coll/protocol.cuh"
#include "coll/reduce.cuh"
#include "common/cuda_api.h"

namespace gshmem::coll::kernels {
namespace {

using namespace gshmem::coll::device;

// Elements per 16 bytes: CTA ranges start on 16-byte boundaries.
template <class E>
constexpr size_t kUnit = sizeof(uint4) / sizeof(typename E::U);

// Elements of shard t of `count` in shards of `shard` (the last may be shorter or empty).
__device__ inline size_t shard_length(size_t count, size_t shard, int t) {
  const size_t lo = static_cast<size_t>(t) * shard;
  return lo >= count ? 0 : (count - lo < shard ? count - lo : shard);
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
      cuda::preload(all_reduce_one_shot_kernel<E>, "loading the collective kernels");
      cuda::preload(all_reduce_two_shot_kernel<E>, "loading the collective kernels");
      cuda::preload(all_reduce_pull_kernel<E>, "loading the collective kernels");
      cuda::preload(reduce_slots_kernel<E>, "loading the collective kernels");
      cuda::preload(reduce_scatter_kernel<E>, "loading the collective kernels");
    });
  }
}

}  // namespace gshmem::coll::kernels

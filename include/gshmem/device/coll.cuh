// Data collectives inside kernels, for fused kernels (NVSHMEM's nvshmemx_*_block family): one
// scope, usually a block, on every member of a team moves or reduces symmetric buffers.
//
//   broadcast<Scope>(dev, team, dest, src, nbytes, root)
//       every member's dest[0, nbytes) = member root's src[0, nbytes); root is a team index, and
//       root's own dest is written too.
//   all_gather<Scope>(dev, team, dest, src, nbytes)
//       dest holds team.size blocks of nbytes in team order: block t = member t's src.
//   all_to_all<Scope>(dev, team, dest, src, nbytes)
//       src and dest hold team.size blocks of nbytes: block t of this member's src goes to block
//       team_my_pe(team) of member t's dest.
//   all_reduce<Scope, Op>(dev, team, dest, src, count)
//       dest[i] = Op over every member t of member t's src[i], for i < count (elements of T).
//   reduce_scatter<Scope, Op>(dev, team, dest, src, count)
//       src holds team.size blocks of count elements; member m's dest[i] = Op over every
//       member t of member t's src[m * count + i], for i < count.
// T (deduced from dest/src) is float, __half, __nv_bfloat16, int32_t or int64_t and Op is
// ReduceOp::Sum, Prod, Min or Max; reduce.cuh says what each computes (16-bit floats accumulate
// in fp32, integers wrap).
//
// Contract:
//   * Collective: one scope on every member of the team calls, with the same arguments; PEs
//     outside the team do not call. Scope is Block in fused kernels; Warp and Thread work the
//     same way, with fewer threads moving the data.
//   * dest and src are symmetric addresses (in the heap) and every member is load/store-
//     reachable. Any nbytes or count, 0 included, and any alignment (typed pointers aligned to
//     their element, as C++ requires).
//   * src holds its data when the scope calls: the scope's own writes, earlier kernels', and
//     other blocks' once the calling block has synchronised with them.
//   * Blocking at the scope: on return dest holds the result on this PE for every thread of the
//     scope, and src may be overwritten (every member has finished reading it). Nothing is left
//     pending: no quiet is needed.
//   * Bounded, as sync and barrier (barrier.cuh): each returns true, or false to every thread of
//     the scope when one of its waits gave up (GSHMEM_TIMEOUT, comm.abort(), another failed
//     wait); dest is then undefined, and the fault record names the PE (comm.check()).
//   * dest and src do not overlap, except in place: broadcast with dest == src; all_gather with
//     src == (char*)dest + team_my_pe * nbytes; all_reduce with dest == src; reduce_scatter with
//     src == dest - team_my_pe * count. all_to_all has no in-place form.
//   * One at a time: the collectives synchronise through the team barrier, whose rule they take
//     on (barrier.cuh): on every PE at most one scope at a time may be inside a collective, sync
//     or barrier on teams that share two or more PEs, and the PEs call them in the same order.
//     In particular only one block per PE may be inside a collective on a given team.
//   * Reductions combine the members in team order (member 0 first), and each element is
//     computed once, by one member, so every member gets the same bits.
//
// Algorithm, every collective: sync, then move or reduce, then barrier. The opening sync's
// release/acquire (barrier.cuh) orders each member's earlier writes to its src, and its reads of
// its dest, before any other member's accesses in this call; the closing barrier (quiet, then
// sync) makes every store complete and visible and tells each member that nobody still reads its
// src. Between them, over NVLink loads and stores:
//   broadcast       each member pulls root's src into its own dest: the members copy in parallel,
//                   instead of root's scope writing team.size copies.
//   all_gather      each member pushes its src into block team_my_pe of every member's dest.
//   all_to_all      each member pushes its src block t into block team_my_pe of member t's dest.
//   all_reduce      two-shot in one pass: the elements are shared out among the members on
//                   16-byte boundaries of dest; member m loads its share from every member's
//                   src, reduces it and stores the result into every member's dest.
//   reduce_scatter  member m loads block m from every member's src and reduces it into its dest.
// Copies go through copy.cuh (the widest word dest and src are congruent in). Reductions load
// 16-byte words where dest and src are congruent modulo 16 (elements one by one before the first
// and after the last such word, or everywhere when they are not), each thread loading the next
// member's words while it combines the current member's.
#pragma once

#include "barrier.cuh"
#include "copy.cuh"
#include "ptr.cuh"
#include "reduce.cuh"
#include "scope.cuh"

namespace gshmem {
namespace detail {

// Words per thread per pass of reduce_words. Two members' loads are in flight (2 x 2 words), and
// the kernel stays under ~90 registers a thread (4 words took 128 for 16-bit floats).
constexpr unsigned kReduceUnroll = 2;

// Elements of `elem_bytes` before p's next 16-byte boundary, at most `count`. Symmetric
// addresses have the same alignment on every PE: heaps and slots are aligned far beyond 16 bytes.
__device__ inline size_t head_elements(const void* p, size_t elem_bytes, size_t count) {
  const size_t head = (16 - reinterpret_cast<unsigned long long>(p) % 16) % 16 / elem_bytes;
  return head < count ? head : count;
}

// For i < words: the Op over members t, in team order, of member t's src[i], stored into every
// member's dest[i] (to_all) or into this PE's. W is uint4 or one element's Bits. Each word is
// loaded and stored by one thread, so dest may be src. Out of line: reduce_range calls it three
// times, and inlining each call more than doubled the compile time of every (type, op, scope)
// instantiation; one call per range is nothing next to the range's memory traffic.
template <class Scope, ReduceOp Op, class T, class W>
__device__ __noinline__ void reduce_words(const Device& dev, const Team& team, W* dest,
                                          const W* src, size_t words, bool to_all) {
  const size_t stride = Scope::size();
  for (size_t base = Scope::rank(); base < words; base += kReduceUnroll * stride) {
    // Member t + 1's words are loaded before member t's are combined: two members' loads in
    // flight per thread, with accumulators for only kReduceUnroll words.
    W next[kReduceUnroll];
    const auto load = [&](int t) {
      const W* from = peer(dev, src, gshmem_team_world_pe(&team, t));
#pragma unroll
      for (unsigned u = 0; u < kReduceUnroll; ++u) {
        if (base + u * stride < words) next[u] = from[base + u * stride];
      }
    };
    load(0);
    Lanes<T, W> acc[kReduceUnroll];
    for (int t = 0; t < team.size; ++t) {
      W loaded[kReduceUnroll];
#pragma unroll
      for (unsigned u = 0; u < kReduceUnroll; ++u) loaded[u] = next[u];
      if (t + 1 < team.size) load(t + 1);
#pragma unroll
      for (unsigned u = 0; u < kReduceUnroll; ++u) {
        if (base + u * stride >= words) continue;
        if (t == 0) {
          acc[u].set(loaded[u]);
        } else {
          acc[u].template combine<Op>(loaded[u]);
        }
      }
    }
    W out[kReduceUnroll];
#pragma unroll
    for (unsigned u = 0; u < kReduceUnroll; ++u) {
      if (base + u * stride < words) out[u] = acc[u].get();
    }
    for (int t = 0; t < (to_all ? team.size : 1); ++t) {
      W* to = to_all ? peer(dev, dest, gshmem_team_world_pe(&team, t)) : dest;
#pragma unroll
      for (unsigned u = 0; u < kReduceUnroll; ++u) {
        if (base + u * stride < words) to[base + u * stride] = out[u];
      }
    }
  }
}

// reduce_words over count elements: 16-byte words between the head and the tail when dest and
// src are congruent modulo 16, elements elsewhere.
template <class Scope, ReduceOp Op, class T>
__device__ inline void reduce_range(const Device& dev, const Team& team, T* dest, const T* src,
                                    size_t count, bool to_all) {
  using Bits = typename Reduce<T>::Bits;
  Bits* d = reinterpret_cast<Bits*>(dest);
  const Bits* s = reinterpret_cast<const Bits*>(src);
  const unsigned long long skew =
      reinterpret_cast<unsigned long long>(d) ^ reinterpret_cast<unsigned long long>(s);
  if (skew % sizeof(uint4) != 0) {
    reduce_words<Scope, Op, T>(dev, team, d, s, count, to_all);
    return;
  }
  constexpr size_t kLanes = sizeof(uint4) / sizeof(Bits);
  const size_t head = head_elements(d, sizeof(Bits), count);
  const size_t vectors = (count - head) / kLanes;
  const size_t tail = head + vectors * kLanes;
  reduce_words<Scope, Op, T>(dev, team, d, s, head, to_all);
  reduce_words<Scope, Op, T>(dev, team, reinterpret_cast<uint4*>(d + head),
                             reinterpret_cast<const uint4*>(s + head), vectors, to_all);
  reduce_words<Scope, Op, T>(dev, team, d + tail, s + tail, count - tail, to_all);
}

// Member m's share [lo, hi) of count elements at dest, cut on dest's 16-byte boundaries so that
// only the first share has a head and only the last a tail. Every member computes the same cuts.
__device__ inline void share(const void* dest, size_t elem_bytes, size_t count, int m,
                             int members, size_t* lo, size_t* hi) {
  const size_t lanes = 16 / elem_bytes;
  const size_t head = head_elements(dest, elem_bytes, count);
  const size_t vectors = (count - head) / lanes;
  const size_t per = (vectors + members - 1) / members;
  const auto cut = [&](int k) {
    const size_t v = per * k;
    return head + (v < vectors ? v : vectors) * lanes;
  };
  *lo = m == 0 ? 0 : cut(m);
  *hi = m == members - 1 ? count : cut(m + 1);
}

}  // namespace detail

template <class Scope = Block>
__device__ inline bool broadcast(const Device& dev, const Team& team, void* dest, const void* src,
                                 size_t nbytes, int root) {
  const bool synced = sync<Scope>(dev, team);
  if (team.my_pe != root || dest != src) {
    detail::copy<Scope>(dest, detail::peer(dev, src, gshmem_team_world_pe(&team, root)), nbytes);
  }
  return barrier<Scope>(dev, team) && synced;
}

template <class Scope = Block>
__device__ inline bool all_gather(const Device& dev, const Team& team, void* dest,
                                  const void* src, size_t nbytes) {
  const bool synced = sync<Scope>(dev, team);
  char* mine = static_cast<char*>(dest) + team.my_pe * nbytes;
  // From the next member round to this one, so the members' first pushes go to different PEs.
  for (int k = 1; k <= team.size; ++k) {
    const int t = (team.my_pe + k) % team.size;
    char* to = detail::peer(dev, mine, gshmem_team_world_pe(&team, t));
    if (to != src) detail::copy<Scope>(to, src, nbytes);  // in place: already there
  }
  return barrier<Scope>(dev, team) && synced;
}

template <class Scope = Block>
__device__ inline bool all_to_all(const Device& dev, const Team& team, void* dest,
                                  const void* src, size_t nbytes) {
  const bool synced = sync<Scope>(dev, team);
  char* mine = static_cast<char*>(dest) + team.my_pe * nbytes;
  for (int k = 1; k <= team.size; ++k) {
    const int t = (team.my_pe + k) % team.size;
    detail::copy<Scope>(detail::peer(dev, mine, gshmem_team_world_pe(&team, t)),
                        static_cast<const char*>(src) + t * nbytes, nbytes);
  }
  return barrier<Scope>(dev, team) && synced;
}

template <class Scope, ReduceOp Op, class T>
__device__ inline bool all_reduce(const Device& dev, const Team& team, T* dest, const T* src,
                                  size_t count) {
  const bool synced = sync<Scope>(dev, team);
  size_t lo, hi;
  detail::share(dest, sizeof(T), count, team.my_pe, team.size, &lo, &hi);
  detail::reduce_range<Scope, Op>(dev, team, dest + lo, src + lo, hi - lo, true);
  return barrier<Scope>(dev, team) && synced;
}

template <class Scope, ReduceOp Op, class T>
__device__ inline bool reduce_scatter(const Device& dev, const Team& team, T* dest, const T* src,
                                      size_t count) {
  const bool synced = sync<Scope>(dev, team);
  detail::reduce_range<Scope, Op>(dev, team, dest, src + team.my_pe * count, count, false);
  return barrier<Scope>(dev, team) && synced;
}

}  // namespace gshmem

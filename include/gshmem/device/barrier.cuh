// Team barrier and sync, made from the device by one scope (a thread, a warp or, usually, a
// block) on every PE of the team. Every PE of the team must be load/store-reachable.
//
//   sync(dev, team)     returns once every PE of the team has called it (arrival only).
//   barrier(dev, team)  quiet, then sync: additionally, every put/atomic/signal a PE issued
//                       before its barrier is complete and visible to every PE after it.
//
// Algorithm: each PE keeps one 64-bit arrival counter per world PE in the runtime's symmetric
// sync area (dev.sync). Arriving, PE a adds 1 to its counter on every other member
// (red.release.sys.global.add.u64: a's earlier writes, and through bar.sync its scope's, precede
// the arrival); it then waits, with ld.acquire.sys, until each member b's counter on a reaches the
// number of syncs a has completed with b plus one, a tally a keeps in the local half of dev.sync.
// Counters only grow, so a PE that runs ahead into its next sync cannot be mistaken for a late
// one, and teams need no memory of their own: any teams, created in any order, share the
// counters. The threads of the scope split the members, so a block-scoped sync of n PEs is one
// round of n - 1 parallel remote adds and polls.
//
// Contract: the calls are collective over the team; on every PE at most one scope at a time
// may be inside sync/barrier on teams that share two or more PEs, and PEs must call them in the
// same order (the rule OpenSHMEM states for team collectives).
#pragma once

#include "order.cuh"
#include "ptr.cuh"
#include "ptx.cuh"
#include "scope.cuh"

namespace gshmem {

template <class Scope = Block>
__device__ inline void sync(const Device& dev, const Team& team) {
  unsigned long long* arrivals = reinterpret_cast<unsigned long long*>(dev.sync);
  unsigned long long* tallies = arrivals + dev.n_pes;
  Scope::sync();
  for (int i = Scope::rank(); i < team.size; i += Scope::size()) {
    const int pe = gshmem_team_world_pe(&team, i);
    if (pe != dev.my_pe) detail::red_add_release(detail::peer(dev, arrivals + dev.my_pe, pe), 1ull);
  }
  for (int i = Scope::rank(); i < team.size; i += Scope::size()) {
    const int pe = gshmem_team_world_pe(&team, i);
    if (pe == dev.my_pe) continue;
    const unsigned long long expected = tallies[pe] + 1;
    while (detail::ld_acquire(arrivals + pe) < expected) {
    }
    tallies[pe] = expected;
  }
  Scope::sync();
}

template <class Scope = Block>
__device__ inline void barrier(const Device& dev, const Team& team) {
  quiet<Scope>();
  sync<Scope>(dev, team);
}

// sync / barrier over every PE (dev.world).
template <class Scope = Block>
__device__ inline void sync_all(const Device& dev) {
  sync<Scope>(dev, dev.world);
}

template <class Scope = Block>
__device__ inline void barrier_all(const Device& dev) {
  barrier<Scope>(dev, dev.world);
}

}  // namespace gshmem

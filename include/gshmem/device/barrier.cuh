// Team barrier and sync, made from the device by one scope (a thread, a warp or, usually, a
// block) on every PE of the team. A PE beyond load/store reach is reached through the proxy path
// (proxy.cuh): its arrival is a signal add the network carries.
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
// Bounded (deadline.cuh): each returns true, or false to every thread of the scope when a wait
// gave up (GSHMEM_TIMEOUT, comm.abort(), another failed wait); the fault names the PE.
//
// Contract: the calls are collective over the team; on every PE at most one scope at a time
// may be inside sync/barrier on teams that share two or more PEs, and PEs must call them in the
// same order (the rule OpenSHMEM states for team collectives).
#pragma once

#include "deadline.cuh"
#include "order.cuh"
#include "ptr.cuh"
#include "ptx.cuh"
#include "scope.cuh"

namespace gshmem {

template <class Scope = Block>
__device__ inline bool sync(const Device& dev, const Team& team) {
  unsigned long long* arrivals = reinterpret_cast<unsigned long long*>(dev.sync);
  unsigned long long* tallies = arrivals + dev.n_pes;
  Scope::sync();
  for (int i = Scope::rank(); i < team.size; i += Scope::size()) {
    const int pe = gshmem_team_world_pe(&team, i);
    if (pe == dev.my_pe) continue;
    if (detail::via_proxy(dev, pe)) {
      detail::proxy_signal(dev, reinterpret_cast<uint64_t*>(arrivals + dev.my_pe), 1,
                           SignalOp::Add, pe);
    } else {
      detail::red_add_release(detail::peer(dev, arrivals + dev.my_pe, pe), 1ull);
    }
  }
  bool done = true;
  for (int i = Scope::rank(); i < team.size; i += Scope::size()) {
    const int pe = gshmem_team_world_pe(&team, i);
    if (pe == dev.my_pe || !done) continue;
    const unsigned long long expected = tallies[pe] + 1;
    const detail::Waited what{GSHMEM_WAIT_BARRIER, pe, static_cast<int>(Cmp::GE), arrivals + pe,
                              expected};
    Deadline deadline;
    unsigned long long seen;
    while ((seen = detail::ld_acquire(arrivals + pe)) < expected) {
      if (deadline.expired(dev, what, seen)) {
        done = false;
        break;
      }
    }
    tallies[pe] = expected;
  }
  return Scope::all(done);
}

template <class Scope = Block>
__device__ inline bool barrier(const Device& dev, const Team& team) {
  if (!quiet<Scope>(dev)) return false;
  return sync<Scope>(dev, team);
}

// sync / barrier over every PE (dev.world).
template <class Scope = Block>
__device__ inline bool sync_all(const Device& dev) {
  return sync<Scope>(dev, dev.world);
}

template <class Scope = Block>
__device__ inline bool barrier_all(const Device& dev) {
  return barrier<Scope>(dev, dev.world);
}

}  // namespace gshmem

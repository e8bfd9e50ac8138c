// CollState: the per-comm memory of gshmem's own collectives (sync.h gives the layout), built
// collectively as the last step of comm init: one zeroed heap allocation whose size every PE
// derives from the same settings, checked equal across PEs here (a mismatch would make the
// kernels disagree about where data lives). Nothing is allocated later: no collective call hides
// a heap collective.
//
//   GSHMEM_COLL_SCRATCH_BYTES  staging memory per PE (default 32 MiB): 2 x n_pes slots, so a
//                              launch moves at most scratch / (2 n_pes) bytes per member pair;
//                              larger calls run as several launches (chunks); a comm with a
//                              proxy path takes n_pes slots more, where its reductions through
//                              the proxy stage (exchange.cpp)
//   GSHMEM_COLL_CTAS           most CTAs of a collective kernel (default 64, 1..128); each launch
//                              takes fewer when it is small (ops.cpp, ctas_for)
//   GSHMEM_COLL_CHECK          1: every collective kernel compares its arguments with the other
//                              members' and traps on a mismatch, printing both (default 0)
#pragma once

#include <cstdint>

#include "coll/permute_sync.h"
#include "coll/sync.h"

namespace gshmem {

class Comm;

namespace coll {

class CollState {
 public:
  // Collective over the comm (one bootstrap allgather, one heap calloc). Throws gshmem::Error.
  explicit CollState(Comm& comm);
  // The memory is released with the heap (a free would be a collective), which is why the comm
  // destroys this object before its heap.
  CollState(const CollState&) = delete;
  CollState& operator=(const CollState&) = delete;

  // Sync::desc is 0 here; ops.cpp sets it per call when check() is on.
  const Sync& sync() const { return sync_; }
  const PermuteSync& permute() const { return permute_; }
  const PermuteFlags& permute_flags() const { return permute_flags_; }
  const ExchangeSlots& exchange_slots() const { return exchange_slots_; }
  bool check() const { return check_; }

 private:
  Sync sync_{};
  PermuteSync permute_{};
  PermuteFlags permute_flags_{};
  ExchangeSlots exchange_slots_{};
  bool check_ = false;
};

}  // namespace coll
}  // namespace gshmem

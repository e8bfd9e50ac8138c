// Symmetric addresses (DESIGN.md §2.4): a symmetric object is named by its local address p; PE
// q's copy lives at slot_base + local_index[q] * slot_size + (p - heap_base). ptr/team_ptr expose
// that address so kernels may also use plain loads and stores on it.
#pragma once

#include "types.cuh"

namespace gshmem {
namespace detail {

// PE `pe`'s address of symmetric `p`. `pe` must be load/store-reachable (local_index != -1):
// every RMA, signal, atomic and barrier call goes through here and does not check.
template <class T>
__device__ inline T* peer(const Device& dev, T* p, int pe) {
  if (pe == dev.my_pe) return p;
  const int slot = reinterpret_cast<const int32_t*>(dev.local_index)[pe];
  const long long shift = static_cast<long long>(slot - dev.my_slot) *
                          static_cast<long long>(dev.slot_size);
  return reinterpret_cast<T*>(reinterpret_cast<unsigned long long>(p) + shift);
}

}  // namespace detail

// Address of symmetric object `p` in PE `pe`'s heap, usable with ordinary loads and stores from
// this GPU; nullptr when `pe` is not load/store-reachable. Not blocking, no ordering.
template <class T>
__device__ inline T* ptr(const Device& dev, T* p, int pe) {
  if (pe < 0 || pe >= dev.n_pes) return nullptr;
  if (reinterpret_cast<const int32_t*>(dev.local_index)[pe] < 0) return nullptr;
  return detail::peer(dev, p, pe);
}

// As ptr(), with `pe` an index in `team`; nullptr also when `pe` is outside the team.
template <class T>
__device__ inline T* team_ptr(const Device& dev, const Team& team, T* p, int pe) {
  if (pe < 0 || pe >= team.size) return nullptr;
  return ptr(dev, p, gshmem_team_world_pe(&team, pe));
}

}  // namespace gshmem

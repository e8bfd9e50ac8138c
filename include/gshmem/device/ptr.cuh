// Symmetric addresses (DESIGN.md §2.4): a symmetric object is named by its local address p; PE
// q's copy lives at slot_base + local_index[q] * slot_size + (p - heap_base). ptr/team_ptr expose
// that address so kernels may also use plain loads and stores on it.
#pragma once

#include "types.cuh"

namespace gshmem {
namespace detail {

// Bytes from this PE's address of a symmetric object to PE `pe`'s (0 for this PE): a load of
// local_index. A kernel that addresses one peer again and again takes this once, early, so that
// the load is not on the path between a wait and the store after it.
__device__ inline long long peer_shift(const Device& dev, int pe) {
  if (pe == dev.my_pe) return 0;
  const int slot = reinterpret_cast<const int32_t*>(dev.local_index)[pe];
  return static_cast<long long>(slot - dev.my_slot) * static_cast<long long>(dev.slot_size);
}

// `p` moved by a peer_shift.
template <class T>
__device__ inline T* shifted(T* p, long long shift) {
  return reinterpret_cast<T*>(reinterpret_cast<unsigned long long>(p) + shift);
}

// PE `pe`'s address of symmetric `p`. `pe` must be load/store-reachable (local_index != -1):
// every RMA, signal, atomic and barrier call goes through here and does not check.
template <class T>
__device__ inline T* peer(const Device& dev, T* p, int pe) {
  return shifted(p, peer_shift(dev, pe));
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

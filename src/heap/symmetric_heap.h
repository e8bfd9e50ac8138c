// The symmetric heap (DESIGN.md §2.3-2.4). One virtual address range is reserved per PE at init,
// with a slot for every load/store-reachable PE on this host (slot i = local PE i's heap). Physical
// memory is added in chunks when allocations need it: each PE creates its chunk on its own GPU,
// exports it as a POSIX fd, passes the fd to its local peers (LocalChannel), and every PE maps
// every local chunk at the same offset in the owner's slot. Earlier allocations never move.
//
// The symmetric address of an object is its local address; PE q's copy is at
//   slot_base + local_index(q) * slot_size + (ptr - heap_base).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "bootstrap/local_channel.h"
#include "bootstrap/tcp_bootstrap.h"
#include "heap/allocator.h"

namespace gshmem {

struct HeapConfig {
  int device = 0;
  uint64_t slot_size = 0;       // bytes reserved per PE; a multiple of granularity
  uint64_t granularity = 0;     // physical allocation granularity (same on every PE)
  uint64_t initial_bytes = 0;   // mapped at construction
  uint64_t grow_bytes = 0;      // least bytes added per growth
  bool check_sequence = true;   // compare the allocation sequence across PEs at each call
  // world rank -> local index (slot), or -1 when that PE is not load/store-reachable.
  std::vector<int> local_index;
};

class SymmetricHeap {
 public:
  // Collective over the bootstrap. `channel` may be null when no peer is reachable.
  SymmetricHeap(Bootstrap& bootstrap, LocalChannel* channel, HeapConfig config);
  ~SymmetricHeap();  // unmaps everything; the caller has synchronised the device
  SymmetricHeap(const SymmetricHeap&) = delete;
  SymmetricHeap& operator=(const SymmetricHeap&) = delete;

  // Collective. Same offsets on every PE; grows the heap when needed; zero=true fills with zeros
  // and returns once every PE's block is zero.
  void* malloc(uint64_t size, uint64_t alignment, bool zero);
  // Collective. Waits for this device's work and for every PE, then frees.
  void free(void* ptr);

  // Called after every growth, on every PE in the same order (growth is collective), with
  // mapped() already the new size: the proxy path registers the grown heap with the network.
  // An exception from it leaves the heap grown and propagates from malloc.
  void set_grow_hook(std::function<void()> hook) { grow_hook_ = std::move(hook); }

  // PE `pe`'s address of symmetric object `ptr`, or nullptr if `pe` is not reachable.
  void* peer_ptr(const void* ptr, int pe) const;
  bool contains(const void* ptr) const;

  void* base() const { return reinterpret_cast<void*>(own_base()); }
  CUdeviceptr slot_base() const { return va_; }
  uint64_t slot_size() const { return config_.slot_size; }
  uint64_t reserved() const { return config_.slot_size; }
  uint64_t mapped() const { return allocator_.end(); }
  uint64_t in_use() const { return allocator_.in_use(); }
  int local_size() const { return slots_; }
  const std::vector<int>& local_index() const { return config_.local_index; }

 private:
  CUdeviceptr own_base() const;
  void check_sequence(uint64_t op, uint64_t a, uint64_t b);
  void grow_to(uint64_t needed_end);
  void release_all() noexcept;

  Bootstrap& bootstrap_;
  LocalChannel* channel_;
  HeapConfig config_;
  int my_slot_ = 0;
  int slots_ = 1;
  CUdeviceptr va_ = 0;
  uint64_t sequence_hash_ = 0;
  bool broken_ = false;  // a growth failed half-way: peers may disagree about the layout
  Allocator allocator_;
  std::vector<std::pair<CUdeviceptr, size_t>> mappings_;
  std::function<void()> grow_hook_;
};

}  // namespace gshmem

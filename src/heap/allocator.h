// First-fit allocator over offsets [0, end) of the symmetric heap, with coalescing of free
// neighbours. Purely host-side and deterministic: PEs that make the same calls get the same
// offsets, which is what makes the heap symmetric. The range grows at its end (grow()).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace gshmem {

class Allocator {
 public:
  Allocator() = default;

  // The lowest aligned offset at which `size` bytes fit, or nullopt. alignment: a power of two.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t alignment);
  // Returns the size of the block that started at `offset`; throws a usage error if no live
  // block starts there.
  uint64_t release(uint64_t offset);

  // The end the range must reach for allocate(size, alignment) to succeed once grown.
  uint64_t end_needed(uint64_t size, uint64_t alignment) const;
  // Extends the range to new_end (>= end()); the new space joins the last free block.
  void grow(uint64_t new_end);

  uint64_t end() const { return end_; }
  uint64_t in_use() const { return in_use_; }
  size_t live_blocks() const { return live_.size(); }
  size_t free_blocks() const { return free_.size(); }
  // Size of the live block that contains `offset` and its start, or nullopt.
  std::optional<std::pair<uint64_t, uint64_t>> find_live(uint64_t offset) const;

 private:
  void add_free(uint64_t start, uint64_t size);  // coalesces with neighbours

  uint64_t end_ = 0;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;  // start -> size
  std::map<uint64_t, uint64_t> live_;  // start -> size
};

}  // namespace gshmem

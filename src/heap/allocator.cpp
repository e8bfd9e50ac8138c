#include "heap/allocator.h"

#include <string>

#include "common/error.h"

namespace gshmem {
namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }

void check_args(uint64_t size, uint64_t alignment) {
  GSHMEM_REQUIRE(size > 0, "allocation size must be positive");
  GSHMEM_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0,
                 "alignment must be a power of two, got " + std::to_string(alignment));
}

}  // namespace

std::optional<uint64_t> Allocator::allocate(uint64_t size, uint64_t alignment) {
  check_args(size, alignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    uint64_t start = it->first, len = it->second;
    uint64_t at = align_up(start, alignment);
    if (at < start || at - start >= len || len - (at - start) < size) continue;
    free_.erase(it);
    if (at > start) free_.emplace(start, at - start);
    uint64_t tail = start + len - (at + size);
    if (tail) free_.emplace(at + size, tail);
    live_.emplace(at, size);
    in_use_ += size;
    return at;
  }
  return std::nullopt;
}

uint64_t Allocator::release(uint64_t offset) {
  auto it = live_.find(offset);
  GSHMEM_REQUIRE(it != live_.end(), "offset " + std::to_string(offset) +
                                        " is not the start of a live symmetric allocation "
                                        "(double free, or a pointer not returned by malloc?)");
  uint64_t size = it->second;
  live_.erase(it);
  in_use_ -= size;
  add_free(offset, size);
  return size;
}

uint64_t Allocator::end_needed(uint64_t size, uint64_t alignment) const {
  check_args(size, alignment);
  uint64_t start = end_;
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == end_) start = last->first;
  }
  return align_up(start, alignment) + size;
}

void Allocator::grow(uint64_t new_end) {
  GSHMEM_REQUIRE(new_end >= end_, "the heap cannot shrink");
  if (new_end == end_) return;
  uint64_t old = end_;
  end_ = new_end;
  add_free(old, new_end - old);
}

std::optional<std::pair<uint64_t, uint64_t>> Allocator::find_live(uint64_t offset) const {
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (offset - it->first >= it->second) return std::nullopt;
  return std::make_pair(it->first, it->second);
}

void Allocator::add_free(uint64_t start, uint64_t size) {
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += size;
      return;
    }
  }
  free_.emplace(start, size);
}

}  // namespace gshmem

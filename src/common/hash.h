// A 64-bit FNV-1a style hash with a final mix: cheap, deterministic across hosts. Used for
// allocation-sequence checks and for names derived from secrets. Not cryptographic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gshmem {

inline uint64_t hash_mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return hash_mix(h);
}

inline uint64_t hash_combine(uint64_t h, uint64_t value) {
  return hash_mix(h ^ (value + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

}  // namespace gshmem

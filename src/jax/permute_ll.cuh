// The small-operand ppermute: one kernel, LL protocol (each 8-byte store carries 4 data bytes
// and the call's epoch as a flag, so data and arrival are one NVLink write).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gshmem/gshmem.h"

namespace gshmem::jax {

// One symmetric allocation per PE, zeroed at init (ll_bytes() long):
//   epoch            uint64: kernel-path calls made so far (every PE makes the same calls)
//   consumed[npes]   uint64: written by receiver r: the last epoch r read from this PE
//   last_sent[npes]  uint64: the last epoch this PE sent to each receiver
//   lines[npes][words] uint64: the LL lines each source writes into this PE
struct LLLayout {
  uint64_t* base;
  int npes;
  size_t words;  // capacity per source, in 4-byte words
  GSHMEM_HOST_DEVICE uint64_t* epoch() const { return base; }
  GSHMEM_HOST_DEVICE uint64_t* consumed() const { return base + 1; }
  GSHMEM_HOST_DEVICE uint64_t* last_sent() const { return base + 1 + npes; }
  GSHMEM_HOST_DEVICE uint64_t* lines(int source) const {
    return base + 1 + 2 * npes + static_cast<size_t>(source) * words;
  }
};

inline size_t ll_bytes(int npes, size_t words) { return 8 * (1 + 2 * static_cast<size_t>(npes) + npes * words); }

// Enqueues the exchange on `stream`: this PE's `words` 4-byte words of `in` go to `dst`, `src`'s
// land in `out` (-1: none; dst == src == this PE: a local copy).
cudaError_t permute_ll(const gshmem_device_t& dev, const LLLayout& ll, const uint32_t* in, uint32_t* out,
                       size_t words, int dst, int src, cudaStream_t stream);

}  // namespace gshmem::jax

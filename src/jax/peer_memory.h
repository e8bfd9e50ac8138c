// Letting a device of this process put into another device's XLA buffer (the direct ppermute,
// permute.cpp). XLA's allocator maps its memory with CUDA's virtual memory API, one device's
// access per mapping; cudaMalloc-style memory is covered by peer access (registry.h).
#pragma once

#include <cstddef>

namespace gshmem::jax {

// Whether CUDA device `from` can now store into the `bytes` at `out`, memory of another device
// of this process: for virtual-memory mappings, grants `from` read-write access to every mapping
// the bytes lie in where it lacks it (access stays with a mapping until XLA unmaps it, so it is
// checked at every call); for cudaMalloc'd memory, `peers_enabled` (peer access from `from` to
// the owner, registry.h); pool memory (cudaMallocAsync), no.
bool grant_peer_access(const void* out, size_t bytes, int from, bool peers_enabled);

}  // namespace gshmem::jax

#include "peer_memory.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace gshmem::jax {
namespace {

// The driver's entry points, found through the runtime (this library links no libcuda).
struct Driver {
  CUresult (*pointer_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*get_access)(unsigned long long*, const CUmemLocation*, CUdeviceptr) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  bool ok() const { return pointer_attribute && get_access && set_access; }
};

template <class F>
void find(const char* symbol, F* fn) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &found, 12000, cudaEnableDefault, &status) ==
          cudaSuccess &&
      status == cudaDriverEntryPointSuccess) {
    *fn = reinterpret_cast<F>(found);
  }
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    find("cuPointerGetAttribute", &x.pointer_attribute);
    find("cuMemGetAccess", &x.get_access);
    find("cuMemSetAccess", &x.set_access);
    return x;
  }();
  return d;
}

}  // namespace

bool grant_peer_access(const void* out, size_t bytes, int from, bool peers_enabled) {
  const Driver& d = driver();
  if (!d.ok()) return false;
  auto ptr = reinterpret_cast<CUdeviceptr>(out);
  void* pool = nullptr;
  int legacy = 0;
  if (d.pointer_attribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr) !=
          CUDA_SUCCESS ||
      d.pointer_attribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr) != CUDA_SUCCESS) {
    return false;
  }
  if (legacy) return peers_enabled;
  if (pool) return false;
  const CUmemLocation peer{CU_MEM_LOCATION_TYPE_DEVICE, from};
  for (const CUdeviceptr end = ptr + bytes; ptr < end;) {  // mapping by mapping
    CUdeviceptr base = 0;
    size_t size = 0;
    unsigned long long flags = 0;
    if (d.pointer_attribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, ptr) != CUDA_SUCCESS ||
        d.pointer_attribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, ptr) != CUDA_SUCCESS ||
        size == 0) {
      return false;
    }
    if (d.get_access(&flags, &peer, ptr) != CUDA_SUCCESS ||
        flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      const CUmemAccessDesc grant{peer, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      if (d.set_access(base, size, &grant, 1) != CUDA_SUCCESS) return false;
    }
    ptr = base + size;
  }
  return true;
}

}  // namespace gshmem::jax

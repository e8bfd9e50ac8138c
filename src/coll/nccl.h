// The NCCL backend: libnccl loaded at run time (dlopen of libnccl.so.2, or GSHMEM_NCCL_LIBRARY),
// never linked and never required. One NCCL communicator per gshmem comm, created by the
// explicit, collective gshmem_comm_enable_nccl (its unique id travels over the comm's bootstrap).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "gshmem/gshmem.h"

namespace gshmem {
class Comm;
}

namespace gshmem::coll {

// Loads and checks libnccl in this process only (no communicator; closed again before it
// returns), for tests and diagnostics. `library` empty: the search create() uses
// (GSHMEM_NCCL_LIBRARY, else libnccl.so.2, else GSHMEM_NCCL_SEARCH_PATH's folders).
struct NcclProbe {
  bool ok = false;
  std::string why;   // when !ok: what was tried and what to do
  int version = 0;   // when ok: e.g. 22809
  std::string path;  // when ok: what was opened
};
NcclProbe probe_nccl(const std::string& library);

class NcclBackend {
 public:
  // Collective over `comm`. Throws GSHMEM_ERROR_USAGE ("NCCL is not available: <why>") when the
  // library cannot be loaded or is older than 2.18; every PE then raises the same error.
  static std::unique_ptr<NcclBackend> create(Comm& comm);
  ~NcclBackend();
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  // Enqueue on `stream`; arguments as the C ABI's gshmem_*_on_stream over the world team.
  void all_reduce(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                  gshmem_redop_t op, cudaStream_t stream);
  void all_gather(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                  cudaStream_t stream);
  void reduce_scatter(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                      gshmem_redop_t op, cudaStream_t stream);
  void broadcast(const void* in, void* out, size_t count, gshmem_dtype_t dtype, int root,
                 cudaStream_t stream);
  void all_to_all(const void* in, void* out, size_t count, gshmem_dtype_t dtype,
                  cudaStream_t stream);

  int version() const;  // e.g. 22809

 private:
  struct Impl;
  explicit NcclBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gshmem::coll

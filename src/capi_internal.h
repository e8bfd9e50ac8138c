// Shared by the translation units that implement the C ABI (capi*.cpp): the
// handle behind gshmem_comm_t, and `guarded`, which turns every exception into a result code
// plus the per-thread message that gshmem_last_error() returns.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "core/comm.h"
#include "gshmem/gshmem.h"

struct gshmem_comm {
  std::unique_ptr<gshmem::Comm> impl;
};

namespace gshmem::capi {

// This thread's message for the last failed call (defined in capi.cpp).
std::string& last_error();

template <typename F>
gshmem_result_t guarded(F&& body) {
  try {
    body();
    last_error().clear();
    return GSHMEM_SUCCESS;
  } catch (const gshmem::Error& e) {
    last_error() = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    last_error() = "out of host memory";
    return GSHMEM_ERROR_SYSTEM;
  } catch (const std::exception& e) {
    last_error() = std::string("internal error: ") + e.what();
    return GSHMEM_ERROR_SYSTEM;
  }
}

// The comm behind a handle, for every call but abort: raises GSHMEM_ERROR_FAULT once a peer
// died or a device wait gave up (the comm can then only be aborted).
inline gshmem::Comm& live(gshmem_comm_t comm) {
  GSHMEM_REQUIRE(comm != nullptr && comm->impl != nullptr, "comm is NULL or already finalized");
  comm->impl->check_faults();
  return *comm->impl;
}

template <typename T>
void require_out(T* out, const char* name) {
  GSHMEM_REQUIRE(out != nullptr, std::string(name) + " must not be NULL");
}

// The C ABI passes streams as void* so that gshmem.h needs no CUDA header.
inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace gshmem::capi

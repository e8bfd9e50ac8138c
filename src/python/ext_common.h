// Shared by the extension's translation units (ext.cpp, ext_device.cpp, ext_stream.cpp): how a
// C ABI result or a gshmem::Error becomes a Python exception, and how a gshmem._C.CommHandle
// yields its gshmem_comm_t.
#pragma once

#include <nanobind/nanobind.h>

#include <optional>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "gshmem/gshmem.h"

namespace gshmem::python {

// Raises the gshmem._errors class for `code` (UsageError, TimeoutError, ...) with `message`.
[[noreturn]] void raise(gshmem_result_t code, const std::string& message);

// The gshmem_comm_t behind a gshmem._C.CommHandle; raises UsageError once it is finalized.
gshmem_comm_t comm_of(nanobind::handle comm_handle);

// Runs a C ABI call without the GIL and raises its error, if any, with the GIL held. Releasing
// the GIL matters: collectives block until the other PEs arrive (in one process, other threads
// drive those PEs), and enqueueing can block while a stream's queue is held by a wait.
template <typename F>
void call(F&& f) {
  gshmem_result_t rc;
  std::string message;
  {
    nanobind::gil_scoped_release release;
    rc = f();
    if (rc != GSHMEM_SUCCESS) message = gshmem_last_error();
  }
  if (rc != GSHMEM_SUCCESS) raise(rc, message);
}

// Runs internal C++ code without the GIL, translating gshmem::Error.
template <typename F>
auto call_internal(F&& f) -> decltype(f()) {
  std::optional<gshmem::Error> failure;
  {
    nanobind::gil_scoped_release release;
    try {
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        return;
      } else {
        return f();
      }
    } catch (const gshmem::Error& e) {
      failure.emplace(e);
    }
  }
  raise(failure->code(), failure->what());
}

}  // namespace gshmem::python

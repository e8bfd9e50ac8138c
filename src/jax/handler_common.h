// What every gshmem XLA FFI handler shares: the device's state, gshmem errors as FFI errors,
// XLA element types as gshmem's, and a team from the per-PE table the Python side computed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gshmem/gshmem.h"
#include "registry.h"
#include "xla/ffi/api/ffi.h"

namespace gshmem::jax {

namespace ffi = ::xla::ffi;

inline ffi::Error gshmem_error(const char* op) {
  return ffi::Error::Internal(std::string("gshmem.jax ") + op + ": " + gshmem_last_error());
}

// The attached state of `ordinal`, or an error saying how to attach it.
inline std::optional<ffi::Error> lookup(int ordinal, const char* op, const DeviceState** out) {
  *out = device_state(ordinal);
  if (*out) return std::nullopt;
  return ffi::Error::InvalidArgument(std::string("gshmem.jax ") + op +
                                     ": no gshmem comm on XLA device " + std::to_string(ordinal) +
                                     "; call gshmem.jax.init() first");
}

inline std::optional<gshmem_dtype_t> gshmem_dtype(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return GSHMEM_FLOAT32;
    case ffi::DataType::BF16: return GSHMEM_BFLOAT16;
    case ffi::DataType::F16: return GSHMEM_FLOAT16;
    case ffi::DataType::S32: return GSHMEM_INT32;
    case ffi::DataType::S64: return GSHMEM_INT64;
    default: return std::nullopt;
  }
}

// `groups` holds (start, stride, size) per world PE: the strided team of this PE's group.
inline std::optional<ffi::Error> team_of(const DeviceState& s, ffi::Span<const int32_t> groups,
                                         const char* op, gshmem_team_t* team) {
  if (groups.size() != static_cast<size_t>(3 * s.nranks)) {
    return ffi::Error::InvalidArgument(std::string("gshmem.jax ") + op +
                                       ": the group table was made for another number of PEs");
  }
  gshmem_team_t world{};
  const int32_t* g = groups.begin() + 3 * s.rank;
  if (gshmem_team_world(s.comm, &world) != GSHMEM_SUCCESS ||
      gshmem_team_split_strided(&world, g[0], g[1], g[2], team) != GSHMEM_SUCCESS) {
    return gshmem_error(op);
  }
  return std::nullopt;
}

}  // namespace gshmem::jax

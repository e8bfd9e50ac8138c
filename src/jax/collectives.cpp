// XLA FFI handlers of gshmem.jax's collectives over one mesh axis group (a strided team of PEs):
// gshmem_all_reduce (psum), gshmem_all_gather, gshmem_reduce_scatter (psum_scatter) and
// gshmem_all_to_all, each the on-stream collective of the C API on XLA's stream, with XLA's
// buffers (ordinary memory, staged by the collective through the comm's heap scratch). The
// Python side has moved the operated dimension to the front, so every call is on flat memory.
#include <string>

#include "handler_common.h"

namespace gshmem::jax {
namespace {

struct Call {
  const DeviceState* state;
  gshmem_team_t team;
  gshmem_dtype_t dtype;
};

// The state, team and dtype of a call, or the error that stops it.
std::optional<ffi::Error> prepare(int32_t ordinal, ffi::DataType type,
                                  ffi::Span<const int32_t> groups, const char* op, Call* call) {
  if (auto err = lookup(ordinal, op, &call->state)) return err;
  auto dtype = gshmem_dtype(type);
  if (!dtype) {
    return ffi::Error::InvalidArgument(
        std::string("gshmem.jax ") + op +
        ": element type not supported (float32, bfloat16, float16, int32, int64)");
  }
  call->dtype = *dtype;
  return team_of(*call->state, groups, op, &call->team);
}

ffi::Error all_reduce(void* stream, int32_t ordinal, ffi::AnyBuffer x,
                      ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int32_t> groups) {
  Call c{};
  if (auto err = prepare(ordinal, x.element_type(), groups, "psum", &c)) return *err;
  if (gshmem_all_reduce_on_stream(c.state->comm, &c.team, x.untyped_data(), out->untyped_data(),
                                  x.element_count(), c.dtype, GSHMEM_SUM, stream)) {
    return gshmem_error("psum");
  }
  return ffi::Error::Success();
}

ffi::Error all_gather(void* stream, int32_t ordinal, ffi::AnyBuffer x,
                      ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int32_t> groups) {
  Call c{};
  if (auto err = prepare(ordinal, x.element_type(), groups, "all_gather", &c)) return *err;
  if (gshmem_all_gather_on_stream(c.state->comm, &c.team, x.untyped_data(), out->untyped_data(),
                                  x.element_count(), c.dtype, stream)) {
    return gshmem_error("all_gather");
  }
  return ffi::Error::Success();
}

ffi::Error reduce_scatter(void* stream, int32_t ordinal, ffi::AnyBuffer x,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int32_t> groups) {
  Call c{};
  if (auto err = prepare(ordinal, x.element_type(), groups, "psum_scatter", &c)) return *err;
  if (gshmem_reduce_scatter_on_stream(c.state->comm, &c.team, x.untyped_data(), out->untyped_data(),
                                      out->element_count(), c.dtype, GSHMEM_SUM, stream)) {
    return gshmem_error("psum_scatter");
  }
  return ffi::Error::Success();
}

ffi::Error all_to_all(void* stream, int32_t ordinal, ffi::AnyBuffer x,
                      ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int32_t> groups) {
  Call c{};
  if (auto err = prepare(ordinal, x.element_type(), groups, "all_to_all", &c)) return *err;
  const size_t count = x.element_count() / static_cast<size_t>(c.team.size);
  if (gshmem_all_to_all_on_stream(c.state->comm, &c.team, x.untyped_data(), out->untyped_data(),
                                  count, c.dtype, stream)) {
    return gshmem_error("all_to_all");
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace gshmem::jax

#define GSHMEM_JAX_COLLECTIVE(symbol, impl)                                      \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, impl,                                    \
                                xla::ffi::Ffi::Bind()                            \
                                    .Ctx<xla::ffi::PlatformStream<void*>>()      \
                                    .Ctx<xla::ffi::DeviceOrdinal>()              \
                                    .Arg<xla::ffi::AnyBuffer>()                  \
                                    .Ret<xla::ffi::AnyBuffer>()                  \
                                    .Attr<xla::ffi::Span<const int32_t>>("groups"), \
                                {xla::ffi::Traits::kCmdBufferCompatible})

GSHMEM_JAX_COLLECTIVE(gshmem_jax_all_reduce, gshmem::jax::all_reduce);
GSHMEM_JAX_COLLECTIVE(gshmem_jax_all_gather, gshmem::jax::all_gather);
GSHMEM_JAX_COLLECTIVE(gshmem_jax_reduce_scatter, gshmem::jax::reduce_scatter);
GSHMEM_JAX_COLLECTIVE(gshmem_jax_all_to_all, gshmem::jax::all_to_all);

// gshmem_ppermute: XLA FFI handler of gshmem.jax.ppermute. Each PE sends its operand to at most
// one PE and receives from at most one (a permutation of the mesh axis; PEs nobody sends to get
// zeros, as jax.lax.ppermute). The operand goes out by copy-engine puts straight from XLA's
// buffer into the receiver's symmetric slot, in chunks of the slot's size; the receiver copies
// each chunk into XLA's output. Per chunk:
//   receiver: signal "ready" on its sender (its slot is free: earlier copies out are done);
//   sender:   wait for "ready", reset it, put the chunk with the "arrived" signal;
//   receiver: wait for "arrived", reset it, copy the slot out.
// Every flag goes 0 -> 1 -> 0 within a call, so a CUDA graph of the call (XLA command buffers)
// replays it without host help. Everything runs on XLA's stream; the host only enqueues.
// Small operands (``kernel`` = 1, chosen by gshmem/jax/rules.py) take one kernel instead: the
// C API's all_to_allv over the group's team with one nonzero count each way, which replaces the
// seven stream operations of a chunk by one launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "handler_common.h"

namespace gshmem::jax {
namespace {

ffi::Error copy_error(cudaError_t err) {
  return ffi::Error::Internal(std::string("gshmem.jax ppermute: ") + cudaGetErrorString(err));
}

// The exchange as one all_to_allv kernel over the group's team (4-byte elements).
ffi::Error permute_kernel(const DeviceState& s, void* stream, const void* in, void* out, size_t bytes,
                          int dst, int src, ffi::Span<const int32_t> groups) {
  gshmem_team_t team{};
  if (auto err = team_of(s, groups, "ppermute", &team)) return *err;
  std::vector<size_t> send(team.size, 0), recv(team.size, 0), zeros(team.size, 0);
  if (dst >= 0) send[(dst - team.start) / team.stride] = bytes / 4;
  if (src >= 0) recv[(src - team.start) / team.stride] = bytes / 4;
  if (gshmem_all_to_allv_on_stream(s.comm, &team, in, send.data(), zeros.data(), out, recv.data(),
                                   zeros.data(), GSHMEM_INT32, stream)) {
    return gshmem_error("ppermute");
  }
  return ffi::Error::Success();
}

ffi::Error permute(void* stream, int32_t ordinal, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out,
                   ffi::Span<const int32_t> peers, ffi::Span<const int32_t> groups, int32_t kernel) {
  const char* op = "ppermute";
  const DeviceState* s = nullptr;
  if (auto err = lookup(ordinal, op, &s)) return *err;
  if (peers.size() != static_cast<size_t>(2 * s->nranks)) {
    return ffi::Error::InvalidArgument("gshmem.jax ppermute: the peer table was made for another number of PEs");
  }
  const int dst = peers[2 * s->rank], src = peers[2 * s->rank + 1];
  const size_t bytes = x.size_bytes();
  auto* in = static_cast<const char*>(x.untyped_data());
  auto* res = static_cast<char*>(out->untyped_data());
  auto cs = static_cast<cudaStream_t>(stream);
  if (src < 0) {  // nobody sends here: zeros, as jax.lax.ppermute
    if (cudaError_t e = cudaMemsetAsync(res, 0, bytes, cs)) return copy_error(e);
  }
  if (kernel) {
    if (bytes % 4) return ffi::Error::InvalidArgument("gshmem.jax ppermute: the kernel path moves 4-byte words");
    return permute_kernel(*s, stream, in, res, bytes, dst, src, groups);
  }
  if (src == s->rank) {
    if (cudaError_t e = cudaMemcpyAsync(res, in, bytes, cudaMemcpyDeviceToDevice, cs)) return copy_error(e);
  }
  const bool sends = dst >= 0 && dst != s->rank, receives = src >= 0 && src != s->rank;
  for (size_t offset = 0; offset < bytes && (sends || receives); offset += s->slot_bytes) {
    const size_t n = std::min(s->slot_bytes, bytes - offset);
    if (receives && gshmem_signal_op_on_stream(s->comm, s->ready, 1, GSHMEM_SIGNAL_SET, src, stream)) {
      return gshmem_error(op);
    }
    if (sends && (gshmem_signal_wait_until_on_stream(s->comm, s->ready, GSHMEM_CMP_EQ, 1, stream) ||
                  gshmem_signal_op_on_stream(s->comm, s->ready, 0, GSHMEM_SIGNAL_SET, s->rank, stream) ||
                  gshmem_put_signal_on_stream(s->comm, s->slot, in + offset, n, s->arrived, 1,
                                              GSHMEM_SIGNAL_SET, dst, stream))) {
      return gshmem_error(op);
    }
    if (receives && (gshmem_signal_wait_until_on_stream(s->comm, s->arrived, GSHMEM_CMP_EQ, 1, stream) ||
                     gshmem_signal_op_on_stream(s->comm, s->arrived, 0, GSHMEM_SIGNAL_SET, s->rank, stream) ||
                     gshmem_get_on_stream(s->comm, res + offset, s->slot, n, s->rank, stream))) {
      return gshmem_error(op);
    }
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace gshmem::jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(gshmem_jax_ppermute, gshmem::jax::permute,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<void*>>()
                                  .Ctx<xla::ffi::DeviceOrdinal>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<xla::ffi::Span<const int32_t>>("peers")
                                  .Attr<xla::ffi::Span<const int32_t>>("groups")
                                  .Attr<int32_t>("kernel"),
                              {xla::ffi::Traits::kCmdBufferCompatible});

// gshmem_ppermute: XLA FFI handler of gshmem.jax.ppermute. Each PE sends its operand to at most
// one PE and receives from at most one (a permutation within the mesh axis' groups; PEs nobody
// sends to get zeros, as jax.lax.ppermute). Two paths, chosen by gshmem/jax/rules.py:
//
// kernel (small operands of 4-byte words): one kernel, LL lines (permute_ll.cu).
//
// copy engine: chunks of the slot size go straight from XLA's buffer into the receiver's two
// symmetric slots by copy-engine puts (zero SMs) on a side stream, while XLA's stream copies the
// previous chunk out of the other slot into XLA's output. Per chunk k, slot j = k % 2:
//   receiver (XLA's stream): "ready[j]" set on its sender once slot j is free (at the start for
//                            the first two chunks, then after copying chunk k - 2 out);
//   sender (side stream):    wait for its "ready[j]", reset it, put chunk k with "arrived[j]";
//   receiver:                wait for "arrived[j]", reset it, copy slot j out.
// Every flag is set and reset the same number of times within a call, so a CUDA graph of the call
// (XLA command buffers) replays it without host help; the side stream forks from and joins
// XLA's stream by events, which graph capture records as edges.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "handler_common.h"

namespace gshmem::jax {
namespace {

ffi::Error cuda_error(cudaError_t err) {
  return ffi::Error::Internal(std::string("gshmem.jax ppermute: ") + cudaGetErrorString(err));
}

// Enqueues the copy-engine path; false with gshmem's error set when a call fails.
bool permute_copy_engine(const DeviceState& s, cudaStream_t stream, const char* in, char* out, size_t bytes,
                         int dst, int src) {
  const bool sends = dst >= 0 && dst != s.rank, receives = src >= 0 && src != s.rank;
  const size_t chunks = (bytes + s.slot_bytes - 1) / s.slot_bytes;
  auto chunk = [&](size_t k) { return std::min(s.slot_bytes, bytes - k * s.slot_bytes); };
  auto ready = [&](size_t k) {  // tell the sender slot k % 2 is free for chunk k
    return gshmem_signal_op_on_stream(s.comm, s.ready + k % 2, 1, GSHMEM_SIGNAL_SET, src, stream) == 0;
  };
  if (receives) {
    for (size_t k = 0; k < std::min<size_t>(2, chunks); ++k) {
      if (!ready(k)) return false;
    }
  }
  if (sends) {
    if (cudaEventRecord(s.fork, stream) || cudaStreamWaitEvent(s.side, s.fork, 0)) return false;
    for (size_t k = 0; k < chunks; ++k) {
      uint64_t* r = s.ready + k % 2;
      if (gshmem_signal_wait_until_on_stream(s.comm, r, GSHMEM_CMP_EQ, 1, s.side) ||
          gshmem_signal_op_on_stream(s.comm, r, 0, GSHMEM_SIGNAL_SET, s.rank, s.side) ||
          gshmem_put_signal_on_stream(s.comm, s.slots + (k % 2) * s.slot_bytes, in + k * s.slot_bytes, chunk(k),
                                      s.arrived + k % 2, 1, GSHMEM_SIGNAL_SET, dst, s.side)) {
        return false;
      }
    }
    if (cudaEventRecord(s.join, s.side)) return false;
  }
  if (receives) {
    for (size_t k = 0; k < chunks; ++k) {
      uint64_t* a = s.arrived + k % 2;
      if (gshmem_signal_wait_until_on_stream(s.comm, a, GSHMEM_CMP_EQ, 1, stream) ||
          gshmem_signal_op_on_stream(s.comm, a, 0, GSHMEM_SIGNAL_SET, s.rank, stream) ||
          gshmem_get_on_stream(s.comm, out + k * s.slot_bytes, s.slots + (k % 2) * s.slot_bytes, chunk(k),
                               s.rank, stream)) {
        return false;
      }
      if (k + 2 < chunks && !ready(k + 2)) return false;
    }
  }
  return !sends || cudaStreamWaitEvent(stream, s.join, 0) == cudaSuccess;
}

ffi::Error permute(void* stream, int32_t ordinal, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out,
                   ffi::Span<const int32_t> peers, int32_t kernel) {
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
    if (cudaError_t e = cudaMemsetAsync(res, 0, bytes, cs)) return cuda_error(e);
  }
  if (kernel) {
    if (bytes % 4 || bytes / 4 > s->ll.words) {
      return ffi::Error::InvalidArgument("gshmem.jax ppermute: the kernel path takes whole 4-byte words up to "
                                         "GSHMEM_JAX_PPERMUTE_KERNEL_MAX, as at init");
    }
    cudaError_t e = permute_ll(s->device, s->ll, reinterpret_cast<const uint32_t*>(in),
                               reinterpret_cast<uint32_t*>(res), bytes / 4, dst, src, cs);
    return e ? cuda_error(e) : ffi::Error::Success();
  }
  if (src == s->rank) {
    if (cudaError_t e = cudaMemcpyAsync(res, in, bytes, cudaMemcpyDeviceToDevice, cs)) return cuda_error(e);
  }
  if (bytes > 0 && !permute_copy_engine(*s, cs, in, res, bytes, dst, src)) {
    cudaError_t e = cudaGetLastError();
    return e ? cuda_error(e) : gshmem_error(op);
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
                                  .Attr<int32_t>("kernel"),
                              {xla::ffi::Traits::kCmdBufferCompatible});

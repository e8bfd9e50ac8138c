// gshmem_ppermute: XLA FFI handler of gshmem.jax.ppermute. Each PE sends its operand to at most
// one PE and receives from at most one (a permutation of the mesh axis; PEs nobody sends to get
// zeros, as jax.lax.ppermute). The operand goes out by copy-engine puts straight from XLA's
// buffer into the receiver's symmetric slot, in chunks of half the slot (chunk k in half k % 2);
// the receiver copies each chunk into XLA's output. Per chunk k, in half h:
//   receiver: signal "ready" on its sender (half h is free: the copy out of chunk k - 2 is done),
//             in the sender's flag of half h for this receiver;
//   sender:   wait for its receiver's "ready" of half h, reset it, put the chunk with the half's
//             "arrived" signal;
//   receiver: wait for "arrived", reset it, copy the half out.
// With one chunk everything runs on XLA's stream. With more, the receiver's copies out run on the
// channel's copier stream, forked from XLA's stream and joined back before the handler returns,
// so chunk k's copy out overlaps chunk k + 1's put (256 MiB at 2 x H200: 871 us against 889 in
// one chunk; each chunk's flags hold the put stream ~11 us, so larger slots gain more).
// Every flag goes 0 -> 1 -> 0 within a call, so a CUDA graph of the call (XLA command buffers,
// which capture the fork and join too) replays it without host help; the host only enqueues.
// Small operands (``kernel`` = 1, chosen by gshmem/jax/rules.py) take one kernel instead: the C
// API's permute (gshmem_permute_on_stream), stored straight into XLA's output, no stream
// operations.
//
// gshmem_ppermute_direct: large operands when every PE is in this process (one process driving
// its GPUs): the sender puts into the receiver's XLA output itself, learned from the receiver's
// handler through a host-side table (rendezvous.h), with the same ready/arrived flags and no
// copy out (permute_direct below).
//
// gshmem_ppermute_start / gshmem_ppermute_done: the same exchange split in two so that it
// overlaps XLA's computation (the ring attention's rotations). start runs the chunks on its
// channel's own stream, after the work XLA enqueued before it, into start's result; done makes
// XLA's stream wait for them and returns that result (aliased). Between the two, XLA must neither
// read start's result nor reuse start's operand: the Python side passes both to done and nothing
// else, and done also takes the values it must come after. Neither is command-buffer compatible
// (the channel's stream forks from XLA's stream in start and joins it in done, two separate
// commands).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "handler_common.h"
#include "peer_memory.h"
#include "rendezvous.h"

namespace gshmem::jax {
namespace {

ffi::Error copy_error(cudaError_t err) {
  return ffi::Error::Internal(std::string("gshmem.jax ppermute: ") + cudaGetErrorString(err));
}

// Makes `to` wait for the work enqueued so far on `from`, through `event`.
cudaError_t join(cudaStream_t from, cudaStream_t to, cudaEvent_t event) {
  if (cudaError_t e = cudaEventRecord(event, from)) return e;
  return cudaStreamWaitEvent(to, event, 0);
}

// Where one exchange's data goes, for the direct ppermute; by default through the slots.
struct Route {
  char* peer_out = nullptr;  // sender: the receiver's XLA output, put into straight (one chunk)
  bool direct_in = false;    // receiver: its sender puts straight into `res` (one chunk, no copy)
};

// The chunked exchange of `bytes` through channel `ch`, enqueued on `stream` (header comment).
ffi::Error exchange(const DeviceState& s, const Channel& ch, cudaStream_t stream, const char* in,
                    char* res, size_t bytes, int dst, int src, const Route& route, const char* op) {
  if (src < 0) {  // nobody sends here: zeros, as jax.lax.ppermute
    if (cudaError_t e = cudaMemsetAsync(res, 0, bytes, stream)) return copy_error(e);
  }
  if (src == s.rank) {
    if (cudaError_t e = cudaMemcpyAsync(res, in, bytes, cudaMemcpyDeviceToDevice, stream)) {
      return copy_error(e);
    }
  }
  const bool sends = dst >= 0 && dst != s.rank, receives = src >= 0 && src != s.rank;
  if (!sends && !receives) return ffi::Error::Success();
  const size_t staged = (bytes + s.half_bytes - 1) / s.half_bytes;
  const size_t sent = !sends ? 0 : route.peer_out ? 1 : staged;
  const size_t got = !receives ? 0 : route.direct_in ? 1 : staged;
  const cudaStream_t copier = got > 1 ? ch.copier : stream;
  if (copier != stream) {
    if (cudaError_t e = join(stream, copier, ch.forked)) return copy_error(e);
  }
  auto half = [&](size_t k) { return static_cast<char*>(ch.slot) + (k % kHalves) * s.half_bytes; };
  auto ready = [&](size_t k) {  // receiver: half k % 2 (or res, direct) may now take chunk k
    return gshmem_signal_op_on_stream(s.comm, ch.ready[k % kHalves] + s.rank, 1, GSHMEM_SIGNAL_SET,
                                      src, copier);
  };
  for (size_t k = 0; k < std::min<size_t>(got, kHalves); ++k) {
    if (ready(k)) return gshmem_error(op);
  }
  for (size_t k = 0; k < std::max(sent, got); ++k) {
    const size_t offset = k * s.half_bytes, n = std::min(s.half_bytes, bytes - offset);
    uint64_t* const ready_flag = ch.ready[k % kHalves] + dst;
    uint64_t* const arrived = ch.arrived[k % kHalves];
    if (k < sent &&
        (gshmem_signal_wait_until_on_stream(s.comm, ready_flag, GSHMEM_CMP_EQ, 1, stream) ||
         gshmem_signal_op_on_stream(s.comm, ready_flag, 0, GSHMEM_SIGNAL_SET, s.rank, stream))) {
      return gshmem_error(op);
    }
    if (k < sent && route.peer_out) {  // the whole operand into the receiver's output
      if (cudaError_t e =
              cudaMemcpyAsync(route.peer_out, in, bytes, cudaMemcpyDeviceToDevice, stream)) {
        return copy_error(e);
      }
      if (gshmem_signal_op_on_stream(s.comm, arrived, 1, GSHMEM_SIGNAL_SET, dst, stream)) {
        return gshmem_error(op);
      }
    } else if (k < sent && gshmem_put_signal_on_stream(s.comm, half(k), in + offset, n, arrived, 1,
                                                       GSHMEM_SIGNAL_SET, dst, stream)) {
      return gshmem_error(op);
    }
    if (k < got &&
        (gshmem_signal_wait_until_on_stream(s.comm, arrived, GSHMEM_CMP_EQ, 1, copier) ||
         gshmem_signal_op_on_stream(s.comm, arrived, 0, GSHMEM_SIGNAL_SET, s.rank, copier) ||
         (!route.direct_in &&
          gshmem_get_on_stream(s.comm, res + offset, half(k), n, s.rank, copier)) ||
         (k + kHalves < got && ready(k + kHalves)))) {
      return gshmem_error(op);
    }
  }
  if (copier != stream) {
    if (cudaError_t e = join(copier, stream, ch.copied)) return copy_error(e);
  }
  return ffi::Error::Success();
}

// This PE's (destination, source) from the peer table, checked against the comm's size.
std::optional<ffi::Error> peers_of(const DeviceState& s, ffi::Span<const int32_t> peers,
                                   const char* op, int* dst, int* src) {
  if (peers.size() != static_cast<size_t>(2 * s.nranks)) {
    return ffi::Error::InvalidArgument(std::string("gshmem.jax ") + op +
                                       ": the peer table was made for another number of PEs");
  }
  *dst = peers[2 * s.rank];
  *src = peers[2 * s.rank + 1];
  return std::nullopt;
}

// Channel `channel` of `s` for the overlapped permutes (1..kChannels-1).
std::optional<ffi::Error> async_channel(const DeviceState& s, int32_t channel, const char* op,
                                        const Channel** out) {
  if (channel < 1 || channel >= kChannels) {
    return ffi::Error::InvalidArgument(std::string("gshmem.jax ") + op + ": channel " +
                                       std::to_string(channel) + " is not in 1.." +
                                       std::to_string(kChannels - 1));
  }
  *out = &s.channels[channel];
  return std::nullopt;
}

ffi::Error permute(void* stream, int32_t ordinal, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out,
                   ffi::Span<const int32_t> peers, int32_t kernel) {
  const char* op = "ppermute";
  const DeviceState* s = nullptr;
  int dst = -1, src = -1;
  if (auto err = lookup(ordinal, op, &s)) return *err;
  if (auto err = peers_of(*s, peers, op, &dst, &src)) return *err;
  const size_t bytes = x.size_bytes();
  auto* in = static_cast<const char*>(x.untyped_data());
  auto* res = static_cast<char*>(out->untyped_data());
  if (kernel) {
    if (gshmem_permute_on_stream(s->comm, in, res, bytes, dst, src, stream)) {
      return gshmem_error(op);
    }
    return ffi::Error::Success();
  }
  return exchange(*s, s->channels[0], static_cast<cudaStream_t>(stream), in, res, bytes, dst, src,
                  Route{}, op);
}

std::atomic<uint64_t> g_direct_puts{0};  // puts of this process straight into an XLA output

// The direct ppermute (one process driving its peers' devices): a receiver whose sender is in
// this process and can reach its output posts that output, and the sender puts the operand
// straight into it, so nothing is staged or copied twice (XLA's virtual-memory mappings get the
// sender's access granted: peer_memory.h); a receiver that cannot (a sender in another process,
// an output in pool memory) posts nothing or null, and both sides use the slots.
// Not command-buffer compatible: the receiver's buffer differs from call to call.
ffi::Error permute_direct(void* stream, int32_t ordinal, ffi::RunId run, ffi::AnyBuffer x,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int32_t> peers) {
  const char* op = "ppermute";
  const DeviceState* s = nullptr;
  int dst = -1, src = -1;
  if (auto err = lookup(ordinal, op, &s)) return *err;
  if (auto err = peers_of(*s, peers, op, &dst, &src)) return *err;
  auto* res = static_cast<char*>(out->untyped_data());
  const uint64_t call = next_call(ordinal, static_cast<uint64_t>(run.run_id));
  Route route;
  if (const int from = local_ordinal(src); src != s->rank && from >= 0) {
    route.direct_in = grant_peer_access(res, out->size_bytes(), device_state(from)->device,
                                        peer_access(from, ordinal));
    post(CallKey{static_cast<uint64_t>(run.run_id), call, s->rank},
         route.direct_in ? res : nullptr);
  }
  if (dst != s->rank && local_ordinal(dst) >= 0) {
    void* peer_out = nullptr;
    if (!take(CallKey{static_cast<uint64_t>(run.run_id), call, dst}, s->timeout_s, &peer_out)) {
      return ffi::Error::Internal(
          "gshmem.jax ppermute: PE " + std::to_string(dst) +
          " (this process) did not make this call within GSHMEM_TIMEOUT; every device must "
          "run the same ppermutes in the same order, and XLA must run the devices' programs "
          "concurrently (else set GSHMEM_JAX_PPERMUTE_DIRECT=0)");
    }
    route.peer_out = static_cast<char*>(peer_out);
    if (peer_out) ++g_direct_puts;
  }
  return exchange(*s, s->channels[0], static_cast<cudaStream_t>(stream),
                  static_cast<const char*>(x.untyped_data()), res, x.size_bytes(), dst, src, route,
                  op);
}

// `token` carries no data: the Python side ties later computation to it (an optimization barrier)
// to keep the start ahead of that computation without giving XLA a use of `out` before done.
ffi::Error permute_start(void* stream, int32_t ordinal, ffi::AnyBuffer x,
                         ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> /*token*/,
                         ffi::Span<const int32_t> peers, int32_t channel) {
  const char* op = "ppermute_start";
  const DeviceState* s = nullptr;
  const Channel* ch = nullptr;
  int dst = -1, src = -1;
  if (auto err = lookup(ordinal, op, &s)) return *err;
  if (auto err = peers_of(*s, peers, op, &dst, &src)) return *err;
  if (auto err = async_channel(*s, channel, op, &ch)) return *err;
  auto xla = static_cast<cudaStream_t>(stream);
  if (cudaError_t e = cudaEventRecord(ch->issued, xla)) return copy_error(e);
  if (cudaError_t e = cudaStreamWaitEvent(ch->stream, ch->issued, 0)) return copy_error(e);
  if (auto err =
          exchange(*s, *ch, ch->stream, static_cast<const char*>(x.untyped_data()),
                   static_cast<char*>(out->untyped_data()), x.size_bytes(), dst, src, Route{}, op);
      !err.success()) {
    return err;
  }
  if (cudaError_t e = cudaEventRecord(ch->landed, ch->stream)) return copy_error(e);
  return ffi::Error::Success();
}

ffi::Error permute_done(void* stream, int32_t ordinal, ffi::AnyBuffer received, ffi::RemainingArgs,
                        ffi::Result<ffi::AnyBuffer> out, int32_t channel) {
  const char* op = "ppermute_done";
  const DeviceState* s = nullptr;
  const Channel* ch = nullptr;
  if (auto err = lookup(ordinal, op, &s)) return *err;
  if (auto err = async_channel(*s, channel, op, &ch)) return *err;
  auto xla = static_cast<cudaStream_t>(stream);
  if (cudaError_t e = cudaStreamWaitEvent(xla, ch->landed, 0)) return copy_error(e);
  if (out->untyped_data() != received.untyped_data()) {  // aliased unless XLA chose otherwise
    if (cudaError_t e = cudaMemcpyAsync(out->untyped_data(), received.untyped_data(),
                                        received.size_bytes(), cudaMemcpyDeviceToDevice, xla)) {
      return copy_error(e);
    }
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace gshmem::jax

// How many direct ppermutes of this process put straight into their receiver's output (the
// others went through the slots): for tests and benchmarks.
extern "C" uint64_t gshmem_jax_direct_puts(void) { return gshmem::jax::g_direct_puts.load(); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(gshmem_jax_ppermute, gshmem::jax::permute,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<void*>>()
                                  .Ctx<xla::ffi::DeviceOrdinal>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<xla::ffi::Span<const int32_t>>("peers")
                                  .Attr<int32_t>("kernel"),
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(gshmem_jax_ppermute_direct, gshmem::jax::permute_direct,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<void*>>()
                                  .Ctx<xla::ffi::DeviceOrdinal>()
                                  .Ctx<xla::ffi::RunId>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<xla::ffi::Span<const int32_t>>("peers"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(gshmem_jax_ppermute_start, gshmem::jax::permute_start,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<void*>>()
                                  .Ctx<xla::ffi::DeviceOrdinal>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<xla::ffi::Span<const int32_t>>("peers")
                                  .Attr<int32_t>("channel"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(gshmem_jax_ppermute_done, gshmem::jax::permute_done,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<void*>>()
                                  .Ctx<xla::ffi::DeviceOrdinal>()
                                  .Arg<xla::ffi::AnyBuffer>()
                                  .RemainingArgs()
                                  .Ret<xla::ffi::AnyBuffer>()
                                  .Attr<int32_t>("channel"));

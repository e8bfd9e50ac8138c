#include "coll/ops.h"

#include <algorithm>
#include <string>

#include "coll/coll_state.h"
#include "coll/exchange.h"
#include "coll/kernels.h"
#include "coll/nccl.h"
#include "coll/select.h"
#include "coll/validate.h"
#include "common/cuda_api.h"
#include "common/error.h"
#include "core/comm.h"

namespace gshmem::coll {
namespace {

constexpr uint64_t kNotDirect = ~0ull;

bool is_world(const Comm& comm, const gshmem_team_t& t) {
  return t.start == 0 && t.stride == 1 && t.size == comm.nranks();
}

// The backend and algorithm for this call (select.h; it also writes the debug log); NCCL only
// where the comm has it and the team is the world (NCCL's communicator spans every PE).
// `out_symmetric`: `out` may take a direct path (select.h: direct_path); `in_symmetric`: `in`
// too, so an all_reduce may pull (select.h: pull_path).
Choice decide(Comm& comm, const gshmem_team_t& team, gshmem_coll_t op, size_t bytes,
              bool out_symmetric, bool nccl_has_op = true, bool in_symmetric = false) {
  const bool nccl = nccl_has_op && comm.nccl() != nullptr && is_world(comm, team);
  return choose({op, bytes, team.size, nccl, out_symmetric, in_symmetric,
                 beyond_reach(comm, team), comm.proxy() != nullptr});
}

// GSHMEM_COLL_CHECK's descriptor of a call: what every member must agree on. Low 7 bits: the
// collective + 1 (never 0); bit 7: direct; then dtype, operator, root; the high half hashes the
// count (0 for all_to_allv, whose counts differ between members by design) and, for a direct
// call, the output's heap offset (every member must pass the same symmetric object).
uint64_t describe(gshmem_coll_t op, gshmem_dtype_t dtype, int redop, int root, uint64_t count,
                  uint64_t direct_offset = kNotDirect) {
  const bool direct = direct_offset != kNotDirect;
  const uint64_t key = count ^ (direct ? (direct_offset + 1) * 0xFF51AFD7ED558CCDull : 0);
  const uint64_t hashed = (key * 0x9E3779B97F4A7C15ull) >> 32;
  return (static_cast<uint64_t>(op) + 1) | static_cast<uint64_t>(direct) << 7 |
         static_cast<uint64_t>(dtype) << 8 | static_cast<uint64_t>(redop & 0xf) << 12 |
         static_cast<uint64_t>(root & 0xffff) << 16 | hashed << 32;
}

// What every launch of this call needs; `desc` (describe()) is used when GSHMEM_COLL_CHECK is on.
// sync.ctas is the comm's maximum here; sized() lowers it per launch.
kernels::Launch launch(Comm& comm, const gshmem_team_t& team, cudaStream_t stream,
                       uint64_t desc) {
  CollState& state = comm.coll_state();
  kernels::Launch l{comm.device_state().device(), team, state.sync(), stream};
  if (state.check()) l.sync.desc = desc;
  return l;
}

// The grid of a launch that moves `pair_bytes` between each pair of members: a CTA per
// `per_cta` bytes, at least 16, at most the comm's GSHMEM_COLL_CTAS. Measured on 4 H200s
// (docs/collectives.md): moving collectives were best with 16 CTAs up to 256 KiB per pair, 32 at
// 1 MiB and 64 from 4 MiB (32 KiB per CTA); the reducing ones, which also load every input,
// with 32 at 256 KiB and 64 from 1 MiB (8 KiB per CTA); since their loads of every member's word
// are in flight together (reduce.cuh), 2 KiB per CTA was as fast or faster from 256 KiB to 4 MiB
// at 2 and 4 PEs (4 PEs 512 KiB 10.5 against 11.7 us at 4 KiB; docs/benchmarks.md, 2026-11-27,
// against 8 KiB and 4 KiB in the same session). 2 H200s with GSHMEM_COLL_CTAS=128
// (docs/benchmarks.md): reduce_scatter 14-16 % faster at 16-64 MiB, all_gather 3-4 %,
// all_reduce level; 4 H200s, 2026-11-27: every moving collective within noise of 64 either way
// from 1 to 64 MiB, so the default stays 64. A pure function of the launch's arguments, so
// every member launches the same grid (protocol.cuh pairs CTA b with CTA b).
constexpr uint64_t kMovePerCta = 32 << 10;
constexpr uint64_t kReducePerCta = 2 << 10;
kernels::Launch sized(kernels::Launch l, uint64_t pair_bytes, uint64_t per_cta = kMovePerCta) {
  constexpr uint64_t kMinCtas = 16;
  const uint64_t want = std::max(kMinCtas, pair_bytes / per_cta);
  l.sync.ctas = static_cast<int32_t>(std::min<uint64_t>(want, l.sync.ctas));
  return l;
}

// Direct calls store straight into the members' outputs, which needs `out` in the symmetric heap
// (Choice::direct, from select.h's direct_path). Every member must decide alike: same buffer
// kind, same sizes (GSHMEM_COLL_CHECK verifies it). out's heap offset, or kNotDirect outside it.
uint64_t heap_offset(Comm& comm, const void* out) {
  if (!comm.heap().contains(out)) return kNotDirect;
  return static_cast<uint64_t>(static_cast<const char*>(out) -
                               static_cast<const char*>(comm.heap().base()));
}

const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

// Calls f(offset, length) for consecutive pieces of at most `per` of `total`.
template <class F>
void chunks(size_t total, size_t per, F&& f) {
  for (size_t off = 0; off < total; off += per) f(off, std::min(per, total - off));
}

// The packets (kernels.h) on the permute's memory, in chunks of one permute chunk, a launch
// each. They need no staging Launch: no slots, no signal phase, no call descriptor.
kernels::PacketLaunch packet_launch(Comm& comm, const gshmem_team_t& team, cudaStream_t stream) {
  return {comm.device_state().device(), team, comm.coll_state().permute(), stream};
}
constexpr size_t kPacketChunkBytes = kPermuteChunkWords * 8;

// Member t's in[me * stride + i] reduced into out[i], i < count (elements of e bytes).
void reduce_packets(Comm& comm, const gshmem_team_t& team, cudaStream_t stream,
                    gshmem_dtype_t dtype, size_t e, gshmem_redop_t op, const void* in,
                    void* out, size_t count, size_t stride) {
  const kernels::PacketLaunch l = packet_launch(comm, team, stream);
  chunks(count, kPacketChunkBytes / e, [&](size_t off, size_t len) {
    kernels::reduce_packets(l, dtype, op, at(in, off * e), at(out, off * e), len, stride);
  });
}

// Member t's in[me * in_stride + i] into out[t * out_stride + i], i < bytes.
void move_packets(Comm& comm, const gshmem_team_t& team, cudaStream_t stream, const void* in,
                  size_t in_stride, void* out, size_t out_stride, size_t bytes) {
  const kernels::PacketLaunch l = packet_launch(comm, team, stream);
  chunks(bytes, kPacketChunkBytes, [&](size_t off, size_t len) {
    kernels::move_packets(l, at(in, off), in_stride, at(out, off), out_stride, len);
  });
}

}  // namespace

void all_reduce(Comm& comm, const gshmem_team_t* team_arg, const void* in, void* out,
                size_t count, gshmem_dtype_t dtype, gshmem_redop_t op, cudaStream_t stream) {
  const char* what = "all_reduce_on_stream";
  const gshmem_team_t team = resolve_team(comm, team_arg, what);
  const size_t e = element_size(dtype, what);
  require_redop(op, what);
  const size_t bytes = span_bytes(count, e, 1, what);
  if (count == 0) return;
  require_buffer(comm, what, "in", in, bytes, e);
  require_buffer(comm, what, "out", out, bytes, e);
  require_no_overlap(what, in, bytes, out, bytes, in == out);
  const uint64_t out_offset = heap_offset(comm, out), in_offset = heap_offset(comm, in);
  const Choice c = decide(comm, team, GSHMEM_COLL_ALL_REDUCE, bytes, out_offset != kNotDirect,
                          true, in_offset != kNotDirect);
  cuda::DeviceGuard current(comm.device());
  if (c.backend == Backend::Nccl) {
    comm.nccl()->all_reduce(in, out, count, dtype, op, stream);
    return;
  }
  if (c.algo == Algo::Exchange) {
    exchange_all_reduce(comm, team, in, out, count, dtype, op, stream);
    return;
  }
  if (c.algo == Algo::Packet) {
    reduce_packets(comm, team, stream, dtype, e, op, in, out, count, 0);
    return;
  }
  const size_t n = static_cast<size_t>(team.size);
  // Two-shot's second phase stores into a heap `out` directly at no extra cost (kernels_reduce.cu),
  // whatever the size. Pulling, every member must also pass the same `in`: its offset joins the
  // checked descriptor's.
  const uint64_t offset =
      !c.direct ? kNotDirect : c.pull ? out_offset ^ (in_offset << 1) : out_offset;
  const kernels::Launch l =
      launch(comm, team, stream, describe(GSHMEM_COLL_ALL_REDUCE, dtype, op, 0, count, offset));
  const size_t unit = 16 / e;
  auto shard_of = [&](size_t len) { return ((len + n - 1) / n + unit - 1) / unit * unit; };
  if (c.pull) {
    kernels::all_reduce_pull(sized(l, shard_of(count) * e, kReducePerCta), dtype, op, in, out,
                             count, shard_of(count));
    return;
  }
  switch (c.algo) {
    case Algo::OneShot:
      chunks(count, l.sync.slot_bytes / e, [&](size_t off, size_t len) {
        kernels::all_reduce_one_shot(sized(l, len * e, kReducePerCta), dtype, op,
                                     at(in, off * e), at(out, off * e), len);
      });
      break;
    default:  // TwoShot (Nccl, Exchange and Packet are not reached)
      chunks(count, n * (l.sync.slot_bytes / 2 / e), [&](size_t off, size_t len) {
        kernels::all_reduce_two_shot(sized(l, shard_of(len) * e, kReducePerCta), dtype, op,
                                     at(in, off * e), at(out, off * e), len, shard_of(len),
                                     c.direct);
      });
      break;
  }
}

void all_gather(Comm& comm, const gshmem_team_t* team_arg, const void* in, void* out, size_t count,
                gshmem_dtype_t dtype, cudaStream_t stream) {
  const char* what = "all_gather_on_stream";
  const gshmem_team_t team = resolve_team(comm, team_arg, what);
  const size_t e = element_size(dtype, what);
  const size_t bytes = span_bytes(count, e, 1, what);
  const size_t out_bytes = span_bytes(count, e, team.size, what);
  if (count == 0) return;
  require_buffer(comm, what, "in", in, bytes, e);
  require_buffer(comm, what, "out", out, out_bytes, e);
  require_no_overlap(what, in, bytes, out, out_bytes, in == at(out, team.my_pe * bytes));
  const uint64_t out_offset = heap_offset(comm, out);
  const Choice c = decide(comm, team, GSHMEM_COLL_ALL_GATHER, bytes, out_offset != kNotDirect);
  cuda::DeviceGuard current(comm.device());
  if (c.backend == Backend::Nccl) {
    comm.nccl()->all_gather(in, out, count, dtype, stream);
    return;
  }
  if (c.algo == Algo::Exchange) {
    exchange_all_gather(comm, team, in, out, bytes, stream);
    return;
  }
  if (c.algo == Algo::Packet) {
    move_packets(comm, team, stream, in, 0, out, bytes, bytes);
    return;
  }
  const uint64_t offset = c.direct ? out_offset : kNotDirect;
  const kernels::Launch l =
      launch(comm, team, stream, describe(GSHMEM_COLL_ALL_GATHER, dtype, 0, 0, count, offset));
  if (offset != kNotDirect) {
    kernels::all_gather(sized(l, bytes), in, out, bytes, bytes, true);
    return;
  }
  chunks(bytes, l.sync.slot_bytes, [&](size_t off, size_t len) {
    kernels::all_gather(sized(l, len), at(in, off), at(out, off), len, bytes, false);
  });
}

void reduce_scatter(Comm& comm, const gshmem_team_t* team_arg, const void* in, void* out,
                    size_t count, gshmem_dtype_t dtype, gshmem_redop_t op, cudaStream_t stream) {
  const char* what = "reduce_scatter_on_stream";
  const gshmem_team_t team = resolve_team(comm, team_arg, what);
  const size_t e = element_size(dtype, what);
  require_redop(op, what);
  const size_t bytes = span_bytes(count, e, 1, what);
  const size_t in_bytes = span_bytes(count, e, team.size, what);
  if (count == 0) return;
  require_buffer(comm, what, "in", in, in_bytes, e);
  require_buffer(comm, what, "out", out, bytes, e);
  require_no_overlap(what, in, in_bytes, out, bytes, out == at(in, team.my_pe * bytes));
  const Choice c = decide(comm, team, GSHMEM_COLL_REDUCE_SCATTER, in_bytes, false);
  cuda::DeviceGuard current(comm.device());
  if (c.backend == Backend::Nccl) {
    comm.nccl()->reduce_scatter(in, out, count, dtype, op, stream);
    return;
  }
  if (c.algo == Algo::Exchange) {
    exchange_reduce_scatter(comm, team, in, out, count, dtype, op, stream);
    return;
  }
  if (c.algo == Algo::Packet) {
    reduce_packets(comm, team, stream, dtype, e, op, in, out, count, count);
    return;
  }
  const kernels::Launch l =
      launch(comm, team, stream, describe(GSHMEM_COLL_REDUCE_SCATTER, dtype, op, 0, count));
  chunks(count, l.sync.slot_bytes / e, [&](size_t off, size_t len) {
    kernels::reduce_scatter(sized(l, len * e, kReducePerCta), dtype, op, at(in, off * e),
                            at(out, off * e), len, count);
  });
}

void broadcast(Comm& comm, const gshmem_team_t* team_arg, const void* in, void* out, size_t count,
               gshmem_dtype_t dtype, int root, cudaStream_t stream) {
  const char* what = "broadcast_on_stream";
  const gshmem_team_t team = resolve_team(comm, team_arg, what);
  const size_t e = element_size(dtype, what);
  require_root(root, team.size, what);
  const size_t bytes = span_bytes(count, e, 1, what);
  if (count == 0) return;
  if (team.my_pe == root) {
    require_buffer(comm, what, "in", in, bytes, e);
    require_no_overlap(what, in, bytes, out, bytes, in == out);
  }
  require_buffer(comm, what, "out", out, bytes, e);
  const uint64_t out_offset = heap_offset(comm, out);
  const Choice c = decide(comm, team, GSHMEM_COLL_BROADCAST, bytes, out_offset != kNotDirect);
  cuda::DeviceGuard current(comm.device());
  if (c.backend == Backend::Nccl) {  // world team: member `root` is world rank `root`
    comm.nccl()->broadcast(in, out, count, dtype, root, stream);
    return;
  }
  if (c.algo == Algo::Exchange) {
    exchange_broadcast(comm, team, in, out, bytes, root, stream);
    return;
  }
  const uint64_t offset = c.direct ? out_offset : kNotDirect;
  const kernels::Launch l = launch(comm, team, stream,
                                   describe(GSHMEM_COLL_BROADCAST, dtype, 0, root, count, offset));
  if (offset != kNotDirect) {
    kernels::broadcast(sized(l, bytes), in, out, bytes, root, true);
    return;
  }
  chunks(bytes, l.sync.slot_bytes, [&](size_t off, size_t len) {
    kernels::broadcast(sized(l, len), team.my_pe == root ? at(in, off) : nullptr, at(out, off),
                       len, root, false);
  });
}

void all_to_all(Comm& comm, const gshmem_team_t* team_arg, const void* in, void* out, size_t count,
                gshmem_dtype_t dtype, cudaStream_t stream) {
  const char* what = "all_to_all_on_stream";
  const gshmem_team_t team = resolve_team(comm, team_arg, what);
  const size_t e = element_size(dtype, what);
  const size_t block = span_bytes(count, e, 1, what);
  const size_t bytes = span_bytes(count, e, team.size, what);
  if (count == 0) return;
  require_buffer(comm, what, "in", in, bytes, e);
  require_buffer(comm, what, "out", out, bytes, e);
  require_no_overlap(what, in, bytes, out, bytes, in == out);
  // Direct needs in != out (kernels_move.cu).
  const uint64_t out_offset = in == out ? kNotDirect : heap_offset(comm, out);
  const Choice c = decide(comm, team, GSHMEM_COLL_ALL_TO_ALL, bytes, out_offset != kNotDirect);
  cuda::DeviceGuard current(comm.device());
  if (c.backend == Backend::Nccl) {
    comm.nccl()->all_to_all(in, out, count, dtype, stream);
    return;
  }
  if (c.algo == Algo::Exchange) {
    exchange_all_to_all(comm, team, in, out, block, stream);
    return;
  }
  if (c.algo == Algo::Packet) {
    move_packets(comm, team, stream, in, block, out, block, block);
    return;
  }
  const uint64_t offset = c.direct ? out_offset : kNotDirect;
  const kernels::Launch l =
      launch(comm, team, stream, describe(GSHMEM_COLL_ALL_TO_ALL, dtype, 0, 0, count, offset));
  if (offset != kNotDirect) {
    kernels::all_to_all(sized(l, block), in, out, block, block, true);
    return;
  }
  chunks(block, l.sync.slot_bytes, [&](size_t off, size_t len) {
    kernels::all_to_all(sized(l, len), at(in, off), at(out, off), len, block, false);
  });
}

void all_to_allv(Comm& comm, const gshmem_team_t* team_arg, const void* in,
                 const size_t* send_counts, const size_t* send_displs, void* out,
                 const size_t* recv_counts, const size_t* recv_displs, gshmem_dtype_t dtype,
                 cudaStream_t stream) {
  const char* what = "all_to_allv_on_stream";
  const gshmem_team_t team = resolve_team(comm, team_arg, what);
  const size_t e = element_size(dtype, what);
  GSHMEM_REQUIRE(send_counts && send_displs && recv_counts && recv_displs,
                 std::string(what) + ": send_counts, send_displs, recv_counts and recv_displs "
                                     "must be host arrays of team size, not NULL");
  GSHMEM_REQUIRE(team.size <= kMaxVPes, std::string(what) + ": teams of more than " +
                                            std::to_string(kMaxVPes) + " PEs are not supported");
  const uint64_t slot = comm.coll_state().sync().slot_bytes;
  kernels::VLayout v{};
  size_t in_end = 0, out_end = 0, total = 0;
  for (int t = 0; t < team.size; ++t) {
    v.send_bytes[t] = span_bytes(send_counts[t], e, 1, what);
    v.recv_bytes[t] = span_bytes(recv_counts[t], e, 1, what);
    v.send_off[t] = span_bytes(send_displs[t], e, 1, what);
    v.recv_off[t] = span_bytes(recv_displs[t], e, 1, what);
    GSHMEM_REQUIRE(v.send_bytes[t] <= slot && v.recv_bytes[t] <= slot,
                   std::string(what) + ": member " + std::to_string(t) + " sends or receives " +
                       std::to_string(std::max(v.send_bytes[t], v.recv_bytes[t])) +
                       " bytes, more than one staging slot (" + std::to_string(slot) +
                       " bytes); raise GSHMEM_COLL_SCRATCH_BYTES (2 x PEs slots) or split the "
                       "exchange");
    if (v.send_bytes[t] > 0) in_end = std::max<size_t>(in_end, v.send_off[t] + v.send_bytes[t]);
    if (v.recv_bytes[t] > 0) out_end = std::max<size_t>(out_end, v.recv_off[t] + v.recv_bytes[t]);
    total += v.send_bytes[t];
  }
  GSHMEM_REQUIRE(send_counts[team.my_pe] == recv_counts[team.my_pe],
                 std::string(what) + ": this PE sends itself " +
                     std::to_string(send_counts[team.my_pe]) + " elements but expects " +
                     std::to_string(recv_counts[team.my_pe]) + "; they must match");
  if (in_end > 0) require_buffer(comm, what, "in", in, in_end, e);
  if (out_end > 0) require_buffer(comm, what, "out", out, out_end, e);
  if (in_end > 0 && out_end > 0) require_no_overlap(what, in, in_end, out, out_end, false);
  // NCCL has no all_to_allv here (nccl.h): gshmem's schedule always runs it; the choice is
  // still made, for the debug log and so that a malformed override fails clearly.
  decide(comm, team, GSHMEM_COLL_ALL_TO_ALLV, total, false, false);
  cuda::DeviceGuard current(comm.device());
  kernels::all_to_allv(
      launch(comm, team, stream, describe(GSHMEM_COLL_ALL_TO_ALLV, dtype, 0, 0, 0)), in, out, v);
}

}  // namespace gshmem::coll

#include "coll/exchange.h"

#include <algorithm>
#include <string>

#include "coll/coll_state.h"
#include "coll/kernels.h"
#include "coll/permute_plan.h"
#include "coll/validate.h"
#include "common/cuda_api.h"
#include "common/error.h"
#include "core/comm.h"
#include "stream/ops.h"

namespace gshmem::coll {
namespace {

int world(const gshmem_team_t& team, int t) { return gshmem_team_world_pe(&team, t); }

const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

void local_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (dst == src) return;
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (a collective's own block)");
}

// The exchange slots of this comm; a usage error on a comm without them (no proxy path).
const ExchangeSlots& slots_of(Comm& comm, const char* what) {
  const ExchangeSlots& x = comm.coll_state().exchange_slots();
  GSHMEM_REQUIRE(x.base != nullptr, std::string(what) + ": reductions as exchanges stage through "
                                                        "slots that only a comm with a proxy "
                                                        "path has");
  return x;
}

// Phase one of a piece: member t's block (`block(t)`, `size(t)` elements) goes to t's slot for
// this PE; then this PE reduces its own block (read in place) and what arrived into `out`.
// Members whose block is empty neither send nor receive it.
template <class Block, class Size>
void scatter_and_reduce(Comm& comm, const gshmem_team_t& team, const ExchangeSlots& x,
                        Block block, Size size, size_t e, char* out, gshmem_dtype_t dtype,
                        gshmem_redop_t op, cudaStream_t stream) {
  const int n = team.size, me = team.my_pe;
  char* my_slot = x.base + static_cast<size_t>(comm.rank()) * x.slot_bytes;
  std::vector<ExchangeSend> sends;
  std::vector<int> srcs;
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    if (size(to) > 0) sends.push_back({world(team, to), block(to), my_slot, size(to) * e});
    if (size(me) > 0) srcs.push_back(world(team, (me - k + n) % n));
  }
  exchange(comm, sends, srcs, stream);
  if (size(me) > 0) {
    kernels::reduce_slots(stream, team, comm.rank(), dtype, op, block(me), x.base, x.slot_bytes,
                          out, size(me));
  }
}

}  // namespace

void exchange(Comm& comm, const std::vector<ExchangeSend>& sends, const std::vector<int>& srcs,
              cudaStream_t stream) {
  const PermuteFlags& f = comm.coll_state().permute_flags();
  const int me = comm.rank();
  std::vector<int> dsts;
  for (const ExchangeSend& s : sends) dsts.push_back(s.pe);
  size_t next = 0;  // the plan's sends come in the order of `sends`
  for (const PermuteAction& a : exchange_plan(dsts, srcs)) {
    switch (a.step) {
      case PermuteStep::Announce:
        stream::signal_op(comm, f.ready + me, 1, GSHMEM_SIGNAL_SET, a.pe, stream);
        break;
      case PermuteStep::AwaitReady:
        stream::signal_wait_until(comm, f.ready + a.pe, GSHMEM_CMP_EQ, 1, stream);
        stream::signal_op(comm, f.ready + a.pe, 0, GSHMEM_SIGNAL_SET, me, stream);
        break;
      case PermuteStep::Send: {
        const ExchangeSend& s = sends[next++];
        stream::put_signal(comm, s.dst, s.src, s.bytes, f.arrived + me, 1, GSHMEM_SIGNAL_SET,
                           s.pe, stream);
        break;
      }
      case PermuteStep::AwaitArrival:
        stream::signal_wait_until(comm, f.arrived + a.pe, GSHMEM_CMP_EQ, 1, stream);
        stream::signal_op(comm, f.arrived + a.pe, 0, GSHMEM_SIGNAL_SET, me, stream);
        break;
      case PermuteStep::Copy:
      case PermuteStep::Zero:
        break;  // the permute's own steps (permute.cpp): never in an exchange plan
    }
  }
}

namespace {

// Every member gets `bytes` from this PE at block `me` of its `out`: member t gets src(t) (this
// PE's own block copied locally). Members in ring order from this PE (me + 1, me + 2, ...), so
// that the n - 1 sends of every member start at different receivers.
template <class Src>
void ring_exchange(Comm& comm, const gshmem_team_t& team, Src src, void* out, size_t bytes,
                   cudaStream_t stream) {
  const int n = team.size, me = team.my_pe;
  char* own = at(out, me * bytes);
  std::vector<ExchangeSend> sends;
  std::vector<int> srcs;
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    sends.push_back({world(team, to), src(to), own, bytes});
    srcs.push_back(world(team, (me - k + n) % n));
  }
  local_copy(own, src(me), bytes, stream);
  exchange(comm, sends, srcs, stream);
}

}  // namespace

void exchange_all_gather(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t bytes, cudaStream_t stream) {
  ring_exchange(comm, team, [&](int) { return in; }, out, bytes, stream);
}

void exchange_all_to_all(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t block, cudaStream_t stream) {
  ring_exchange(
      comm, team, [&](int t) -> const void* { return at(in, t * block); }, out, block, stream);
}

void exchange_reduce_scatter(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                             size_t count, gshmem_dtype_t dtype, gshmem_redop_t op,
                             cudaStream_t stream) {
  const char* what = "reduce_scatter_on_stream";
  const ExchangeSlots& x = slots_of(comm, what);
  const size_t e = element_size(dtype, what);
  const size_t per = x.slot_bytes / e;  // elements of each member's block a piece moves
  for (size_t off = 0; off < count; off += per) {
    const size_t len = std::min(per, count - off);
    scatter_and_reduce(
        comm, team, x, [&](int t) { return at(in, (t * count + off) * e); },
        [&](int) { return len; }, e, at(out, off * e), dtype, op, stream);
  }
}

void exchange_all_reduce(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t count, gshmem_dtype_t dtype, gshmem_redop_t op,
                         cudaStream_t stream) {
  const char* what = "all_reduce_on_stream";
  const ExchangeSlots& x = slots_of(comm, what);
  const size_t e = element_size(dtype, what);
  const int n = team.size, me = team.my_pe;
  const size_t per = x.slot_bytes / e * n;  // a piece: a shard of at most one slot per member
  for (size_t off = 0; off < count; off += per) {
    const size_t len = std::min(per, count - off);
    const size_t shard = (len + n - 1) / n;
    const char* piece = at(in, off * e);
    char* result = at(out, off * e);
    const auto lo = [&](int t) { return std::min(len, static_cast<size_t>(t) * shard); };
    const auto size = [&](int t) { return std::min(len, lo(t) + shard) - lo(t); };
    scatter_and_reduce(
        comm, team, x, [&](int t) { return piece + lo(t) * e; }, size, e, result + lo(me) * e,
        dtype, op, stream);
    // Phase two: this PE's reduced shard to every member's slot; theirs copied out of its slots
    // (the exchange's announcements come after the reduction on this stream: the slots are free).
    char* my_slot = x.base + static_cast<size_t>(comm.rank()) * x.slot_bytes;
    std::vector<ExchangeSend> sends;
    std::vector<int> srcs;
    for (int k = 1; k < n; ++k) {
      if (size(me) > 0) {
        sends.push_back({world(team, (me + k) % n), result + lo(me) * e, my_slot, size(me) * e});
      }
      const int from = (me - k + n) % n;
      if (size(from) > 0) srcs.push_back(world(team, from));
    }
    exchange(comm, sends, srcs, stream);
    for (int t = 0; t < n; ++t) {
      if (t == me || size(t) == 0) continue;
      cuda::check(cudaMemcpyAsync(result + lo(t) * e,
                                  x.base + static_cast<size_t>(world(team, t)) * x.slot_bytes,
                                  size(t) * e, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync (an all_reduce's shard out of its exchange slot)");
    }
  }
}

void exchange_broadcast(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                        size_t bytes, int root, cudaStream_t stream) {
  const int n = team.size, me = team.my_pe;
  if (me != root) {
    exchange(comm, {}, {world(team, root)}, stream);
    return;
  }
  std::vector<ExchangeSend> sends;
  for (int k = 1; k < n; ++k) sends.push_back({world(team, (me + k) % n), in, out, bytes});
  local_copy(out, in, bytes, stream);
  exchange(comm, sends, {}, stream);
}

}  // namespace gshmem::coll

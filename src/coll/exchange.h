// Exchanges by puts with flags (permute_plan.h's protocol) on a stream: the copy-engine permute,
// and the collectives of teams with members beyond load/store reach (select.h: Algo::Exchange),
// whose puts, signals and waits take the proxy path to those members (docs/network.md). Every
// message is stored straight into a symmetric object at its receiver; zero SMs for the data.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "gshmem/gshmem.h"

namespace gshmem {

class Comm;

namespace coll {

// One message: `bytes` of local `src` into `dst`, a symmetric object (its address here), on `pe`.
struct ExchangeSend {
  int pe;
  const void* src;
  void* dst;
  size_t bytes;
};

// Enqueues on `stream` the steps of exchange_plan(sends' PEs, srcs): this PE announces to each
// PE of `srcs` that what it sends here may come, sends each message once its receiver
// announced, then waits for every PE of `srcs`'s message. Collective in the sense of the plan:
// the PEs named must make the matching calls (each send pairs with its receiver's src), in the
// same order as every other exchange between them. No PE is this one. Does not wait on the host.
void exchange(Comm& comm, const std::vector<ExchangeSend>& sends, const std::vector<int>& srcs,
              cudaStream_t stream);

// The three collectives that only move bytes, as exchanges into a symmetric `out` (arguments
// already checked; `team` resolved; byte counts per member): each member's block straight into
// every other member's `out`, and this PE's own block copied locally. The reductions below take
// element counts.
void exchange_all_gather(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t bytes, cudaStream_t stream);
void exchange_all_to_all(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t block, cudaStream_t stream);
void exchange_broadcast(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                        size_t bytes, int root, cudaStream_t stream);

// The reductions, staged through the comm's exchange slots (CollState::exchange_slots: only on a
// comm with a proxy path), so `out` may be any device memory; in pieces of at most one slot per
// member pair. reduce_scatter: each member's block t goes to member t's slot, which reduces what
// arrived (team order, its own block read in place). all_reduce: the same on team-size shards of
// each piece, then each member's reduced shard goes to every member's slot and is copied out.
void exchange_reduce_scatter(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                             size_t count, gshmem_dtype_t dtype, gshmem_redop_t op,
                             cudaStream_t stream);
void exchange_all_reduce(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t count, gshmem_dtype_t dtype, gshmem_redop_t op,
                         cudaStream_t stream);

}  // namespace coll
}  // namespace gshmem

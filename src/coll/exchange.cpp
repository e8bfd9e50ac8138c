#include "coll/exchange.h"

#include "coll/coll_state.h"
#include "coll/permute_plan.h"
#include "common/cuda_api.h"
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

// Members in ring order from this PE (me + 1, me + 2, ...), so that the n - 1 sends of every
// member start at different receivers.
void exchange_all_gather(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t bytes, cudaStream_t stream) {
  const int n = team.size, me = team.my_pe;
  char* own = at(out, me * bytes);
  std::vector<ExchangeSend> sends;
  std::vector<int> srcs;
  for (int k = 1; k < n; ++k) {
    sends.push_back({world(team, (me + k) % n), in, own, bytes});
    srcs.push_back(world(team, (me - k + n) % n));
  }
  local_copy(own, in, bytes, stream);
  exchange(comm, sends, srcs, stream);
}

void exchange_all_to_all(Comm& comm, const gshmem_team_t& team, const void* in, void* out,
                         size_t block, cudaStream_t stream) {
  const int n = team.size, me = team.my_pe;
  std::vector<ExchangeSend> sends;
  std::vector<int> srcs;
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    sends.push_back({world(team, to), at(in, to * block), at(out, me * block), block});
    srcs.push_back(world(team, (me - k + n) % n));
  }
  local_copy(at(out, me * block), at(in, me * block), block, stream);
  exchange(comm, sends, srcs, stream);
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

#include <string>
#include <vector>

#include "coll/coll_state.h"
#include "coll/exchange.h"
#include "coll/kernels.h"
#include "coll/ops.h"
#include "coll/permute_plan.h"
#include "coll/select.h"
#include "coll/validate.h"
#include "common/cuda_api.h"
#include "common/error.h"
#include "core/comm.h"
#include "gshmem/gshmem.h"

namespace gshmem::coll {
namespace {

// -1, or a PE of the comm: one that loads and stores reach, or one on the comm's proxy path.
void require_peer(Comm& comm, int pe, const char* role, const char* op) {
  if (pe < 0) {
    GSHMEM_REQUIRE(pe == -1, std::string(op) + ": " + role + "_pe " + std::to_string(pe) +
                                 " is not a PE; use -1 for none");
    return;
  }
  GSHMEM_REQUIRE(pe < comm.nranks(), std::string(op) + ": " + role + "_pe " + std::to_string(pe) +
                                         " is not a PE of this comm's " +
                                         std::to_string(comm.nranks()));
  GSHMEM_REQUIRE(comm.heap().local_index()[pe] >= 0 || comm.via_proxy(pe),
                 std::string(op) + ": PE " + std::to_string(pe) +
                     " is beyond load/store reach of this GPU and this comm has no proxy path "
                     "(docs/network.md)");
}

// The copy-engine path (select.h, PermutePath::CopyEngine): zero SMs, the message stored straight
// into the receiver's symmetric `out` by exchange.h's steps on `stream`, or, to or from a PE on
// the proxy path, through the proxy. The waits are the on-stream ones (released when the comm
// stops: a dead peer, an abort).
void copy_engine_permute(Comm& comm, const void* in, void* out, size_t bytes, int dst_pe,
                         int src_pe, cudaStream_t stream) {
  const int me = comm.rank();
  for (const PermuteAction& a : permute_plan(me, dst_pe, src_pe)) {
    if (a.step == PermuteStep::Copy) {
      cuda::check(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync (permute to itself)");
      return;
    }
    if (a.step == PermuteStep::Zero) {
      cuda::check(cudaMemsetAsync(out, 0, bytes, stream), "cudaMemsetAsync (permute: no source)");
    }
  }
  std::vector<ExchangeSend> sends;
  std::vector<int> srcs;
  if (dst_pe >= 0) sends.push_back({dst_pe, in, out, bytes});
  if (src_pe >= 0) srcs.push_back(src_pe);
  exchange(comm, sends, srcs, stream);
}

}  // namespace

void permute(Comm& comm, const void* in, void* out, size_t bytes, int dst_pe, int src_pe,
             cudaStream_t stream) {
  const char* what = "permute_on_stream";
  require_peer(comm, dst_pe, "dst", what);
  require_peer(comm, src_pe, "src", what);
  GSHMEM_REQUIRE((dst_pe == comm.rank()) == (src_pe == comm.rank()),
                 std::string(what) + ": this PE sends to itself or receives from itself but not "
                                     "both (dst_pe " + std::to_string(dst_pe) + ", src_pe " +
                     std::to_string(src_pe) + "); a permutation pairs the two");
  if (bytes == 0) return;
  require_buffer(comm, what, "in", in, bytes, 1);
  require_buffer(comm, what, "out", out, bytes, 1);
  require_no_overlap(what, in, bytes, out, bytes, in == out);
  const bool out_symmetric = comm.heap().contains(out);
  // Both ends of a pair choose alike: every PE has a proxy path or none (Comm::open_proxy).
  const bool proxy = comm.proxy() != nullptr;
  if ((dst_pe >= 0 && comm.via_proxy(dst_pe)) || (src_pe >= 0 && comm.via_proxy(src_pe))) {
    GSHMEM_REQUIRE(out_symmetric && in != out,
                   std::string(what) + ": a permute to or from a PE on the proxy path stores "
                                       "into its receiver's `out`, which must be a symmetric "
                                       "heap object (the same on every PE) other than `in`");
  }
  cuda::DeviceGuard current(comm.device());
  const PermutePath path = permute_path(bytes, out_symmetric, in == out, proxy);
  if (path == PermutePath::CopyEngine) {
    copy_engine_permute(comm, in, out, bytes, dst_pe, src_pe, stream);
    return;
  }
  kernels::permute({comm.device_state().device(), comm.coll_state().permute(), stream}, in, out,
                   bytes, dst_pe, src_pe, path == PermutePath::Bulk);
}

}  // namespace gshmem::coll

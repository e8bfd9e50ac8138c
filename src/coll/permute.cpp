#include <string>

#include "coll/coll_state.h"
#include "coll/kernels.h"
#include "coll/ops.h"
#include "coll/permute_plan.h"
#include "coll/select.h"
#include "coll/validate.h"
#include "common/cuda_api.h"
#include "common/error.h"
#include "core/comm.h"
#include "gshmem/gshmem.h"
#include "stream/ops.h"

namespace gshmem::coll {
namespace {

// -1, or a PE of the comm that loads and stores reach (the packets are stored straight into it).
void require_peer(Comm& comm, int pe, const char* role, const char* op) {
  if (pe < 0) {
    GSHMEM_REQUIRE(pe == -1, std::string(op) + ": " + role + "_pe " + std::to_string(pe) +
                                 " is not a PE; use -1 for none");
    return;
  }
  GSHMEM_REQUIRE(pe < comm.nranks(), std::string(op) + ": " + role + "_pe " + std::to_string(pe) +
                                         " is not a PE of this comm's " +
                                         std::to_string(comm.nranks()));
  GSHMEM_REQUIRE(comm.heap().local_index()[pe] >= 0,
                 std::string(op) + ": PE " + std::to_string(pe) +
                     " is beyond load/store reach of this GPU; move the data with "
                     "gshmem_put_signal_on_stream, which also takes the proxy path");
}

// The copy-engine path (select.h, permute_by_copy_engine): zero SMs, the message stored straight
// into the receiver's symmetric `out`, by the steps of permute_plan.h on `stream`. The waits are
// the on-stream ones (released when the comm stops: a dead peer, an abort).
void copy_engine_permute(Comm& comm, const void* in, void* out, size_t bytes, int dst_pe,
                         int src_pe, cudaStream_t stream) {
  const PermuteFlags& f = comm.coll_state().permute_flags();
  const int me = comm.rank();
  for (const PermuteAction& a : permute_plan(me, dst_pe, src_pe)) {
    switch (a.step) {
      case PermuteStep::Copy:
        cuda::check(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpyAsync (permute to itself)");
        break;
      case PermuteStep::Zero:
        cuda::check(cudaMemsetAsync(out, 0, bytes, stream), "cudaMemsetAsync (permute: no source)");
        break;
      case PermuteStep::Announce:
        stream::signal_op(comm, f.ready + me, 1, GSHMEM_SIGNAL_SET, a.pe, stream);
        break;
      case PermuteStep::AwaitReady:
        stream::signal_wait_until(comm, f.ready + a.pe, GSHMEM_CMP_EQ, 1, stream);
        stream::signal_op(comm, f.ready + a.pe, 0, GSHMEM_SIGNAL_SET, me, stream);
        break;
      case PermuteStep::Send:
        stream::put_signal(comm, out, in, bytes, f.arrived + me, 1, GSHMEM_SIGNAL_SET, a.pe,
                           stream);
        break;
      case PermuteStep::AwaitArrival:
        stream::signal_wait_until(comm, f.arrived + a.pe, GSHMEM_CMP_EQ, 1, stream);
        stream::signal_op(comm, f.arrived + a.pe, 0, GSHMEM_SIGNAL_SET, me, stream);
        break;
    }
  }
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
  cuda::DeviceGuard current(comm.device());
  if (permute_by_copy_engine(bytes, comm.heap().contains(out), in == out)) {
    copy_engine_permute(comm, in, out, bytes, dst_pe, src_pe, stream);
    return;
  }
  kernels::permute({comm.device_state().device(), comm.coll_state().permute(), stream}, in, out,
                   bytes, dst_pe, src_pe);
}

}  // namespace gshmem::coll

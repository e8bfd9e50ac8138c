// The collectives-on-a-stream section of the C ABI (include/gshmem/gshmem.h): resolves the
// handle and the stream, then hands over to src/coll/ops.h, which checks the arguments, chooses
// the backend and enqueues. gshmem_comm_enable_nccl and gshmem_coll_explain live in
// capi_coll_select.cpp.
#include <cuda_runtime_api.h>

#include "capi_internal.h"
#include "coll/ops.h"
#include "gshmem/gshmem.h"

using gshmem::capi::guarded;
using gshmem::capi::as_stream;
using gshmem::capi::live;

extern "C" {

gshmem_result_t gshmem_all_reduce_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                            const void* in, void* out, size_t count,
                                            gshmem_dtype_t dtype, gshmem_redop_t op,
                                            void* stream) {
  return guarded([&] {
    gshmem::coll::all_reduce(live(comm), team, in, out, count, dtype, op, as_stream(stream));
  });
}

gshmem_result_t gshmem_all_gather_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                            const void* in, void* out, size_t count,
                                            gshmem_dtype_t dtype, void* stream) {
  return guarded([&] {
    gshmem::coll::all_gather(live(comm), team, in, out, count, dtype, as_stream(stream));
  });
}

gshmem_result_t gshmem_reduce_scatter_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                                const void* in, void* out, size_t count,
                                                gshmem_dtype_t dtype, gshmem_redop_t op,
                                                void* stream) {
  return guarded([&] {
    gshmem::coll::reduce_scatter(live(comm), team, in, out, count, dtype, op, as_stream(stream));
  });
}

gshmem_result_t gshmem_broadcast_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                           const void* in, void* out, size_t count,
                                           gshmem_dtype_t dtype, int root, void* stream) {
  return guarded([&] {
    gshmem::coll::broadcast(live(comm), team, in, out, count, dtype, root, as_stream(stream));
  });
}

gshmem_result_t gshmem_all_to_all_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                            const void* in, void* out, size_t count,
                                            gshmem_dtype_t dtype, void* stream) {
  return guarded([&] {
    gshmem::coll::all_to_all(live(comm), team, in, out, count, dtype, as_stream(stream));
  });
}

gshmem_result_t gshmem_all_to_allv_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                             const void* in, const size_t* send_counts,
                                             const size_t* send_displs, void* out,
                                             const size_t* recv_counts,
                                             const size_t* recv_displs, gshmem_dtype_t dtype,
                                             void* stream) {
  return guarded([&] {
    gshmem::coll::all_to_allv(live(comm), team, in, send_counts, send_displs, out, recv_counts,
                              recv_displs, dtype, as_stream(stream));
  });
}

gshmem_result_t gshmem_permute_on_stream(gshmem_comm_t comm, const void* in, void* out,
                                         size_t bytes, int dst_pe, int src_pe, void* stream) {
  return guarded([&] {
    gshmem::coll::permute(live(comm), in, out, bytes, dst_pe, src_pe, as_stream(stream));
  });
}

}  // extern "C"

// Collectives on a stream (the C ABI's gshmem_*_on_stream collectives, include/gshmem/gshmem.h
// states their contracts) after the handle has been resolved. Each checks its arguments
// (validate.h), asks select.h for the backend and algorithm, makes the comm's GPU current, and
// enqueues: NCCL's call (world team only), or gshmem's kernels (kernels.h), one launch per chunk
// that fits the staging slots. None waits for the GPU or for a peer; all are capturable.
//
// Algorithms (docs/collectives.md, "## Algorithms"): all_reduce runs packet, one_shot or
// two_shot (ring asks for two_shot, the bandwidth-optimal schedule on a fully connected NVLink
// host); the other collectives have one schedule each (push to every member's slot, one signal
// phase), which every requested algorithm maps to.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "gshmem/gshmem.h"

namespace gshmem {

class Comm;

namespace coll {

void all_reduce(Comm& comm, const gshmem_team_t* team, const void* in, void* out, size_t count,
                gshmem_dtype_t dtype, gshmem_redop_t op, cudaStream_t stream);
void all_gather(Comm& comm, const gshmem_team_t* team, const void* in, void* out, size_t count,
                gshmem_dtype_t dtype, cudaStream_t stream);
void reduce_scatter(Comm& comm, const gshmem_team_t* team, const void* in, void* out,
                    size_t count, gshmem_dtype_t dtype, gshmem_redop_t op, cudaStream_t stream);
void broadcast(Comm& comm, const gshmem_team_t* team, const void* in, void* out, size_t count,
               gshmem_dtype_t dtype, int root, cudaStream_t stream);
void all_to_all(Comm& comm, const gshmem_team_t* team, const void* in, void* out, size_t count,
                gshmem_dtype_t dtype, cudaStream_t stream);
void all_to_allv(Comm& comm, const gshmem_team_t* team, const void* in, const size_t* send_counts,
                 const size_t* send_displs, void* out, const size_t* recv_counts,
                 const size_t* recv_displs, gshmem_dtype_t dtype, cudaStream_t stream);

// permute.cpp: gshmem_permute_on_stream (a packet exchange with one PE each way).
void permute(Comm& comm, const void* in, void* out, size_t bytes, int dst_pe, int src_pe,
             cudaStream_t stream);

}  // namespace coll
}  // namespace gshmem

// Argument checks of the collectives on a stream (DESIGN.md §5): on the host, before anything is
// enqueued, without CUDA calls. Each throws a usage error naming the operation (`op`, e.g.
// "all_reduce_on_stream") and saying what to do.
#pragma once

#include <cstddef>

#include "gshmem/gshmem.h"

namespace gshmem {

class Comm;

namespace coll {

// The team a call runs over (NULL: every PE). It must be a well-formed strided team of this
// comm, and this PE must be a member (team->my_pe names it).
gshmem_team_t resolve_team(Comm& comm, const gshmem_team_t* team, const char* op);
// Whether some member of `team` is not load/store-reachable (select.h: such a team takes NCCL).
bool beyond_reach(Comm& comm, const gshmem_team_t& team);
// Bytes of one element of `dtype`.
size_t element_size(gshmem_dtype_t dtype, const char* op);
void require_redop(gshmem_redop_t redop, const char* op);
// 0 <= root < team_size.
void require_root(int root, int team_size, const char* op);
// `bytes` (count * element size * members) without overflow.
size_t span_bytes(size_t count, size_t elem, size_t members, const char* op);
// A buffer of `bytes` (> 0): non-NULL, aligned to the element size; when it lies in the
// symmetric heap, all of it does.
void require_buffer(Comm& comm, const char* op, const char* name, const void* p, size_t bytes,
                    size_t elem);
// [in, in + in_bytes) and [out, out + out_bytes) are disjoint, unless `in_place` (the caller
// found the one overlap that the collective's contract allows).
void require_no_overlap(const char* op, const void* in, size_t in_bytes, const void* out,
                        size_t out_bytes, bool in_place);

}  // namespace coll
}  // namespace gshmem

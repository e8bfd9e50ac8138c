// Teams (DESIGN.md §3 team/): strided sets of world PEs, as values. Creating a team is local
// arithmetic, never a collective: teams own no memory (device team barriers use the per-PE
// counters of the runtime's sync area, see include/gshmem/device/barrier.cuh). The same
// gshmem_team_t is used by the host, the C ABI, Python and kernels; the inline functions of
// device_state.h translate PE numbers on both sides.
#pragma once

#include <vector>

#include "gshmem/device_state.h"

namespace gshmem::team {

// Every PE: 0, 1, ..., n_pes - 1.
gshmem_team_t world(int my_pe, int n_pes);

// The team of `members` (increasing world ranks, containing my_pe) when they are evenly
// strided; otherwise the empty team {0, 1, 0, -1}.
gshmem_team_t from_members(const std::vector<int>& members, int my_pe);

// PEs start, start + stride, ..., start + (size - 1) * stride of `parent` (parent numbering).
// The caller must be a member of `parent`; it gets my_pe == -1 when it is not in the child.
// Throws GSHMEM_ERROR_USAGE on a range outside the parent, size < 1 or stride < 1.
gshmem_team_t split_strided(const gshmem_team_t& parent, int start, int stride, int size);

// The OpenSHMEM 2-D split: `parent` laid out row-major in rows of `xrange` PEs (xrange is
// clamped to the parent size; the last row may be short). `x` is the caller's row (consecutive
// PEs), `y` its column (stride xrange). The caller must be a member of `parent`.
struct Split2d {
  gshmem_team_t x;
  gshmem_team_t y;
};
Split2d split_2d(const gshmem_team_t& parent, int xrange);

// Throws GSHMEM_ERROR_USAGE unless `team` is a well-formed descriptor (stride >= 1, size >= 0,
// my_pe in [-1, size), every PE a valid world rank when n_pes > 0).
void check(const gshmem_team_t& team, int n_pes = 0);

}  // namespace gshmem::team

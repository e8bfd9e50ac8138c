// Teams on the device: a Team (types.cuh) is a strided set of world PEs, passed by value like the
// Device (dev.world, dev.node, or one made on the host by gshmem_team_split_*). The arithmetic is
// the same inline code the host uses (device_state.h). None of these calls communicates.
#pragma once

#include "types.cuh"

namespace gshmem {

// This PE's index in `team`, or -1 when it is not a member.
__device__ inline int team_my_pe(const Team& team) { return team.my_pe; }

// Number of PEs in `team`.
__device__ inline int team_n_pes(const Team& team) { return team.size; }

// World rank of PE `pe` of `team` (0 <= pe < team_n_pes(team)).
__device__ inline int team_world_pe(const Team& team, int pe) {
  return gshmem_team_world_pe(&team, pe);
}

// Index in `dst` of PE `src_pe` of `src`, or -1 when it is not a member of `dst`.
__device__ inline int team_translate_pe(const Team& src, int src_pe, const Team& dst) {
  return gshmem_team_translate(&src, src_pe, &dst);
}

}  // namespace gshmem

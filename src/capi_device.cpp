// The device-state and team section of the C ABI (include/gshmem/gshmem.h).
#include "capi_internal.h"
#include "core/device_state.h"
#include "gshmem/gshmem.h"
#include "team/team.h"

using gshmem::capi::guarded;
using gshmem::capi::live;
using gshmem::capi::require_out;

extern "C" {

gshmem_result_t gshmem_comm_device(gshmem_comm_t comm, gshmem_device_t* dev) {
  return guarded([&] {
    require_out(dev, "dev");
    *dev = live(comm).device_state().device();
  });
}

gshmem_result_t gshmem_team_world(gshmem_comm_t comm, gshmem_team_t* team) {
  return guarded([&] {
    require_out(team, "team");
    *team = live(comm).device_state().device().world;
  });
}

gshmem_result_t gshmem_team_node(gshmem_comm_t comm, gshmem_team_t* team) {
  return guarded([&] {
    require_out(team, "team");
    const gshmem_team_t node = live(comm).device_state().device().node;
    GSHMEM_REQUIRE(node.size > 0,
                   "the PEs reachable from this PE are not evenly strided in the world, so they "
                   "do not form a team; launch local PEs with consecutive ranks");
    *team = node;
  });
}

gshmem_result_t gshmem_team_split_strided(const gshmem_team_t* parent, int start, int stride,
                                          int size, gshmem_team_t* child) {
  return guarded([&] {
    require_out(parent, "parent");
    require_out(child, "child");
    *child = gshmem::team::split_strided(*parent, start, stride, size);
  });
}

gshmem_result_t gshmem_team_split_2d(const gshmem_team_t* parent, int xrange, gshmem_team_t* xteam,
                                     gshmem_team_t* yteam) {
  return guarded([&] {
    require_out(parent, "parent");
    require_out(xteam, "xteam");
    require_out(yteam, "yteam");
    const gshmem::team::Split2d split = gshmem::team::split_2d(*parent, xrange);
    *xteam = split.x;
    *yteam = split.y;
  });
}

gshmem_result_t gshmem_team_translate_pe(const gshmem_team_t* src, int src_pe,
                                         const gshmem_team_t* dst, int* dst_pe) {
  return guarded([&] {
    require_out(src, "src");
    require_out(dst, "dst");
    require_out(dst_pe, "dst_pe");
    gshmem::team::check(*src);
    gshmem::team::check(*dst);
    *dst_pe = gshmem_team_translate(src, src_pe, dst);
  });
}

}  // extern "C"

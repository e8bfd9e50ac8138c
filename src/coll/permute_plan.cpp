#include "coll/permute_plan.h"

namespace gshmem::coll {

std::vector<PermuteAction> permute_plan(int me, int dst_pe, int src_pe) {
  if (src_pe == me) return {{PermuteStep::Copy, me}};
  std::vector<PermuteAction> plan;
  if (src_pe < 0) {
    plan.push_back({PermuteStep::Zero, me});
  } else {
    plan.push_back({PermuteStep::Announce, src_pe});
  }
  if (dst_pe >= 0) {
    plan.push_back({PermuteStep::AwaitReady, dst_pe});
    plan.push_back({PermuteStep::Send, dst_pe});
  }
  if (src_pe >= 0) plan.push_back({PermuteStep::AwaitArrival, src_pe});
  return plan;
}

}  // namespace gshmem::coll

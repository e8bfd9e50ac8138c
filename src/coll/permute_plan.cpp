#include "coll/permute_plan.h"

namespace gshmem::coll {

std::vector<PermuteAction> exchange_plan(const std::vector<int>& dsts,
                                         const std::vector<int>& srcs) {
  std::vector<PermuteAction> plan;
  for (int src : srcs) plan.push_back({PermuteStep::Announce, src});
  for (int dst : dsts) {
    plan.push_back({PermuteStep::AwaitReady, dst});
    plan.push_back({PermuteStep::Send, dst});
  }
  for (int src : srcs) plan.push_back({PermuteStep::AwaitArrival, src});
  return plan;
}

std::vector<PermuteAction> permute_plan(int me, int dst_pe, int src_pe) {
  if (src_pe == me) return {{PermuteStep::Copy, me}};
  std::vector<PermuteAction> plan;
  if (src_pe < 0) plan.push_back({PermuteStep::Zero, me});
  std::vector<int> dsts, srcs;
  if (dst_pe >= 0) dsts.push_back(dst_pe);
  if (src_pe >= 0) srcs.push_back(src_pe);
  for (const PermuteAction& a : exchange_plan(dsts, srcs)) plan.push_back(a);
  return plan;
}

}  // namespace gshmem::coll

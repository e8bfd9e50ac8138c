#include "team/team.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace gshmem::team {
namespace {

std::string describe(const gshmem_team_t& t) {
  return "{start " + std::to_string(t.start) + ", stride " + std::to_string(t.stride) +
         ", size " + std::to_string(t.size) + ", my_pe " + std::to_string(t.my_pe) + "}";
}

void require_member(const gshmem_team_t& parent) {
  GSHMEM_REQUIRE(parent.my_pe >= 0,
                 "this PE is not a member of the parent team " + describe(parent) +
                     ": only members may split a team");
}

}  // namespace

void check(const gshmem_team_t& t, int n_pes) {
  bool ok = t.stride >= 1 && t.size >= 0 && t.my_pe >= -1 && t.my_pe < t.size && t.start >= 0;
  if (ok && n_pes > 0 && t.size > 0) {
    ok = static_cast<long long>(t.start) + static_cast<long long>(t.size - 1) * t.stride < n_pes;
  }
  GSHMEM_REQUIRE(ok, "malformed team " + describe(t) +
                         ": use a team made by gshmem_team_world/node/split_*");
}

gshmem_team_t world(int my_pe, int n_pes) { return gshmem_team_t{0, 1, n_pes, my_pe}; }

gshmem_team_t from_members(const std::vector<int>& members, int my_pe) {
  const gshmem_team_t empty{0, 1, 0, -1};
  if (members.empty()) return empty;
  const int stride = members.size() > 1 ? members[1] - members[0] : 1;
  if (stride < 1) return empty;
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i] - members[i - 1] != stride) return empty;
  }
  gshmem_team_t t{members[0], stride, static_cast<int32_t>(members.size()), -1};
  t.my_pe = gshmem_team_pe_of(&t, my_pe);
  return t;
}

gshmem_team_t split_strided(const gshmem_team_t& parent, int start, int stride, int size) {
  check(parent);
  require_member(parent);
  GSHMEM_REQUIRE(size >= 1, "split_strided: size must be >= 1, got " + std::to_string(size));
  GSHMEM_REQUIRE(stride >= 1, "split_strided: stride must be >= 1, got " + std::to_string(stride));
  const long long last = static_cast<long long>(start) + static_cast<long long>(size - 1) * stride;
  GSHMEM_REQUIRE(start >= 0 && last < parent.size,
                 "split_strided: PEs " + std::to_string(start) + " .. " + std::to_string(last) +
                     " (stride " + std::to_string(stride) + ") are not all in the parent team " +
                     describe(parent));
  gshmem_team_t child{gshmem_team_world_pe(&parent, start), stride * parent.stride, size, -1};
  child.my_pe = gshmem_team_pe_of(&child, gshmem_team_world_pe(&parent, parent.my_pe));
  return child;
}

Split2d split_2d(const gshmem_team_t& parent, int xrange) {
  check(parent);
  require_member(parent);
  GSHMEM_REQUIRE(xrange >= 1, "split_2d: xrange must be >= 1, got " + std::to_string(xrange));
  xrange = std::min(xrange, parent.size);
  const int row = parent.my_pe / xrange, column = parent.my_pe % xrange;
  const int row_start = row * xrange;
  return Split2d{split_strided(parent, row_start, 1, std::min(xrange, parent.size - row_start)),
                 split_strided(parent, column, xrange,
                               (parent.size - column + xrange - 1) / xrange)};
}

}  // namespace gshmem::team

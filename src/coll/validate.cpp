#include "coll/validate.h"

#include <cstdint>
#include <limits>
#include <string>

#include "common/error.h"
#include "core/comm.h"
#include "stream/validate.h"

namespace gshmem::coll {

gshmem_team_t resolve_team(Comm& comm, const gshmem_team_t* team, const char* op) {
  const int n = comm.nranks();
  gshmem_team_t t{0, 1, n, comm.rank()};
  if (team != nullptr) {
    t = *team;
    GSHMEM_REQUIRE(t.size >= 1 && t.stride >= 1 && t.start >= 0 &&
                       static_cast<int64_t>(t.start) + static_cast<int64_t>(t.size - 1) * t.stride <
                           n,
                   std::string(op) + ": team {start " + std::to_string(t.start) + ", stride " +
                       std::to_string(t.stride) + ", size " + std::to_string(t.size) +
                       "} is not a non-empty team of this comm's " + std::to_string(n) +
                       " PEs; make teams with gshmem_team_world/node/split_* on this comm");
    const int me = gshmem_team_pe_of(&t, comm.rank());
    GSHMEM_REQUIRE(me >= 0, std::string(op) + ": this PE (rank " + std::to_string(comm.rank()) +
                                ") is not a member of the team; only members make the call");
    GSHMEM_REQUIRE(t.my_pe == me, std::string(op) + ": team->my_pe is " + std::to_string(t.my_pe) +
                                      " but this PE is member " + std::to_string(me) +
                                      "; pass a team made on this PE");
  }
  return t;
}

bool beyond_reach(Comm& comm, const gshmem_team_t& team) {
  for (int i = 0; i < team.size; ++i) {
    if (comm.heap().local_index()[gshmem_team_world_pe(&team, i)] < 0) return true;
  }
  return false;
}

size_t element_size(gshmem_dtype_t dtype, const char* op) {
  switch (dtype) {
    case GSHMEM_FLOAT32: return 4;
    case GSHMEM_BFLOAT16: return 2;
    case GSHMEM_FLOAT16: return 2;
    case GSHMEM_INT32: return 4;
    case GSHMEM_INT64: return 8;
  }
  throw_error(GSHMEM_ERROR_USAGE,
              std::string(op) + ": dtype " + std::to_string(static_cast<int>(dtype)) +
                  " is not a gshmem_dtype_t; use GSHMEM_FLOAT32, BFLOAT16, FLOAT16, INT32 or "
                  "INT64 (0..4)");
}

void require_redop(gshmem_redop_t redop, const char* op) {
  GSHMEM_REQUIRE(redop >= GSHMEM_SUM && redop <= GSHMEM_MAX,
                 std::string(op) + ": op " + std::to_string(static_cast<int>(redop)) +
                     " is not a reduction; use GSHMEM_SUM, PROD, MIN or MAX (0..3)");
}

void require_root(int root, int team_size, const char* op) {
  GSHMEM_REQUIRE(root >= 0 && root < team_size,
                 std::string(op) + ": root " + std::to_string(root) +
                     " is out of range; the team has members 0.." + std::to_string(team_size - 1));
}

size_t span_bytes(size_t count, size_t elem, size_t members, const char* op) {
  const size_t limit = std::numeric_limits<size_t>::max() / elem / members;
  GSHMEM_REQUIRE(count <= limit, std::string(op) + ": count " + std::to_string(count) +
                                     " is too large (its byte size overflows)");
  return count * elem * members;
}

void require_buffer(Comm& comm, const char* op, const char* name, const void* p, size_t bytes,
                    size_t elem) {
  stream::require_local(op, name, p);
  GSHMEM_REQUIRE(reinterpret_cast<uintptr_t>(p) % elem == 0,
                 std::string(op) + ": " + name + " is not aligned to its element size (" +
                     std::to_string(elem) + " bytes)");
  if (comm.heap().contains(p)) stream::require_symmetric(comm, op, name, p, bytes);
}

void require_no_overlap(const char* op, const void* in, size_t in_bytes, const void* out,
                        size_t out_bytes, bool in_place) {
  if (in_place) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  GSHMEM_REQUIRE(a + in_bytes <= b || b + out_bytes <= a,
                 std::string(op) + ": in and out overlap in a way the collective does not "
                                   "allow; use separate buffers or the in-place form its "
                                   "contract names");
}

}  // namespace gshmem::coll

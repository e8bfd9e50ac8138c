// The backend-choice part of the collectives' C ABI (include/gshmem/gshmem.h):
// gshmem_comm_enable_nccl and gshmem_coll_explain. The collectives themselves are in
// capi_coll.cpp; both consult src/coll/select.h with the same Query, so `explain` reports
// exactly what a call would do.
#include <algorithm>
#include <cstring>
#include <string>

#include "capi_internal.h"
#include "coll/nccl.h"
#include "coll/select.h"
#include "coll/validate.h"
#include "gshmem/gshmem.h"

using gshmem::capi::guarded;
using gshmem::capi::live;

extern "C" {

gshmem_result_t gshmem_comm_enable_nccl(gshmem_comm_t comm) {
  return guarded([&] {
    gshmem::Comm& c = live(comm);
    if (c.nccl() != nullptr) return;  // every PE enabled it before (collective, so all agree)
    c.set_nccl(gshmem::coll::NcclBackend::create(c));
  });
}

// npes <= 0 means the comm's size (the world team); a team smaller than the world never uses
// NCCL (its communicator spans the world).
gshmem_result_t gshmem_coll_explain(gshmem_comm_t comm, gshmem_coll_t op, size_t bytes, int npes,
                                    int symmetric, char* out, size_t len) {
  return guarded([&] {
    gshmem::Comm& c = live(comm);
    gshmem::capi::require_out(out, "out");
    GSHMEM_REQUIRE(len > 0, "gshmem_coll_explain: len must be positive");
    GSHMEM_REQUIRE(npes <= c.nranks(), "gshmem_coll_explain: npes " + std::to_string(npes) +
                                           " is more than the comm's " +
                                           std::to_string(c.nranks()) + " PEs");
    int n = npes <= 0 ? c.nranks() : npes;
    const gshmem_team_t first{0, 1, n, c.rank() < n ? c.rank() : -1};  // PEs 0 .. n-1
    GSHMEM_REQUIRE((symmetric & ~(GSHMEM_EXPLAIN_OUT_SYMMETRIC | GSHMEM_EXPLAIN_IN_SYMMETRIC)) == 0,
                   "gshmem_coll_explain: symmetric " + std::to_string(symmetric) +
                       " has bits other than GSHMEM_EXPLAIN_OUT_SYMMETRIC and _IN_SYMMETRIC");
    gshmem::coll::Query q{op, bytes, n, c.nccl() != nullptr && n == c.nranks(),
                          (symmetric & GSHMEM_EXPLAIN_OUT_SYMMETRIC) != 0,
                          (symmetric & GSHMEM_EXPLAIN_IN_SYMMETRIC) != 0,
                          gshmem::coll::beyond_reach(c, first), c.proxy() != nullptr};
    std::string text = gshmem::coll::explain(q);
    size_t k = std::min(text.size(), len - 1);
    std::memcpy(out, text.data(), k);
    out[k] = '\0';
  });
}

}  // extern "C"

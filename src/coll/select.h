// Choosing how a collective runs (DESIGN.md §2.7): gshmem's own algorithm on the device API, or
// NCCL. The rule starts from XLA's (point-to-point permutes always one-sided; all-reduce
// one-sided below a size threshold, NCCL above); thresholds come from a table measured on the
// GPU host (docs/collectives.md gives the command), and the environment overrides everything:
//   GSHMEM_COLL_BACKEND=auto|gshmem|nccl            all collectives
//   GSHMEM_COLL_<OP>_BACKEND=auto|gshmem|nccl        one collective (OP: ALL_REDUCE, ...)
//   GSHMEM_COLL_<OP>_ALGO=packet|one_shot|two_shot   gshmem's algorithm for one collective
// A team with a member beyond load/store reach always takes NCCL (and an override that asks
// for gshmem is a usage error). choose() is pure (no GPU, no communication) so CPU tests cover
// it; every PE computes the same choice from the same arguments.
#pragma once

#include <cstddef>
#include <string>

#include "gshmem/gshmem.h"

namespace gshmem::coll {

enum class Backend { Gshmem, Nccl };
// Exchange: puts with flags straight into a symmetric `out` (exchange.h), which reach members on
// the proxy path; the algorithm of teams with members beyond load/store reach.
enum class Algo { Packet, OneShot, TwoShot, Nccl, Exchange };

struct Query {
  gshmem_coll_t op;
  size_t bytes;         // bytes of input per PE
  int npes;             // team size
  bool nccl_available;  // gshmem_comm_enable_nccl succeeded on this comm (and the team is world)
  bool out_symmetric = false;  // `out` is a symmetric heap object (and, for all_to_all, not `in`)
  bool in_symmetric = false;   // `in` is a symmetric heap object
  // Some member is beyond load/store reach (another host, or P2P off). gshmem's kernels run on
  // loads and stores, so such a team takes NCCL (its own network path) when it is enabled, else
  // Algo::Exchange where the comm has a proxy path and the call allows it (all_gather,
  // broadcast and all_to_all into a symmetric `out`; all_reduce and reduce_scatter), else a
  // usage error saying what to do.
  bool beyond_reach = false;
  bool proxy = false;  // the comm has a proxy path (docs/network.md)
};

// Whether a call writes a symmetric `out` straight into every member's copy instead of staging
// it through heap scratch (docs/collectives.md, "Direct paths"): all_reduce at any size (its
// two-shot second phase); all_gather, broadcast and all_to_all from GSHMEM_COLL_DIRECT_MIN bytes
// of input per PE (default 256 KiB; "never": off); reduce_scatter never. Staged calls give NCCL
// larger sizes (the table in select.cpp). Re-reads the environment; a bad value is a usage error.
bool direct_path(gshmem_coll_t op, size_t bytes, bool out_symmetric);

// Whether a two-shot all_reduce whose `in` and `out` are both symmetric heap objects reads the
// members' inputs in place (docs/collectives.md, "Pull"): no staging slots and one launch at any
// size, from GSHMEM_COLL_PULL_MIN bytes of input per PE (default 0: always; "never": off).
// Re-reads the environment; a bad value is a usage error.
bool pull_path(gshmem_coll_t op, size_t bytes, bool in_symmetric, bool out_symmetric);

// How gshmem_permute_on_stream moves a message (permute.cpp, kernels_permute.cu):
//   CopyEngine  by the copy engine straight into the receiver's `out`: `out` a symmetric heap
//               object (the same one on every PE, as for any collective), not `in` (in place, a
//               sender would read what its own source overwrites), and at least
//               GSHMEM_PERMUTE_COPY_MIN bytes (default 16 MiB; "never": off), or at any size when
//               the comm has a proxy path (`proxy`: the kernels reach no PE on it, and every PE of
//               such a comm has one, so the two ends of a pair still choose alike);
//   Bulk        else from GSHMEM_PERMUTE_BULK_MIN bytes (default 512 KiB; "never": off): the
//               kernel's plain stores, a fence and a flag per chunk;
//   Packets     else: the kernel's LL packets, one NVLink crossing and no signal.
// Both ends of a pair must choose alike, so the variables must be equal on every PE. Re-reads
// the environment; a bad value is a usage error.
enum class PermutePath { Packets, Bulk, CopyEngine };
PermutePath permute_path(size_t bytes, bool out_symmetric, bool in_place, bool proxy);
const char* name(PermutePath path);

struct Choice {
  Backend backend;
  Algo algo;
  std::string reason;   // one line: which rule or override decided
  bool direct = false;  // the chosen gshmem algorithm stores straight into a symmetric `out`
  bool pull = false;    // the two-shot all_reduce loads the members' symmetric inputs in place
};

// Throws GSHMEM_ERROR_USAGE for a malformed override (naming the variable and the values allowed)
// or for an override that asks for NCCL when it is not available.
Choice choose(const Query& q);
// "all_reduce 1048576 B on 4 PEs: gshmem two_shot (below the NCCL threshold of 64 MiB)".
std::string explain(const Query& q);

const char* name(gshmem_coll_t op);  // "all_reduce", ...
const char* name(Algo algo);  // "packet", "one_shot", "two_shot", "nccl", "exchange"
std::string algo_name(const Choice& c);  // name(c.algo), "two_shot pull" where c.pull

}  // namespace gshmem::coll

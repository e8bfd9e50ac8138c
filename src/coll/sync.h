// The per-comm memory that gshmem's own collectives synchronise and stage through, as kernels
// receive it (by value, like gshmem_device_t). Filled by CollState (coll_state.h); read by the
// device code in protocol.cuh. Plain C++ so that host .cpp files and .cu files share it.
//
// Layout, all in the symmetric heap (one zeroed allocation at comm init, same offsets everywhere):
//   arrivals  uint64[kMaxCtas][n_pes]   arrivals[b][q]: signals CTA b of PE q sent to this PE's
//                                       CTA b (written by q with red.release.sys.add)
//   tallies   uint64[kMaxCtas][n_pes]   signals from q this PE's CTA b has consumed (local only)
//   seq       uint64[kMaxCtas][n_pes]   collectives this PE has run with q, kept per CTA (local);
//                                       bit 0 picks the staging buffer
//   slots     [2][n_pes][slot_bytes]    staging: slot (parity, q) on this PE holds what q pushed
//   descs     uint64[2][n_pes]          GSHMEM_COLL_CHECK: the call descriptor each member sent
// Everything is indexed by world PE, so collectives on teams that share only this PE never touch
// the same words; counters only grow, so a CUDA graph replays correctly with nothing host-side
// baked into it. Arrivals and tallies are per CTA (a launch with fewer CTAs leaves the others'
// untouched); seq advances for every CTA at every call, launched or not, so that all CTAs of a
// call agree on the slot parity whatever grid each call had (protocol.cuh, end_call).
#pragma once

#include <cstdint>

namespace gshmem::coll {

constexpr int kMaxCtas = 128;       // upper bound of GSHMEM_COLL_CTAS
constexpr int kThreads = 512;       // threads per CTA of every collective kernel
constexpr int kMaxVPes = 64;        // all_to_allv: team size carried in the kernel parameters

struct Sync {
  uint64_t* arrivals;
  uint64_t* tallies;
  uint64_t* seq;
  char* slots;
  uint64_t slot_bytes;    // bytes of one staging slot (multiple of 4096)
  uint64_t* descs;
  uint64_t desc;          // this call's descriptor (describe() in ops.cpp), 0: no check
  int32_t ctas;           // this launch's grid (CollState: the comm's maximum, GSHMEM_COLL_CTAS;
                          // ops.cpp lowers it per launch from the launch's size, alike on all PEs)
  int32_t n_pes;
};

}  // namespace gshmem::coll

// Device side of gshmem's collectives: how the CTAs of one collective kernel on different PEs
// find their staging memory and synchronise (docs/collectives.md, "## Algorithms").
//
// Every collective kernel runs Sync::ctas CTAs on every member. CTA b of PE p exchanges data only
// with CTA b of the other members: the element (or byte) ranges are split among CTAs by a rule
// that depends on nothing but the call's arguments, so CTA b pushes exactly what CTA b of each
// receiver later reads. No grid-wide synchronisation, no cooperative launch.
//
// Push, then signal (the device API's put_signal order): the threads of CTA b store their data
// into the receiver's slot for this PE (weak stores over NVLink), bar.sync, and then one thread
// per receiver does red.release.sys.add(1) on the receiver's arrivals[b][me] (a release is
// cumulative: it orders what bar.sync ordered before it, so no separate fence; until 2026-11-27 a
// fence.acq_rel.sys came first, 1.3-1.7 us per all_reduce, docs/benchmarks.md).
// The receiver's thread for source q polls arrivals[b][q] with ld.acquire.sys until it exceeds
// the tally it keeps, then bar.sync extends the acquire to the whole CTA, which then reads the
// slot with plain loads. A kernel with k such phases advances each tally by k.
//
// Reuse of staging memory without a closing barrier: slots are double-buffered by the parity of
// seq[b][q], the number of collectives this PE has run with q (equal on both sides, since both
// count the same calls, and equal for every CTA b: end_call). When p writes (parity P) in its
// call j + 2 with q, it has, in call j + 1, received something from q (every call makes every
// member receive from every other), which q sent after its kernel of call j had completed (stream
// order); so q has finished reading what p wrote in call j with the same parity. This needs
// collectives on teams that share two or more PEs to be ordered on each PE (one stream, or stream
// dependencies), the rule the device API's barrier states.
//
// Every wait is bounded (gshmem/device/deadline.cuh): after GSHMEM_TIMEOUT, on comm.abort() or
// once another wait of the comm failed, it records what it waited for and from whom, and goes on
// as if it had arrived: the kernel ends (every later wait gives up at its first check), its
// results are undefined, and the host raises gshmem.FaultError at the comm's next call.
//
// Argument check (GSHMEM_COLL_CHECK=1): in phase 1, CTA 0 stores the call's descriptor (which
// collective, dtype, operator, root, count) into each receiver's descs[parity][me] before its
// signal, and compares what each member sent it with its own after the wait; a mismatch prints
// both and traps. Same double-buffering argument as the slots. The packets (kernels_packets.cu,
// no signal phase) are not checked.
#pragma once

#include <cstdio>

#include "coll/sync.h"
#include "gshmem/device/copy.cuh"
#include "gshmem/device/deadline.cuh"
#include "gshmem/device/packet.cuh"
#include "gshmem/device/ptr.cuh"
#include "gshmem/device/ptx.cuh"
#include "gshmem/device/scope.cuh"

namespace gshmem::coll::device {

// [lo, hi) of CTA `b` when `len` items are split among `ctas` CTAs in units of `unit` items.
// CTA 0 gets a non-empty range whenever len > 0.
struct Range {
  size_t lo, hi;
  __device__ size_t size() const { return hi - lo; }
};
__device__ inline Range cta_range(size_t len, size_t unit, int b, int ctas) {
  const size_t units = (len + unit - 1) / unit;
  const size_t per = (units + ctas - 1) / ctas;
  size_t lo = static_cast<size_t>(b) * per * unit;
  size_t hi = lo + per * unit;
  if (lo > len) lo = len;
  if (hi > len) hi = len;
  return {lo, hi};
}

// World PE of team member t.
__device__ inline int world(const Team& team, int t) { return gshmem_team_world_pe(&team, t); }

// Team index of the k-th member (k = 0 .. size - 2) this CTA pushes to: the members after this
// one, rotated by the CTA index. At any moment the CTAs of every PE then spread their stores over
// all receivers instead of all writing to member 0 first: with 4 PEs, one receiver per CTA at a
// time moved 311 GB/s per PE against 236-263 GB/s for every CTA on the same receiver (16 MiB
// blocks: benchmarks/nvlink_fanout.py, docs/results.md).
__device__ inline int push_target(const Team& team, int k) {
  const int others = team.size - 1;
  return (team.my_pe + 1 + (k + static_cast<int>(blockIdx.x)) % others) % team.size;
}

// This CTA's counters for world PE q.
__device__ inline size_t counter(const Sync& s, int q) {
  return static_cast<size_t>(blockIdx.x) * s.n_pes + q;
}

__device__ inline unsigned parity(const Sync& s, int q) {
  return static_cast<unsigned>(s.seq[counter(s, q)] & 1u);
}

// This PE's staging slot that world PE `src` fills, with `parity`.
__device__ inline char* slot(const Sync& s, unsigned par, int src) {
  return s.slots + (static_cast<size_t>(par) * s.n_pes + src) * s.slot_bytes;
}

// Where this PE pushes to world PE q: q's slot for this PE, in the buffer of this call's parity.
__device__ inline char* remote_slot(const Sync& s, const Device& dev, int q) {
  return gshmem::detail::peer(dev, slot(s, parity(s, q), dev.my_pe), q);
}

// This PE's slot filled by world PE q in this call.
__device__ inline const char* local_slot(const Sync& s, int q) {
  return slot(s, parity(s, q), q);
}

// GSHMEM_COLL_CHECK: where member `src`'s descriptor lands on this PE, with `parity`.
__device__ inline uint64_t* desc_slot(const Sync& s, unsigned par, int src) {
  return s.descs + static_cast<size_t>(par) * s.n_pes + src;
}

// The collective a descriptor names (its low 7 bits: gshmem_coll_t + 1).
__device__ inline const char* coll_name(uint64_t desc) {
  switch (static_cast<int>(desc & 0x7f) - 1) {
    case 0: return "all_reduce";
    case 1: return "all_gather";
    case 2: return "reduce_scatter";
    case 3: return "broadcast";
    case 4: return "all_to_all";
    case 5: return "all_to_allv";
    default: return "another collective";
  }
}

// What a phase's signal has to order. kPushed: the CTA's stores before it (a release, the
// general case). kStarted: the CTA has stored nothing yet; the phase only says that every
// member's kernel has started, so that its `in` is written and its `out` free (stream order: the
// work before it on its stream has completed, and loads over NVLink are served by the owner's
// L2). That signal is relaxed: a system-scope release costs ~0.7 us even with nothing to wait
// for (docs/benchmarks.md), and torch's symmetric-memory kernels open the same way. With the
// argument check on, CTA 0's descriptor store precedes the signal, so it is a release again.
enum class Arrival { kPushed, kStarted };

// Phase `phase` (1, 2, ...) of the call: every member's CTA b signals every other member's CTA b
// once its pushes are done, then waits for all of theirs. Made by the whole CTA.
__device__ inline void arrive_and_wait(const Sync& s, const Device& dev, const Team& team,
                                       unsigned phase, Arrival arrival = Arrival::kPushed) {
  const bool check = s.desc != 0 && phase == 1 && blockIdx.x == 0;
  const bool release = arrival == Arrival::kPushed || check;
  __syncthreads();  // every thread's pushes happen-before the releasing thread's next step
  for (int t = threadIdx.x; t < team.size; t += blockDim.x) {
    const int q = gshmem_team_world_pe(&team, t);
    if (q == dev.my_pe) continue;
    if (check) *gshmem::detail::peer(dev, desc_slot(s, parity(s, q), dev.my_pe), q) = s.desc;
    unsigned long long* arrivals = gshmem::detail::peer(
        dev, reinterpret_cast<unsigned long long*>(s.arrivals) + counter(s, dev.my_pe), q);
    // a release at system scope, cumulative over what the barrier above ordered before it (the
    // device barrier's pattern, barrier.cuh): no separate fence
    if (release) {
      gshmem::detail::red_add_release(arrivals, 1ull);
    } else {
      gshmem::detail::red_add_relaxed(arrivals, 1ull);
    }
  }
  for (int t = threadIdx.x; t < team.size; t += blockDim.x) {
    const int q = gshmem_team_world_pe(&team, t);
    if (q == dev.my_pe) continue;
    const unsigned long long want = s.tallies[counter(s, q)] + phase;
    const unsigned long long* arrived =
        reinterpret_cast<const unsigned long long*>(s.arrivals) + counter(s, q);
    const gshmem::detail::Waited what{GSHMEM_WAIT_COLLECTIVE, q, static_cast<int>(Cmp::GE),
                                      arrived, want};
    gshmem::Deadline deadline;
    unsigned long long seen;
    while ((seen = gshmem::detail::ld_acquire(arrived)) < want) {
      if (deadline.expired(dev, what, seen)) break;
    }
    if (check) {
      const uint64_t theirs = *desc_slot(s, parity(s, q), q);
      if (theirs != s.desc) {
        printf("gshmem collective: mismatched collective calls: PE %d made %s and PE %d made %s "
               "(descriptors 0x%016llx and 0x%016llx: collective, dtype, op, root, count); every "
               "member must make the same call\n",
               dev.my_pe, coll_name(s.desc), q, coll_name(theirs),
               static_cast<unsigned long long>(s.desc), static_cast<unsigned long long>(theirs));
        __trap();
      }
    }
  }
  __syncthreads();  // the acquires above happen-before every thread's reads of the slots
}

// Ends the call for this CTA: tallies advance by the `phases` consumed, seq by one. Made by the
// whole CTA after its last read of the slots.
//
// seq must advance on every CTA of every call, launched or not: launches have different grids
// (ops.cpp sizes them), so CTA b's byte range of a slot differs from call to call, and the reuse
// rule above only holds if every range of a slot written in call j + 1 has the other parity from
// every range read in call j. With per-CTA counts that skipped the small calls, CTA 20 of a
// 64-CTA call could write the parity that CTA 5 of the preceding 16-CTA call was still reading
// (seen as wrong data by tests/gpu/scripts/soak_check.py mixing all_gather and broadcast sizes).
// So the last CTA also advances the seq of the CTAs this launch did not run; nothing reads those
// during the launch. Tallies count signals actually sent to CTA b and stay per CTA.
__device__ inline void end_call(const Sync& s, const Device& dev, const Team& team,
                                unsigned phases) {
  __syncthreads();  // nobody reads parity() after it changes
  for (int t = threadIdx.x; t < team.size; t += blockDim.x) {
    const int q = gshmem_team_world_pe(&team, t);
    if (q == dev.my_pe) continue;
    s.tallies[counter(s, q)] += phases;
    s.seq[counter(s, q)] += 1;
  }
  if (blockIdx.x + 1 != gridDim.x) return;
  const int idle = (kMaxCtas - static_cast<int>(gridDim.x)) * team.size;
  for (int i = threadIdx.x; i < idle; i += blockDim.x) {
    const int q = gshmem_team_world_pe(&team, i % team.size);
    if (q == dev.my_pe) continue;
    s.seq[static_cast<size_t>(gridDim.x + i / team.size) * s.n_pes + q] += 1;
  }
}

// ---- copies -----------------------------------------------------------------------------------
// The CTA copies `bytes` (device API copy loop: widest congruent words, weak loads and stores).
__device__ inline void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  gshmem::detail::copy<Block>(dst, src, bytes);
}

}  // namespace gshmem::coll::device

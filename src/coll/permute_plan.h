// The copy-engine permute's steps on one PE's stream (permute.cpp and exchange.cpp run them; the
// CPU tests run every PE's plans against each other for whole sequences of calls). Pure: no CUDA.
//
//   Copy          dst_pe == src_pe == me: a local copy, nothing else
//   Zero          nobody sends here: `out` is zeroed (as jax.lax.ppermute)
//   Announce      as receiver: SET ready[me] on pe = src_pe (this PE's `out` is free: stream order)
//   AwaitReady    as sender: wait for ready[pe] == 1 (pe = dst_pe), then reset it to 0
//   Send          copy `in` into pe's `out` by the copy engine, then SET arrived[me] on pe (the
//                 SET is ordered after the copy)
//   AwaitArrival  as receiver: wait for arrived[pe] == 1 (pe = src_pe), then reset it to 0
// Every PE announces before it waits, so no cycle of permutes deadlocks, and every flag is back
// to 0 when the call ends, so a CUDA graph replays it as captured.
#pragma once

#include <vector>

namespace gshmem::coll {

enum class PermuteStep { Copy, Zero, Announce, AwaitReady, Send, AwaitArrival };

struct PermuteAction {
  PermuteStep step;
  int pe;  // the peer the step concerns; this PE for Copy and Zero
};

// The steps of PE `me` sending to `dst_pe` and receiving from `src_pe` (-1: none), arguments
// already checked (both or neither of them `me`).
std::vector<PermuteAction> permute_plan(int me, int dst_pe, int src_pe);

// The same protocol with several peers each way (exchange.h: the collectives through the proxy):
// Announce to every PE of `srcs`, then AwaitReady and Send for each PE of `dsts` in order, then
// AwaitArrival from every PE of `srcs`. Every PE still announces before it waits, and the flags
// are per pair of PEs, so any set of such calls, made alike on every PE, cannot deadlock. PEs are
// other than `me`, each at most once per list.
std::vector<PermuteAction> exchange_plan(const std::vector<int>& dsts,
                                         const std::vector<int>& srcs);

}  // namespace gshmem::coll

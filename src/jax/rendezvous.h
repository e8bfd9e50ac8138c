// How the direct ppermute's receivers tell their senders in this process which XLA buffer to put
// into (permute.cpp): a host-side table keyed by XLA's run id, the call's index within that run
// on the receiver's device and the receiver's PE. Every device of an SPMD program makes the same
// calls in the same order, so (run, call) names the same ppermute on every device.
#pragma once

#include <cstdint>

namespace gshmem::jax {

struct CallKey {
  uint64_t run;
  uint64_t call;
  int pe;  // the receiver
  bool operator<(const CallKey& o) const {
    return run != o.run ? run < o.run : call != o.call ? call < o.call : pe < o.pe;
  }
};

// The index of this direct ppermute among those device `ordinal` made in run `run`: 0, 1, ...
// (each run counts from 0; a device's 16 most recent runs are counted apart, should their calls
// interleave). Called by the device's handler, in program order.
uint64_t next_call(int ordinal, uint64_t run);

// The receiver's output for `key`, or nullptr when it receives through the staging slot.
void post(const CallKey& key, void* out);

// The sender: waits up to `seconds` (0: no limit) for `key`'s post and takes it (each post is
// taken once). Returns false when none came in time.
bool take(const CallKey& key, double seconds, void** out);

}  // namespace gshmem::jax

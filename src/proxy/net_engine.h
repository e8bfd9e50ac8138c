// The network engine behind the proxy path: one-sided put, get and 64-bit atomic add into memory
// regions that every rank registered, over an existing engine (UCX). Calls are serialised by
// the engine (the proxy thread and the comm's registration may overlap).
//
// Ordering and completion, as UCX gives them:
//   - operations to one peer may complete in any order; fence() orders every operation issued
//     before it before every one issued after it, per peer (put, fence, signal add);
//   - a signal add travels as a UCX active message and the target's engine applies it with a CPU
//     atomic when it progresses (its proxy thread always does): network atomics on arbitrary
//     memory are not available on every transport (TCP, shared memory), messages are. Signal
//     words must therefore be CPU-visible (host memory, or pinned host memory mapped into the
//     GPU that waits on them);
//   - a put's `done` callback runs once the source buffer may be reused (local completion), a
//     get's once the data is in the local buffer;
//   - flush() returns once every operation issued so far is complete at its target.
// Every wait is bounded by the engine's timeout; a failed peer is named in the error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gshmem {
class Bootstrap;
}

namespace gshmem::proxy {

// Called from progress() (or from put()/get() when it completed at once) with the call's `tag`.
using Done = void (*)(void* arg, uint64_t tag);

class NetEngine {
 public:
  virtual ~NetEngine() = default;

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  virtual const char* name() const = 0;

  // Collective: registers [base, base + bytes) of this rank (sizes may differ per rank; 0 is
  // allowed and makes the rank's region unreachable) and learns every other rank's. Returns
  // the region's id, the same on every rank. Memory may be host or GPU memory.
  virtual int register_region(void* base, size_t bytes) = 0;
  // Collective: forgets a region everywhere. Operations on it must be flushed first.
  virtual void deregister_region(int region) = 0;
  // Collective: returns once every rank entered; this rank's engine keeps progressing meanwhile.
  virtual void barrier() = 0;
  // The bytes rank `pe` registered for `region`.
  virtual size_t region_bytes(int region, int pe) const = 0;

  // Non-blocking. Copies `bytes` from local `src` to `offset` of `pe`'s `region`.
  virtual void put(int pe, const void* src, size_t bytes, int region, uint64_t offset,
                   Done done, void* arg, uint64_t tag) = 0;
  // Non-blocking. Copies from `pe`'s region into local `dst`.
  virtual void get(int pe, void* dst, size_t bytes, int region, uint64_t offset, Done done,
                   void* arg, uint64_t tag) = 0;
  // Non-blocking. Adds `value` to the 8-byte aligned word at `offset` of `pe`'s `region`, once it
  // arrives and `pe`'s engine progresses.
  virtual void signal_add(int pe, int region, uint64_t offset, uint64_t value) = 0;
  // Orders the operations issued before it before those issued after it (to each peer).
  virtual void fence() = 0;
  // Blocking: every operation issued so far is complete at its target (a signal add: delivered to
  // the target's engine); throws GSHMEM_ERROR_FAULT
  // naming the peer that failed, or GSHMEM_ERROR_TIMEOUT naming those that did not finish.
  virtual void flush() = 0;
  // Advances outstanding operations; returns whether anything happened. Throws once a peer fails.
  virtual bool progress() = 0;
};

// Collective over `bs`: a UCX context and worker on this rank and endpoints to every other rank;
// `timeout` bounds every blocking call. Throws GSHMEM_ERROR_SYSTEM when UCX cannot be loaded or
// this build has no UCX support.
std::unique_ptr<NetEngine> make_ucx_engine(Bootstrap& bs, double timeout);

}  // namespace gshmem::proxy

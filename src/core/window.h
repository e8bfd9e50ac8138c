// Window: memory each PE registered collectively (sizes may differ), with numbered signals and
// counters, reachable from kernels through the by-value gshmem_window_t (device/window.cuh,
// docs/windows.md). The comm owns its windows; registration and deregistration are collective.
//
// Peers reach a PE's window by loads and stores: memory in the symmetric heap through the heap's
// mappings, other device memory (cudaMalloc, torch's caching allocator) through CUDA IPC (or
// directly, for a peer in this process). When the comm has a proxy path (PEs beyond load/store
// reach), every PE's window is also registered with its network engine (one region id, the same
// on every PE) and the counters come from the proxy path's pool, which the proxy adds to when a
// put it carried lets its source go.
#pragma once

#include <cstdint>
#include <vector>

#include "gshmem/device_state.h"

namespace gshmem {

class Comm;

class Window {
 public:
  // Collective over the comm's world: every PE calls with its own buffer. Throws gshmem::Error
  // on every PE when any PE's buffer cannot be shared or a peer is out of reach.
  Window(Comm& comm, void* ptr, uint64_t bytes, int contexts, int signals, int counters);
  // Local teardown (comm abort): unmaps the peers' windows, frees this PE's arrays (a region
  // registered with the proxy's engine goes with the engine).
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  // Collective: waits for this GPU's work and for every PE, then releases the signals.
  void deregister();

  const gshmem_window_t& device() const { return state_; }

 private:
  void release_local() noexcept;  // what is this PE's alone (also on abort)
  void deregister_region();       // collective: the engine forgets the window's memory

  Comm& comm_;
  gshmem_window_t state_{};
  std::vector<void*> imported_;  // peers' windows opened through CUDA IPC (to close)
  void* signals_ = nullptr;      // symmetric: this PE's signal array
  void* tables_ = nullptr;       // device arrays bases | sizes | signal bases
  void* counters_ = nullptr;     // cudaMalloc'ed; null when they come from the proxy's pool
  int proxy_region_ = -1;        // the engine's region of this window, -1: none
  uint64_t counter_first_ = 0;   // in the proxy path's pool
  bool pooled_counters_ = false; // counter_first_ is taken from the pool
};

}  // namespace gshmem

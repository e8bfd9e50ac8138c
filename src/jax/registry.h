// Per-device state of the JAX adapter: which comm serves XLA's device ordinal N, and the
// symmetric memory the permute uses (XLA's buffers are not symmetric). Python attaches a device
// after creating its comm (gshmem.jax.init) and detaches it before finalizing the comm.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gshmem/gshmem.h"
#include "permute_ll.cuh"

namespace gshmem::jax {

struct DeviceState {
  gshmem_comm_t comm = nullptr;
  gshmem_device_t device{};  // for the kernels
  int rank = -1;             // this device's PE
  int nranks = 0;
  // copy-engine path: two symmetric receive slots of slot_bytes, and per slot a "ready" flag
  // (set by the receiver on its sender: the slot is free) and an "arrived" flag (set by the
  // sender on the receiver: a chunk is in it)
  char* slots = nullptr;
  size_t slot_bytes = 0;
  uint64_t* ready = nullptr;    // [2]
  uint64_t* arrived = nullptr;  // [2]
  cudaStream_t side = nullptr;  // the sender's puts, overlapping the receiver's copies out
  cudaEvent_t fork = nullptr, join = nullptr;
  LLLayout ll{};  // kernel path
};

// The state of `ordinal`, or nullptr when no comm is attached to it.
const DeviceState* device_state(int ordinal);

}  // namespace gshmem::jax

extern "C" {
// Attaches `comm` to XLA device `ordinal`. Symmetric allocations of that comm: `slots`
// (2 * slot_bytes), `flags` (32 bytes, zeroed), `ll` (permute_ll.cuh's ll_bytes(npes,
// ll_words), zeroed). Returns 0, or 1 with gshmem_jax_last_error() set.
int gshmem_jax_attach(int ordinal, void* comm, void* slots, size_t slot_bytes, void* flags, void* ll,
                      size_t ll_words);
// Forgets the comm of `ordinal` (before it is finalized). Calls already enqueued are unaffected.
void gshmem_jax_detach(int ordinal);
const char* gshmem_jax_last_error(void);
// Bytes of the `ll` allocation for `npes` PEs and `words` 4-byte words per source.
size_t gshmem_jax_ll_bytes(int npes, size_t words);
}

// Per-device state of the JAX adapter: which comm serves XLA's device ordinal N, and the
// symmetric staging the permute uses (XLA's buffers are not symmetric). Python attaches a device
// after creating its comm (gshmem.jax.init) and detaches it before finalizing the comm.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gshmem/gshmem.h"

namespace gshmem::jax {

struct DeviceState {
  gshmem_comm_t comm = nullptr;
  int rank = -1;              // this device's PE
  int nranks = 0;
  void* slot = nullptr;       // symmetric receive slot of slot_bytes
  size_t slot_bytes = 0;
  uint64_t* ready = nullptr;  // symmetric flag: "my receiver's slot is free" (set by the receiver)
  uint64_t* arrived = nullptr;  // symmetric flag: "a chunk is in my slot" (set by the sender)
};

// The state of `ordinal`, or nullptr when no comm is attached to it.
const DeviceState* device_state(int ordinal);

}  // namespace gshmem::jax

extern "C" {
// Attaches `comm` to XLA device `ordinal`; `slot` (slot_bytes) and `flags` (16 bytes, zeroed)
// are symmetric allocations of that comm. Returns 0, or 1 with gshmem_jax_last_error() set.
int gshmem_jax_attach(int ordinal, void* comm, void* slot, size_t slot_bytes, void* flags);
// Forgets the comm of `ordinal` (before it is finalized). Calls already enqueued are unaffected.
void gshmem_jax_detach(int ordinal);
const char* gshmem_jax_last_error(void);
}

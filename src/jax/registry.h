// Per-device state of the JAX adapter: which comm serves XLA's device ordinal N, and the
// symmetric staging the permutes use (XLA's buffers are not symmetric). Python attaches a device
// after creating its comm (gshmem.jax.init) and detaches it before finalizing the comm. Devices
// attached in one process get peer access to one another (the direct ppermute: permute.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gshmem/gshmem.h"

namespace gshmem::jax {

// Channel 0 serves the synchronous ppermute on XLA's stream. Channels 1.. serve the overlapped
// permutes (ppermute_start/_done, the ring attention's): each has a stream of its own on which
// its transfers run while XLA's stream computes, and two events joining it to XLA's stream.
constexpr int kChannels = 5;
// An exchange goes in chunks of half a slot: chunk k lands in half k % 2, so while the receiver
// copies chunk k out of one half the sender puts chunk k + 1 into the other.
constexpr int kHalves = 2;
// The smallest slot attach accepts (GSHMEM_JAX_SLOT_BYTES): chunks of at least 32 KiB.
constexpr size_t kMinSlotBytes = 64 * 1024;

struct Channel {
  void* slot = nullptr;  // symmetric receive slot of slot_bytes: kHalves halves of half_bytes
  // symmetric flags per half [nranks]: ready[h][q] = "receiver q's half h is free", set here by
  // q. One per receiver, so exchanges of a channel in other directions (a permutation and its
  // inverse, the ring's forward and backward) never take one another's signal.
  uint64_t* ready[kHalves] = {};
  uint64_t* arrived[kHalves] = {};  // symmetric flag: "a chunk is in my half h" (set by the sender)
  cudaStream_t stream = nullptr;  // channels >= 1: where the transfers run
  // Copies out of the slot when an exchange has several chunks, forked from and joined back to
  // the stream the exchange runs on, so a chunk's copy-out overlaps the next chunk's put.
  cudaStream_t copier = nullptr;
  cudaEvent_t issued = nullptr;   // recorded on XLA's stream when a start is enqueued
  cudaEvent_t landed = nullptr;   // recorded on `stream` when the start's transfers are done
  cudaEvent_t forked = nullptr;   // the copier's fork from, and join to, the exchange's stream
  cudaEvent_t copied = nullptr;
};

struct DeviceState {
  gshmem_comm_t comm = nullptr;
  int device = -1;  // the CUDA device
  int rank = -1;    // this device's PE
  int nranks = 0;
  size_t slot_bytes = 0;
  size_t half_bytes = 0;  // a chunk: slot_bytes / kHalves, rounded down to 256 bytes
  double timeout_s = 0;   // the comm's GSHMEM_TIMEOUT (0: no limit), for host-side waits
  Channel channels[kChannels];
};

// The state of `ordinal`, or nullptr when no comm is attached to it.
const DeviceState* device_state(int ordinal);

// The ordinal of this process's device whose comm is PE `pe`, or -1 (the PE is in another
// process).
int local_ordinal(int pe);

// Whether device `from` loads and stores memory that cudaMalloc gave device `to` (ordinals):
// attach enables peer access between the devices of this process where the GPUs allow it.
bool peer_access(int from, int to);

}  // namespace gshmem::jax

extern "C" {
// Channels per device: attach wants that many slots.
int gshmem_jax_channels(void);
// The 8-byte flags attach wants for a comm of `nranks` PEs: kHalves x (nranks + 1) per channel.
size_t gshmem_jax_flags(int nranks);
// Attaches `comm` to XLA device `ordinal`; `slots` (gshmem_jax_channels() x slot_bytes, one slot
// after the other; slot_bytes >= 64 KiB) and `flags` (gshmem_jax_flags(nranks) x 8 bytes, zeroed;
// nranks: the comm's PEs) are symmetric allocations of that comm. Creates the channels' streams
// and events on the comm's GPU, and enables peer access between it and the devices attached
// before it.
// Returns 0, or 1 with gshmem_jax_last_error() set.
int gshmem_jax_attach(int ordinal, void* comm, void* slots, size_t slot_bytes, void* flags);
// Forgets the comm of `ordinal` (before it is finalized) and releases its streams and events.
// Calls already enqueued are unaffected.
void gshmem_jax_detach(int ordinal);
const char* gshmem_jax_last_error(void);
}

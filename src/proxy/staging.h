// Staging: how the network engine moves GPU memory over transports that cannot touch it (TCP):
// through pinned host chunks it copies to and from itself, so that UCX moves host memory only
// (UCX's own path for GPU memory over TCP copies every fragment on its own: ~0.4 GB/s measured,
// host memory over the same loopback 4.4-6.6 GB/s). A bulk transfer of staged memory travels in
// parts of one chunk each; outgoing and incoming parts take chunks from separate pools, so two
// ranks sending to each other can never hold all chunks while each waits for the other to
// receive. Installed on an engine by a comm (make_gpu_staging); without one the engine hands
// every buffer to UCX as it is.
#pragma once

#include <cstddef>
#include <memory>

namespace gshmem::proxy {

class Staging {
 public:
  virtual ~Staging() = default;
  // Whether `p` must be staged (GPU memory).
  virtual bool staged(const void* p) const = 0;
  // Bytes of one chunk (one part of a transfer).
  virtual size_t chunk_bytes() const = 0;
  // A free chunk for an outgoing or an incoming part, or null when the pool is exhausted (try
  // again once a part finished).
  virtual void* take(bool outgoing) = 0;
  virtual void give_back(void* chunk, bool outgoing) = 0;
  // Copies `bytes` between a chunk and staged memory; returns once the copy is complete.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

// Staging for GPU `device`: `chunks` pinned chunks of `chunk_bytes` per direction, copies on a
// non-blocking stream of its own (they wait for nothing else on the GPU).
std::unique_ptr<Staging> make_gpu_staging(int device, size_t chunk_bytes, int chunks);

}  // namespace gshmem::proxy

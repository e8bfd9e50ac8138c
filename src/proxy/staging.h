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
#include <vector>

namespace gshmem::proxy {

class Staging {
 public:
  virtual ~Staging() = default;
  // Whether `p` must be staged (GPU memory).
  virtual bool staged(const void* p) const = 0;
  // Bytes of one chunk (one part of a transfer).
  size_t chunk_bytes() const { return chunk_bytes_; }
  // A free chunk for an outgoing or an incoming part, or null when that pool is exhausted (try
  // again once a part finished).
  void* take(bool outgoing) {
    std::vector<void*>& pool = free_[outgoing ? 0 : 1];
    if (pool.empty()) return nullptr;
    void* chunk = pool.back();
    pool.pop_back();
    return chunk;
  }
  void give_back(void* chunk, bool outgoing) { free_[outgoing ? 0 : 1].push_back(chunk); }
  // Starts copying `bytes` between `chunk` and staged memory (dst or src is the chunk); one copy
  // per chunk at a time. Not blocking.
  virtual void start_copy(void* chunk, void* dst, const void* src, size_t bytes) = 0;
  // Whether the copy last started on `chunk` is complete. Throws on a failed copy.
  virtual bool copied(void* chunk) = 0;

 protected:
  explicit Staging(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}
  // Makes `chunk` (of chunk_bytes()) part of one pool; derived classes own the memory.
  void add_chunk(void* chunk, bool outgoing) { give_back(chunk, outgoing); }

 private:
  size_t chunk_bytes_;
  std::vector<void*> free_[2];  // outgoing, incoming
};

// Staging for GPU `device`: `chunks` pinned chunks of `chunk_bytes` per direction; copies out
// of and into the GPU on two non-blocking streams of its own (they wait for nothing else on the
// GPU), completion seen through an event per chunk.
std::unique_ptr<Staging> make_gpu_staging(int device, size_t chunk_bytes, int chunks);

}  // namespace gshmem::proxy

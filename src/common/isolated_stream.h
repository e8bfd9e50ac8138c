// IsolatedStream: a stream in a CUDA context of its own on one device, for work that must run
// while this process's ordinary streams are blocked.
//
// Why: the streams of a context share a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS). A
// stream blocked at a stream memory operation's wait, or at an event of such a stream, holds
// its queue, and work queued behind it from any other stream of the context waits too: measured
// (H100, a ring-attention step whose peer was killed) as a release write that never ran, because
// its stream shared a queue with a side stream waiting on the blocked one. A second context has
// queues of its own, and the GPU schedules it while the first one's queues are blocked. The
// process's memory mappings (the symmetric heap included) are valid in every context of the
// device, so work here reaches the same addresses.
//
// Creating a context takes time and device memory: make one only where the primary context's
// queues were seen to be stuck. Not thread-safe; the owner serialises calls.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>

namespace gshmem::cuda {

class IsolatedStream {
 public:
  // Creates the context and a non-blocking stream in it; the calling thread's current context
  // is left as it was. Throws GSHMEM_ERROR_CUDA.
  explicit IsolatedStream(int device);
  ~IsolatedStream();  // destroys the context (and the stream with it)
  IsolatedStream(const IsolatedStream&) = delete;
  IsolatedStream& operator=(const IsolatedStream&) = delete;

  // Queues a 64-bit write of `value` to `address` (device memory mapped in this process),
  // ordered after a memory barrier like cuStreamWriteValue64's default. Throws on failure.
  void write_value64(uint64_t* address, uint64_t value);
  // Whether everything queued has run, polling for at most `limit`.
  bool idle_within(std::chrono::milliseconds limit);

 private:
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

// Whether the primary-context `stream` has run everything queued on it, polling for at most
// `limit`. False (not an exception) when the query fails.
bool stream_idle_within(cudaStream_t stream, std::chrono::milliseconds limit);

}  // namespace gshmem::cuda

// StreamState: what the on-stream operations (DESIGN.md §2.6, docs/on-stream.md) need from a comm
// beyond its heap and device state. Built collectively as the last step of comm init, because it
// allocates symmetric memory: the counters of barriers on stream, kept apart from the device
// API's (dev.sync) so that a stream barrier never shares counters with a user kernel's barrier
// that may run at the same time on another stream.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/isolated_stream.h"

#include "gshmem/device_state.h"

namespace gshmem {

class Comm;

namespace stream {

// GSHMEM_STREAM_KERNEL_MAX_BYTES: put/get/put_signal of at most this many bytes (and more than
// 0) are copied by a one-block kernel instead of the copy engines (default 16 KiB, measured;
// 0: always the copy engines). Re-read from the environment at each call; a bad value is a
// usage error.
uint64_t kernel_max_bytes_from_env();

class StreamState {
 public:
  // Collective over the comm (one zeroed heap allocation). Throws gshmem::Error.
  explicit StreamState(Comm& comm);
  // The barrier counters are released with the heap (a free would be a collective), which is
  // why the comm destroys this object before its heap.
  ~StreamState();
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

  // The comm's gshmem_device_t with `sync` pointing at the stream barriers' own counters.
  const gshmem_device_t& barrier_device() const { return barrier_device_; }
  // GSHMEM_STREAM_KERNEL_MAX_BYTES as it was when the comm was created.
  uint64_t kernel_max_bytes() const { return kernel_max_bytes_; }
  // Whether the GPU runs 64-bit stream memory operations (cuStreamWrite/WaitValue64); when it
  // does not, signals and waits take the one-thread kernel paths instead.
  bool memops() const { return memops_; }
  // GSHMEM_STREAM_WAIT=kernel (read at comm creation): every on-stream wait takes the bounded
  // one-thread kernel instead of a stream memory operation.
  bool wait_kernel() const { return wait_kernel_; }

  // Remembers a stream memory operation's wait on `sig` (no deadline bounds those) with a value
  // that satisfies it; the last kNotedWaits distinct ones are kept. Any thread.
  void note_wait(uint64_t* sig, uint64_t satisfying);
  // Writes every noted value into its signal, so that streams blocked on a peer that will never
  // signal go on (with undefined data). For a comm that has stopped; the watchdog calls it again
  // every period (a stream may re-arm a flag and wait on it again). The writes go on a stream of
  // this comm's own; when that stream's hardware queue turns out to be stuck behind a blocked
  // stream, on an IsolatedStream (a context of its own) from then on. Returns once the writes
  // ran, or after about a second for a GPU that does not run them.
  void release_waits() noexcept;

  static constexpr size_t kNotedWaits = 64;

 private:
  struct NotedWait {
    uint64_t* sig;
    uint64_t value;
  };
  gshmem_device_t barrier_device_{};
  uint64_t kernel_max_bytes_ = 0;
  bool memops_ = false;
  bool wait_kernel_ = false;
  int device_ = 0;
  cudaStream_t release_stream_ = nullptr;
  std::unique_ptr<cuda::IsolatedStream> isolated_;  // made at the first release that got stuck
  std::mutex waits_mutex_;
  std::array<NotedWait, kNotedWaits> waits_{};
  size_t next_wait_ = 0;
};

}  // namespace stream
}  // namespace gshmem

// FaultState: where a comm's bounded device waits report that they gave up, and how the host
// makes them give up (gshmem_fault_t in include/gshmem/device_state.h, docs/reliability.md).
//
// The record lives in host memory mapped into the GPU: kernels write it while the host may be
// blocked elsewhere, and the host reads it with a plain load, without synchronising with kernels
// that may still run. Faults found on the host (a peer process died) are kept beside it. Once a
// fault is recorded the comm stays failed: every later call raises GSHMEM_ERROR_FAULT.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "gshmem/device_state.h"

namespace gshmem {

// "PE 0 gave up waiting for PE 1 after 120.0 s: signal_wait_until(0x7f.., GE 5) saw 4 ...".
// Pure: the CPU tests check it on hand-made records.
std::string describe_fault(const gshmem_fault_t& f, int my_pe);

class FaultState {
 public:
  // Allocates the mapped record and the claim word on `device`. Throws gshmem::Error.
  explicit FaultState(int device);
  ~FaultState();
  FaultState(const FaultState&) = delete;
  FaultState& operator=(const FaultState&) = delete;

  // Addresses for gshmem_device_t.fault and .fault_claim.
  uint64_t record_address() const;
  uint64_t claim_address() const { return reinterpret_cast<uint64_t>(claim_); }

  // Makes every bounded wait of the comm give up at its next check. Any thread.
  void request_abort() noexcept;
  // Records a fault found on the host, unless one is recorded already. Any thread.
  void record_host(const std::string& message) noexcept;
  // Whether a fault is recorded (device or host). One load from host memory; any thread.
  bool failed() const noexcept;
  // Throws Error(GSHMEM_ERROR_FAULT) describing the first fault, if there is one.
  void check(int my_pe) const;

 private:
  int device_;
  gshmem_fault_t* record_ = nullptr;  // cudaHostAlloc(mapped)
  uint32_t* claim_ = nullptr;         // cudaMalloc, zeroed
  std::atomic<bool> host_failed_{false};
  mutable std::mutex mutex_;          // guards host_message_
  std::string host_message_;
};

}  // namespace gshmem

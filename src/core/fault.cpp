#include "core/fault.h"

#include <cinttypes>
#include <cstdio>

#include "common/cuda_api.h"
#include "common/error.h"

namespace gshmem {
namespace {

const char* wait_name(int op) {
  switch (op) {
    case GSHMEM_WAIT_SIGNAL: return "signal_wait_until";
    case GSHMEM_WAIT_VALUE: return "wait_until";
    case GSHMEM_WAIT_BARRIER: return "a device barrier";
    case GSHMEM_WAIT_COLLECTIVE: return "a collective kernel";
    case GSHMEM_WAIT_MOE: return "a gshmem.moe kernel";
    case GSHMEM_WAIT_PROXY: return "a proxy-path operation";
    case GSHMEM_WAIT_PACKETS: return "wait_packets";
    default: return "a device wait";
  }
}

// Why a wait stopped before its deadline; nullptr when it ran out of time (GSHMEM_TIMEOUT).
const char* stop_reason(int cause) {
  switch (cause) {
    case GSHMEM_FAULT_ABORT: return "the comm was aborted";
    case GSHMEM_FAULT_OTHER: return "another wait of this comm had failed";
    case GSHMEM_FAULT_PROXY:
      return "the comm's proxy thread failed (a network peer died or the network failed)";
    default: return nullptr;
  }
}

const char* cmp_name(int cmp) {
  static const char* const names[] = {"==", "!=", ">", ">=", "<", "<="};
  return cmp >= 0 && cmp < 6 ? names[cmp] : nullptr;
}

}  // namespace

std::string describe_fault(const gshmem_fault_t& f, int my_pe) {
  std::string who = f.pe >= 0 ? "PE " + std::to_string(f.pe) : "a peer";
  char buf[512];
  const double seconds = static_cast<double>(f.waited_ns) * 1e-9;
  if (const char* why = stop_reason(f.cause)) {
    std::snprintf(buf, sizeof buf, "PE %d: %s waiting for %s stopped because %s", my_pe,
                  wait_name(f.op), who.c_str(), why);
  } else {
    std::snprintf(buf, sizeof buf,
                  "PE %d: %s gave up waiting for %s after %.1f s (GSHMEM_TIMEOUT); is %s alive "
                  "and making the same calls?",
                  my_pe, wait_name(f.op), who.c_str(), seconds, who.c_str());
  }
  std::string out = buf;
  if (const char* c = cmp_name(f.cmp)) {
    std::snprintf(buf, sizeof buf,
                  " Waited for the word at 0x%" PRIx64 " to be %s %" PRIu64 "; it was %" PRIu64
                  " (block %d, thread %d).",
                  f.addr, c, f.expected, f.seen, f.block, f.thread);
    out += buf;
  }
  return out + " The comm can only be aborted now.";
}

FaultState::FaultState(int device) : device_(device) {
  cuda::DeviceGuard guard(device);
  void* host = nullptr;
  cuda::check(
      cudaHostAlloc(&host, sizeof(gshmem_fault_t), cudaHostAllocMapped | cudaHostAllocPortable),
      "allocating the fault record");
  record_ = static_cast<gshmem_fault_t*>(host);
  *record_ = gshmem_fault_t{};
  void* claim = nullptr;
  if (cudaMalloc(&claim, sizeof(uint32_t)) != cudaSuccess ||
      cudaMemset(claim, 0, sizeof(uint32_t)) != cudaSuccess) {
    cudaFree(claim);
    cudaFreeHost(host);
    throw_error(GSHMEM_ERROR_CUDA, "allocating the fault claim word failed");
  }
  claim_ = static_cast<uint32_t*>(claim);
}

FaultState::~FaultState() {
  try {
    cuda::DeviceGuard guard(device_);
    cudaFree(claim_);  // nothing more to do if these fail during teardown
    cudaFreeHost(record_);
  } catch (const Error&) {
  }
}

uint64_t FaultState::record_address() const {
  void* dev = nullptr;
  cuda::check(cudaHostGetDevicePointer(&dev, record_, 0), "mapping the fault record");
  return reinterpret_cast<uint64_t>(dev);
}

void FaultState::request_abort() noexcept {
  reinterpret_cast<volatile uint32_t*>(&record_->abort)[0] = 1;
}

void FaultState::record_host(const std::string& message) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (host_failed_.load() || failed()) return;
  host_message_ = message;
  host_failed_.store(true);
}

bool FaultState::failed() const noexcept {
  return host_failed_.load(std::memory_order_acquire) ||
         reinterpret_cast<const volatile uint32_t*>(&record_->recorded)[0] != 0;
}

void FaultState::check(int my_pe) const {
  if (!failed()) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (reinterpret_cast<const volatile uint32_t*>(&record_->recorded)[0] != 0) {
    gshmem_fault_t copy;
    const volatile gshmem_fault_t* r = record_;
    copy.op = r->op;
    copy.cause = r->cause;
    copy.pe = r->pe;
    copy.cmp = r->cmp;
    copy.block = r->block;
    copy.thread = r->thread;
    copy.addr = r->addr;
    copy.expected = r->expected;
    copy.seen = r->seen;
    copy.waited_ns = r->waited_ns;
    // A kernel that gave up because the host aborted after a dead peer reports the peer.
    if (copy.cause == GSHMEM_FAULT_ABORT && host_failed_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      throw_error(GSHMEM_ERROR_FAULT, host_message_);
    }
    throw_error(GSHMEM_ERROR_FAULT, describe_fault(copy, my_pe));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  throw_error(GSHMEM_ERROR_FAULT, host_message_);
}

}  // namespace gshmem

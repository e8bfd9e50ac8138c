// Bounded waits (docs/reliability.md). Every blocking device call that takes a Device polls with
// a Deadline, which makes the wait give up when
//   - it has lasted longer than dev.timeout_ns (GSHMEM_TIMEOUT; 0: no time limit),
//   - the host aborted the comm (comm.abort(), or the watchdog after a peer died), or
//   - another wait of this comm has already given up (so a failed job drains in milliseconds),
//   - the comm's proxy thread stopped on an error (a network peer failed: proxy.cuh).
// The first wait that gives up records what it waited for in dev.fault; the host raises
// gshmem.FaultError naming the peer and the operation at the comm's next call. A wait that gives
// up returns as if done, reporting false: the kernel may stop early or run on (its results are
// undefined either way). Nothing traps, so the CUDA context stays usable and the process can
// report the error and tear down.
//
// Cost: one counter increment per poll. Every kCheckEvery polls a wait reads the clock and the
// claim word (GPU memory), and the host's flags (abort, the proxy's failure: PCIe reads) only
// once per kHostCheckNs of waiting. Reading them at every check kept per-process JAX permutes of
// 256 KiB at ~600 us per call instead of ~8, a state that held call after call (a wait long
// enough to read host memory outlasted the partner's, whose next wait then did the same:
// docs/jax-measured.md); once per millisecond removed it, and an abort still lands within about
// one.
#pragma once

#include "ptx.cuh"
#include "types.cuh"

namespace gshmem {
namespace detail {

constexpr unsigned kCheckEvery = 1024;
constexpr unsigned long long kHostCheckNs = 1000000;  // 1 ms

__device__ inline unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// What a wait is waiting for, as the fault record names it.
struct Waited {
  int op;             // GSHMEM_WAIT_*
  int pe;             // the PE expected to write, -1 when not known
  int cmp;            // static_cast<int>(Cmp), -1 when the wait is not a comparison
  const void* addr;   // the word polled
  uint64_t expected;  // the value compared against
};

// Stores the record unless another wait already claimed it. The claim is an atomic on GPU memory;
// the fields are plain system-scope stores to host memory, `recorded` last after a fence.
__device__ inline void record_fault(const Device& dev, const Waited& w, uint64_t seen,
                                    unsigned long long waited_ns, int cause) {
  if (dev.fault == 0 || dev.fault_claim == 0) return;
  if (atomicCAS(reinterpret_cast<unsigned*>(dev.fault_claim), 0u, 1u) != 0u) return;
  volatile gshmem_fault_t* f = reinterpret_cast<volatile gshmem_fault_t*>(dev.fault);
  f->op = w.op;
  f->cause = cause;
  f->pe = w.pe;
  f->cmp = w.cmp;
  f->block = static_cast<int32_t>(blockIdx.x);
  f->thread = static_cast<int32_t>(threadIdx.x);
  f->addr = reinterpret_cast<uint64_t>(w.addr);
  f->expected = w.expected;
  f->seen = seen;
  f->waited_ns = waited_ns;
  __threadfence_system();
  f->recorded = 1;
}

// The record's view of a compared value: its bits, zero-extended.
template <class T>
__device__ inline uint64_t fault_bits(T v) {
  return static_cast<uint64_t>(to_bits(v));
}

}  // namespace detail

// One per wait, constructed before the polling loop; expired() is called after each poll that
// did not succeed. Made by the one thread that polls.
class Deadline {
 public:
  // Whether the wait must give up now; if so, the fault is recorded (first one wins).
  __device__ bool expired(const Device& dev, const detail::Waited& w, uint64_t seen) {
    if ((++polls_ & (detail::kCheckEvery - 1)) != 0) return false;
    const unsigned long long now = detail::globaltimer();
    if (start_ == 0) start_ = host_checked_ = now;
    int cause = 0;
    // A claimed record: another wait of this comm gave up (it claims before it records).
    if (dev.fault_claim != 0 && *reinterpret_cast<const volatile uint32_t*>(dev.fault_claim) != 0) {
      cause = GSHMEM_FAULT_OTHER;
    } else if (now - host_checked_ >= detail::kHostCheckNs) {
      host_checked_ = now;
      cause = host_cause(dev);
    }
    if (cause == 0 && dev.timeout_ns != 0 && now - start_ > dev.timeout_ns) {
      cause = GSHMEM_FAULT_TIMEOUT;
    }
    if (cause == 0) return false;
    detail::record_fault(dev, w, seen, now - start_, cause);
    return true;
  }

 private:
  // What the host's flags say: the comm aborted, its proxy failed, or nothing (0).
  __device__ static int host_cause(const Device& dev) {
    if (dev.fault != 0 && reinterpret_cast<const volatile gshmem_fault_t*>(dev.fault)->abort != 0) {
      return GSHMEM_FAULT_ABORT;
    }
    if (dev.proxy_failed != 0 &&
        *reinterpret_cast<const volatile uint64_t*>(dev.proxy_failed) != 0) {
      return GSHMEM_FAULT_PROXY;
    }
    return 0;
  }

  unsigned long long start_ = 0;
  unsigned long long host_checked_ = 0;  // when this wait last read the host's flags
  unsigned polls_ = 0;
};

}  // namespace gshmem

// signal_op and signal_wait_until on a stream, by stream memory operations where they express the
// operation (zero SMs; captured into CUDA graphs as memory-operation nodes), else by one-thread
// kernels built on the device API's signal_op / signal_wait_until.
//
//   SET      cuStreamWriteValue64 on the peer's mapping of the signal, default flags: the write
//            is preceded by a memory barrier scoped to the stream (like __threadfence_system()),
//            so everything earlier on the stream, copy-engine copies included, is visible first.
//   ADD      no stream memory operation adds: a one-thread kernel does red.release.sys.add.
//   EQ       cuStreamWaitValue64(EQ).
//   GE, GT   cuStreamWaitValue64(GEQ) with value (GT: value + 1) when that is below 2^63. GEQ
//            compares cyclically, (int64_t)(*sig - value) >= 0, which is the unsigned comparison
//            while the signal is below 2^63 too (gshmem.h states the contract). Larger values use
//            the kernel, which compares unsigned.
//   NE LT LE a one-thread kernel polling with ld.acquire.sys (the device API's bounded wait).
// No deadline bounds a stream memory operation's wait: each is noted with the value that
// satisfies it (StreamState::note_wait), and when the comm stops (a dead peer, a failed device
// wait, comm.abort()) the host writes those values, so no stream stays blocked. Under
// GSHMEM_STREAM_WAIT=kernel every wait takes the bounded kernel instead (one SM slot while it
// waits, a kernel launch more per wait).
// After a satisfied wait, later stream work sees what the signalling PE wrote before its update:
// that PE's update was released after its data (above), the data sits in this GPU's memory, and
// later kernels and copies read it from there.
#include <cstdint>

#include "common/cuda_api.h"
#include "core/comm.h"
#include "gshmem/gshmem.h"
#include "stream/kernels.h"
#include "stream/ops.h"
#include "stream/validate.h"

namespace gshmem::stream {
namespace {

constexpr uint64_t kCyclicMax = static_cast<uint64_t>(INT64_MAX);

CUdeviceptr device_ptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

void enqueue_signal(Comm& comm, uint64_t* sig_sym, uint64_t value, int op, int pe,
                    cudaStream_t stream) {
  if (op == GSHMEM_SIGNAL_SET && comm.stream_state().memops() && !comm.via_proxy(pe)) {
    const CUdeviceptr target = device_ptr(comm.heap().peer_ptr(sig_sym, pe));
    cuda::check(cuda::driver().stream_write_value64(reinterpret_cast<CUstream>(stream), target,
                                                    value, CU_STREAM_WRITE_VALUE_DEFAULT),
                "cuStreamWriteValue64 (signal SET on stream)");
    return;
  }
  kernels::signal_op(comm.device_state().device(), sig_sym, value, op, pe, stream);
}

void signal_op(Comm& comm, uint64_t* sig_sym, uint64_t value, int op, int pe,
               cudaStream_t stream) {
  constexpr const char* name = "signal_op_on_stream";
  require_reachable(comm, name, pe);
  require_signal(comm, name, sig_sym);
  require_signal_op(name, op);
  cuda::DeviceGuard current(comm.device());
  enqueue_signal(comm, sig_sym, value, op, pe, stream);
}

void signal_wait_until(Comm& comm, uint64_t* sig_sym, int cmp, uint64_t value,
                       cudaStream_t stream) {
  constexpr const char* name = "signal_wait_until_on_stream";
  require_signal(comm, name, sig_sym);
  require_cmp(name, cmp, value);
  // GE 0 and LE UINT64_MAX hold for every signal value: nothing to wait for.
  if ((cmp == GSHMEM_CMP_GE && value == 0) || (cmp == GSHMEM_CMP_LE && value == UINT64_MAX)) return;
  cuda::DeviceGuard current(comm.device());
  StreamState& state = comm.stream_state();
  if (state.memops() && !state.wait_kernel()) {
    const CUstream s = reinterpret_cast<CUstream>(stream);
    const auto& d = cuda::driver();
    if (cmp == GSHMEM_CMP_EQ) {
      state.note_wait(sig_sym, value);
      cuda::check(d.stream_wait_value64(s, device_ptr(sig_sym), value, CU_STREAM_WAIT_VALUE_EQ),
                  "cuStreamWaitValue64 (wait EQ on stream)");
      return;
    }
    const bool ge = cmp == GSHMEM_CMP_GE && value <= kCyclicMax;
    const bool gt = cmp == GSHMEM_CMP_GT && value < kCyclicMax;
    if (ge || gt) {
      const uint64_t bound = gt ? value + 1 : value;
      state.note_wait(sig_sym, bound);
      cuda::check(d.stream_wait_value64(s, device_ptr(sig_sym), bound, CU_STREAM_WAIT_VALUE_GEQ),
                  "cuStreamWaitValue64 (wait GE on stream)");
      return;
    }
  }
  kernels::wait_until(comm.device_state().device(), sig_sym, cmp, value, stream);
}

}  // namespace gshmem::stream

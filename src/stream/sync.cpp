// quiet and barrier on a stream.
//
// quiet enqueues nothing, because stream order already completes every operation above before
// anything later on the stream starts:
//   - copy-engine copies (put, get, put_signal's data) and stream memory operations (signal SET,
//     waits) complete in stream order: the next operation starts once the copy's writes have
//     been performed in the destination memory, and a later cuStreamWriteValue64 or kernel
//     release is ordered after them;
//   - kernels (small messages, signal ADD, waits, barrier) complete at the kernel boundary: the
//     next operation starts once the kernel has ended, and a kernel's writes, local or to a
//     peer's memory over NVLink/PCIe, are performed by then.
// What a quiet promises other PEs ("visible") needs a synchronisation that they observe; on a
// stream that is a later signal (put_signal, signal_op) or barrier, which release everything
// before them by themselves, or the host waiting for the stream and then using its own channel.
//
// barrier: a one-warp kernel running the device API's barrier<Block> (fence.sc.sys, then the
// counter-based team sync of device/barrier.cuh) over the world team, on the comm's
// gshmem_device_t with `sync` pointing at counters only stream barriers use (StreamState). The
// counters and tallies live in device memory and only grow, so a CUDA graph that captured the
// barrier is correct on every replay, as long as every PE replays its graph the same number of
// times; nothing host-side is baked into the graph.
#include "common/cuda_api.h"
#include "core/comm.h"
#include "stream/kernels.h"
#include "stream/ops.h"
#include "stream/validate.h"

namespace gshmem::stream {

void quiet(Comm& comm, cudaStream_t /*stream: stream order already completes its work*/) {
  comm.heap();  // throws if the comm has been finalized
}

void barrier(Comm& comm, cudaStream_t stream) {
  require_all_reachable(comm, "barrier_on_stream");
  cuda::DeviceGuard current(comm.device());
  kernels::barrier(comm.stream_state().barrier_device(), stream);
}

}  // namespace gshmem::stream

// Kernels of the proxy-path GPU test (tests/cpu/net_worker.py, scenario gpu_producers): GPU
// threads as producers on the proxy queue (gshmem/device/proxy.cuh). extern "C" so they can be
// fetched by name.
#include <gshmem/device/proxy.cuh>

using gshmem::proxy::Command;
using gshmem::proxy::Descriptor;
using gshmem::proxy::Op;
using gshmem::proxy::QueueView;

// Every thread of the grid appends `per_thread` descriptors of `op`: piece p = thread *
// per_thread + k covers bytes [p * chunk, (p + 1) * chunk) of `src` and of the target's region;
// a put_signal or signal adds 1 to the signal word at `signal_offset`; puts count completions
// in counter 0. A full queue is retried (the proxy thread frees slots as it takes them);
// `full_waits` counts the retries.
extern "C" __global__ void proxy_push(Descriptor* slots, uint64_t* tail, uint64_t* head,
                                      uint64_t capacity, int op, int pe, int region,
                                      const char* src, uint64_t chunk, int signal_region,
                                      uint64_t signal_offset, uint64_t per_thread,
                                      unsigned long long* full_waits) {
  const QueueView q{slots, tail, head, capacity};
  const uint64_t thread = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  for (uint64_t k = 0; k < per_thread; ++k) {
    const uint64_t piece = thread * per_thread + k;
    Command c;
    c.op = static_cast<Op>(op);
    c.pe = static_cast<uint32_t>(pe);
    c.region = static_cast<uint16_t>(region);
    c.local = reinterpret_cast<uint64_t>(src + piece * chunk);
    c.offset = piece * chunk;
    c.bytes = chunk;
    c.signal_region = static_cast<uint16_t>(signal_region);
    c.signal_offset = signal_offset;
    c.signal_value = 1;
    c.counter = c.op == Op::kPut || c.op == Op::kPutSignal ? 1 : 0;
    while (!gshmem::proxy::try_push(q, c)) atomicAdd(full_waits, 1ull);
  }
}

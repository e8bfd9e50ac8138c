// Benchmark kernels for `python -m gshmem.bench p2p` (python/gshmem/bench/p2p.py). Compiled once
// per process by CuPy's RawModule (NVRTC); tests/cpu/test_bench.py compiles it with NVRTC and
// nvcc on the CPU. Every kernel is extern "C" so Python fetches it by name. A "unit" is one
// instance of the scope (a thread, a warp or a block); units split each transfer into contiguous
// chunks, as NVSHMEM's perftest does.
#include <gshmem/device.cuh>

namespace {

using gshmem::Block;
using gshmem::Thread;
using gshmem::Warp;
typedef unsigned long long u64;

template <class Scope>
__device__ u64 unit_index() {
  const unsigned per_block = (blockDim.x * blockDim.y * blockDim.z) / Scope::size();
  return static_cast<u64>(blockIdx.x) * per_block + (Block::rank() / Scope::size());
}

template <class Scope>
__device__ u64 unit_count() {
  return static_cast<u64>(gridDim.x) * (blockDim.x * blockDim.y * blockDim.z) / Scope::size();
}

__device__ u64 global_time_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

constexpr int kBwGet = 1;  // bw_loop's mode bits: gets, not puts
constexpr int kBwNbi = 2;  // non-blocking calls, one quiet(dev) at the end

// `iters` puts (or gets) of `bytes`, slot i % nslots of `stride` bytes each: blocking calls then
// quiet, or (kBwNbi) non-blocking ones completed by one quiet(dev). Through the proxy a blocking
// call appends a quiet of its own and waits for it; the non-blocking rows measure the transfers.
template <class Scope>
__device__ void bw_loop(const gshmem::Device& dev, char* dst, const char* src, u64 bytes,
                        u64 stride, int nslots, int iters, int pe, int mode) {
  const u64 units = unit_count<Scope>(), u = unit_index<Scope>();
  u64 per = (bytes + units - 1) / units;
  per = (per + 15) & ~static_cast<u64>(15);  // chunks start 16-byte aligned
  const u64 b = per * u < bytes ? per * u : bytes;
  const u64 e = b + per < bytes ? b + per : bytes;
  const bool get = mode & kBwGet, nbi = mode & kBwNbi;
  for (int i = 0; i < iters; ++i) {
    const u64 off = static_cast<u64>(i % nslots) * stride;
    char* to = dst + off + b;
    const char* from = src + off + b;
    if (get && nbi) {
      gshmem::get_nbi<Scope>(dev, to, from, e - b, pe);
    } else if (get) {
      gshmem::get<Scope>(dev, to, from, e - b, pe);
    } else if (nbi) {
      gshmem::put_nbi<Scope>(dev, to, from, e - b, pe);
    } else {
      gshmem::put<Scope>(dev, to, from, e - b, pe);
    }
  }
  if (nbi) {
    gshmem::quiet<Scope>(dev);
  } else {
    gshmem::quiet<Scope>();
  }
}

// Waits for this PE's `sig` >= v: the bounded form (GSHMEM_TIMEOUT, abort) or the OpenSHMEM one
// that spins forever, so that one run measures what bounding the waits costs.
template <class Scope, bool kBounded>
__device__ void wait_round(const gshmem::Device& dev, const uint64_t* sig, uint64_t v, int peer) {
  if (kBounded) {
    gshmem::signal_wait_until<Scope>(dev, sig, gshmem::Cmp::GE, v, peer);
  } else {
    gshmem::signal_wait_until<Scope>(sig, gshmem::Cmp::GE, v);
  }
}

// Ping-pong with put_signal: the initiator sends round i (signal value i) and waits for the
// reply i; the responder waits for i and replies. The initiator's globaltimer over the timed
// rounds (after `warmup` rounds) goes to out_ns[0].
template <class Scope, bool kBounded>
__device__ void ping_pong(const gshmem::Device& dev, char* buf, const char* src, u64 bytes,
                          uint64_t* sig, int warmup, int iters, int peer, int initiator,
                          u64* out_ns) {
  u64 t0 = 0;
  for (int i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) t0 = global_time_ns();
    if (initiator) {
      gshmem::put_signal<Scope>(dev, buf, src, bytes, sig, static_cast<uint64_t>(i),
                                gshmem::SignalOp::Set, peer);
      wait_round<Scope, kBounded>(dev, sig, static_cast<uint64_t>(i), peer);
    } else {
      wait_round<Scope, kBounded>(dev, sig, static_cast<uint64_t>(i), peer);
      gshmem::put_signal<Scope>(dev, buf, src, bytes, sig, static_cast<uint64_t>(i),
                                gshmem::SignalOp::Set, peer);
    }
  }
  if (initiator && Scope::rank() == 0) out_ns[0] = global_time_ns() - t0;
}

// Ping-pong with packets (put_packets / wait_packets): the same rounds, round i's messages carry
// epoch i in this PE's `packets` buffer (zeroed before the run); each reply is also the credit
// that lets the other side overwrite the buffer it just copied out.
template <class Scope, bool kBounded>
__device__ void ping_pong_packets(const gshmem::Device& dev, char* dst, const char* src,
                                  u64 bytes, void* packets, int warmup, int iters, int peer,
                                  int initiator, u64* out_ns) {
  u64 t0 = 0;
  for (int i = 1; i <= warmup + iters; ++i) {
    if (i == warmup + 1) t0 = global_time_ns();
    const unsigned epoch = static_cast<unsigned>(i);
    if (initiator) gshmem::put_packets<Scope>(dev, packets, src, bytes, epoch, peer);
    if (kBounded) {
      gshmem::wait_packets<Scope>(dev, dst, packets, bytes, epoch, peer);
    } else {
      gshmem::wait_packets<Scope>(dst, packets, bytes, epoch);
    }
    if (!initiator) gshmem::put_packets<Scope>(dev, packets, src, bytes, epoch, peer);
  }
  if (initiator && Scope::rank() == 0) out_ns[0] = global_time_ns() - t0;
}

}  // namespace

// Device barrier of every PE (one thread): lines up the PEs' next kernels within ~1 us.
extern "C" __global__ void start_sync(gshmem::Device dev) { gshmem::sync_all<Thread>(dev); }

// Up to 1024 threads per CTA (-t): the bound keeps the register count launchable.
#define GSHMEM_BENCH_BW(NAME, SCOPE)                                                          \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
      bw_##NAME(gshmem::Device dev, char* dst, const char* src, u64 bytes, u64 stride,        \
                int nslots, int iters, int pe, int mode) {                                    \
    bw_loop<SCOPE>(dev, dst, src, bytes, stride, nslots, iters, pe, mode);                    \
  }
GSHMEM_BENCH_BW(thread, Thread)
GSHMEM_BENCH_BW(warp, Warp)
GSHMEM_BENCH_BW(block, Block)
#undef GSHMEM_BENCH_BW

// One ping-pong kernel: BODY (ping_pong: FLAG a signal; ping_pong_packets: FLAG the packets'
// landing buffer) at one scope, bounded waits or not.
#define GSHMEM_BENCH_PP(NAME, BODY, FLAG, SCOPE, BOUNDED)                                     \
  extern "C" __global__ void NAME(gshmem::Device dev, char* buf, const char* src, u64 bytes,  \
                                  FLAG* flag, int warmup, int iters, int peer, int initiator, \
                                  u64* out_ns) {                                             \
    BODY<SCOPE, BOUNDED>(dev, buf, src, bytes, flag, warmup, iters, peer, initiator, out_ns); \
  }
// Every scope, unbounded (PREFIX_<scope>) and bounded (PREFIX_bounded_<scope>).
#define GSHMEM_BENCH_PP_ALL(PREFIX, BODY, FLAG)                      \
  GSHMEM_BENCH_PP(PREFIX##_thread, BODY, FLAG, Thread, false)        \
  GSHMEM_BENCH_PP(PREFIX##_warp, BODY, FLAG, Warp, false)            \
  GSHMEM_BENCH_PP(PREFIX##_block, BODY, FLAG, Block, false)          \
  GSHMEM_BENCH_PP(PREFIX##_bounded_thread, BODY, FLAG, Thread, true) \
  GSHMEM_BENCH_PP(PREFIX##_bounded_warp, BODY, FLAG, Warp, true)     \
  GSHMEM_BENCH_PP(PREFIX##_bounded_block, BODY, FLAG, Block, true)
GSHMEM_BENCH_PP_ALL(pingpong, ping_pong, uint64_t)
GSHMEM_BENCH_PP_ALL(pingpong_packets, ping_pong_packets, void)
#undef GSHMEM_BENCH_PP_ALL
#undef GSHMEM_BENCH_PP

// Element index of thread `tid`'s i-th operation: consecutive threads, consecutive elements.
__device__ inline u64 rate_index(u64 tid, u64 nthreads, int i, u64 nelems) {
  return (tid + static_cast<u64>(i) * nthreads) % nelems;
}

__device__ inline u64 rate_pattern(u64 idx) { return idx * 0x9E3779B97F4A7C15ull + 1; }

// Message rates on 8-byte words of PE `pe`. op: 0 p, 1 g, 2 atomic_fetch_add, 3 atomic_add.
// p stores rate_pattern(idx); g with `check` stores what it read at out[idx] (else one xor per
// thread at out[tid]); the atomics add 1 to word tid % nelems.
extern "C" __global__ void rate(gshmem::Device dev, u64* sym, u64 nelems, int iters, int pe,
                                int op, int check, u64* out) {
  const u64 nthreads = static_cast<u64>(gridDim.x) * blockDim.x;
  const u64 tid = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  u64 acc = 0;
  if (op == 0) {
    for (int i = 0; i < iters; ++i) {
      const u64 idx = rate_index(tid, nthreads, i, nelems);
      gshmem::p(dev, sym + idx, rate_pattern(idx), pe);
    }
    gshmem::quiet<Block>(dev);  // through the proxy, complete only after a quiet
  } else if (op == 1) {
    for (int i = 0; i < iters; ++i) {
      const u64 idx = rate_index(tid, nthreads, i, nelems);
      const u64 v = gshmem::g(dev, static_cast<const u64*>(sym + idx), pe);
      if (check) {
        out[idx] = v;
      } else {
        acc ^= v;
      }
    }
  } else if (op == 2) {
    u64* cell = sym + tid % nelems;
    for (int i = 0; i < iters; ++i) acc += gshmem::atomic_fetch_add(dev, cell, 1ull, pe);
  } else {
    u64* cell = sym + tid % nelems;
    for (int i = 0; i < iters; ++i) gshmem::atomic_add(dev, cell, 1ull, pe);
    gshmem::quiet<Block>(dev);
  }
  if (!check && op != 0 && op != 3) out[tid] = acc;
}

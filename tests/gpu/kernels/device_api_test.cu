// Test kernels for the device API: every operation at every scope. One source serves both
// compile paths: tests/cpu/test_device_compile.py builds it with plain `nvcc -c` (sm_80, sm_90;
// no -rdc), and tests/gpu/scripts/*.py load it through CuPy's RawModule (NVRTC).
// Kernels are extern "C" so they can be fetched by name; a "unit" is one instance of the scope
// (a thread, a warp or a block) and units split each transfer into contiguous chunks.
#include <gshmem/device.cuh>

namespace {

template <class Scope>
__device__ unsigned long long unit_index() {
  const unsigned long long block = blockIdx.x;
  const unsigned per_block = (blockDim.x * blockDim.y * blockDim.z) / Scope::size();
  return block * per_block + (gshmem::Block::rank() / Scope::size());
}

template <class Scope>
__device__ unsigned long long unit_count() {
  return static_cast<unsigned long long>(gridDim.x) * (blockDim.x * blockDim.y * blockDim.z) /
         Scope::size();
}

// [begin, end) of this unit's chunk of `bytes`. kLanesReversed (thread scope, whole warps): lane
// k of a warp takes the chunk of lane 31 - k, so the lanes' copies do not tile one range in lane
// order and thread-scope copies take their per-lane path (copy.cuh).
template <class Scope, bool kLanesReversed = false>
__device__ void chunk(size_t bytes, size_t* begin, size_t* end) {
  const unsigned long long units = unit_count<Scope>();
  unsigned long long u = unit_index<Scope>();
  if (kLanesReversed) u = (u & ~31ull) | (31 - (u & 31));
  const size_t per = (bytes + units - 1) / units;
  *begin = per * u < bytes ? per * u : bytes;
  *end = *begin + per < bytes ? *begin + per : bytes;
}

// mode: 0 blocking, 1 non-blocking followed by quiet.
template <class Scope, bool kLanesReversed = false>
__device__ void put_chunk(const gshmem::Device& dev, char* dst, const char* src, size_t bytes,
                          int pe, int mode) {
  size_t b, e;
  chunk<Scope, kLanesReversed>(bytes, &b, &e);
  if (mode == 0) {
    gshmem::put<Scope>(dev, dst + b, src + b, e - b, pe);
  } else {
    gshmem::put_nbi<Scope>(dev, dst + b, src + b, e - b, pe);
    gshmem::quiet<Scope>(dev);
  }
}

template <class Scope, bool kLanesReversed = false>
__device__ void get_chunk(const gshmem::Device& dev, char* dst, const char* src, size_t bytes,
                          int pe, int mode) {
  size_t b, e;
  chunk<Scope, kLanesReversed>(bytes, &b, &e);
  if (mode == 0) {
    gshmem::get<Scope>(dev, dst + b, src + b, e - b, pe);
  } else {
    gshmem::get_nbi<Scope>(dev, dst + b, src + b, e - b, pe);
    gshmem::quiet<Scope>(dev);
  }
}

// Each unit puts its chunk and adds 1 to the peer's signal (or sets it to `value` when op is Set:
// only meaningful with one unit).
template <class Scope>
__device__ void put_signal_chunk(const gshmem::Device& dev, char* dst, const char* src,
                                 size_t bytes, uint64_t* sig, uint64_t value, int op, int pe,
                                 int mode) {
  size_t b, e;
  chunk<Scope>(bytes, &b, &e);
  const gshmem::SignalOp sop = op == 0 ? gshmem::SignalOp::Set : gshmem::SignalOp::Add;
  if (mode == 0) {
    gshmem::put_signal<Scope>(dev, dst + b, src + b, e - b, sig, value, sop, pe);
  } else {
    gshmem::put_signal_nbi<Scope>(dev, dst + b, src + b, e - b, sig, value, sop, pe);
    gshmem::quiet<Scope>(dev);
  }
}

template <class Scope, class T>
__device__ void iput_chunk(const gshmem::Device& dev, T* dst, const T* src, long long dst_stride,
                           long long src_stride, size_t nelems, int pe, int get) {
  size_t b, e;
  chunk<Scope>(nelems, &b, &e);
  if (get) {
    gshmem::iget<Scope>(dev, dst + b * dst_stride, src + b * src_stride, dst_stride, src_stride,
                        e - b, pe);
  } else {
    gshmem::iput<Scope>(dev, dst + b * dst_stride, src + b * src_stride, dst_stride, src_stride,
                        e - b, pe);
  }
}

}  // namespace

#define SCOPED_KERNELS(NAME, SCOPE)                                                             \
  extern "C" __global__ void put_##NAME(gshmem::Device dev, char* dst, const char* src,         \
                                        size_t bytes, int pe, int mode) {                       \
    put_chunk<SCOPE>(dev, dst, src, bytes, pe, mode);                                           \
  }                                                                                             \
  extern "C" __global__ void get_##NAME(gshmem::Device dev, char* dst, const char* src,         \
                                        size_t bytes, int pe, int mode) {                       \
    get_chunk<SCOPE>(dev, dst, src, bytes, pe, mode);                                           \
  }                                                                                             \
  extern "C" __global__ void put_signal_##NAME(gshmem::Device dev, char* dst, const char* src,  \
                                               size_t bytes, uint64_t* sig, uint64_t value,     \
                                               int op, int pe, int mode) {                      \
    put_signal_chunk<SCOPE>(dev, dst, src, bytes, sig, value, op, pe, mode);                    \
  }                                                                                             \
  extern "C" __global__ void iput32_##NAME(gshmem::Device dev, int* dst, const int* src,        \
                                           long long dst_stride, long long src_stride,          \
                                           size_t nelems, int pe, int get) {                    \
    iput_chunk<SCOPE>(dev, dst, src, dst_stride, src_stride, nelems, pe, get);                  \
  }                                                                                             \
  extern "C" __global__ void iput64_##NAME(gshmem::Device dev, double* dst, const double* src,  \
                                           long long dst_stride, long long src_stride,          \
                                           size_t nelems, int pe, int get) {                    \
    iput_chunk<SCOPE>(dev, dst, src, dst_stride, src_stride, nelems, pe, get);                  \
  }                                                                                             \
  /* Waits until the local signal reaches `value` (scoped), then copies the received bytes */   \
  /* to `out` with plain loads: the data-after-signal check. */                                 \
  extern "C" __global__ void wait_copy_##NAME(const uint64_t* sig, uint64_t value,              \
                                              const char* data, char* out, size_t bytes) {      \
    if (blockIdx.x != 0) return;                                                                \
    if (SCOPE::size() == 32 && gshmem::Block::rank() >= 32) return;                             \
    if (SCOPE::size() == 1 && gshmem::Block::rank() != 0) return;                               \
    gshmem::signal_wait_until<SCOPE>(sig, gshmem::Cmp::GE, value);                              \
    for (size_t i = SCOPE::rank(); i < bytes; i += SCOPE::size()) out[i] = data[i];             \
  }                                                                                             \
  /* `iters` rounds of: write (round, my_pe) into the right neighbour's slot `round % 2` with */ \
  /* p, barrier, check the left neighbour's value arrived, sync. Counts mismatches. */          \
  extern "C" __global__ void barrier_loop_##NAME(gshmem::Device dev, gshmem::Team team,         \
                                                 unsigned long long* slots, int iters,          \
                                                 unsigned long long* errors) {                  \
    if (SCOPE::size() == 32 && gshmem::Block::rank() >= 32) return;                             \
    if (SCOPE::size() == 1 && gshmem::Block::rank() != 0) return;                               \
    const int me = team.my_pe, n = team.size;                                                   \
    const int right = gshmem::team_world_pe(team, (me + 1) % n);                                \
    const unsigned long long left = (me + n - 1) % n;                                           \
    for (int r = 0; r < iters; ++r) {                                                           \
      if (SCOPE::rank() == 0) gshmem::p(dev, slots + (r % 2), (1ull * r << 32) | me, right);    \
      gshmem::barrier<SCOPE>(dev, team);                                                        \
      if (SCOPE::rank() == 0 && slots[r % 2] != ((1ull * r << 32) | left)) ++*errors;           \
      gshmem::sync<SCOPE>(dev, team);                                                           \
    }                                                                                           \
  }

SCOPED_KERNELS(thread, gshmem::Thread)
SCOPED_KERNELS(warp, gshmem::Warp)
SCOPED_KERNELS(block, gshmem::Block)

// Thread-scope put and get whose lanes' chunks are reversed within each warp (chunk above).
extern "C" __global__ void put_thread_reversed(gshmem::Device dev, char* dst, const char* src,
                                               size_t bytes, int pe, int mode) {
  put_chunk<gshmem::Thread, true>(dev, dst, src, bytes, pe, mode);
}
extern "C" __global__ void get_thread_reversed(gshmem::Device dev, char* dst, const char* src,
                                               size_t bytes, int pe, int mode) {
  get_chunk<gshmem::Thread, true>(dev, dst, src, bytes, pe, mode);
}

// ---- p / g on every element size ----
#define PG_KERNELS(NAME, T)                                                                     \
  extern "C" __global__ void p_##NAME(gshmem::Device dev, T* dst, const T* values, size_t n,    \
                                      int pe) {                                                 \
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)  \
      gshmem::p(dev, dst + i, values[i], pe);                                                   \
    gshmem::quiet<gshmem::Block>(dev); /* a proxy PE's p is complete only after a quiet */      \
  }                                                                                             \
  extern "C" __global__ void g_##NAME(gshmem::Device dev, T* out, const T* src, size_t n,       \
                                      int pe) {                                                 \
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)  \
      out[i] = gshmem::g(dev, src + i, pe);                                                     \
  }
PG_KERNELS(u8, unsigned char)
PG_KERNELS(u16, unsigned short)
PG_KERNELS(u32, unsigned int)
PG_KERNELS(u64, unsigned long long)
PG_KERNELS(f32, float)
PG_KERNELS(f64, double)

// ---- atomics under contention ----
// Every thread of every PE, `iters` times, on every PE's copy of `cell` (cells below):
//   [0] add 1   [1] fetch_add 1 (old values to `fetched`)   [2] inc   [3] fetch_inc (to fetched)
//   [4] compare_swap increment loop   [5] or of bit (gtid % bits)   [6] xor of (gtid + 1)
//   [7] and of ~bit(gtid % bits) (cell starts all ones)   [8] swap in (gtid + 1) (old to fetched)
// Each `fetched` array has n_pes * iters entries per thread: its values per target PE must be
// a permutation of 0 .. (all threads * iters - 1) for [1] and [3].
template <class T>
__device__ void amo_body(const gshmem::Device& dev, T* cells, T* fetched, int iters) {
  const unsigned long long gtid = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long nthreads = 1ull * gridDim.x * blockDim.x;
  const int bits = 8 * sizeof(T);
  const T bit = static_cast<T>(1ull << ((gtid + dev.my_pe) % bits));
  const T one = 1, mine = static_cast<T>(gtid + 1);
  for (int it = 0; it < iters; ++it) {
    for (int k = 0; k < dev.n_pes; ++k) {
      const int pe = (dev.my_pe + k) % dev.n_pes;
      const size_t slot = ((static_cast<size_t>(pe) * iters + it) * nthreads + gtid) * 3;
      gshmem::atomic_add(dev, cells + 0, one, pe);
      fetched[slot + 0] = gshmem::atomic_fetch_add(dev, cells + 1, one, pe);
      gshmem::atomic_inc(dev, cells + 2, pe);
      fetched[slot + 1] = gshmem::atomic_fetch_inc(dev, cells + 3, pe);
      T seen = gshmem::atomic_fetch(dev, cells + 4, pe), prev;
      while ((prev = gshmem::atomic_compare_swap(dev, cells + 4, seen, static_cast<T>(seen + 1),
                                                 pe)) != seen) {
        seen = prev;
      }
      if (it % 2) {
        gshmem::atomic_or(dev, cells + 5, bit, pe);
        gshmem::atomic_xor(dev, cells + 6, mine, pe);
        gshmem::atomic_and(dev, cells + 7, static_cast<T>(~bit), pe);
      } else {
        gshmem::atomic_fetch_or(dev, cells + 5, bit, pe);
        gshmem::atomic_fetch_xor(dev, cells + 6, mine, pe);
        gshmem::atomic_fetch_and(dev, cells + 7, static_cast<T>(~bit), pe);
      }
      fetched[slot + 2] = gshmem::atomic_swap(dev, cells + 8, mine, pe);
    }
  }
}
#define AMO_KERNEL(NAME, T)                                                                     \
  extern "C" __global__ void amo_##NAME(gshmem::Device dev, T* cells, T* fetched, int iters) {  \
    amo_body(dev, cells, fetched, iters);                                                       \
  }
AMO_KERNEL(i32, int)
AMO_KERNEL(u32, unsigned int)
AMO_KERNEL(i64, long long)
AMO_KERNEL(u64, unsigned long long)

// Float and double add: every thread adds 1 to every PE's cells[0] (exact in binary floating
// point while totals stay below 2^24 / 2^53) and fetch_adds 0.5 to cells[1]; atomic_set then
// atomic_fetch round-trips a value on cells[2].
template <class T>
__device__ void famo_body(const gshmem::Device& dev, T* cells, int iters) {
  for (int it = 0; it < iters; ++it) {
    for (int k = 0; k < dev.n_pes; ++k) {
      const int pe = (dev.my_pe + k) % dev.n_pes;
      gshmem::atomic_add(dev, cells + 0, static_cast<T>(1), pe);
      gshmem::atomic_fetch_add(dev, cells + 1, static_cast<T>(0.5), pe);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const int right = (dev.my_pe + 1) % dev.n_pes;
    gshmem::atomic_set(dev, cells + 2, static_cast<T>(dev.my_pe + 0.25), right);
    gshmem::fence(dev);  // through the proxy, operations to one PE are unordered until a fence
    cells[3] = gshmem::atomic_fetch(dev, cells + 2, right);
  }
}
#define FLOAT_AMO_KERNEL(NAME, T)                                                               \
  extern "C" __global__ void famo_##NAME(gshmem::Device dev, T* cells, int iters) {             \
    famo_body(dev, cells, iters);                                                               \
  }
FLOAT_AMO_KERNEL(f32, float)
FLOAT_AMO_KERNEL(f64, double)

// ---- ordering stress: data before signal, thousands of times ----
// PE `sender` and PE `receiver` play ping-pong over `iters` rounds. Round r: the sender fills
// `words` 64-bit words of the receiver's `data` with pattern(r, i) using put_signal<Block>
// (signal SET to r + 1, alternating with ADD 1 so both ops are stressed), the receiver waits for
// the signal, checks every word (counting mismatches in `errors`) and acknowledges by signal_op on
// the sender's `ack`; the sender waits for the ack before overwriting.
__device__ unsigned long long pattern(int round, size_t i) {
  return (static_cast<unsigned long long>(round) << 40) ^ (i * 0x9E3779B97F4A7C15ull);
}

extern "C" __global__ void ping_pong(gshmem::Device dev, unsigned long long* data,
                                     unsigned long long* staging, uint64_t* sig, uint64_t* ack,
                                     size_t words, int iters, int sender, int receiver,
                                     unsigned long long* errors) {
  using gshmem::Block;
  if (dev.my_pe == sender) {
    for (int r = 0; r < iters; ++r) {
      for (size_t i = Block::rank(); i < words; i += Block::size()) staging[i] = pattern(r, i);
      const gshmem::SignalOp op = r % 2 ? gshmem::SignalOp::Add : gshmem::SignalOp::Set;
      gshmem::put_signal<Block>(dev, data, staging, words * 8, sig, r % 2 ? 1 : r + 1, op,
                                receiver);
      gshmem::signal_wait_until<Block>(ack, gshmem::Cmp::GE, r + 1);
    }
  } else if (dev.my_pe == receiver) {
    for (int r = 0; r < iters; ++r) {
      gshmem::signal_wait_until<Block>(sig, gshmem::Cmp::GE, r + 1);
      unsigned long long bad = 0;
      for (size_t i = Block::rank(); i < words; i += Block::size()) bad += data[i] != pattern(r, i);
      if (bad) atomicAdd(errors, bad);
      __syncthreads();
      if (Block::rank() == 0) gshmem::signal_op(dev, ack, r + 1, gshmem::SignalOp::Set, sender);
    }
  }
}

// ---- packets: messages that carry their own flags ----
// Every PE runs `rounds` rounds of a ring: round r (epoch epoch0 + r) puts `bytes` of
// packet_byte(r, me, i) from src to the next PE's `buf` and waits (bounded or not) for the
// previous PE's into dst, counting in errors[0] the bytes that differ and in errors[1] the guard
// bytes around dst (16 on each side, 0xEE) that changed. Before overwriting the next PE's buf it
// waits for that PE's credit (`credit` >= r: round r - 1 was copied out), and after its own copy
// it credits the previous PE. One scope unit per PE (grid of 1).
static_assert(gshmem::packet_buffer_bytes(0) == 0 && gshmem::packet_buffer_bytes(1) == 16 &&
                  gshmem::packet_buffer_bytes(8) == 16 && gshmem::packet_buffer_bytes(9) == 32,
              "16 bytes of packet per 8 data bytes, rounded up");

__device__ unsigned char packet_byte(int round, int pe, size_t i) {
  return static_cast<unsigned char>(round * 131 + pe * 17 + i * 7 + (i >> 8));
}

template <class Scope>
__device__ void packet_ring(const gshmem::Device& dev, void* buf, unsigned char* src,
                            unsigned char* dst, size_t bytes, int rounds, unsigned epoch0,
                            uint64_t* credit, int bounded, unsigned long long* errors) {
  const int n = dev.n_pes, next = (dev.my_pe + 1) % n, prev = (dev.my_pe + n - 1) % n;
  unsigned long long bad = 0, guard = 0, gave_up = 0;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = Scope::rank(); i < bytes; i += Scope::size()) {
      src[i] = packet_byte(r, dev.my_pe, i);
    }
    if (r > 0) gshmem::signal_wait_until<Scope>(credit, gshmem::Cmp::GE, r);
    gshmem::put_packets<Scope>(dev, buf, src, bytes, epoch0 + r, next);
    if (bounded) {
      gave_up += !gshmem::wait_packets<Scope>(dev, dst, buf, bytes, epoch0 + r, prev);
    } else {
      gshmem::wait_packets<Scope>(dst, buf, bytes, epoch0 + r);
    }
    for (size_t i = Scope::rank(); i < bytes; i += Scope::size()) {
      bad += dst[i] != packet_byte(r, prev, i);
    }
    for (size_t i = Scope::rank(); i < 16; i += Scope::size()) {
      guard += (dst[-16 + static_cast<long long>(i)] != 0xEE) + (dst[bytes + i] != 0xEE);
    }
    Scope::sync();  // every thread's checks read dst before the next round overwrites it
    if (Scope::rank() == 0) gshmem::signal_op(dev, credit, r + 1, gshmem::SignalOp::Set, prev);
  }
  if (bad) atomicAdd(errors, bad);
  if (guard) atomicAdd(errors + 1, guard);
  if (gave_up) atomicAdd(errors + 2, gave_up);
}

#define PACKET_KERNEL(NAME, SCOPE)                                                             \
  extern "C" __global__ void packets_##NAME(gshmem::Device dev, void* buf, unsigned char* src,  \
                                            unsigned char* dst, size_t bytes, int rounds,       \
                                            unsigned epoch0, uint64_t* credit, int bounded,     \
                                            unsigned long long* errors) {                       \
    packet_ring<gshmem::SCOPE>(dev, buf, src, dst, bytes, rounds, epoch0, credit, bounded,      \
                               errors);                                                         \
  }
PACKET_KERNEL(thread, Thread)
PACKET_KERNEL(warp, Warp)
PACKET_KERNEL(block, Block)
#undef PACKET_KERNEL

// out[0] = what a bounded wait_packets<Block> for `bytes` with `epoch` from `from_pe` reported.
extern "C" __global__ void bounded_packets_wait(gshmem::Device dev, const void* buf, void* dst,
                                                size_t bytes, unsigned epoch, int from_pe,
                                                int* out) {
  const bool done = gshmem::wait_packets<gshmem::Block>(dev, dst, buf, bytes, epoch, from_pe);
  if (threadIdx.x == 0) out[0] = done;
}

// ---- point-to-point sync family ----
// Every PE sets flag[my_pe] = value on every PE (p, then atomic_set on odd PEs), then waits with
// each form for all n flags and records what the test family reports.
extern "C" __global__ void wait_family(gshmem::Device dev, long long* flags, int* status,
                                       unsigned long long* out, long long value) {
  const int n = dev.n_pes;
  for (int pe = 0; pe < n; ++pe) {
    if (dev.my_pe % 2) gshmem::atomic_set(dev, flags + dev.my_pe, value, pe);
    else gshmem::p(dev, flags + dev.my_pe, value, pe);
  }
  gshmem::wait_until(flags + (dev.my_pe + 1) % n, gshmem::Cmp::EQ, value);
  out[0] = gshmem::wait_until_any(flags, n, status, gshmem::Cmp::GE, value);
  size_t idx[64];
  out[1] = gshmem::wait_until_some(flags, n, idx, status, gshmem::Cmp::GT, value - 1);
  gshmem::wait_until_all(flags, n, status, gshmem::Cmp::NE, 0ll);
  // The test family reads every flag, an excluded one too: that one may still be on its way.
  gshmem::wait_until_all(flags, n, nullptr, gshmem::Cmp::EQ, value);
  out[2] = gshmem::test_all(flags, n, status, gshmem::Cmp::LE, value);
  out[3] = gshmem::test_any(flags, n, status, gshmem::Cmp::LT, value);
  out[4] = gshmem::test(flags, gshmem::Cmp::GE, value);
  out[5] = gshmem::test_some(flags, n, idx, nullptr, gshmem::Cmp::EQ, value);
  out[6] = gshmem::signal_fetch(reinterpret_cast<const uint64_t*>(flags));
  // The bounded forms, once everything has arrived: each must report success.
  const int left = (dev.my_pe + n - 1) % n;
  out[7] = gshmem::wait_until(dev, flags + left, gshmem::Cmp::EQ, value, left);
  out[8] = gshmem::wait_until_any(dev, flags, n, status, gshmem::Cmp::GE, value);
  out[9] = gshmem::wait_until_some(dev, flags, n, idx, status, gshmem::Cmp::GT, value - 1);
  out[10] = gshmem::wait_until_all(dev, flags, n, status, gshmem::Cmp::NE, 0ll);
  out[11] = gshmem::signal_wait_until(dev, reinterpret_cast<const uint64_t*>(flags + left),
                                      gshmem::Cmp::GE, static_cast<uint64_t>(value), left);
}

// ---- bounded waits that are meant to fail (tests/gpu/scripts/fault_check.py) ----
// out[0] = what a block-scoped bounded wait for `sig` >= value (from `from_pe`) reported.
extern "C" __global__ void bounded_signal_wait(gshmem::Device dev, const uint64_t* sig,
                                               unsigned long long value, int from_pe, int* out) {
  const bool done = gshmem::signal_wait_until<gshmem::Block>(dev, sig, gshmem::Cmp::GE, value,
                                                             from_pe);
  if (threadIdx.x == 0) out[0] = done;
}

// out[0] = what the device barrier over every PE reported.
extern "C" __global__ void bounded_barrier(gshmem::Device dev, int* out) {
  const bool done = gshmem::barrier_all<gshmem::Block>(dev);
  if (threadIdx.x == 0) out[0] = done;
}

// ---- ptr / team_ptr and team arithmetic ----
// out[pe] = address of `obj` on pe via ptr (0 if unreachable); out[n + i] = team_ptr(team, i);
// out[2n + i] = team_world_pe(team, i); out[3n] = team_translate_pe(team, team.my_pe, world).
// Every reachable PE's copy of obj[0] gets my_pe + 1 added through the mapped pointer.
extern "C" __global__ void ptr_check(gshmem::Device dev, gshmem::Team team, unsigned long long* obj,
                                     unsigned long long* out) {
  const int n = dev.n_pes;
  for (int pe = 0; pe < n; ++pe) {
    unsigned long long* q = gshmem::ptr(dev, obj, pe);
    out[pe] = reinterpret_cast<unsigned long long>(q);
    if (q) atomicAdd_system(q, static_cast<unsigned long long>(dev.my_pe + 1));
  }
  for (int i = 0; i < n; ++i) {
    out[n + i] = reinterpret_cast<unsigned long long>(gshmem::team_ptr(dev, team, obj, i));
    out[2 * n + i] = i < gshmem::team_n_pes(team) ? gshmem::team_world_pe(team, i) : -1;
  }
  out[3 * n] = gshmem::team_translate_pe(team, gshmem::team_my_pe(team), dev.world);
  out[3 * n + 1] = gshmem::my_pe(dev) * 1000 + gshmem::n_pes(dev);
}

// ---- collectives in kernels (coll.cuh) ----
// `iters` rounds on the same buffers. Round r copies input r % 2 (`inputs` holds both, src_bytes
// each) into src, runs the collective, then stores dest (dest_bytes) into saved[r] in rounds 0
// and 1 and, in later rounds, counts the bytes of dest that differ from saved[r % 2]: a member
// reading a src that is being rewritten, or writing a dest that is still being read, shows up
// as a difference (the inputs alternate, so stale data is wrong data). A collective that
// returns false (one of its waits gave up) counts one more error.
template <class Scope, class Collective>
__device__ void coll_rounds(char* dest, char* src, const char* inputs, size_t src_bytes,
                            char* saved, size_t dest_bytes, int iters,
                            unsigned long long* errors, Collective collective) {
  for (int r = 0; r < iters; ++r) {
    const char* input = inputs + (r % 2) * src_bytes;
    for (size_t i = Scope::rank(); i < src_bytes; i += Scope::size()) src[i] = input[i];
    const bool done = collective();
    if (!done && Scope::rank() == 0) atomicAdd(errors, 1ull);
    char* kept = saved + (r % 2) * dest_bytes;
    unsigned long long differ = 0;
    for (size_t i = Scope::rank(); i < dest_bytes; i += Scope::size()) {
      if (r < 2) kept[i] = dest[i];
      else differ += dest[i] != kept[i];
    }
    if (differ) atomicAdd(errors, differ);
    Scope::sync();  // in place, src lies in dest: compare all of it before rewriting src
  }
}

// One signature for every collective: n is nbytes (broadcast, all_gather, all_to_all) or count
// (all_reduce, reduce_scatter); root is used by broadcast only.
#define COLL_PARAMS                                                                             \
  gshmem::Device dev, gshmem::Team team, char *dest, char *src, const char *inputs,             \
      char *saved, size_t n, int root, int iters, unsigned long long *errors

#define COLL_MOVE_KERNELS(NAME, SCOPE)                                                          \
  extern "C" __global__ void coll_broadcast_##NAME(COLL_PARAMS) {                               \
    coll_rounds<SCOPE>(dest, src, inputs, n, saved, n, iters, errors, [&] {                     \
      return gshmem::broadcast<SCOPE>(dev, team, dest, src, n, root);                           \
    });                                                                                         \
  }                                                                                             \
  extern "C" __global__ void coll_all_gather_##NAME(COLL_PARAMS) {                              \
    coll_rounds<SCOPE>(dest, src, inputs, n, saved, team.size * n, iters, errors, [&] {         \
      return gshmem::all_gather<SCOPE>(dev, team, dest, src, n);                                \
    });                                                                                         \
  }                                                                                             \
  extern "C" __global__ void coll_all_to_all_##NAME(COLL_PARAMS) {                              \
    coll_rounds<SCOPE>(dest, src, inputs, team.size * n, saved, team.size * n, iters, errors,   \
                       [&] { return gshmem::all_to_all<SCOPE>(dev, team, dest, src, n); });     \
  }
COLL_MOVE_KERNELS(thread, gshmem::Thread)
COLL_MOVE_KERNELS(warp, gshmem::Warp)
COLL_MOVE_KERNELS(block, gshmem::Block)

#define COLL_REDUCE_KERNELS(TNAME, T, ONAME, OP, SNAME, SCOPE)                                  \
  extern "C" __global__ void coll_all_reduce_##TNAME##_##ONAME##_##SNAME(COLL_PARAMS) {         \
    const size_t bytes = n * sizeof(T);                                                         \
    coll_rounds<SCOPE>(dest, src, inputs, bytes, saved, bytes, iters, errors, [&] {             \
      return gshmem::all_reduce<SCOPE, gshmem::ReduceOp::OP>(                                   \
          dev, team, reinterpret_cast<T*>(dest), reinterpret_cast<const T*>(src), n);           \
    });                                                                                         \
  }                                                                                             \
  extern "C" __global__ void coll_reduce_scatter_##TNAME##_##ONAME##_##SNAME(COLL_PARAMS) {     \
    const size_t bytes = n * sizeof(T);                                                         \
    coll_rounds<SCOPE>(dest, src, inputs, team.size * bytes, saved, bytes, iters, errors, [&] { \
      return gshmem::reduce_scatter<SCOPE, gshmem::ReduceOp::OP>(                               \
          dev, team, reinterpret_cast<T*>(dest), reinterpret_cast<const T*>(src), n);           \
    });                                                                                         \
  }
#define COLL_REDUCE_OPS(TNAME, T)                                                               \
  COLL_REDUCE_KERNELS(TNAME, T, sum, Sum, block, gshmem::Block)                                 \
  COLL_REDUCE_KERNELS(TNAME, T, prod, Prod, block, gshmem::Block)                               \
  COLL_REDUCE_KERNELS(TNAME, T, min, Min, block, gshmem::Block)                                 \
  COLL_REDUCE_KERNELS(TNAME, T, max, Max, block, gshmem::Block)
COLL_REDUCE_OPS(f32, float)
COLL_REDUCE_OPS(f16, __half)
COLL_REDUCE_OPS(bf16, __nv_bfloat16)
COLL_REDUCE_OPS(i32, int32_t)
COLL_REDUCE_OPS(i64, int64_t)
COLL_REDUCE_KERNELS(i32, int32_t, sum, Sum, warp, gshmem::Warp)
COLL_REDUCE_KERNELS(i32, int32_t, sum, Sum, thread, gshmem::Thread)

// Packets (the LL protocol): a message whose every 8 data bytes travel with two copies of a 32-bit
// epoch in one 16-byte store {data lo, epoch, data hi, epoch}. Each 8-byte half is written
// atomically, so a receiver that sees both epochs match knows the data beside them has arrived:
// no fence and no signal on the sender, no acquire on the receiver. A put_signal ping-pong pays a
// system-scope release per message, which waits until the NVLink stores before it are
// acknowledged: over NVLink between two H200s, one way, 0.70 us with packets against 1.89 us for
// data + release, and 0.81 us for a bare relaxed flag (benchmarks/signal_latency.cu;
// docs/benchmarks.md, "Where a put_signal's latency goes"). The price is bandwidth: half of every
// packet is flags, so packets are for small messages (up to a few KiB); put_signal is for bulk.
//
//   packet_buffer_bytes(bytes)   size of the buffer a message of `bytes` lands in: 16 bytes per
//                                8 data bytes, rounded up.
//   put_packets<Scope>(dev, buf, src, bytes, epoch, pe)
//                                the scope's threads store src as packets carrying `epoch` into
//                                PE pe's copy of symmetric `buf`. Not blocking, ordered with
//                                nothing else; src may be reused on return.
//   wait_packets<Scope>(dev, dst, buf, bytes, epoch, from_pe)
//                                blocks until every packet of this PE's `buf` carries `epoch` and
//                                copies their data to dst; on return every thread of the scope
//                                sees all of dst. Bounded (deadline.cuh): false when it gave up
//                                (GSHMEM_TIMEOUT, abort, another failed wait), dst then undefined.
//   wait_packets<Scope>(dst, buf, bytes, epoch)   the same, spinning without bound.
//
// Epochs are 1 .. 2^32 - 1: a zeroed buffer holds 0, so epoch 0 would match before anything
// arrived. Every message into a buffer needs an epoch that buffer does not hold yet; the count of
// messages sent to it, plus one, is one. The packets give no back-pressure: the sender may
// overwrite `buf` only once the receiver has copied the previous message out (its reply in a
// ping-pong, a credit, or two buffers used in turn). `buf`: symmetric, 16-byte aligned,
// packet_buffer_bytes(bytes) long, zeroed before first use. src and dst: any alignment.
// Packets need a load/store path to `pe`; a PE on the proxy path (proxy.cuh) prints and traps.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cstdio>  // device printf (NVRTC declares it itself)
#endif

#include "deadline.cuh"
#include "proxy.cuh"
#include "ptr.cuh"
#include "scope.cuh"

namespace gshmem {

__host__ __device__ constexpr size_t packet_buffer_bytes(size_t bytes) {
  return (bytes + 7) / 8 * 16;
}

namespace detail {

__device__ inline void store_packet(uint4* p, unsigned long long data, unsigned epoch) {
  const unsigned lo = static_cast<unsigned>(data), hi = static_cast<unsigned>(data >> 32);
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(lo), "r"(epoch),
               "r"(hi), "r"(epoch)
               : "memory");
}

// Packet p as it is now: {data lo, epoch, data hi, epoch}.
__device__ inline uint4 look_at_packet(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// Whether packet value v carries `epoch` in both halves; its data in `data`, and in `seen` an
// epoch that did not match (for a fault record).
__device__ inline bool packet_arrived(uint4 v, unsigned epoch, unsigned long long& data,
                                      unsigned& seen) {
  data = (static_cast<unsigned long long>(v.z) << 32) | v.x;
  seen = v.y == epoch ? v.w : v.y;
  return v.y == epoch && v.w == epoch;
}

// One look at packet p: true, with its data, once both of its epochs are `epoch`.
__device__ inline bool poll_packet(const uint4* p, unsigned epoch, unsigned long long& data,
                                   unsigned& seen) {
  return packet_arrived(look_at_packet(p), epoch, data, seen);
}

// Packets one thread of the scope moves in one go: their loads are all in flight before the
// first is used. Only a lone thread gains (its 1 KiB ping-pong: 31.0 -> 11.9 us one way on
// 4 x H200, 8 B level at 0.89 us); a warp's or a block's threads hold a few packets each, and
// batching them made their small messages slower (8 B: 1.1 -> 1.6 us a warp). Fewer packets
// than a batch take the one-packet loop (batched too, one thread's 8 B went 0.89 -> 1.15 us).
template <class Scope>
struct PacketBatch {
  static constexpr int value = 1;
};
template <>
struct PacketBatch<Thread> {
  static constexpr int value = 8;
};

// Word i (bytes [8i, 8i + 8)) of a buffer of `bytes`, zero-filled past the end; any alignment.
__device__ inline unsigned long long load8(const char* p, size_t i, size_t bytes) {
  const char* at = p + i * 8;
  if (i * 8 + 8 <= bytes && reinterpret_cast<unsigned long long>(at) % 8 == 0) {
    return *reinterpret_cast<const unsigned long long*>(at);
  }
  unsigned long long v = 0;
  for (size_t k = 0; k < 8 && i * 8 + k < bytes; ++k) {
    v |= static_cast<unsigned long long>(static_cast<unsigned char>(at[k])) << (8 * k);
  }
  return v;
}

// Stores word i of a buffer of `bytes`, nothing past the end; any alignment.
__device__ inline void store8(char* p, size_t i, size_t bytes, unsigned long long v) {
  char* at = p + i * 8;
  if (i * 8 + 8 <= bytes && reinterpret_cast<unsigned long long>(at) % 8 == 0) {
    *reinterpret_cast<unsigned long long*>(at) = v;
    return;
  }
  for (size_t k = 0; k < 8 && i * 8 + k < bytes; ++k) at[k] = static_cast<char>(v >> (8 * k));
}

// Waits until packet p carries `epoch` and returns its data in `data`: true, or false once
// `deadline` expired (no deadline without a `dev`), recording a wait of kind `op` from `from`.
// The one polling loop of every packet wait (wait_packets, the collectives' kernels).
__device__ inline bool await_packet(const Device* dev, Deadline& deadline, const uint4* p,
                                    unsigned epoch, int op, int from, unsigned long long& data) {
  unsigned seen;
  while (!poll_packet(p, epoch, data, seen)) {
    if (dev == nullptr) continue;
    const Waited what{op, from, static_cast<int>(Cmp::EQ), p, epoch};
    if (deadline.expired(*dev, what, seen)) return false;
  }
  return true;
}

// put_packets' body: this thread's words of src stored as packets: whole batches of
// PacketBatch first (all their loads before the first store), the rest one at a time, so a
// message shorter than a batch takes the one-packet path unchanged.
template <class Scope>
__device__ inline void send_packets(uint4* packets, const char* src, size_t bytes,
                                    unsigned epoch) {
  constexpr int kBatch = PacketBatch<Scope>::value;
  const size_t words = (bytes + 7) / 8, step = Scope::size();
  size_t i = Scope::rank();
  if constexpr (kBatch > 1) {
    for (; i + (kBatch - 1) * step < words; i += kBatch * step) {
      unsigned long long data[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) data[k] = load8(src, i + k * step, bytes);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) store_packet(packets + i + k * step, data[k], epoch);
    }
  }
  for (; i < words; i += step) store_packet(packets + i, load8(src, i, bytes), epoch);
}

// wait_packets' body: this thread's packets: whole batches of PacketBatch first (one look at
// each, then those not there yet awaited in turn), the rest awaited one at a time; false once
// `dev`'s deadline (when given) expired on one.
template <class Scope>
__device__ inline bool receive_packets(const Device* dev, void* dst, const void* buf, size_t bytes,
                                       unsigned epoch, int from_pe) {
  constexpr int kBatch = PacketBatch<Scope>::value;
  const uint4* packets = static_cast<const uint4*>(buf);
  const size_t words = (bytes + 7) / 8, step = Scope::size();
  Deadline deadline;
  size_t i = Scope::rank();
  if constexpr (kBatch > 1) {
    for (; i + (kBatch - 1) * step < words; i += kBatch * step) {
      uint4 now[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) now[k] = look_at_packet(packets + i + k * step);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        unsigned long long data;
        unsigned seen;
        if (!packet_arrived(now[k], epoch, data, seen) &&
            !await_packet(dev, deadline, packets + i + k * step, epoch, GSHMEM_WAIT_PACKETS,
                          from_pe, data)) {
          return false;
        }
        store8(static_cast<char*>(dst), i + k * step, bytes, data);
      }
    }
  }
  for (; i < words; i += step) {
    unsigned long long data;
    if (!await_packet(dev, deadline, packets + i, epoch, GSHMEM_WAIT_PACKETS, from_pe, data)) {
      return false;
    }
    store8(static_cast<char*>(dst), i, bytes, data);
  }
  return true;
}

}  // namespace detail

template <class Scope = Thread>
__device__ inline void put_packets(const Device& dev, void* buf, const void* src, size_t bytes,
                                   uint32_t epoch, int pe) {
  if (detail::via_proxy(dev, pe)) {
    if (Scope::rank() == 0) {
      printf("gshmem put_packets: PE %d is on the proxy path; packets need load/store access\n",
             pe);
    }
    __trap();
  }
  Scope::sync();  // every thread reads what the others wrote to src
  detail::send_packets<Scope>(static_cast<uint4*>(detail::peer(dev, buf, pe)),
                              static_cast<const char*>(src), bytes, epoch);
  Scope::sync();  // all of src has been read before any thread overwrites it
}

template <class Scope = Thread>
__device__ inline bool wait_packets(const Device& dev, void* dst, const void* buf, size_t bytes,
                                    uint32_t epoch, int from_pe = -1) {
  return Scope::all(detail::receive_packets<Scope>(&dev, dst, buf, bytes, epoch, from_pe));
}

template <class Scope = Thread>
__device__ inline void wait_packets(void* dst, const void* buf, size_t bytes, uint32_t epoch) {
  detail::receive_packets<Scope>(nullptr, dst, buf, bytes, epoch, -1);
  Scope::sync();  // every thread's copy out happens-before the scope's next step
}

}  // namespace gshmem

// Where a put_signal's latency goes: one-way ping-pong latency between GPU 0 and GPU 1 (one
// process, CUDA peer access, one thread per GPU) for each way of telling the peer that data has
// arrived, from a bare flag to data + release + acquire (what put_signal and signal_wait_until
// issue), and packets (data and flag in one 16-byte store: gshmem/device/packet.cuh). Then what
// the sender alone pays per (data, flag) pair when it does not wait. Raw PTX, no gshmem: it
// isolates the instructions' costs. Results and reading: docs/benchmarks.md.
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -o /tmp/signal_latency benchmarks/signal_latency.cu
//   /tmp/signal_latency            # needs two peer-capable GPUs
//
// Every round the initiator sends round i with payload p(i); the responder checks it and replies
// p(i) + 1, which the initiator checks: "wrong" counts payloads that arrived stale.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "raw_cuda.cuh"

namespace {

using u64 = unsigned long long;

__device__ u64 now_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ void st_weak(u64* p, u64 v) {
  asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ void st_relaxed(u64* p, u64 v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ void st_release(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ u64 ld_relaxed(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ u64 ld_acquire(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ void fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ void st_packet(u64* p, u64 data, unsigned epoch) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p),
               "r"(static_cast<unsigned>(data)), "r"(epoch), "r"(static_cast<unsigned>(data >> 32)),
               "r"(epoch)
               : "memory");
}
__device__ bool ld_packet(const u64* p, unsigned epoch, u64* data) {
  unsigned lo, e1, hi, e2;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(lo), "=r"(e1), "=r"(hi), "=r"(e2)
               : "l"(p)
               : "memory");
  *data = (static_cast<u64>(hi) << 32) | lo;
  return e1 == epoch && e2 == epoch;
}

enum Variant {
  kFlagRelaxed,         // flag: st.relaxed; wait: ld.relaxed (no data: the floor)
  kFlagRelease,         // flag: st.release; wait: ld.acquire (no data)
  kDataRelease,         // data st; flag st.release; wait ld.acquire (put_signal's instructions)
  kDataFenceRelaxed,    // data st; fence.acq_rel; flag st.relaxed; wait ld.acquire (the older form)
  kDataReleaseFence,    // data st; flag st.release; wait ld.relaxed, then fence.acq_rel
  kPacket,              // data and epoch in one 16-byte st.volatile; wait on the packet
  kVariants
};
const char* const kNames[kVariants] = {
    "flag only: st.relaxed / ld.relaxed poll",
    "flag only: st.release / ld.acquire poll",
    "8 B data + st.release flag / ld.acquire poll",
    "8 B data + fence + st.relaxed flag / ld.acquire poll",
    "8 B data + st.release flag / ld.relaxed poll + fence",
    "packet: 8 B data + epochs in one 16-byte store",
};

__device__ void send(int v, u64* data, u64* flag, u64 round, u64 payload) {
  switch (v) {
    case kFlagRelaxed: st_relaxed(flag, round); break;
    case kFlagRelease: st_release(flag, round); break;
    case kDataRelease: st_weak(data, payload); st_release(flag, round); break;
    case kDataFenceRelaxed: st_weak(data, payload); fence_sys(); st_relaxed(flag, round); break;
    case kDataReleaseFence: st_weak(data, payload); st_release(flag, round); break;
    case kPacket: st_packet(data, payload, static_cast<unsigned>(round)); break;
  }
}

__device__ u64 receive(int v, const u64* data, const u64* flag, u64 round) {
  u64 got = 0;
  switch (v) {
    case kFlagRelaxed: while (ld_relaxed(flag) < round) {} return 0;
    case kFlagRelease: while (ld_acquire(flag) < round) {} return 0;
    case kDataRelease:
    case kDataFenceRelaxed: while (ld_acquire(flag) < round) {} return *data;
    case kDataReleaseFence: while (ld_relaxed(flag) < round) {} fence_sys(); return *data;
    case kPacket: while (!ld_packet(data, static_cast<unsigned>(round), &got)) {} return got;
  }
  return 0;
}

// out[0]: the initiator's ns over the timed rounds; out[1]: wrong payloads seen here.
__global__ void ping_pong(int v, bool initiator, const u64* my_data, const u64* my_flag,
                          u64* peer_data, u64* peer_flag, int warmup, int rounds, u64* out) {
  u64 t0 = 0, wrong = 0;
  const bool carries_data = v != kFlagRelaxed && v != kFlagRelease;
  for (int i = 1; i <= warmup + rounds; ++i) {
    if (i == warmup + 1) t0 = now_ns();
    const u64 payload = static_cast<u64>(i) * 0x9E3779B97F4A7C15ull;
    if (initiator) {
      send(v, peer_data, peer_flag, i, payload);
      const u64 got = receive(v, my_data, my_flag, i);
      wrong += carries_data && got != payload + 1;
    } else {
      const u64 got = receive(v, my_data, my_flag, i);
      wrong += carries_data && got != payload;
      send(v, peer_data, peer_flag, i, got + 1);
    }
  }
  if (initiator) out[0] = now_ns() - t0;
  out[1] = wrong;
}

// The sender alone: n (data, flag) pairs to the peer back to back, nobody waiting.
__global__ void send_only(int v, u64* peer_data, u64* peer_flag, int n, u64* out) {
  const u64 t0 = now_ns();
  for (int i = 1; i <= n; ++i) send(v, peer_data + (i & 63) * 2, peer_flag, i, i);
  out[0] = now_ns() - t0;
}

}  // namespace

int main() {
  if (raw_cuda::peer_pair("signal_latency") != 0) return 1;
  u64 *data[2], *flag[2], *out[2];
  for (int d = 0; d < 2; ++d) {
    RAW_CUDA_CHECK(cudaSetDevice(d));
    RAW_CUDA_CHECK(cudaMalloc(&data[d], 4096));
    RAW_CUDA_CHECK(cudaMalloc(&flag[d], 4096));
    RAW_CUDA_CHECK(cudaMalloc(&out[d], 64));
  }
  const int warmup = 2000, rounds = 20000, repeats = 3;
  std::printf("one-way latency (round trip / 2), %d rounds, %d repeats\n", rounds, repeats);
  for (int v = 0; v < kVariants; ++v) {
    for (int r = 0; r < repeats; ++r) {
      for (int d = 0; d < 2; ++d) {
        RAW_CUDA_CHECK(cudaSetDevice(d));
        RAW_CUDA_CHECK(cudaMemset(data[d], 0, 4096));
        RAW_CUDA_CHECK(cudaMemset(flag[d], 0, 4096));
        RAW_CUDA_CHECK(cudaDeviceSynchronize());
      }
      for (int d = 0; d < 2; ++d) {
        RAW_CUDA_CHECK(cudaSetDevice(d));
        ping_pong<<<1, 1>>>(v, d == 0, data[d], flag[d], data[1 - d], flag[1 - d], warmup, rounds,
                            out[d]);
      }
      u64 first[2], second[2];
      RAW_CUDA_CHECK(cudaSetDevice(0));
      RAW_CUDA_CHECK(cudaDeviceSynchronize());
      RAW_CUDA_CHECK(cudaMemcpy(first, out[0], sizeof first, cudaMemcpyDeviceToHost));
      RAW_CUDA_CHECK(cudaSetDevice(1));
      RAW_CUDA_CHECK(cudaDeviceSynchronize());
      RAW_CUDA_CHECK(cudaMemcpy(second, out[1], sizeof second, cudaMemcpyDeviceToHost));
      std::printf("  %-54s %7.3f us   wrong %llu/%llu\n", kNames[v], first[0] / 1e3 / rounds / 2,
                  first[1], second[1]);
    }
  }
  const int pairs = 100000;
  std::printf("sender alone, %d (data, flag) pairs to the peer\n", pairs);
  for (int v : {kFlagRelaxed, kDataRelease, kDataFenceRelaxed, kPacket}) {
    RAW_CUDA_CHECK(cudaSetDevice(0));
    send_only<<<1, 1>>>(v, data[1], flag[1], pairs, out[0]);
    u64 ns = 0;
    RAW_CUDA_CHECK(cudaDeviceSynchronize());
    RAW_CUDA_CHECK(cudaMemcpy(&ns, out[0], sizeof ns, cudaMemcpyDeviceToHost));
    std::printf("  %-54s %7.1f ns per pair\n", kNames[v], static_cast<double>(ns) / pairs);
  }
  return 0;
}

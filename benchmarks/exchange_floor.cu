// The floor of a small all_reduce in a CUDA graph: every visible GPU (one process, CUDA peer
// access), a graph per GPU of 240 dependent kernels that each sum an 8-byte value over the GPUs
// through one LL packet per GPU pair (gshmem's packet stores and loads, device/packet.cuh), with
// the credits of gshmem's protocol (stored back to the sender after the read, awaited before the
// next send into the same slot); every graph replayed at once. Beside it the same protocol in a
// ring (one packet to the next GPU, the value from the previous one), the floor of a permute at
// this GPU count. Two shapes of the exchange: one thread moves every peer's packet in turn (as
// gshmem's packet kernel moves a word), or one thread per peer with a barrier before the sum. It
// says what moving packets with several peers costs against one, against which gshmem's packet
// all_reduce (benchmarks/graph_chain.py) is measured. Results: docs/benchmarks.md ("Packets at 4
// PEs, and the floor of a small all_reduce").
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -Iinclude -o /tmp/exchange_floor benchmarks/exchange_floor.cu
//   /tmp/exchange_floor                          # every visible GPU (2 to 8, peer-capable)
//   CUDA_VISIBLE_DEVICES=0,1 /tmp/exchange_floor  # two of them
//
// Every replay is checked: the ring's value has travelled 240 GPUs back, the sum is the GPUs'
// starting values summed and multiplied by the GPU count 239 times (mod 2^64).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "gshmem/device/packet.cuh"
#include "raw_cuda.cuh"

namespace {

using u64 = unsigned long long;
constexpr int kMaxGpus = 8;
constexpr int kCalls = 240;  // a multiple of 2 .. 6 and 8

enum Shape { kRing, kOneThread, kThreadPerPeer };

struct Mine {
  uint4* slots;  // [2][n]: the packet from GPU q of a call, by the call count's parity
  u64* credits;  // [n]: calls of this GPU's packets that GPU q has read (written by q)
  u64* counter;  // calls so far
  u64* data;     // [2]: the value, in and out by turns
};

struct Peers {
  uint4* slots[kMaxGpus];
  u64* credits[kMaxGpus];
};

// Call j's packet with `v` into GPU q's slot for GPU g, once q has read call j - 2's.
__device__ inline void send(const Mine& me, const Peers& peers, int n, int g, int q, u64 j,
                            unsigned e, u64 v) {
  if (j >= 2) {
    while (*reinterpret_cast<volatile u64*>(me.credits + q) < j - 1) {
    }
  }
  gshmem::detail::store_packet(peers.slots[q] + (j & 1) * n + g, v, e);
}

// Call j's value from GPU q, then q's credit back.
__device__ inline u64 receive(const Mine& me, const Peers& peers, int n, int g, int q, u64 j,
                              unsigned e) {
  uint4 p;
  do {
    p = gshmem::detail::look_at_packet(me.slots + (j & 1) * n + q);
  } while (p.y != e || p.w != e);
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(peers.credits[q] + g), "l"(j + 1)
               : "memory");
  return static_cast<u64>(p.x) | (static_cast<u64>(p.z) << 32);
}

__global__ void exchange_kernel(Mine me, Peers peers, int n, int g, Shape shape, int in_idx) {
  __shared__ u64 got[kMaxGpus];
  const u64 j = *me.counter;
  const unsigned e = static_cast<unsigned>(j % 0xffffffffull) + 1u;
  const u64 v = me.data[in_idx];
  const int t = static_cast<int>(threadIdx.x);
  if (shape == kRing) {
    if (t == 0) {
      send(me, peers, n, g, (g + 1) % n, j, e, v);
      me.data[1 - in_idx] = receive(me, peers, n, g, (g + n - 1) % n, j, e);
    }
  } else if (shape == kOneThread) {
    if (t == 0) {
      for (int q = 0; q < n; ++q) {
        if (q != g) send(me, peers, n, g, q, j, e, v);
      }
      u64 sum = 0;
      for (int q = 0; q < n; ++q) sum += q == g ? v : receive(me, peers, n, g, q, j, e);
      me.data[1 - in_idx] = sum;
    }
  } else {
    if (t < n && t != g) {
      send(me, peers, n, g, t, j, e, v);
      got[t] = receive(me, peers, n, g, t, j, e);
    }
    __syncthreads();
    if (t == 0) {
      u64 sum = 0;
      for (int q = 0; q < n; ++q) sum += q == g ? v : got[q];
      me.data[1 - in_idx] = sum;
    }
  }
  __syncthreads();  // every thread has read the count
  if (t == 0) *me.counter = j + 1;
}

struct Variant {
  const char* name;
  Shape shape;
  int threads;
};

// Median µs per call of kCalls kernels per graph, every GPU's graph replayed at once.
int run(const Variant& v, int n, const Mine* mine, const Peers& peers, cudaStream_t* stream,
        float* us) {
  return raw_cuda::time_graphs(
      n, stream, kCalls,
      [&](int g, int i, cudaStream_t s) {
        exchange_kernel<<<1, v.threads, 0, s>>>(mine[g], peers, n, g, v.shape, i & 1);
      },
      us);
}

u64 start_value(int g) { return 1000ull * (g + 1); }

// After `replays` replays of kCalls kernels: how many GPUs hold another value than they should.
int count_wrong(const Variant& v, int n, const Mine* mine, int replays, int* wrong) {
  u64 sum = 0, scale = 1;
  for (int g = 0; g < n; ++g) sum += start_value(g);
  for (int c = 1; c < kCalls * replays; ++c) scale *= static_cast<u64>(n);
  *wrong = 0;
  for (int g = 0; g < n; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    u64 got = 0;
    RAW_CUDA_CHECK(cudaMemcpy(&got, mine[g].data, sizeof got, cudaMemcpyDeviceToHost));
    const u64 want = v.shape == kRing ? start_value(g) : sum * scale;  // kCalls % n == 0
    *wrong += got != want;
  }
  return 0;
}

}  // namespace

int main() {
  int n = 0;
  RAW_CUDA_CHECK(cudaGetDeviceCount(&n));
  n = std::min(n, kMaxGpus);
  if (n < 2 || kCalls % n != 0) {
    std::printf("exchange_floor needs 2 to 6 or 8 peer-capable GPUs, has %d\n", n);
    return 1;
  }
  Mine mine[kMaxGpus];
  Peers peers{};
  cudaStream_t stream[kMaxGpus];
  for (int g = 0; g < n; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    for (int q = 0; q < n; ++q) {
      if (q != g) RAW_CUDA_CHECK(cudaDeviceEnablePeerAccess(q, 0));
    }
    Mine& m = mine[g];
    RAW_CUDA_CHECK(cudaMalloc(&m.slots, 2 * n * sizeof(uint4)));
    RAW_CUDA_CHECK(cudaMalloc(&m.credits, n * sizeof(u64)));
    RAW_CUDA_CHECK(cudaMalloc(&m.counter, sizeof(u64)));
    RAW_CUDA_CHECK(cudaMalloc(&m.data, 2 * sizeof(u64)));
    RAW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream[g], cudaStreamNonBlocking));
    peers.slots[g] = m.slots;
    peers.credits[g] = m.credits;
  }
  const Variant variants[] = {
      {"ring: to the next GPU, from the previous", kRing, 32},
      {"every peer, one thread in turn", kOneThread, 32},
      {"every peer, one thread in turn, 128 threads", kOneThread, 128},
      {"every peer, a thread each + barrier", kThreadPerPeer, 32},
  };
  std::printf("%d GPUs, %d dependent kernels per graph, every graph at once\n", n, kCalls);
  std::printf("%-48s %10s %6s\n", "kernel", "us/call", "wrong");
  for (const Variant& v : variants) {
    // Fresh counts, credits and slots for each variant (every slot's epoch starts again at 1).
    for (int g = 0; g < n; ++g) {
      RAW_CUDA_CHECK(cudaSetDevice(g));
      RAW_CUDA_CHECK(cudaMemset(mine[g].slots, 0, 2 * n * sizeof(uint4)));
      RAW_CUDA_CHECK(cudaMemset(mine[g].credits, 0, n * sizeof(u64)));
      RAW_CUDA_CHECK(cudaMemset(mine[g].counter, 0, sizeof(u64)));
      const u64 own = start_value(g);
      RAW_CUDA_CHECK(cudaMemcpy(mine[g].data, &own, sizeof own, cudaMemcpyHostToDevice));
    }
    for (int g = 0; g < n; ++g) {
      RAW_CUDA_CHECK(cudaSetDevice(g));
      RAW_CUDA_CHECK(cudaDeviceSynchronize());
    }
    float us = 0;
    int wrong = 0;
    if (run(v, n, mine, peers, stream, &us) || count_wrong(v, n, mine, 12, &wrong)) return 1;
    std::printf("%-48s %10.3f %6s\n", v.name, us, wrong ? "WRONG" : "0");
  }
  return 0;
}

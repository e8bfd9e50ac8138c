// The floor of a small permute in a CUDA graph: two GPUs (one process, CUDA peer access), a graph
// per GPU of 200 dependent kernels that each swap an 8-byte value with the other GPU through one
// LL packet (8 data bytes and the epoch twice in one 16-byte store, as protocol.cuh's), both
// graphs replayed at once; µs per call for the pieces of gshmem's permute protocol added one at a
// time (a credit stored back to the sender, the sender waiting for it, 512 threads and a barrier),
// beside a kernel that touches no peer. gshmem's packet stores and loads (device/packet.cuh), no
// other part of gshmem: it says what the protocol itself costs, against which gshmem's permute
// kernel in the same chain is measured. Results: docs/benchmarks.md ("The floor of a small
// permute").
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -Iinclude -o /tmp/permute_floor benchmarks/permute_floor.cu
//   /tmp/permute_floor             # needs two peer-capable GPUs
//
// Each GPU starts with its own value; 200 swaps per replay leave every GPU its own value again,
// which is checked after each variant ("wrong" counts GPUs that hold another).
#include <cuda_runtime.h>

#include <cstdio>

#include "gshmem/device/packet.cuh"
#include "raw_cuda.cuh"

namespace {

using u64 = unsigned long long;

enum Flags { kCredit = 1, kWaitCredit = 2, kSync = 4, kAllLoad = 8, kBloat = 16 };
struct Big {  // a 256-byte parameter, as a large device-state struct passed by value
  u64 w[32];
};

struct Side {
  uint4* slot;   // [2] packets from the peer, by the parity of the call count
  u64* credit;   // calls of this GPU's packets the peer has read (written by the peer)
  u64* counter;  // calls so far (local)
  u64* data;     // [2] the value, in and out by turns
};

__global__ void swap_kernel(Side me, uint4* peer_slot, u64* peer_credit, int flags, int in_idx,
                            Big big) {
  if (flags & kBloat) {  // a large cold path ahead of the hot one (never taken: w[0] is 0)
    if (big.w[0] != 0) {
#pragma unroll
      for (int k = 0; k < 400; ++k) me.data[(k * 7 + threadIdx.x) & 1] += big.w[k & 31] * (k + 3);
    }
  }
  const u64 all = (flags & kAllLoad) ? *reinterpret_cast<volatile u64*>(me.counter) : 0;
  if (threadIdx.x == 0) {
    const u64 j = (flags & kAllLoad) ? all : *me.counter;
    const unsigned e = static_cast<unsigned>(j % 0xffffffffull) + 1u;
    if ((flags & kWaitCredit) && j >= 2) {
      while (*reinterpret_cast<volatile u64*>(me.credit) < j - 1) {
      }
    }
    const u64 v = me.data[in_idx];
    gshmem::detail::store_packet(peer_slot + (j & 1), v, e);
    uint4 p;
    do {
      p = gshmem::detail::look_at_packet(me.slot + (j & 1));
    } while (p.y != e || p.w != e);
    me.data[1 - in_idx] = static_cast<u64>(p.x) | (static_cast<u64>(p.z) << 32);
    if (flags & kCredit) {
      asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(peer_credit), "l"(j + 1)
                   : "memory");
    }
    *me.counter = j + 1;
  }
  if (flags & kSync) __syncthreads();
}

__global__ void local_kernel(Side me, int in_idx) {
  if (threadIdx.x == 0) me.data[1 - in_idx] = me.data[in_idx] + 1;
}

struct Variant {
  const char* name;
  int flags, threads;
  bool local;
};

// Median µs per call of `calls` kernels per graph, both GPUs' graphs replayed at once.
int run(const Variant& v, Side side[2], cudaStream_t stream[2], int calls, float* us) {
  return raw_cuda::time_graphs(
      2, stream, calls,
      [&](int g, int i, cudaStream_t s) {
        if (v.local) {
          local_kernel<<<1, v.threads, 0, s>>>(side[g], i & 1);
        } else {
          swap_kernel<<<1, v.threads, 0, s>>>(side[g], side[1 - g].slot, side[1 - g].credit,
                                              v.flags, i & 1, Big{});
        }
      },
      us);
}

// Gives each GPU its own value (1000 * (g + 1)).
int give_own_values(Side side[2]) {
  for (int g = 0; g < 2; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    const u64 own = 1000ull * (g + 1);
    RAW_CUDA_CHECK(cudaMemcpy(side[g].data, &own, sizeof own, cudaMemcpyHostToDevice));
  }
  return 0;
}

// How many GPUs hold a value other than their own, in *wrong.
int count_foreign_values(Side side[2], int* wrong) {
  *wrong = 0;
  for (int g = 0; g < 2; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    u64 v = 0;
    RAW_CUDA_CHECK(cudaMemcpy(&v, side[g].data, sizeof v, cudaMemcpyDeviceToHost));
    *wrong += v != 1000ull * (g + 1);
  }
  return 0;
}

}  // namespace

int main() {
  if (raw_cuda::peer_pair("permute_floor")) return 1;
  const int calls = 200;  // even: every GPU holds its own value after each replay
  Side side[2];
  cudaStream_t stream[2];
  for (int g = 0; g < 2; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    RAW_CUDA_CHECK(cudaMalloc(&side[g].slot, 2 * sizeof(uint4)));
    RAW_CUDA_CHECK(cudaMemset(side[g].slot, 0, 2 * sizeof(uint4)));
    RAW_CUDA_CHECK(cudaMalloc(&side[g].credit, sizeof(u64)));
    RAW_CUDA_CHECK(cudaMemset(side[g].credit, 0, sizeof(u64)));
    RAW_CUDA_CHECK(cudaMalloc(&side[g].counter, sizeof(u64)));
    RAW_CUDA_CHECK(cudaMemset(side[g].counter, 0, sizeof(u64)));
    RAW_CUDA_CHECK(cudaMalloc(&side[g].data, 2 * sizeof(u64)));
    RAW_CUDA_CHECK(cudaMemset(side[g].data, 0, 2 * sizeof(u64)));
    RAW_CUDA_CHECK(cudaStreamCreateWithFlags(&stream[g], cudaStreamNonBlocking));
  }
  // Counts and credits carry over from variant to variant (epochs only grow), so a variant that
  // awaits credits comes after one that stores them.
  const Variant variants[] = {
      {"local only (no peer), 32 threads", 0, 32, true},
      {"swap, 32 threads", 0, 32, false},
      {"swap, 512 threads + barrier", kSync, 512, false},
      {"swap + credit stored back, 32 threads", kCredit, 32, false},
      {"swap + credit stored + awaited, 32 threads", kCredit | kWaitCredit, 32, false},
      {"swap + credit stored + awaited, 512 + barrier", kCredit | kWaitCredit | kSync, 512, false},
      {"  the same, every thread loading the count", kCredit | kWaitCredit | kSync | kAllLoad, 512,
       false},
      {"  the same, 256-byte parameter + cold code", kCredit | kWaitCredit | kSync | kBloat, 512,
       false},
  };
  std::printf("%-48s %10s %6s\n", "kernel (200 per graph, both GPUs at once)", "us/call", "wrong");
  for (const Variant& v : variants) {
    int wrong = 0;
    float us = 0;
    if (give_own_values(side) || run(v, side, stream, calls, &us) ||
        count_foreign_values(side, &wrong)) {
      return 1;
    }
    std::printf("%-48s %10.3f %6s\n", v.name, us, v.local ? "-" : (wrong ? "WRONG" : "0"));
  }
  return 0;
}

// What the raw-CUDA probes in benchmarks/ (signal_latency.cu, bulk_copy_put.cu,
// copy_engine_split.cu, permute_floor.cu, exchange_floor.cu) share: a check that returns 1 from
// the enclosing function on a CUDA error, the two peer GPUs most of them run on, and a word
// pattern to fill a buffer with and count mismatches against, so that every copy a probe times
// is also verified.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#define RAW_CUDA_CHECK(x)                                                   \
  do {                                                                      \
    cudaError_t raw_cuda_error = (x);                                       \
    if (raw_cuda_error != cudaSuccess) {                                    \
      std::printf("%s: %s\n", #x, cudaGetErrorString(raw_cuda_error));      \
      return 1;                                                             \
    }                                                                       \
  } while (0)

namespace raw_cuda {

// GPUs 0 and 1 with peer access both ways: 0, or 1 after a message naming `probe` (fewer than two
// GPUs, or a CUDA error).
inline int peer_pair(const char* probe) {
  int count = 0;
  RAW_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::printf("%s needs two peer-capable GPUs\n", probe);
    return 1;
  }
  for (int d = 0; d < 2; ++d) {
    RAW_CUDA_CHECK(cudaSetDevice(d));
    RAW_CUDA_CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
  }
  return 0;
}

// Median µs per call of a graph per GPU g < gpus of `calls` captured launch(g, i, stream[g]),
// i < calls, in *us: every GPU's graph replayed at once, 3 warm-up replays and 9 timed, each
// replay the slowest GPU's time (the floor probes' harness).
template <class Launch>
int time_graphs(int gpus, cudaStream_t* stream, int calls, Launch&& launch, float* us) {
  std::vector<cudaGraphExec_t> exec(gpus);
  std::vector<cudaEvent_t> start(gpus), stop(gpus);
  for (int g = 0; g < gpus; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    cudaGraph_t graph;
    RAW_CUDA_CHECK(cudaStreamBeginCapture(stream[g], cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < calls; ++i) launch(g, i, stream[g]);
    RAW_CUDA_CHECK(cudaStreamEndCapture(stream[g], &graph));
    RAW_CUDA_CHECK(cudaGraphInstantiate(&exec[g], graph, 0));
    RAW_CUDA_CHECK(cudaGraphDestroy(graph));
    RAW_CUDA_CHECK(cudaEventCreate(&start[g]));
    RAW_CUDA_CHECK(cudaEventCreate(&stop[g]));
  }
  std::vector<float> ms;
  for (int r = 0; r < 12; ++r) {
    for (int g = 0; g < gpus; ++g) {
      RAW_CUDA_CHECK(cudaSetDevice(g));
      RAW_CUDA_CHECK(cudaEventRecord(start[g], stream[g]));
      RAW_CUDA_CHECK(cudaGraphLaunch(exec[g], stream[g]));
      RAW_CUDA_CHECK(cudaEventRecord(stop[g], stream[g]));
    }
    float worst = 0;
    for (int g = 0; g < gpus; ++g) {
      RAW_CUDA_CHECK(cudaEventSynchronize(stop[g]));
      float t = 0;
      RAW_CUDA_CHECK(cudaEventElapsedTime(&t, start[g], stop[g]));
      worst = std::max(worst, t);
    }
    if (r >= 3) ms.push_back(worst);
  }
  std::sort(ms.begin(), ms.end());
  *us = ms[ms.size() / 2] * 1000.f / static_cast<float>(calls);
  for (int g = 0; g < gpus; ++g) {
    RAW_CUDA_CHECK(cudaSetDevice(g));
    RAW_CUDA_CHECK(cudaGraphExecDestroy(exec[g]));
    RAW_CUDA_CHECK(cudaEventDestroy(start[g]));
    RAW_CUDA_CHECK(cudaEventDestroy(stop[g]));
  }
  return 0;
}

// Word i of the pattern with `seed`.
__host__ __device__ inline unsigned pattern(size_t i, unsigned seed) {
  return static_cast<unsigned>(i) * 2654435761u + seed;
}

__global__ void fill(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = pattern(i, seed);
  }
}

// Adds to *wrong the number of the n words of p that differ from the pattern.
__global__ void count_wrong(const unsigned* p, size_t n, unsigned seed,
                                   unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    bad += p[i] != pattern(i, seed);
  }
  if (bad) atomicAdd(wrong, bad);
}

}  // namespace raw_cuda

// Can an on-stream put of 1 MiB go faster by splitting it over several copy engines? One
// cudaMemcpyAsync in a CUDA graph moves 1 MiB at ~215 GB/s (issue 15 asked for 300). Here each
// put is split into k pieces on k streams (a fork/join inside the graph, so the pieces may run
// on different copy engines), GPU 0 -> GPU 1 with peer access, `kPuts` puts in sequence per
// graph (each put's pieces fork from the previous put's join), the graph replayed. Raw CUDA, no
// gshmem; every size is checked after its run. Results: docs/benchmarks.md.
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -o /tmp/copy_engine_split benchmarks/copy_engine_split.cu
//   /tmp/copy_engine_split          # needs two peer-capable GPUs
#include <cuda_runtime.h>

#include <cstdio>

#include "raw_cuda.cuh"

constexpr int kPuts = 20;

int main() {
  if (raw_cuda::peer_pair("copy_engine_split") != 0) return 1;
  const size_t cap = 64ull << 20;
  char *src, *dst;
  unsigned long long* wrong;
  RAW_CUDA_CHECK(cudaSetDevice(1));
  RAW_CUDA_CHECK(cudaMalloc(&dst, cap));
  RAW_CUDA_CHECK(cudaSetDevice(0));
  RAW_CUDA_CHECK(cudaMalloc(&src, cap));
  RAW_CUDA_CHECK(cudaMalloc(&wrong, sizeof *wrong));
  cudaStream_t streams[8];
  cudaEvent_t forks[kPuts][8], joins[kPuts][8];
  for (auto& s : streams) RAW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (auto* events : {&forks, &joins}) {
    for (auto& row : *events) {
      for (auto& ev : row) RAW_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
  }
  int engines = 0;
  RAW_CUDA_CHECK(cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, 0));
  std::printf("GPU 0 -> GPU 1, graph of %d puts, each split in k pieces on k streams; %d async "
              "engines\n", kPuts, engines);
  for (size_t bytes : {256ull << 10, 1ull << 20, 4ull << 20, 16ull << 20}) {
    for (int k : {1, 2, 3, 4, 8}) {
      raw_cuda::fill<<<264, 512>>>(reinterpret_cast<unsigned*>(src), bytes / 4, 11u);
      RAW_CUDA_CHECK(cudaMemset(dst, 0, bytes));
      RAW_CUDA_CHECK(cudaDeviceSynchronize());
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      cudaStream_t main = streams[0];
      RAW_CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
      const size_t piece = (bytes / k + 255) / 256 * 256;
      for (int p = 0; p < kPuts; ++p) {
        RAW_CUDA_CHECK(cudaEventRecord(forks[p][0], main));
        for (int j = 1; j < k; ++j) RAW_CUDA_CHECK(cudaStreamWaitEvent(streams[j], forks[p][0], 0));
        for (int j = 0; j < k; ++j) {
          const size_t lo = j * piece;
          if (lo >= bytes) break;
          const size_t n = bytes - lo < piece ? bytes - lo : piece;
          RAW_CUDA_CHECK(cudaMemcpyAsync(dst + lo, src + lo, n, cudaMemcpyDefault, streams[j]));
        }
        for (int j = 1; j < k; ++j) {
          RAW_CUDA_CHECK(cudaEventRecord(joins[p][j], streams[j]));
          RAW_CUDA_CHECK(cudaStreamWaitEvent(main, joins[p][j], 0));
        }
      }
      RAW_CUDA_CHECK(cudaStreamEndCapture(main, &graph));
      RAW_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int w = 0; w < 3; ++w) RAW_CUDA_CHECK(cudaGraphLaunch(exec, main));
      cudaEvent_t a, b;
      RAW_CUDA_CHECK(cudaEventCreate(&a));
      RAW_CUDA_CHECK(cudaEventCreate(&b));
      const int reps = 20;
      RAW_CUDA_CHECK(cudaEventRecord(a, main));
      for (int r = 0; r < reps; ++r) RAW_CUDA_CHECK(cudaGraphLaunch(exec, main));
      RAW_CUDA_CHECK(cudaEventRecord(b, main));
      RAW_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      RAW_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      RAW_CUDA_CHECK(cudaMemset(wrong, 0, sizeof *wrong));
      raw_cuda::count_wrong<<<264, 512>>>(reinterpret_cast<const unsigned*>(dst), bytes / 4, 11u,
                                          wrong);
      unsigned long long bad = 0;
      RAW_CUDA_CHECK(cudaMemcpy(&bad, wrong, sizeof bad, cudaMemcpyDeviceToHost));
      const double per_put_us = ms * 1e3 / (reps * kPuts);
      std::printf("  %6zu KiB  k=%d  %7.2f us per put  %7.1f GB/s  wrong words %llu\n",
                  bytes >> 10, k, per_put_us, bytes / (per_put_us * 1e-6) / 1e9, bad);
      RAW_CUDA_CHECK(cudaGraphExecDestroy(exec));
      RAW_CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }
  return 0;
}

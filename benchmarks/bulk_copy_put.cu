// Device put and get over NVLink by Hopper bulk copies (cp.async.bulk, the TMA engine) against
// plain 16-byte loads and stores from SMs (the device API's copy loop) and the copy engine, all
// in one process on GPU 0 and GPU 1 with CUDA peer access. Raw CUDA, no gshmem: it asks whether
// the bulk-copy engine moves more than the SMs' stores (the device put stops near 356 GB/s,
// docs/benchmarks.md) before the device API's copy loop is changed. Every copy is checked.
// Results: docs/benchmarks.md ("Device put and get from SMs, bulk copies and copy engines").
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -o /tmp/bulk_copy_put benchmarks/bulk_copy_put.cu
//   /tmp/bulk_copy_put            # needs two peer-capable Hopper GPUs
//
// bulk: each CTA's thread 0 moves its chunks through `kStages` shared-memory stages: a bulk load
// global -> shared completing on the stage's mbarrier, then a bulk store shared -> global in a
// bulk group; a stage is loaded again once the store that read it has finished reading
// (cp.async.bulk.wait_group.read). put: local source, peer destination; get: the reverse.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "raw_cuda.cuh"

namespace {

constexpr int kStages = 4;

__device__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}

__device__ void mbar_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

__device__ void bulk_load(void* smem, const void* global, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(smem)),
      "l"(global), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

__device__ void bulk_store(void* global, const void* smem, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(global),
               "r"(smem_addr(smem)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

template <int kPending>
__device__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

// Chunks c = blockIdx.x, blockIdx.x + gridDim.x, ... of `chunk` bytes (a multiple of 16).
__global__ void bulk_copy(char* dst, const char* src, size_t bytes, unsigned chunk) {
  extern __shared__ __align__(128) char stage[];
  __shared__ uint64_t bars[kStages];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < kStages; ++s) mbar_init(&bars[s]);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const size_t chunks = (bytes + chunk - 1) / chunk;
  auto size_of = [&](size_t c) {
    const size_t lo = c * chunk;
    return static_cast<unsigned>(bytes - lo < chunk ? bytes - lo : chunk);
  };
  auto load = [&](size_t c, int s) {
    mbar_expect(&bars[s], size_of(c));
    bulk_load(stage + static_cast<size_t>(s) * chunk, src + c * chunk, size_of(c), &bars[s]);
  };
  // This CTA's i-th chunk is c = blockIdx.x + i * gridDim.x, in stage i % kStages.
  size_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  for (size_t i = 0; i < mine && i < kStages; ++i) {
    load(blockIdx.x + i * gridDim.x, static_cast<int>(i));
  }
  for (size_t i = 0; i < mine; ++i) {
    const int s = static_cast<int>(i % kStages);
    const size_t c = blockIdx.x + i * gridDim.x;
    mbar_wait(&bars[s], static_cast<unsigned>((i / kStages) & 1));
    bulk_store(dst + c * chunk, stage + static_cast<size_t>(s) * chunk, size_of(c));
    // The previous chunk's store has read its stage: load that stage's next chunk.
    if (i >= 1 && i - 1 + kStages < mine) {
      bulk_wait_read<1>();
      load(blockIdx.x + (i - 1 + kStages) * gridDim.x, static_cast<int>((i - 1) % kStages));
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // every store complete
}

// The device API's way: every thread moves 16-byte words, 4 loads in flight before the stores.
__global__ void sm_copy(int4* dst, const int4* src, size_t words) {
  const size_t n = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * n < words; i += 4 * n) {
    const int4 a = src[i], b = src[i + n], c = src[i + 2 * n], d = src[i + 3 * n];
    dst[i] = a;
    dst[i + n] = b;
    dst[i + 2 * n] = c;
    dst[i + 3 * n] = d;
  }
  for (; i < words; i += n) dst[i] = src[i];
}

struct Buffers {
  char* local;   // on GPU 0
  char* remote;  // on GPU 1
  unsigned long long* wrong;
};

// Times `iters` launches of `launch` on GPU 0's stream (after 3 warm-up ones), GB/s; then checks
// that `dst` holds the pattern the source was filled with.
template <class Launch>
int timed(const char* what, Launch launch, char* src, char* dst, size_t bytes, const Buffers& b,
          int iters) {
  RAW_CUDA_CHECK(cudaSetDevice(0));
  raw_cuda::fill<<<264, 512>>>(reinterpret_cast<unsigned*>(src), bytes / 4, 7u);
  RAW_CUDA_CHECK(cudaMemset(dst, 0, bytes));
  RAW_CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t start, stop;
  RAW_CUDA_CHECK(cudaEventCreate(&start));
  RAW_CUDA_CHECK(cudaEventCreate(&stop));
  RAW_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) launch();
  RAW_CUDA_CHECK(cudaEventRecord(stop));
  RAW_CUDA_CHECK(cudaEventSynchronize(stop));
  RAW_CUDA_CHECK(cudaGetLastError());
  float ms = 0;
  RAW_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  RAW_CUDA_CHECK(cudaMemset(b.wrong, 0, sizeof *b.wrong));
  raw_cuda::count_wrong<<<264, 512>>>(reinterpret_cast<const unsigned*>(dst), bytes / 4, 7u,
                                      b.wrong);
  unsigned long long wrong = 0;
  RAW_CUDA_CHECK(cudaMemcpy(&wrong, b.wrong, sizeof wrong, cudaMemcpyDeviceToHost));
  std::printf("  %-44s %8zu MiB  %7.1f GB/s  wrong words %llu\n", what, bytes >> 20,
              static_cast<double>(bytes) * iters / (ms * 1e-3) / 1e9, wrong);
  return 0;
}

}  // namespace

int main() {
  if (raw_cuda::peer_pair("bulk_copy_put") != 0) return 1;
  const size_t cap = 256ull << 20;
  Buffers b{};
  RAW_CUDA_CHECK(cudaSetDevice(1));
  RAW_CUDA_CHECK(cudaMalloc(&b.remote, cap));
  RAW_CUDA_CHECK(cudaSetDevice(0));
  RAW_CUDA_CHECK(cudaMalloc(&b.local, cap));
  RAW_CUDA_CHECK(cudaMalloc(&b.wrong, sizeof *b.wrong));
  int sms = 0;
  RAW_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::vector<unsigned> chunks = {16u << 10, 32u << 10, 48u << 10};
  const int most = static_cast<int>(kStages * chunks.back());
  RAW_CUDA_CHECK(
      cudaFuncSetAttribute(bulk_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  std::printf("GPU 0 -> GPU 1 (put) and GPU 1 -> GPU 0 (get), issued by GPU 0, %d SMs\n", sms);
  for (size_t bytes : {32ull << 20, 256ull << 20}) {
    const int iters = bytes >= (256ull << 20) ? 10 : 50;
    for (int dir = 0; dir < 2; ++dir) {
      char* src = dir == 0 ? b.local : b.remote;
      char* dst = dir == 0 ? b.remote : b.local;
      const char* op = dir == 0 ? "put" : "get";
      char what[96];
      std::snprintf(what, sizeof what, "%s copy engine (cudaMemcpyAsync)", op);
      if (timed(what, [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault); }, src, dst,
                bytes, b, iters)) {
        return 1;
      }
      for (int ctas : {32, 64, sms}) {
        std::snprintf(what, sizeof what, "%s SM stores, %d CTAs x 1024", op, ctas);
        auto sm = [&] {
          sm_copy<<<ctas, 1024>>>(reinterpret_cast<int4*>(dst), reinterpret_cast<const int4*>(src),
                                  bytes / 16);
        };
        if (timed(what, sm, src, dst, bytes, b, iters)) return 1;
      }
      for (unsigned chunk : chunks) {
        for (int ctas : {32, 64, sms, 2 * sms}) {
          std::snprintf(what, sizeof what, "%s bulk, %d CTAs, %u KiB x %d stages", op, ctas,
                        chunk >> 10, kStages);
          const int smem = static_cast<int>(kStages * chunk);
          auto bulk = [&] { bulk_copy<<<ctas, 32, smem>>>(dst, src, bytes, chunk); };
          if (timed(what, bulk, src, dst, bytes, b, iters)) return 1;
        }
      }
    }
  }
  return 0;
}

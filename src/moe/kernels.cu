// Expert-parallel dispatch and combine (gshmem.moe, docs/moe.md) on the public device API only:
// symmetric buffers reached with ordinary loads and stores through gshmem::ptr (every rank of the
// team load/store-reachable: the Python side checks it once per buffer), completion by
// release/acquire signals. Three kernels and a C ABI that python/gshmem/moe/kernels.py calls.
//
//   dispatch  sender: each warp copies its tokens' rows (and their top-k restricted to the
//             receiver) straight into every receiver's buffer at the rows routing.py planned;
//             then each block adds 1 to `arrived[me]` at every receiver (release: the block's
//             stores happen-before thread 0's update through bar.sync, and release is cumulative).
//   reduce    receiver: each received row's sum of its experts' output rows (times their
//             weights), written into this rank's symmetric combine buffer; each block then adds
//             1 to `ready[me]` at every sender.
//   pull      sender: waits until every rank's `ready` counter reached the call's target, then
//             each warp reads its tokens' rows from every rank it sent them to and sums them.
//
// Counters only grow (common.cuh); calls alternate dispatch, combine (the Python side enforces
// it), which is what orders the reuse of the buffers.
#include "common.cuh"

namespace gshmem_moe {
namespace {

struct Route {  // what the sender planned (routing.py) and where every rank lives
  const int32_t* pes;        // [world] world PE of each rank of the team
  const int32_t* position;   // [tokens, world] row among this rank's tokens for a rank, or -1
  const int32_t* offsets;    // [world] first row of this rank's tokens at each receiver
  int world, me;
  int64_t tokens;
};

// One warp per token: its row to every rank it goes to, then the top-k entries of that rank.
__global__ void dispatch_kernel(gshmem::Device dev, Route r, const int4* x, int64_t row_vecs,
                                const int64_t* topk, const float* weights, int k, int per_rank,
                                int4* recv_x, int32_t* recv_src, int32_t* recv_local,
                                float* recv_weights, uint64_t* arrived) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t t = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; t < r.tokens;
       t += warps) {
    const int4* src = x + t * row_vecs;
    for (int q = 0; q < r.world; ++q) {
      const int pos = r.position[t * r.world + q];
      if (pos < 0) continue;
      const int64_t row = r.offsets[q] + pos;
      const int pe = r.pes[q];
      int4* dst = gshmem::ptr(dev, recv_x, pe) + row * row_vecs;
#pragma unroll 4
      for (int64_t i = lane; i < row_vecs; i += kWarp) dst[i] = __ldg(src + i);
      if (lane < k) {
        const int64_t e = topk[t * k + lane];
        const bool here = e >= 0 && e / per_rank == q;
        gshmem::ptr(dev, recv_local, pe)[row * k + lane] =
            here ? static_cast<int32_t>(e % per_rank) : -1;
        gshmem::ptr(dev, recv_weights, pe)[row * k + lane] =
            here ? weights[t * k + lane] : 0.0f;
      }
      if (lane == 0) gshmem::ptr(dev, recv_src, pe)[row] = static_cast<int32_t>(t);
    }
  }
  add_to_all(dev, r.pes, r.world, r.me, arrived);
}

__global__ void wait_kernel(const uint64_t* counters, int world, uint64_t target) {
  wait_counters(counters, world, target);
}

// One warp per received row: the sum of its pairs' rows of y (weighted), in fp32, stored once.
// Lane j < k holds choice j's pair and weight; every lane takes them from there once per row, so
// the loads of one vector's k rows are independent and in flight together.
template <class T>
__global__ void reduce_kernel(gshmem::Device dev, Route r, const int4* y, int64_t y_stride_vecs,
                              const int32_t* slot, const float* pair_weight, int k,
                              int64_t rows, int64_t row_vecs, int4* comb, uint64_t* ready) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; row < rows;
       row += warps) {
    const int mine = lane < k ? slot[row * k + lane] : -1;
    const float mine_w = mine >= 0 && pair_weight ? pair_weight[mine] : 1.0f;
    int pair[kMaxTopk];
    float weight[kMaxTopk];
#pragma unroll
    for (int j = 0; j < kMaxTopk; ++j) {
      pair[j] = __shfl_sync(0xffffffffu, mine, j);
      weight[j] = __shfl_sync(0xffffffffu, mine_w, j);
    }
    for (int64_t i = lane; i < row_vecs; i += kWarp) {
      int4 v[kMaxTopk];
#pragma unroll
      for (int j = 0; j < kMaxTopk; ++j) {
        if (pair[j] >= 0) v[j] = __ldg(y + pair[j] * y_stride_vecs + i);
      }
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < kMaxTopk; ++j) {
        if (pair[j] >= 0) Vec8<T>::add(acc, v[j], weight[j]);
      }
      comb[row * row_vecs + i] = Vec8<T>::pack(acc);
    }
  }
  add_to_all(dev, r.pes, r.world, r.me, ready);
}

// One warp per token: the sum of its rows at every rank it was sent to (zeros if none). Lane q
// finds the token's row at rank q (world <= 32) and leaves its address in shared memory.
template <class T>
__global__ void pull_kernel(gshmem::Device dev, Route r, const int4* comb, int64_t row_vecs,
                            int4* out, const uint64_t* ready, uint64_t target) {
  wait_counters(ready, r.world, target);
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int4* base = lane < r.world ? gshmem::ptr(dev, comb, r.pes[lane]) : nullptr;
  __shared__ const int4* rows_of[kThreads / kWarp][kWarp];  // per warp: the token's row per rank
  const int4** rows = rows_of[threadIdx.x / kWarp];
  for (int64_t t = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; t < r.tokens;
       t += warps) {
    const int pos = lane < r.world ? r.position[t * r.world + lane] : -1;
    __syncwarp();  // the previous token's reads of rows[] are done
    rows[lane] = pos >= 0 ? base + (r.offsets[lane] + pos) * row_vecs : nullptr;
    const unsigned sent = __ballot_sync(0xffffffffu, pos >= 0);  // also orders rows[] writes
    for (int64_t i = lane; i < row_vecs; i += kWarp) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (unsigned m = sent; m; m &= m - 1) Vec8<T>::add(acc, rows[__ffs(m) - 1][i], 1.0f);
      out[t * row_vecs + i] = Vec8<T>::pack(acc);
    }
  }
}

}  // namespace

thread_local char last_error[256] = "";

int check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  snprintf(last_error, sizeof(last_error), "%s: %s", what, cudaGetErrorString(e));
  return 1;
}

}  // namespace gshmem_moe

using namespace gshmem_moe;  // NOLINT: the C ABI below calls this library's kernels

extern "C" {

// Every call: `dev` is the comm's gshmem_device_t; `route` arrays are on the GPU; buffers named
// recv_*, comb, arrived and ready are symmetric (the same object on every rank). Non-blocking:
// work is queued on `stream`. Returns 0, or 1 with gshmem_moe_last_error() saying why.

const char* gshmem_moe_last_error() { return gshmem_moe::last_error; }

int gshmem_moe_dispatch(const gshmem_device_t* dev, const int32_t* pes, const int32_t* position,
                        const int32_t* offsets, int world, int me, int64_t tokens,
                        const void* x, int64_t row_bytes, const int64_t* topk,
                        const float* weights, int k, int per_rank, void* recv_x,
                        int32_t* recv_src, int32_t* recv_local, float* recv_weights,
                        uint64_t* arrived, int blocks, cudaStream_t stream) {
  const Route r{pes, position, offsets, world, me, tokens};
  dispatch_kernel<<<blocks, kThreads, 0, stream>>>(
      *dev, r, static_cast<const int4*>(x), row_bytes / 16, topk, weights, k, per_rank,
      static_cast<int4*>(recv_x), recv_src, recv_local, recv_weights, arrived);
  return check(cudaGetLastError(), "moe dispatch");
}

int gshmem_moe_wait(const uint64_t* counters, int world, uint64_t target, cudaStream_t stream) {
  wait_kernel<<<1, kWarp, 0, stream>>>(counters, world, target);
  return check(cudaGetLastError(), "moe wait");
}

// dtype: 0 bfloat16, 1 float16. `pair_weight` may be null (an unweighted sum).
int gshmem_moe_reduce(const gshmem_device_t* dev, const int32_t* pes, int world, int me,
                      int dtype, const void* y, int64_t y_stride_bytes, const int32_t* slot,
                      const float* pair_weight, int k, int64_t rows, int64_t row_bytes,
                      void* comb, uint64_t* ready, int blocks, cudaStream_t stream) {
  const Route r{pes, nullptr, nullptr, world, me, 0};
  auto* kernel = dtype == 0 ? reduce_kernel<__nv_bfloat16> : reduce_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(*dev, r, static_cast<const int4*>(y),
                                          y_stride_bytes / 16, slot, pair_weight, k, rows,
                                          row_bytes / 16, static_cast<int4*>(comb), ready);
  return check(cudaGetLastError(), "moe reduce");
}

int gshmem_moe_pull(const gshmem_device_t* dev, const int32_t* pes, const int32_t* position,
                    const int32_t* offsets, int world, int me, int64_t tokens, int dtype,
                    const void* comb, int64_t row_bytes, void* out, const uint64_t* ready,
                    uint64_t target, int blocks, cudaStream_t stream) {
  const Route r{pes, position, offsets, world, me, tokens};
  auto* kernel = dtype == 0 ? pull_kernel<__nv_bfloat16> : pull_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(*dev, r, static_cast<const int4*>(comb), row_bytes / 16,
                                          static_cast<int4*>(out), ready, target);
  return check(cudaGetLastError(), "moe pull");
}

}  // extern "C"

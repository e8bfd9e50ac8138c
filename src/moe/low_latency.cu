// Low-latency expert-parallel dispatch and combine (gshmem.moe, docs/moe.md): fixed-size buffers,
// no host synchronisation, the same shapes on every call (CUDA-graph capturable), and each
// direction split into a send kernel and a receive kernel so the caller can compute in between.
//
// Symmetric buffers of every rank (T: the buffer's tokens per rank, L: experts per rank, W ranks):
//   stage  [L, W, T] rows  sender s's rows for local expert l, in its (token, choice) order
//   src    [L, W, T] int32 where each staged row came from: token * 8 + choice at its sender
//   count  [L, W] int32    rows sender s staged for expert l in this call
//   comb   [T * 8] rows    at a sender: the expert outputs returned per (token, choice)
//   arrived, ready [W]     completion counters (common.cuh)
// Local: calls [2] uint64 (dispatches, combines received so far) and finished [2] uint32, so a
// receive kernel reads its call's target on the GPU (a captured graph bakes in no call number).
//
//   send          sender: one warp per (token, choice) pair finds the pair's index among this
//                 rank's pairs for its expert (the pairs before it with that expert) and writes the
//                 row (or its FP8 form: e4m3 values, then a scale per 128) into the expert's rank's
//                 stage; warps also count the pairs of every expert into `count` at its rank
//                 (zeros included: every call rewrites every count).
//   recv          receiver: waits for every sender's blocks, then packs the staged rows into
//                 out[l] by sender, then index, with each row's source (sender << 16 | token * 8
//                 + choice) and the rows per expert. Every block scans the counts (at most 1024
//                 experts) in shared memory, so warps take only rows that exist.
//   combine_send  expert owner: each packed row of y goes back to its sender's comb slot.
//   combine_recv  sender: waits for every rank's blocks; out[t] = sum_j w[t,j] comb[t * 8 + j].
//
// Buffer reuse is ordered by the call order the Python side enforces (send, recv of a dispatch,
// then of a combine, then the next dispatch): e.g. a sender's next dispatch follows its combine's
// receive, which waited for every rank's combine send, which follows that rank's dispatch receive
// (the last reader of its stage and counts).
#include "common.cuh"

namespace gshmem_moe {
namespace {

constexpr int kMaxLowLatencyTokens = 256;  // low_latency.MAX_TOKENS

struct Team {
  const int32_t* pes;  // [world] world PE of each rank of the team
  int world, me;
};

// The segment of start[0..n] holding row r (start[seg] <= r < start[seg + 1]).
__device__ inline int segment_of(const int* start, int n, int r) {
  int lo = 0, hi = n;  // start[lo] <= r < start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (start[mid] <= r ? lo : hi) = mid;
  }
  return lo;
}

// The last block to finish a receive kernel records the call as received.
__device__ inline void finish_call(uint64_t* calls, uint32_t* finished, uint64_t call) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(finished, 1u) == gridDim.x - 1) {
      *finished = 0;
      *calls = call;
    }
  }
}

template <class T, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    send_kernel(gshmem::Device dev, Team team, const int4* x, int64_t row_vecs, int64_t stage_vecs,
                int tokens, const int64_t* topk, int k, int num_experts, int locals, int max_tokens,
                int4* stage, int32_t* src, int32_t* count, uint64_t* arrived) {
  __shared__ int32_t flat[kMaxLowLatencyTokens * kMaxTopk];
  const int pairs = tokens * k;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int64_t e = topk[i];
    if (e < -1 || e >= num_experts) {
      // No host synchronisation to raise from: stop loudly rather than drop the pair.
      if (blockIdx.x == 0) {
        printf("gshmem.moe low_latency_dispatch: topk_idx[%d][%d] = %lld is outside [-1, %d)\n",
               i / k, i % k, static_cast<long long>(e), num_experts);
      }
      __trap();
    }
    flat[i] = static_cast<int32_t>(e);
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  const int warp = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int e = warp; e < num_experts; e += warps) {
    const int n = count_equal(flat, pairs, e, lane);
    if (lane == 0) {
      const int q = e / locals;
      gshmem::ptr(dev, count, team.pes[q])[(e % locals) * team.world + team.me] = n;
    }
  }
  for (int p = warp; p < pairs; p += warps) {
    const int32_t e = flat[p];
    if (e < 0) continue;
    const int q = e / locals, l = e % locals;
    const int64_t row = (static_cast<int64_t>(l) * team.world + team.me) * max_tokens +
                        count_equal(flat, p, e, lane);
    const int pe = team.pes[q];
    int4* dst = gshmem::ptr(dev, stage, pe) + row * stage_vecs;
    if (kFp8) {
      quantize_row<T>(reinterpret_cast<uint8_t*>(dst), x + (p / k) * row_vecs, row_vecs, lane);
    } else {
      copy_row(dst, x + (p / k) * row_vecs, row_vecs, lane);
    }
    if (lane == 0) gshmem::ptr(dev, src, pe)[row] = (p / k) * kMaxTopk + p % k;
  }
  add_to_all(dev, team.pes, team.world, team.me, arrived);
}

// One warp per received row: the rows of every (expert, sender) segment, one after the other.
// A staged row is out_vecs vectors for `out`, then (FP8) `groups` float scales for out_scales.
__global__ void __launch_bounds__(kThreads)
    recv_kernel(gshmem::Device dev, const int32_t* pes, int world, int locals, int max_tokens,
                int64_t stage_vecs, int64_t out_vecs, int groups, const int4* stage,
                const int32_t* src, const int32_t* count, const uint64_t* arrived, uint64_t* calls,
                uint32_t* finished, int4* out, float* out_scales, int32_t* out_src,
                int32_t* out_count) {
  __shared__ int start[kMaxExperts + 1];  // by (local expert, sender)
  const uint64_t call = *calls + 1;
  wait_counters(dev, pes, arrived, world, call * gridDim.x);
  const int segments = locals * world;
  scan_counts(count, segments, start);
  if (blockIdx.x == 0) {
    for (int l = threadIdx.x; l < locals; l += blockDim.x) {
      out_count[l] = start[(l + 1) * world] - start[l * world];
    }
  }
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; r < start[segments];
       r += warps) {
    const int seg = segment_of(start, segments, r);
    const int l = seg / world, i = r - start[seg];
    const int64_t slot = static_cast<int64_t>(seg) * max_tokens + i;
    const int64_t packed =
        static_cast<int64_t>(l) * world * max_tokens + (start[seg] - start[l * world]) + i;
    const int4* row = stage + slot * stage_vecs;
    copy_row(out + packed * out_vecs, row, out_vecs, lane);
    const float* scales = reinterpret_cast<const float*>(row + out_vecs);
    for (int g = lane; g < groups; g += kWarp) out_scales[packed * groups + g] = scales[g];
    if (lane == 0) out_src[packed] = ((seg % world) << 16) | src[slot];
  }
  finish_call(calls, finished, call);
}

// One warp per packed row of y that holds an expert output: back to its sender's slot for
// (token, choice).
__global__ void __launch_bounds__(kThreads)
    combine_send_kernel(gshmem::Device dev, Team team, int locals, int max_tokens, int64_t row_vecs,
                        const int4* y, const int32_t* out_src, const int32_t* out_count, int4* comb,
                        uint64_t* ready) {
  __shared__ int start[kMaxExperts + 1];  // by local expert
  scan_counts(out_count, locals, start);
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  for (int r = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; r < start[locals];
       r += warps) {
    const int l = segment_of(start, locals, r);
    const int64_t row = static_cast<int64_t>(l) * team.world * max_tokens + (r - start[l]);
    const int32_t from = out_src[row];
    int4* dst = gshmem::ptr(dev, comb, team.pes[from >> 16]) + (from & 0xffff) * row_vecs;
    copy_row(dst, y + row * row_vecs, row_vecs, lane);
  }
  add_to_all(dev, team.pes, team.world, team.me, ready);
}

// Each token's weighted sum of its choices' returned rows, in fp32, rounded once. A warp takes
// one part of one token's row (parts chosen so every warp of the grid has work at 128 tokens).
template <class T>
__global__ void __launch_bounds__(kThreads)
    combine_recv_kernel(gshmem::Device dev, const int32_t* pes, int world, int tokens, int k,
                        const int64_t* topk, const float* weights, int64_t row_vecs,
                        const int4* comb, const uint64_t* ready, uint64_t* calls,
                        uint32_t* finished, int4* out) {
  const uint64_t call = *calls + 1;
  wait_counters(dev, pes, ready, world, call * gridDim.x);
  const int lane = threadIdx.x % kWarp;
  const int warps = gridDim.x * (blockDim.x / kWarp);
  const int64_t most_parts = (row_vecs + kWarp - 1) / kWarp;
  const int64_t wanted = (2 * static_cast<int64_t>(warps) + tokens - 1) / (tokens > 0 ? tokens : 1);
  const int64_t parts = wanted < 1 ? 1 : (wanted < most_parts ? wanted : most_parts);
  const int64_t part_vecs = (row_vecs + parts - 1) / parts;
  for (int64_t item = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       item < tokens * parts; item += warps) {
    const int64_t t = item / parts, begin = (item % parts) * part_vecs;
    const int64_t end = begin + part_vecs < row_vecs ? begin + part_vecs : row_vecs;
    const bool chosen = lane < k && topk[t * k + lane] >= 0;
    const float mine_w = chosen ? weights[t * k + lane] : 0.0f;
    const unsigned used = __ballot_sync(0xffffffffu, chosen);
    float weight[kMaxTopk];
#pragma unroll
    for (int j = 0; j < kMaxTopk; ++j) weight[j] = __shfl_sync(0xffffffffu, mine_w, j);
    const int4* rows = comb + t * kMaxTopk * row_vecs;
    for (int64_t i = begin + lane; i < end; i += kWarp) {
      int4 v[kMaxTopk];
#pragma unroll
      for (int j = 0; j < kMaxTopk; ++j) {
        if (used >> j & 1) v[j] = __ldg(rows + j * row_vecs + i);
      }
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < kMaxTopk; ++j) {
        if (used >> j & 1) Vec8<T>::add(acc, v[j], weight[j]);
      }
      out[t * row_vecs + i] = Vec8<T>::pack(acc);
    }
  }
  finish_call(calls, finished, call);
}

}  // namespace
}  // namespace gshmem_moe

using namespace gshmem_moe;  // NOLINT: the C ABI below calls this library's kernels

extern "C" {

// Every call queues one kernel of `blocks` blocks on `stream` (the same `blocks` on every rank and
// for every kernel of one buffer: the counters' targets count blocks) and returns 0, or 1 with
// gshmem_moe_last_error() saying why. stage, src, count, comb, arrived and ready are symmetric.

// dtype: 0 bfloat16, 1 float16. fp8: stage e4m3 rows with per-128-element scales instead.
int gshmem_moe_ll_send(const gshmem_device_t* dev, const int32_t* pes, int world, int me,
                       int dtype, int fp8, const void* x, int64_t row_bytes, int tokens,
                       const int64_t* topk, int k, int num_experts, int locals, int max_tokens,
                       void* stage, int32_t* src, int32_t* count, uint64_t* arrived, int blocks,
                       cudaStream_t stream) {
  if (tokens > kMaxLowLatencyTokens || max_tokens > kMaxLowLatencyTokens ||
      num_experts > kMaxExperts) {
    return check(cudaErrorInvalidValue, "moe low-latency send: over 256 tokens or 1024 experts");
  }
  if (fp8 && row_bytes % 256) {
    return check(cudaErrorInvalidValue, "moe low-latency send: FP8 needs hidden % 128 == 0");
  }
  auto* kernel = dtype == 0 ? (fp8 ? send_kernel<__nv_bfloat16, true>
                                   : send_kernel<__nv_bfloat16, false>)
                            : (fp8 ? send_kernel<__half, true> : send_kernel<__half, false>);
  kernel<<<blocks, kThreads, 0, stream>>>(
      *dev, Team{pes, world, me}, static_cast<const int4*>(x), row_bytes / 16, row_bytes / 16,
      tokens, topk, k, num_experts, locals, max_tokens, static_cast<int4*>(stage), src, count,
      arrived);
  return check(cudaGetLastError(), "moe low-latency send");
}

// stage rows hold stage_bytes (the buffer's row); each received row's first out_bytes go to
// `out`, then `groups` floats to `out_scales` (FP8; else groups is 0 and out_scales null).
int gshmem_moe_ll_recv(const gshmem_device_t* dev, const int32_t* pes, int world, int locals,
                       int max_tokens, int64_t stage_bytes, int64_t out_bytes, int groups,
                       const void* stage, const int32_t* src, const int32_t* count,
                       const uint64_t* arrived, uint64_t* calls, uint32_t* finished, void* out,
                       float* out_scales, int32_t* out_src, int32_t* out_count, int blocks,
                       cudaStream_t stream) {
  recv_kernel<<<blocks, kThreads, 0, stream>>>(
      *dev, pes, world, locals, max_tokens, stage_bytes / 16, out_bytes / 16, groups,
      static_cast<const int4*>(stage), src, count, arrived, calls, finished,
      static_cast<int4*>(out), out_scales, out_src, out_count);
  return check(cudaGetLastError(), "moe low-latency receive");
}

int gshmem_moe_ll_combine_send(const gshmem_device_t* dev, const int32_t* pes, int world, int me,
                               int locals, int max_tokens, int64_t row_bytes, const void* y,
                               const int32_t* out_src, const int32_t* out_count, void* comb,
                               uint64_t* ready, int blocks, cudaStream_t stream) {
  combine_send_kernel<<<blocks, kThreads, 0, stream>>>(
      *dev, Team{pes, world, me}, locals, max_tokens, row_bytes / 16,
      static_cast<const int4*>(y), out_src, out_count, static_cast<int4*>(comb), ready);
  return check(cudaGetLastError(), "moe low-latency combine send");
}

// dtype: 0 bfloat16, 1 float16.
int gshmem_moe_ll_combine_recv(const gshmem_device_t* dev, const int32_t* pes, int dtype,
                               int world, int tokens, int k, const int64_t* topk,
                               const float* weights, int64_t row_bytes, const void* comb,
                               const uint64_t* ready, uint64_t* calls, uint32_t* finished,
                               void* out, int blocks, cudaStream_t stream) {
  auto* kernel = dtype == 0 ? combine_recv_kernel<__nv_bfloat16> : combine_recv_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(*dev, pes, world, tokens, k, topk, weights,
                                          row_bytes / 16, static_cast<const int4*>(comb), ready,
                                          calls, finished, static_cast<int4*>(out));
  return check(cudaGetLastError(), "moe low-latency combine receive");
}

}  // extern "C"

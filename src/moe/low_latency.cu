// Low-latency expert-parallel dispatch and combine (gshmem.moe, docs/moe.md): fixed-size buffers,
// no host synchronisation, the same shapes on every call (CUDA-graph capturable), and each
// direction split into a send kernel and a receive kernel so the caller can compute in between.
//
// Symmetric buffers of every rank (T: the buffer's tokens per rank, L: experts per rank, W ranks):
//   stage  [W, T] rows     sender s's token t, if t chose an expert of this rank (once, however
//                          many of this rank's experts it chose)
//   src    [L, W, T] int32 sender s's pairs for local expert l, in its (token, choice) order:
//                          token * 8 + choice
//   count  [L, W] int32    rows sender s staged for expert l in this call
//   route  [W, T, 8] int2  sender s's (token, choice) pairs: {expert << 16 | the pair's index among
//                          s's pairs for that expert, or -1 if unrouted; its weight's bits}
//   shape  [W] int32       sender s's tokens << 4 | k in this call
//   comb   [T * 8] rows    at a sender: per token, one partial sum from each rank it chose, in
//                          rank order
//   arrived, ready [W]     completion counters (common.cuh)
// Local: calls [2] uint64 (dispatches, combines received so far) and finished [2] uint32, so a
// receive kernel reads its call's target on the GPU (a captured graph bakes in no call number).
//
//   send          sender: warps count the pairs of every expert into `count` at its rank (zeros
//                 included: every call rewrites every count) and block 0 writes `shape`
//                 everywhere; one warp per part of a token's row loads it once and stores it (or
//                 its FP8 form, quantized once: e4m3 values, then a scale per 128) into the stage
//                 of every rank the token chose (at 4 ranks, top-8 of 256, ~3.6 rows per token
//                 instead of 8); then one warp per (token, choice) pair finds the pair's index
//                 among this rank's pairs for its expert (the pairs before it with that expert)
//                 and writes the pair into the expert's rank's `src`, and its route entry into
//                 every rank's `route`.
//   recv          receiver: waits for every sender's blocks, then packs the staged rows into
//                 out[l] by sender, then index (a token with several experts here is copied to
//                 each), with each row's source (sender << 16 | token * 8 + choice) and the rows
//                 per expert. Every block scans the counts (at most 1024 experts) in shared
//                 memory, so warps take only rows that exist.
//   combine_send  expert owner: per (sender, token) with choices here, the weighted sum of their
//                 rows of y (fp32, rounded once) goes to the sender's comb slot for this rank: a
//                 token's choices on one rank travel as one row (at 4 ranks, top-8 of 256, about
//                 3.6 rows per token instead of 8).
//   combine_recv  sender: waits for every rank's blocks; out[t] = the sum of its ranks' rows
//                 (fp32, rounded once).
//
// Buffer reuse is ordered by the call order the Python side enforces (send, recv of a dispatch,
// then of a combine, then the next dispatch): e.g. a sender's next dispatch follows its combine's
// receive, which waited for every rank's combine send, which follows that rank's dispatch receive
// (the last reader of its stage and counts).
#include "common.cuh"

namespace gshmem_moe {
namespace {

constexpr int kMaxLowLatencyTokens = 256;  // low_latency.MAX_TOKENS
// The shortest part of a row one warp sums in the combine: a lane's loads in flight (sum_rows)
// over a few rounds.
constexpr int kRowPartVecs = 256;

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

// The ranks a token's choices went to, as a mask (lanes below k hold the choices' experts, -1 for
// none; every lane gets the mask).
__device__ inline unsigned ranks_of(int expert, int locals) {
  return __reduce_or_sync(0xffffffffu, expert < 0 ? 0u : 1u << (expert / locals));
}

template <class T, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    send_kernel(gshmem::Device dev, Team team, const int4* x, int64_t row_vecs, int64_t stage_vecs,
                int tokens, const int64_t* topk, const float* weights, int k, int num_experts,
                int locals, int max_tokens, int4* stage, int32_t* src, int32_t* count, int2* route,
                int32_t* shape, uint64_t* arrived) {
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
  const int lane = threadIdx.x % kWarp, warp = grid_warp(), warps = grid_warps();
  for (int e = warp; e < num_experts; e += warps) {
    const int n = count_equal(flat, pairs, e, lane);
    if (lane == 0) {
      const int q = e / locals;
      gshmem::ptr(dev, count, team.pes[q])[(e % locals) * team.world + team.me] = n;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < team.world) {
    gshmem::ptr(dev, shape, team.pes[threadIdx.x])[team.me] = tokens << 4 | k;
  }
  // Each token's row once to every rank it chose. A warp takes a part of a row (FP8: whole groups
  // of 128 elements, each with its scale) and stores it to those ranks, each vector loaded once.
  const RowParts cut =
      split_rows(tokens, row_vecs, warps, kRowPartVecs, kFp8 ? kFp8GroupVecs : 1);
  for (int64_t item = warp; item < tokens * cut.parts; item += warps) {
    const int t = static_cast<int>(cut.row(item));
    const int64_t begin = cut.begin(item), end = cut.end(item);
    const unsigned ranks = ranks_of(lane < k ? flat[t * k + lane] : -1, locals);
    if (begin >= end) continue;
    const int64_t row = static_cast<int64_t>(team.me) * max_tokens + t;  // at each rank
    int4* mine = lane < team.world && (ranks >> lane & 1)
                     ? gshmem::ptr(dev, stage, team.pes[lane]) + row * stage_vecs
                     : nullptr;
    int4* dst[kMaxTopk];  // the row's start at each rank
    gather_lanes(mine, ranks, static_cast<int4*>(nullptr), dst);
    if (kFp8) {
      quantize_row_to<T>(dst, __popc(ranks), x + t * row_vecs, row_vecs, begin, end, lane);
    } else {
#pragma unroll
      for (int c = 0; c < kMaxTopk; ++c) dst[c] = dst[c] ? dst[c] + begin : nullptr;
      copy_row_to(dst, __popc(ranks), x + t * row_vecs + begin, end - begin, lane);
    }
  }
  for (int p = warp; p < pairs; p += warps) {
    const int32_t e = flat[p];
    const int index = e < 0 ? 0 : count_equal(flat, p, e, lane);  // among this rank's pairs for e
    if (e >= 0 && lane == 0) {
      const int q = e / locals, l = e % locals;
      const int64_t slot = (static_cast<int64_t>(l) * team.world + team.me) * max_tokens + index;
      gshmem::ptr(dev, src, team.pes[q])[slot] = (p / k) * kMaxTopk + p % k;
    }
    // Every rank learns every pair: a combine sums a token's choices on its rank.
    if (lane < team.world) {
      const int2 entry = e < 0 ? make_int2(-1, 0)
                               : make_int2(e << 16 | index, __float_as_int(weights[p]));
      gshmem::ptr(dev, route, team.pes[lane])[(team.me * max_tokens + p / k) * kMaxTopk + p % k] =
          entry;
    }
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
  const int lane = threadIdx.x % kWarp, warps = grid_warps();
  for (int r = grid_warp(); r < start[segments]; r += warps) {
    const int seg = segment_of(start, segments, r);
    const int l = seg / world, i = r - start[seg];
    const int64_t slot = static_cast<int64_t>(seg) * max_tokens + i;
    const int64_t packed =
        static_cast<int64_t>(l) * world * max_tokens + (start[seg] - start[l * world]) + i;
    const int32_t code = src[slot];  // token * 8 + choice at sender seg % world
    const int4* row = stage + ((seg % world) * max_tokens + code / kMaxTopk) * stage_vecs;
    copy_row(out + packed * out_vecs, row, out_vecs, lane);
    const float* scales = reinterpret_cast<const float*>(row + out_vecs);
    for (int g = lane; g < groups; g += kWarp) out_scales[packed * groups + g] = scales[g];
    if (lane == 0) out_src[packed] = ((seg % world) << 16) | code;
  }
  finish_call(calls, finished, call);
}

// One warp per part of a (sender, token) row whose token chose experts of this rank: the sum of
// those experts' output rows of y times the sender's weights (fp32, rounded once) into the
// sender's comb slot for this rank (the token's ranks below this one come first).
template <class T>
__global__ void __launch_bounds__(kThreads)
    combine_send_kernel(gshmem::Device dev, Team team, int locals, int max_tokens, int64_t row_vecs,
                        const int4* y, const int32_t* count, const int2* route,
                        const int32_t* shape, int4* comb, uint64_t* ready) {
  __shared__ int start[kMaxExperts + 1];  // by (local expert, sender), as the receive packed
  const int world = team.world, lane = threadIdx.x % kWarp, warps = grid_warps();
  scan_counts(count, locals * world, start);
  const int64_t cells = static_cast<int64_t>(world) * max_tokens;
  const RowParts cut = split_rows(cells, row_vecs, warps, kRowPartVecs);
  for (int64_t item = grid_warp(); item < cells * cut.parts; item += warps) {
    const int s = static_cast<int>(cut.row(item) / max_tokens);
    const int t = static_cast<int>(cut.row(item) % max_tokens);
    const int64_t begin = cut.begin(item), end = cut.end(item);
    const int sent = shape[s];
    if (t >= sent >> 4 || begin >= end) continue;
    const int2 entry = lane < (sent & 15) ? route[(s * max_tokens + t) * kMaxTopk + lane]
                                          : make_int2(-1, 0);
    const int e = entry.x < 0 ? -1 : entry.x >> 16;
    const unsigned ranks = ranks_of(e, locals);
    if (!(ranks >> team.me & 1)) continue;
    const bool here = e >= 0 && e / locals == team.me;
    const int l = here ? e % locals : 0;
    const int64_t row = static_cast<int64_t>(l) * world * max_tokens +
                        (start[l * world + s] - start[l * world]) + (entry.x & 0xffff);
    const unsigned held = __ballot_sync(0xffffffffu, here);
    const int4* rows[kMaxTopk];
    float w[kMaxTopk];
    gather_lanes(y + row * row_vecs + begin, held, static_cast<const int4*>(nullptr), rows);
    gather_lanes(__int_as_float(entry.y), held, 0.0f, w);
    const int slot = __popc(ranks & ((1u << team.me) - 1));
    int4* dst = gshmem::ptr(dev, comb, team.pes[s]) + (t * kMaxTopk + slot) * row_vecs + begin;
    sum_rows<T>(dst, rows, w, __popc(held), end - begin, lane);
  }
  add_to_all(dev, team.pes, team.world, team.me, ready);
}

// Each token's sum of the rows its ranks returned, in fp32, rounded once. A warp takes one part
// of one token's row (parts chosen so every warp of the grid has work at 128 tokens).
template <class T>
__global__ void __launch_bounds__(kThreads)
    combine_recv_kernel(gshmem::Device dev, const int32_t* pes, int world, int locals, int tokens,
                        int k, const int64_t* topk, int64_t row_vecs, const int4* comb,
                        const uint64_t* ready, uint64_t* calls, uint32_t* finished, int4* out) {
  const uint64_t call = *calls + 1;
  wait_counters(dev, pes, ready, world, call * gridDim.x);
  const int lane = threadIdx.x % kWarp, warps = grid_warps();
  const RowParts cut = split_rows(tokens, row_vecs, 2 * static_cast<int64_t>(warps), kWarp);
  const float ones[kMaxTopk] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (int64_t item = grid_warp(); item < tokens * cut.parts; item += warps) {
    const int64_t t = cut.row(item), begin = cut.begin(item), end = cut.end(item);
    if (begin >= end) continue;
    const int n = __popc(ranks_of(lane < k ? static_cast<int>(topk[t * k + lane]) : -1, locals));
    const int4* rows[kMaxTopk];
#pragma unroll
    for (int c = 0; c < kMaxTopk; ++c) rows[c] = comb + (t * kMaxTopk + c) * row_vecs + begin;
    sum_rows<T>(out + t * row_vecs + begin, rows, ones, n, end - begin, lane);
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
                       const int64_t* topk, const float* weights, int k, int num_experts,
                       int locals, int max_tokens, void* stage, int32_t* src, int32_t* count,
                       void* route, int32_t* shape, uint64_t* arrived, int blocks,
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
      tokens, topk, weights, k, num_experts, locals, max_tokens, static_cast<int4*>(stage), src,
      count, static_cast<int2*>(route), shape, arrived);
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

// dtype: 0 bfloat16, 1 float16 (both combine kernels).
int gshmem_moe_ll_combine_send(const gshmem_device_t* dev, const int32_t* pes, int dtype,
                               int world, int me, int locals, int max_tokens, int64_t row_bytes,
                               const void* y, const int32_t* count, const void* route,
                               const int32_t* shape, void* comb, uint64_t* ready, int blocks,
                               cudaStream_t stream) {
  auto* kernel = dtype == 0 ? combine_send_kernel<__nv_bfloat16> : combine_send_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(
      *dev, Team{pes, world, me}, locals, max_tokens, row_bytes / 16, static_cast<const int4*>(y),
      count, static_cast<const int2*>(route), shape, static_cast<int4*>(comb), ready);
  return check(cudaGetLastError(), "moe low-latency combine send");
}

int gshmem_moe_ll_combine_recv(const gshmem_device_t* dev, const int32_t* pes, int dtype,
                               int world, int locals, int tokens, int k, const int64_t* topk,
                               int64_t row_bytes, const void* comb, const uint64_t* ready,
                               uint64_t* calls, uint32_t* finished, void* out, int blocks,
                               cudaStream_t stream) {
  auto* kernel = dtype == 0 ? combine_recv_kernel<__nv_bfloat16> : combine_recv_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(*dev, pes, world, locals, tokens, k, topk,
                                          row_bytes / 16, static_cast<const int4*>(comb), ready,
                                          calls, finished, static_cast<int4*>(out));
  return check(cudaGetLastError(), "moe low-latency combine receive");
}

}  // extern "C"

// Expert-parallel dispatch and combine, high-throughput mode (gshmem.moe, docs/moe.md), on the
// public device API only: symmetric buffers reached with ordinary loads and stores through
// gshmem::ptr (every rank of the team load/store-reachable: the Python side checks it once per
// buffer), completion by release/acquire signals. A C ABI that python/gshmem/moe/kernels.py calls.
//
//   layout    sender: per tile of kTile tokens, each token's position among the tile's tokens for
//             every rank it goes to (once per rank) and each (token, choice) pair's position among
//             the tile's pairs of its expert; the tiles' counts, their exclusive prefix over tiles
//             (by the last block to finish) and this rank's totals: tokens per rank, pairs per
//             expert, out-of-range indices (routing.plan is the reference).
//   dispatch  sender, after every rank's totals were exchanged: each warp copies a token's row
//             into every receiver it goes to, in the rows after the earlier senders' (by rank),
//             and writes each of its pairs there into the pair's final expert-major slot
//             (routing.expert_slots is the reference): the receiver sorts nothing. Then each
//             block adds 1 to `arrived[me]` at every receiver.
//   check     (a dispatch that does not synchronise the host) every rank's counts, once
//             exchanged: stops the kernels (a device trap, with a message) if any rank's routing
//             held an expert index out of range, or this rank receives more pairs than the
//             caller's bound.
//   padded    (a dispatch that does not synchronise the host) the received pairs as the caller
//             gets them: the arrived ones, then padding up to the caller's bound, in one pass.
//   return    receiver: one float per received pair back to its sender's (token, choice) (the
//             router weights' gradient; pairs whose sender is -1, padding, are skipped), then
//             `returned` signals like the others.
//   reduce    receiver: each received row's sum of its experts' output rows (times their
//             weights), written into this rank's symmetric combine buffer (pull) or into the
//             row's sender's, at (this rank, token) (push), for the rows that arrived (the
//             counts say how many; the host's row count may be an upper bound); each block
//             then adds 1 to `ready[me]` at every sender. Without `ready`: the sums only, into
//             any buffer (Buffer.reduce_pairs); over no rows: the signal only.
//   pull      sender: waits until every rank's `ready` counter reached the call's target, then
//             each warp reads its tokens' rows from every rank it sent them to and sums them
//             (pull: NVLink loads), or from its own combine buffer where they were pushed
//             (push: NVLink stores by the reduce, local loads here).
//
// Counters only grow (common.cuh); calls alternate dispatch, combine (the Python side enforces
// it), which is what orders the reuse of the buffers.
#include "common.cuh"

namespace gshmem_moe {
namespace {

constexpr int kTile = 128;  // tokens per layout tile (kernels.TILE)
// A rank's totals: tokens per rank, pairs per expert, then out-of-range indices and a flag the
// host passes (whether this rank wants the router weights' gradient): kernels.Layout.
constexpr int kTotalsExtra = 2;

struct Route {  // one dispatch's layout and every rank's counts
  const int32_t* pes;         // [world] world PE of each rank of the team
  const int32_t* token_pos;   // [tokens, world] position among its tile's tokens for a rank, or -1
  const int32_t* tile_base;   // [tiles, world + E] the same counts over the earlier tiles
  const int32_t* all_counts;  // [world, world + E + 2] every rank's totals (the exchange)
  int world, me, num_experts;
  int64_t tokens;
  __device__ int columns() const { return world + num_experts; }
  __device__ int count(int rank, int column) const {
    return all_counts[rank * (columns() + kTotalsExtra) + column];
  }
};

// row_offset[q]: this rank's first row at receiver q (the earlier senders' tokens for q before it).
__device__ inline void row_offsets(const Route& r, int* row_offset) {
  for (int q = threadIdx.x; q < r.world; q += blockDim.x) {
    int sum = 0;
    for (int s = 0; s < r.me; ++s) sum += r.count(s, q);
    row_offset[q] = sum;
  }
  __syncthreads();
}

// The row of token t at receiver q, or -1 if it does not go there.
__device__ inline int64_t row_at(const Route& r, const int* row_offset, int64_t t, int q) {
  const int pos = r.token_pos[t * r.world + q];
  if (pos < 0) return -1;
  return row_offset[q] + r.tile_base[(t / kTile) * r.columns() + q] + pos;
}

__global__ void __launch_bounds__(kThreads)
    layout_kernel(const int64_t* topk, int64_t tokens, int k, int num_experts, int world,
                  int per_rank, int flag, int32_t* token_pos, int32_t* pair_pos,
                  int32_t* tile_counts, int32_t* totals, uint32_t* finished) {
  __shared__ int32_t flat[kTile * kMaxTopk];
  __shared__ int hist[kMaxWorld + kMaxExperts];
  __shared__ uint32_t goes[kTile];  // bit q: the token goes to rank q
  const int columns = world + num_experts;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTile;
  const int n = static_cast<int>(tokens - first < kTile ? tokens - first : kTile);  // 0: no tokens
  if (blockIdx.x == 0 && threadIdx.x == 0) totals[columns + 1] = flag;
  for (int c = threadIdx.x; c < columns; c += blockDim.x) hist[c] = 0;
  for (int i = threadIdx.x; i < n * k; i += blockDim.x) {
    const int64_t e = topk[first * k + i];
    if (e < -1 || e >= num_experts) atomicAdd(totals + columns, 1);
    flat[i] = e >= 0 && e < num_experts ? static_cast<int32_t>(e) : -1;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < n; t += blockDim.x) {
    uint32_t mask = 0;
    for (int j = 0; j < k; ++j) {
      if (flat[t * k + j] >= 0) mask |= 1u << (flat[t * k + j] / per_rank);
    }
    goes[t] = mask;
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  if (warp == warps - 1) {
    // A pair's position among the tile's pairs of its expert, in (token, choice) order: one warp
    // walks the pairs 32 at a time, each lane ranked among the lanes of its expert on top of the
    // expert's count so far, which ends as the tile's count of the expert.
    int* seen = hist + world;
    for (int base = 0; base < n * k; base += kWarp) {
      const int p = base + lane;
      const int32_t e = p < n * k ? flat[p] : -1;
      const unsigned same = __match_any_sync(0xffffffffu, e);
      const int before = __popc(same & ((1u << lane) - 1));
      const int pos = e >= 0 ? seen[e] + before : -1;
      __syncwarp();
      if (e >= 0 && before == 0) seen[e] += __popc(same);
      __syncwarp();
      if (p < n * k) pair_pos[first * k + p] = pos;
    }
  }
  for (int q = warp; q < world; q += warps) {  // a token's position among the tile's for rank q
    int before = 0;
    for (int base = 0; base < n; base += kWarp) {
      const int t = base + lane;
      const bool in = t < n && (goes[t] >> q & 1);
      const unsigned ballot = __ballot_sync(0xffffffffu, in);
      if (t < n) {
        token_pos[(first + t) * world + q] = in ? before + __popc(ballot & ((1u << lane) - 1)) : -1;
      }
      before += __popc(ballot);
    }
    if (lane == 0) hist[q] = before;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < columns; c += blockDim.x) {
    tile_counts[blockIdx.x * columns + c] = hist[c];
    if (hist[c]) atomicAdd(totals + c, hist[c]);
  }
  // The last block turns every column of tile_counts into its exclusive prefix over tiles.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(finished, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  constexpr int kInFlight = 8;  // tiles' counts loaded before any is rewritten
  for (int c = threadIdx.x; c < columns; c += blockDim.x) {
    int run = 0;
    for (unsigned b0 = 0; b0 < gridDim.x; b0 += kInFlight) {
      int v[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        v[j] = b0 + j < gridDim.x ? __ldcg(tile_counts + (b0 + j) * columns + c) : 0;
      }
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        if (b0 + j < gridDim.x) tile_counts[(b0 + j) * columns + c] = run;
        run += v[j];
      }
    }
  }
  if (threadIdx.x == 0) *finished = 0;
}

// One warp per token: its row (kFp8: its e4m3 form and scales) to every rank it goes to, and
// each of its pairs there into the pair's slot: slot_base[e] (expert e's first slot at its rank,
// plus the earlier senders' pairs of e) + the earlier tiles' pairs of e + the pair's position in
// its tile.
template <class T, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    dispatch_kernel(gshmem::Device dev, Route r, const int32_t* pair_pos, const int4* x,
                    int64_t row_vecs, const int64_t* topk, const float* weights, int k,
                    int per_rank, int4* recv_x, int32_t* recv_slot, int32_t* pair_row,
                    float* pair_weight, int32_t* pair_src_rank, int32_t* pair_src,
                    uint64_t* arrived) {
  __shared__ int row_offset[kMaxWorld];
  __shared__ int total[kMaxExperts];
  __shared__ int slot_base[kMaxExperts + 1];
  row_offsets(r, row_offset);
  for (int e = threadIdx.x; e < r.num_experts; e += blockDim.x) {
    int sum = 0;
    for (int s = 0; s < r.world; ++s) sum += r.count(s, r.world + e);
    total[e] = sum;
  }
  __syncthreads();
  scan_counts(total, r.num_experts, slot_base);  // pairs of every earlier expert, all ranks
  for (int e = threadIdx.x; e < r.num_experts; e += blockDim.x) {
    int earlier = 0;
    for (int s = 0; s < r.me; ++s) earlier += r.count(s, r.world + e);
    total[e] = slot_base[e] - slot_base[e - e % per_rank] + earlier;  // its rank's experts only
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t t = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; t < r.tokens;
       t += warps) {
    const int32_t* tile = r.tile_base + (t / kTile) * r.columns();
    const int64_t e = lane < k ? topk[t * k + lane] : -1;
    // Lane q < world: the token's row at rank q (-1: it does not go there) and its address.
    const int64_t my_row = lane < r.world ? row_at(r, row_offset, t, lane) : -1;
    int4* my_dst =
        my_row >= 0 ? gshmem::ptr(dev, recv_x, r.pes[lane]) + my_row * row_vecs : nullptr;
    const unsigned to = __ballot_sync(0xffffffffu, my_row >= 0);  // at most k ranks
    int4* dst[kMaxTopk];
    gather_lanes(my_dst, to, static_cast<int4*>(nullptr), dst);
    const int receivers = __popc(to);
    if (kFp8) {
      quantize_row_to<T>(dst, receivers, x + t * row_vecs, row_vecs, 0, row_vecs, lane);
    } else {
      copy_row_to(dst, receivers, x + t * row_vecs, row_vecs, lane);  // loaded once
    }
    for (unsigned m = to; m; m &= m - 1) {
      const int q = __ffs(m) - 1;
      const int64_t row = shfl(my_row, q);
      if (lane < k) {
        const int pe = r.pes[q];
        const bool here = e >= 0 && e / per_rank == q;
        const int slot = here ? total[e] + tile[r.world + e] + pair_pos[t * k + lane] : -1;
        gshmem::ptr(dev, recv_slot, pe)[row * k + lane] = slot;
        if (here) {
          gshmem::ptr(dev, pair_row, pe)[slot] = static_cast<int32_t>(row);
          gshmem::ptr(dev, pair_weight, pe)[slot] = weights[t * k + lane];
          gshmem::ptr(dev, pair_src_rank, pe)[slot] = r.me;
          gshmem::ptr(dev, pair_src, pe)[slot] = static_cast<int32_t>(t * kMaxTopk + lane);
        }
      }
    }
  }
  add_to_all(dev, r.pes, r.world, r.me, arrived);
}

// One thread per value: to its pair's sender, at (token * 8 + choice) of `dest` there.
__global__ void __launch_bounds__(kThreads)
    return_kernel(gshmem::Device dev, const int32_t* pes, int world, int me, const float* values,
                  const int32_t* src_rank, const int32_t* src_code, int64_t pairs, float* dest,
                  uint64_t* returned) {
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (src_rank[p] < 0) continue;  // padding past the received pairs
    gshmem::ptr(dev, dest, pes[src_rank[p]])[src_code[p]] = values[p];
  }
  add_to_all(dev, pes, world, me, returned);
}

// One block: what a dispatch without a host synchronisation cannot raise on the host.
__global__ void __launch_bounds__(kThreads) check_kernel(Route r, int64_t worst_pairs) {
  __shared__ unsigned long long arrived;
  if (threadIdx.x == 0) arrived = 0;
  __syncthreads();
  const int per_rank = r.num_experts / r.world;
  for (int s = threadIdx.x; s < r.world; s += blockDim.x) {
    const int bad = r.count(s, r.columns());
    if (bad > 0) {
      printf("gshmem.moe dispatch: rank %d's topk_idx holds %d expert indices outside [-1, %d)\n",
             s, bad, r.num_experts);
      __trap();
    }
  }
  unsigned long long mine = 0;
  for (int i = threadIdx.x; i < r.world * per_rank; i += blockDim.x) {
    mine += r.count(i / per_rank, r.world + r.me * per_rank + i % per_rank);
  }
  atomicAdd(&arrived, mine);
  __syncthreads();
  const auto pairs = static_cast<long long>(arrived);
  if (threadIdx.x == 0 && pairs > worst_pairs) {
    printf("gshmem.moe dispatch: rank %d receives %lld rows, more than num_worst_rows=%lld\n",
           r.me, pairs, static_cast<long long>(worst_pairs));
    __trap();
  }
}

__global__ void wait_kernel(gshmem::Device dev, const int32_t* pes, const uint64_t* counters,
                            int world, uint64_t target) {
  wait_counters(dev, pes, counters, world, target);
}

// What a dispatch without a host synchronisation returns of the received pairs, in one pass: the
// first n (the pairs the exchanged counts bring here) of the receive arrays as they are (row and
// sources also widened to int64, the token out of the source code), the rest of `worst` padding
// (row 0, weight 0, sources -1: the return kernel skips them); and the pairs per local expert.
struct PaddedPairs {
  int64_t* row;          // [worst]
  float* weight;         // [worst]
  int32_t* src_rank;     // [worst] (the return kernel's)
  int32_t* src_code;     // [worst] token * 8 + choice at the sender
  int64_t* rank;         // [worst] src_rank widened
  int64_t* token;        // [worst] the token of src_code
  int64_t* per_expert;   // [num_experts / world]
};
__global__ void __launch_bounds__(kThreads)
    padded_pairs_kernel(Route r, const int32_t* row, const float* weight, const int32_t* src_rank,
                        const int32_t* src_code, int64_t worst, PaddedPairs out) {
  __shared__ unsigned long long arrived;
  if (threadIdx.x == 0) arrived = 0;
  __syncthreads();
  const int per_rank = r.num_experts / r.world;
  unsigned long long mine = 0;
  for (int l = threadIdx.x; l < per_rank; l += blockDim.x) {
    int sum = 0;
    for (int s = 0; s < r.world; ++s) sum += r.count(s, r.world + r.me * per_rank + l);
    if (blockIdx.x == 0) out.per_expert[l] = sum;
    mine += sum;
  }
  atomicAdd(&arrived, mine);
  __syncthreads();
  const int64_t n = static_cast<int64_t>(arrived);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < worst;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool in = i < n;
    const int32_t rank = in ? src_rank[i] : -1, code = in ? src_code[i] : -1;
    out.row[i] = in ? row[i] : 0;
    out.weight[i] = in ? weight[i] : 0.0f;
    out.src_rank[i] = rank;
    out.src_code[i] = code;
    out.rank[i] = rank;
    out.token[i] = code < 0 ? -1 : code / kMaxTopk;
  }
}

// Where the combine's rows go in push mode: a received row's sum lands in its sender's combine
// buffer at row (this rank) x max_tokens + (the token's index there), so every sender finds its
// tokens' sums in its own memory, one block of max_tokens rows per rank.
struct PushTo {
  const int32_t* src_rank;  // [pairs] the sender of each pair (rank in the team); null: pull
  const int32_t* src_code;  // [pairs] token * kMaxTopk + choice at the sender
  int64_t max_tokens;
};

// One warp per received row: the sum of its pairs' rows of y (weighted), in fp32, stored once.
// Lane j < k holds choice j's pair and weight; every lane takes the row's pairs from there
// (sum_rows: 8 loads per lane in flight however few pairs the row has).
template <class T>
__global__ void __launch_bounds__(kThreads)
    reduce_kernel(gshmem::Device dev, Route r, const int4* y, int64_t y_stride_vecs,
                  const int32_t* slot, const float* pair_weight, int k, int64_t rows,
                  int64_t row_vecs, int4* comb, PushTo push, uint64_t* ready) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  int64_t arrived_rows = 0;  // the slots of rows past them are not this dispatch's
  for (int s = 0; s < r.world; ++s) arrived_rows += r.count(s, r.me);
  const int64_t bound = arrived_rows < rows ? arrived_rows : rows;
  for (int64_t row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; row < bound;
       row += warps) {
    const int mine = lane < k ? slot[row * k + lane] : -1;
    const unsigned held = __ballot_sync(0xffffffffu, mine >= 0);
    if (!held) continue;  // cannot happen: a row is sent only for a pair here
    const int4* my_src = mine >= 0 ? y + mine * y_stride_vecs : nullptr;
    const int4* src[kMaxTopk];
    float weight[kMaxTopk];
    gather_lanes(my_src, held, static_cast<const int4*>(nullptr), src);
    gather_lanes(mine >= 0 && pair_weight ? pair_weight[mine] : 1.0f, held, 0.0f, weight);
    int4* dst = comb + row * row_vecs;
    if (push.src_rank) {  // every pair of a row comes from the same (sender, token)
      const int any = shfl(mine, __ffs(held) - 1);
      const int64_t token = push.src_code[any] / kMaxTopk;
      dst = gshmem::ptr(dev, comb, r.pes[push.src_rank[any]]) +
            (r.me * push.max_tokens + token) * row_vecs;
    }
    sum_rows<T>(dst, src, weight, __popc(held), row_vecs, lane);
  }
  if (ready) add_to_all(dev, r.pes, r.world, r.me, ready);  // null: a local sum, no combine
}

// One warp per token: the sum of its rows from every rank it was sent to (zeros if none). Lane q
// finds the token's row from rank q (world <= 32): at rank q's combine buffer (pull), or in this
// rank's at q's block of max_tokens rows (push, max_tokens > 0).
template <class T>
__global__ void __launch_bounds__(kThreads)
    pull_kernel(gshmem::Device dev, Route r, const int4* comb, int64_t row_vecs, int4* out,
                const uint64_t* ready, uint64_t target, int64_t max_tokens) {
  __shared__ int row_offset[kMaxWorld];
  row_offsets(r, row_offset);
  wait_counters(dev, r.pes, ready, r.world, target);
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const bool pushed = max_tokens > 0;
  const int4* base = lane >= r.world ? nullptr
                    : pushed           ? comb
                                       : gshmem::ptr(dev, comb, r.pes[lane]);
  const float ones[kMaxTopk] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (int64_t t = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp; t < r.tokens;
       t += warps) {
    int64_t row = lane < r.world ? row_at(r, row_offset, t, lane) : -1;
    if (pushed && row >= 0) row = lane * max_tokens + t;
    const unsigned sent = __ballot_sync(0xffffffffu, row >= 0);  // at most k ranks
    const int4* src[kMaxTopk];
    gather_lanes(row >= 0 ? base + row * row_vecs : nullptr, sent,
                 static_cast<const int4*>(nullptr), src);  // fmt: skip
    sum_rows<T>(out + t * row_vecs, src, ones, __popc(sent), row_vecs, lane);
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

// Every call: `dev` is the comm's gshmem_device_t; every array is on the GPU; recv_*, pair_*,
// comb, arrived and ready are symmetric (the same object on every rank). Non-blocking: work is
// queued on `stream`. Returns 0, or 1 with gshmem_moe_last_error() saying why.

const char* gshmem_moe_last_error() { return gshmem_moe::last_error; }

// totals: [world + num_experts + 2], its last entry set to `flag`; tile_counts: [max(1, tiles)].
int gshmem_moe_layout(const int64_t* topk, int64_t tokens, int k, int num_experts, int world,
                      int per_rank, int flag, int32_t* token_pos, int32_t* pair_pos,
                      int32_t* tile_counts, int32_t* totals, uint32_t* finished,
                      cudaStream_t stream) {
  if (world > kMaxWorld || num_experts > kMaxExperts || k > kMaxTopk) {
    return check(cudaErrorInvalidValue, "moe layout: over 32 ranks, 1024 experts or top-8");
  }
  const int columns = world + num_experts;
  const size_t bytes = (columns + kTotalsExtra) * sizeof(int32_t);
  if (check(cudaMemsetAsync(totals, 0, bytes, stream), "moe layout")) return 1;
  const int64_t tiles = tokens > 0 ? (tokens + kTile - 1) / kTile : 1;
  layout_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      topk, tokens, k, num_experts, world, per_rank, flag, token_pos, pair_pos, tile_counts,
      totals, finished);
  return check(cudaGetLastError(), "moe layout");
}

// dtype: 0 bfloat16, 1 float16; fp8: each row travels as e4m3 values, then a float scale per
// 128 elements (hidden % 128 == 0), in the row's slot.
int gshmem_moe_dispatch(const gshmem_device_t* dev, const int32_t* pes, const int32_t* token_pos,
                        const int32_t* tile_base, const int32_t* all_counts, int world, int me,
                        int num_experts, int64_t tokens, const int32_t* pair_pos, int dtype,
                        int fp8, const void* x,
                        int64_t row_bytes, const int64_t* topk, const float* weights, int k,
                        int per_rank, void* recv_x, int32_t* recv_slot, int32_t* pair_row,
                        float* pair_weight, int32_t* pair_src_rank, int32_t* pair_src,
                        uint64_t* arrived, int blocks, cudaStream_t stream) {
  if (fp8 && row_bytes % 256) {
    return check(cudaErrorInvalidValue, "moe dispatch: FP8 needs hidden % 128 == 0");
  }
  const Route r{pes, token_pos, tile_base, all_counts, world, me, num_experts, tokens};
  using Half = __half;
  auto* kernel = dtype == 0 ? (fp8 ? dispatch_kernel<__nv_bfloat16, true>
                                   : dispatch_kernel<__nv_bfloat16, false>)
                            : (fp8 ? dispatch_kernel<Half, true> : dispatch_kernel<Half, false>);
  kernel<<<blocks, kThreads, 0, stream>>>(
      *dev, r, pair_pos, static_cast<const int4*>(x), row_bytes / 16, topk, weights, k, per_rank,
      static_cast<int4*>(recv_x), recv_slot, pair_row, pair_weight, pair_src_rank, pair_src,
      arrived);
  return check(cudaGetLastError(), "moe dispatch");
}

// values[p] to rank src_rank[p]'s dest[src_code[p]] (dest symmetric), then `returned` signals.
int gshmem_moe_return(const gshmem_device_t* dev, const int32_t* pes, int world, int me,
                      const float* values, const int32_t* src_rank, const int32_t* src_code,
                      int64_t pairs, float* dest, uint64_t* returned, int blocks,
                      cudaStream_t stream) {
  return_kernel<<<blocks, kThreads, 0, stream>>>(*dev, pes, world, me, values, src_rank, src_code,
                                                 pairs, dest, returned);
  return check(cudaGetLastError(), "moe return");
}

// all_counts: every rank's totals (the exchange); worst_pairs: the most pairs this rank may
// receive.
int gshmem_moe_check(const int32_t* all_counts, int world, int me, int num_experts,
                     int64_t worst_pairs, cudaStream_t stream) {
  const Route r{nullptr, nullptr, nullptr, all_counts, world, me, num_experts, 0};
  check_kernel<<<1, kThreads, 0, stream>>>(r, worst_pairs);
  return check(cudaGetLastError(), "moe check");
}

// all_counts: every rank's totals (the exchange); row, weight, src_rank, src_code: this rank's
// receive arrays (at least `worst` long); every output has `worst` entries but per_expert
// (num_experts / world).
int gshmem_moe_padded_pairs(const int32_t* all_counts, int world, int me, int num_experts,
                            const int32_t* row, const float* weight, const int32_t* src_rank,
                            const int32_t* src_code, int64_t worst, int64_t* out_row,
                            float* out_weight, int32_t* out_src_rank, int32_t* out_src_code,
                            int64_t* out_rank, int64_t* out_token, int64_t* per_expert,
                            cudaStream_t stream) {
  const Route r{nullptr, nullptr, nullptr, all_counts, world, me, num_experts, 0};
  const PaddedPairs out{out_row, out_weight, out_src_rank, out_src_code, out_rank, out_token,
                        per_expert};
  const int64_t wanted = (worst + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 1 ? 1 : (wanted < 264 ? wanted : 264));
  padded_pairs_kernel<<<blocks, kThreads, 0, stream>>>(r, row, weight, src_rank, src_code, worst,
                                                       out);
  return check(cudaGetLastError(), "moe padded pairs");
}

int gshmem_moe_wait(const gshmem_device_t* dev, const int32_t* pes, const uint64_t* counters,
                    int world, uint64_t target, cudaStream_t stream) {
  wait_kernel<<<1, kWarp, 0, stream>>>(*dev, pes, counters, world, target);
  return check(cudaGetLastError(), "moe wait");
}

// dtype: 0 bfloat16, 1 float16. `pair_weight` may be null (an unweighted sum), and `ready` (the
// sums without a signal, into any buffer `comb`; not with push). push: pair_src_rank
// and pair_src (each pair's sender and token * 8 + choice there) not null, max_tokens the rows of
// each rank's block in the senders' combine buffers (pull: null, null, 0). `rows`: the received
// rows, or an upper bound (the kernel stops at the count all_counts gives).
int gshmem_moe_reduce(const gshmem_device_t* dev, const int32_t* pes, const int32_t* all_counts,
                      int world, int me, int num_experts,
                      int dtype, const void* y, int64_t y_stride_bytes, const int32_t* slot,
                      const float* pair_weight, int k, int64_t rows, int64_t row_bytes,
                      void* comb, const int32_t* pair_src_rank, const int32_t* pair_src,
                      int64_t max_tokens, uint64_t* ready, int blocks, cudaStream_t stream) {
  if ((pair_src_rank == nullptr) != (pair_src == nullptr) || (pair_src_rank && max_tokens < 1)) {
    return check(cudaErrorInvalidValue, "moe reduce: push takes both source arrays and max_tokens");
  }
  if (!ready && pair_src_rank) {
    return check(cudaErrorInvalidValue, "moe reduce: a push must signal `ready`");
  }
  const Route r{pes, nullptr, nullptr, all_counts, world, me, num_experts, 0};
  const PushTo push{pair_src_rank, pair_src, max_tokens};
  auto* kernel = dtype == 0 ? reduce_kernel<__nv_bfloat16> : reduce_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(*dev, r, static_cast<const int4*>(y),
                                          y_stride_bytes / 16, slot, pair_weight, k, rows,
                                          row_bytes / 16, static_cast<int4*>(comb), push, ready);
  return check(cudaGetLastError(), "moe reduce");
}

// pushed_max_tokens: 0 when the reduce left the rows at the receivers (pull), else the reduce's
// max_tokens (push: the rows are in this rank's comb).
int gshmem_moe_pull(const gshmem_device_t* dev, const int32_t* pes, const int32_t* token_pos,
                    const int32_t* tile_base, const int32_t* all_counts, int world, int me,
                    int num_experts, int64_t tokens, int dtype, const void* comb,
                    int64_t row_bytes, void* out, const uint64_t* ready, uint64_t target,
                    int64_t pushed_max_tokens, int blocks, cudaStream_t stream) {
  const Route r{pes, token_pos, tile_base, all_counts, world, me, num_experts, tokens};
  auto* kernel = dtype == 0 ? pull_kernel<__nv_bfloat16> : pull_kernel<__half>;
  kernel<<<blocks, kThreads, 0, stream>>>(*dev, r, static_cast<const int4*>(comb), row_bytes / 16,
                                          static_cast<int4*>(out), ready, target,
                                          pushed_max_tokens);
  return check(cudaGetLastError(), "moe pull");
}

}  // extern "C"

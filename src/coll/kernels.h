// Launchers of gshmem's own collective kernels (kernels_reduce.cu, kernels_move.cu; the
// protocol they share: protocol.cuh; kernels_packets.cu and kernels_permute.cu: theirs,
// permute_protocol.cuh). The caller (ops.cpp) has validated every argument, split
// the call into chunks that fit the staging slots, chosen the grid size (Launch::sync.ctas: a
// function of the chunk's size, so the same on every member) and made the comm's GPU current;
// these functions launch one kernel each (sync.ctas CTAs of kThreads threads; the packets and the
// permute: their own grids, a CTA per region) and throw
// gshmem::Error when the launch fails. Pointers already point at the chunk; counts are the
// chunk's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "coll/permute_sync.h"
#include "coll/sync.h"
#include "gshmem/device_state.h"
#include "gshmem/gshmem.h"

namespace gshmem::coll::kernels {

// What every launch needs: the comm's device state, the team, the collectives' memory, the stream.
struct Launch {
  gshmem_device_t dev;
  gshmem_team_t team;
  Sync sync;
  cudaStream_t stream;
};

// ---- reducing (one kernel per element type; the operator is a run-time argument) ----
// count elements, at most slot_bytes.
void all_reduce_one_shot(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                         const void* in, void* out, size_t count);
// count elements in team-size shards of `shard` elements (a multiple of 16 bytes, at most
// slot_bytes / 2; the last shard may be shorter or empty). direct: `out` is a symmetric heap
// object (the reduced shards go straight into it).
void all_reduce_two_shot(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                         const void* in, void* out, size_t count, size_t shard, bool direct);
// The two-shot reading the members' inputs in place: `in` and `out` symmetric heap objects (the
// same on every member), count elements in team-size shards of `shard` elements (a multiple of
// 16 bytes; the last shard may be shorter or empty), any size (no slots).
void all_reduce_pull(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op, const void* in,
                     void* out, size_t count, size_t shard);
// out[i] = op over members of in[me * stride + i], i < count (at most slot_bytes).
void reduce_scatter(const Launch& l, gshmem_dtype_t dtype, gshmem_redop_t op, const void* in,
                    void* out, size_t count, size_t stride);
// The reductions through the proxy (exchange.cpp): out[i] = op over `team`'s members, in team
// order, of `own`[i] for this PE and slots + q * slot_bytes [i] for world PE q, i < count. No
// synchronisation of its own: the exchange's flags ordered the slots' data on `stream`.
void reduce_slots(cudaStream_t stream, const gshmem_team_t& team, int my_pe,
                  gshmem_dtype_t dtype, gshmem_redop_t op, const void* own, const char* slots,
                  uint64_t slot_bytes, void* out, size_t count);

// ---- moving (bytes; staged: at most slot_bytes per member pair; direct: `out` is a symmetric
// heap object on every member, any size, stored into without staging) ----
// out[t * stride + i] = member t's in[i], i < bytes.
void all_gather(const Launch& l, const void* in, void* out, size_t bytes, size_t stride,
                bool direct);
// out[i] = member root's in[i].
void broadcast(const Launch& l, const void* in, void* out, size_t bytes, int root, bool direct);
// out[t * stride + i] = member t's in[me * stride + i]. direct needs in != out.
void all_to_all(const Launch& l, const void* in, void* out, size_t bytes, size_t stride,
                bool direct);

// all_to_allv in bytes, per team member (team size <= kMaxVPes): travels in the kernel's
// parameters, so a captured graph holds its own copy.
struct VLayout {
  uint64_t send_off[kMaxVPes];
  uint64_t send_bytes[kMaxVPes];
  uint64_t recv_off[kMaxVPes];
  uint64_t recv_bytes[kMaxVPes];
};
void all_to_allv(const Launch& l, const void* in, void* out, const VLayout& layout);

// ---- packets (kernels_packets.cu): every small collective's, on the permute's slots and
// counters (permute_sync.h), one message per member pair, so they interleave with permutes; at
// most kPermuteChunkWords * 8 bytes per member pair (one chunk) ----
struct PacketLaunch {
  gshmem_device_t dev;
  gshmem_team_t team;
  PermuteSync sync;
  cudaStream_t stream;
};
// out[i] = op over members, in team order, of member t's in[me * stride + i], i < count.
// all_reduce: stride 0; reduce_scatter: its block.
void reduce_packets(const PacketLaunch& l, gshmem_dtype_t dtype, gshmem_redop_t op,
                    const void* in, void* out, size_t count, size_t stride);
// out[t * out_stride + i] = member t's in[me * in_stride + i], i < bytes (bytes and strides in
// bytes). all_gather: in_stride 0; all_to_all: both its block.
void move_packets(const PacketLaunch& l, const void* in, size_t in_stride, void* out,
                  size_t out_stride, size_t bytes);

// ---- the permute (kernels_permute.cu) ----
struct PermuteLaunch {
  gshmem_device_t dev;
  PermuteSync sync;
  cudaStream_t stream;
};
// out = world PE src's in (any bytes); this PE's in goes to world PE dst. -1: no
// peer (nothing received leaves zeros); dst == src == this PE copies in to out. `bulk`: the bulk
// protocol, else packets (permute_sync.h); both ends of a pair must choose alike.
void permute(const PermuteLaunch& l, const void* in, void* out, size_t bytes, int dst, int src,
             bool bulk);

// Loads every collective kernel on the current device now (at comm creation), so that a first
// call made while a stream is being captured does not load a module.
void preload();
void preload_packets();  // kernels_packets.cu's share of preload()
void preload_reduce();   // kernels_reduce.cu's share of preload()
void preload_permute();  // kernels_permute.cu's share of preload()

}  // namespace gshmem::coll::kernels

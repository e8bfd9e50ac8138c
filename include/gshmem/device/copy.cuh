// The copy loop behind put/get/put_signal: the threads of a scope move `bytes` from src to dst,
// in the widest word both addresses allow. Internal: use rma.cuh.
//
// Word size: the largest of 16, 8, 4, 2, 1 bytes in which dst and src are congruent (same address
// modulo the word size). The bytes before the first aligned word and after the last one are
// copied one by one; the body moves whole words, each thread keeping kCopyUnroll independent
// loads in flight before storing, with consecutive threads on consecutive words (coalesced).
// Any size and any offsets are correct; 16-byte words need dst and src congruent modulo 16.
// Plain (weak) loads and stores: ordering comes from the caller (signal release, fence, quiet).
//
// Thread scope: the lanes of a warp that reach a copy together each bring their own copy. When
// those copies tile one range (lane k's starts where lane k-1's ends) the lanes move the range as
// one copy; otherwise those of at least kLaneShareBytes are moved by all of these lanes together,
// one copy after another, the rest by their own lane. One lane alone puts its 16-byte words in a
// different 32-byte sector than its neighbours' at every access, half of each sector unused:
// thread-scope puts of 8 KiB per thread moved 169 GB/s where warp scope moved 353
// (docs/benchmarks.md). The lanes synchronise (__syncwarp over them) before, so each reads what
// the others wrote to their sources, and after, so each lane's later release (a signal, a fence)
// covers the whole copy.
#pragma once

#include "scope.cuh"

namespace gshmem {
namespace detail {

constexpr unsigned kCopyUnroll = 4;
constexpr size_t kLaneShareBytes = 512;

// Thread `rank` of `size` moves words rank, rank + size, ... of n.
template <class W>
__device__ inline void copy_words(W* dst, const W* src, size_t n, unsigned rank, unsigned size) {
  size_t i = rank;
  for (; i + (kCopyUnroll - 1) * size < n; i += kCopyUnroll * size) {
    W v[kCopyUnroll];
#pragma unroll
    for (unsigned u = 0; u < kCopyUnroll; ++u) v[u] = src[i + u * size];
#pragma unroll
    for (unsigned u = 0; u < kCopyUnroll; ++u) dst[i + u * size] = v[u];
  }
  for (; i < n; i += size) dst[i] = src[i];
}

// dst and src are congruent modulo sizeof(W).
template <class W>
__device__ inline void copy_congruent(char* dst, const char* src, size_t bytes, unsigned rank,
                                      unsigned size) {
  size_t head = (sizeof(W) - reinterpret_cast<unsigned long long>(dst) % sizeof(W)) % sizeof(W);
  if (head > bytes) head = bytes;
  const size_t words = (bytes - head) / sizeof(W);
  const size_t body_end = head + words * sizeof(W);
  for (size_t i = rank; i < head; i += size) dst[i] = src[i];
  for (size_t i = body_end + rank; i < bytes; i += size) dst[i] = src[i];
  copy_words(reinterpret_cast<W*>(dst + head), reinterpret_cast<const W*>(src + head), words, rank,
             size);
}

// The copy, split over threads rank = 0 .. size - 1 that all call it with the same arguments.
__device__ inline void copy_split(void* dst, const void* src, size_t bytes, unsigned rank,
                                  unsigned size) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const unsigned long long skew =
      reinterpret_cast<unsigned long long>(d) ^ reinterpret_cast<unsigned long long>(s);
  if (skew % 16 == 0) {
    copy_congruent<uint4>(d, s, bytes, rank, size);
  } else if (skew % 8 == 0) {
    copy_congruent<unsigned long long>(d, s, bytes, rank, size);
  } else if (skew % 4 == 0) {
    copy_congruent<unsigned int>(d, s, bytes, rank, size);
  } else if (skew % 2 == 0) {
    copy_congruent<unsigned short>(d, s, bytes, rank, size);
  } else {
    copy_words(d, s, bytes, rank, size);
  }
}

// Whether the copies of `lanes` tile one range, in lane order: each lane's dst and src start where
// the previous lane's end (as when thread t of a kernel puts bytes [t, t + 1) x n of an array).
// Then that range is one copy, which all of them move together, coalesced, at any size: without
// this, 32-byte copies per lane moved half of warp scope's bytes (docs/benchmarks.md). On return
// *range_dst and *range_src hold its start and *range_bytes its length.
__device__ inline bool lanes_tile_one_range(unsigned lanes, unsigned below, void* dst,
                                            const void* src, size_t bytes, void** range_dst,
                                            const void** range_src, size_t* range_bytes) {
  const auto d = reinterpret_cast<unsigned long long>(dst);
  const auto s = reinterpret_cast<unsigned long long>(src);
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  const unsigned earlier = lanes & below;
  const int previous = earlier != 0 ? 31 - __clz(earlier) : static_cast<int>(lane);
  const auto previous_d_end = __shfl_sync(lanes, d + bytes, previous);
  const auto previous_s_end = __shfl_sync(lanes, s + bytes, previous);
  const bool follows = earlier == 0 || (d == previous_d_end && s == previous_s_end);
  if (!__all_sync(lanes, follows)) return false;
  const int first = __ffs(lanes) - 1, last = 31 - __clz(lanes);
  const auto start = __shfl_sync(lanes, d, first);
  *range_dst = reinterpret_cast<void*>(start);
  *range_src = reinterpret_cast<const void*>(__shfl_sync(lanes, s, first));
  *range_bytes = __shfl_sync(lanes, d + bytes, last) - start;
  return true;
}

// Thread scope: each calling lane's copy; copies that tile one range move as one (above), else
// the large ones are shared by the lanes that arrived together (above).
__device__ inline void copy_by_lanes(void* dst, const void* src, size_t bytes) {
  const unsigned lanes = __activemask();
  __syncwarp(lanes);
  unsigned below;
  asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(below));
  const unsigned rank = __popc(lanes & below), size = __popc(lanes);
  void* range_dst;
  const void* range_src;
  size_t range_bytes;
  if (size > 1 && lanes_tile_one_range(lanes, below, dst, src, bytes, &range_dst, &range_src,
                                       &range_bytes)) {
    copy_split(range_dst, range_src, range_bytes, rank, size);
    __syncwarp(lanes);
    return;
  }
  const bool shared = bytes >= kLaneShareBytes;
  unsigned pending = __ballot_sync(lanes, shared);
  while (pending != 0) {  // the same iterations on every lane of `lanes`
    const int owner = __ffs(pending) - 1;
    pending &= pending - 1;
    const auto d = __shfl_sync(lanes, reinterpret_cast<unsigned long long>(dst), owner);
    const auto s = __shfl_sync(lanes, reinterpret_cast<unsigned long long>(src), owner);
    const auto n = __shfl_sync(lanes, static_cast<unsigned long long>(bytes), owner);
    copy_split(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n, rank, size);
  }
  if (!shared) copy_split(dst, src, bytes, 0, 1);
  __syncwarp(lanes);
}

template <class Scope>
__device__ inline void copy(void* dst, const void* src, size_t bytes) {
  copy_split(dst, src, bytes, Scope::rank(), Scope::size());
}

template <>
__device__ inline void copy<Thread>(void* dst, const void* src, size_t bytes) {
  copy_by_lanes(dst, src, bytes);
}

}  // namespace detail
}  // namespace gshmem

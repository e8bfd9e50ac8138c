// The copy loop behind put/get/put_signal: the threads of a scope move `bytes` from src to dst,
// in the widest word both addresses allow. Internal: use rma.cuh.
//
// Word size: the largest of 16, 8, 4, 2, 1 bytes in which dst and src are congruent (same address
// modulo the word size). The bytes before the first aligned word and after the last one are
// copied one by one; the body moves whole words, each thread keeping kCopyUnroll independent
// loads in flight before storing, with consecutive threads on consecutive words (coalesced).
// Any size and any offsets are correct; 16-byte words need dst and src congruent modulo 16.
// Plain (weak) loads and stores: ordering comes from the caller (signal release, fence, quiet).
#pragma once

namespace gshmem {
namespace detail {

constexpr unsigned kCopyUnroll = 4;

template <class Scope, class W>
__device__ inline void copy_words(W* dst, const W* src, size_t n) {
  const size_t stride = Scope::size();
  size_t i = Scope::rank();
  for (; i + (kCopyUnroll - 1) * stride < n; i += kCopyUnroll * stride) {
    W v[kCopyUnroll];
#pragma unroll
    for (unsigned u = 0; u < kCopyUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (unsigned u = 0; u < kCopyUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// dst and src are congruent modulo sizeof(W).
template <class Scope, class W>
__device__ inline void copy_congruent(char* dst, const char* src, size_t bytes) {
  size_t head = (sizeof(W) - reinterpret_cast<unsigned long long>(dst) % sizeof(W)) % sizeof(W);
  if (head > bytes) head = bytes;
  const size_t words = (bytes - head) / sizeof(W);
  const size_t body_end = head + words * sizeof(W);
  for (size_t i = Scope::rank(); i < head; i += Scope::size()) dst[i] = src[i];
  for (size_t i = body_end + Scope::rank(); i < bytes; i += Scope::size()) dst[i] = src[i];
  copy_words<Scope>(reinterpret_cast<W*>(dst + head), reinterpret_cast<const W*>(src + head),
                    words);
}

template <class Scope>
__device__ inline void copy(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const unsigned long long skew =
      reinterpret_cast<unsigned long long>(d) ^ reinterpret_cast<unsigned long long>(s);
  if (skew % 16 == 0) {
    copy_congruent<Scope, uint4>(d, s, bytes);
  } else if (skew % 8 == 0) {
    copy_congruent<Scope, unsigned long long>(d, s, bytes);
  } else if (skew % 4 == 0) {
    copy_congruent<Scope, unsigned int>(d, s, bytes);
  } else if (skew % 2 == 0) {
    copy_congruent<Scope, unsigned short>(d, s, bytes);
  } else {
    copy_words<Scope>(d, s, bytes);
  }
}

}  // namespace detail
}  // namespace gshmem

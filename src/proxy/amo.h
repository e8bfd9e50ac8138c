// The arithmetic of the atomics that arrive over the network (AmoOp on an AmoType word), shared
// by the sinks that apply them: on the CPU (host memory) and in a kernel (GPU memory). Each sink
// runs it inside a compare-and-swap loop on the word, so one definition serves every operation
// and both sides agree on it bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "gshmem/proxy_queue.h"

namespace gshmem::proxy {

template <class F>
GSHMEM_HOST_DEVICE inline F amo_float_bits(uint64_t bits) {
  F f;
  if constexpr (sizeof(F) == 4) {
    const auto low = static_cast<uint32_t>(bits);
    memcpy(&f, &low, sizeof f);
  } else {
    memcpy(&f, &bits, sizeof f);
  }
  return f;
}

template <class F>
GSHMEM_HOST_DEVICE inline uint64_t amo_bits(F f) {
  if constexpr (sizeof(F) == 4) {
    uint32_t low;
    memcpy(&low, &f, sizeof low);
    return low;
  } else {
    uint64_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
  }
}

// The word's new value (in its low amo_bytes(type) bytes) after `op` with `operand` on `old`.
GSHMEM_HOST_DEVICE inline uint64_t amo_next(AmoOp op, AmoType type, uint64_t old, uint64_t operand,
                                            uint64_t compare) {
  const uint64_t mask = amo_bytes(type) == 4 ? 0xffffffffull : ~uint64_t{0};
  old &= mask;
  operand &= mask;
  switch (op) {
    case AmoOp::kAdd:
      if (type == AmoType::kF32) {
        return amo_bits(amo_float_bits<float>(old) + amo_float_bits<float>(operand));
      }
      if (type == AmoType::kF64) {
        return amo_bits(amo_float_bits<double>(old) + amo_float_bits<double>(operand));
      }
      return (old + operand) & mask;
    case AmoOp::kAnd: return old & operand;
    case AmoOp::kOr: return old | operand;
    case AmoOp::kXor: return old ^ operand;
    case AmoOp::kSwap: return operand;
    case AmoOp::kCompareSwap: return old == (compare & mask) ? operand : old;
  }
  return old;
}

// Whether `op` on `type` is an atomic gshmem defines (bitwise operations on integers only).
GSHMEM_HOST_DEVICE inline bool amo_valid(uint64_t op, uint64_t type) {
  constexpr auto kLastOp = static_cast<uint64_t>(AmoOp::kCompareSwap);
  if (op > kLastOp || type > static_cast<uint64_t>(AmoType::kF64)) return false;
  const bool bitwise = op >= static_cast<uint64_t>(AmoOp::kAnd) &&
                       op <= static_cast<uint64_t>(AmoOp::kXor);
  return !bitwise || type <= static_cast<uint64_t>(AmoType::kU64);
}

}  // namespace gshmem::proxy

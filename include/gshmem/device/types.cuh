// gshmem::Device and gshmem::Team: the by-value state a kernel receives (DESIGN.md §2.2), and the
// vocabulary shared by every other device header (comparisons, signal operations).
//
// Host code fills a Device with gshmem_comm_device() (C/C++) or gshmem.device.device_handle()
// (Python) and passes it to a kernel as an ordinary argument; a Team comes from
// gshmem_team_world/node/split_* (or dev.world / dev.node). Neither needs -rdc, a device link
// step or a __constant__ symbol: everything the API needs travels in the argument.
#pragma once

#include "../device_state.h"

namespace gshmem {

using Device = gshmem_device_t;
using Team = gshmem_team_t;

// Comparisons for wait_until / test / signal_wait_until: `*ivar <cmp> value`.
enum class Cmp : int { EQ, NE, GT, GE, LT, LE };

// How put_signal / signal_op update the signal word.
enum class SignalOp : int { Set, Add };

__device__ inline int my_pe(const Device& dev) { return dev.my_pe; }
__device__ inline int n_pes(const Device& dev) { return dev.n_pes; }

namespace detail {

template <class T>
__device__ inline bool compare(T a, Cmp cmp, T b) {
  switch (cmp) {
    case Cmp::EQ: return a == b;
    case Cmp::NE: return a != b;
    case Cmp::GT: return a > b;
    case Cmp::GE: return a >= b;
    case Cmp::LT: return a < b;
    default: return a <= b;  // Cmp::LE
  }
}

}  // namespace detail
}  // namespace gshmem

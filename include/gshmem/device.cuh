// gshmem device API (DESIGN.md §2.2, §4): header-only, state passed by value. Include this from
// CUDA C++ (nvcc -c, no -rdc, no device link step) or NVRTC; kernels take a gshmem::Device
// argument filled on the host by gshmem_comm_device() or gshmem.device.device_handle().
// Requires sm_70 or newer (PTX memory-model instructions). See docs/device-api.md.
//
//   device/types.cuh    Device, Team, Cmp, SignalOp, my_pe, n_pes
//   device/scope.cuh    Thread, Warp, Block: who makes a scoped call
//   device/ptr.cuh      ptr, team_ptr: peers' addresses of symmetric objects
//   device/deadline.cuh Deadline: how the bounded waits give up (GSHMEM_TIMEOUT, abort)
//   device/order.cuh    fence, quiet
//   device/rma.cuh      put, get, put_nbi, get_nbi, p, g, iput, iget
//   device/signal.cuh   put_signal(_nbi), signal_op, signal_fetch, signal_wait_until
//   device/packet.cuh   put_packets, wait_packets: small messages that carry their own arrival
//                       flags (LL), no fence or signal
//   device/sync.cuh     wait_until(_all/_any/_some), test(_all/_any/_some)
//   device/atomic.cuh   atomic_fetch, set, swap, compare_swap, inc, add, and, or, xor (+ fetch_)
//   device/team.cuh     team_my_pe, team_n_pes, team_world_pe, team_translate_pe
//   device/barrier.cuh  sync, barrier, sync_all, barrier_all
//   device/reduce.cuh   ReduceOp (Sum, Prod, Min, Max) and what reducing each element type means
//   device/coll.cuh     broadcast, all_gather, all_to_all, all_reduce, reduce_scatter (in kernels)
//   device/window.cuh   WindowContext: put/put_value/signal/flush with SignalAdd and CounterInc
//                       over registered windows (docs/windows.md)
#pragma once

#include "device/atomic.cuh"
#include "device/barrier.cuh"
#include "device/coll.cuh"
#include "device/deadline.cuh"
#include "device/order.cuh"
#include "device/packet.cuh"
#include "device/proxy.cuh"
#include "device/ptr.cuh"
#include "device/reduce.cuh"
#include "device/rma.cuh"
#include "device/scope.cuh"
#include "device/signal.cuh"
#include "device/sync.cuh"
#include "device/team.cuh"
#include "device/types.cuh"
#include "device/window.cuh"

// The collectives that only move bytes, beyond packets (kernels_packets.cu): all_gather,
// broadcast, all_to_all, all_to_allv; independent of the element type. The
// staged kernels push into the receivers' staging slots, run one signal phase and copy out of
// their own slots; direct ones store straight into the members' heap outputs (protocol.cuh).
#include "coll/kernels.h"
#include "coll/protocol.cuh"
#include "common/cuda_api.h"

namespace gshmem::coll::kernels {
namespace {

using namespace gshmem::coll::device;

constexpr size_t kUnit = 16;  // CTA byte ranges start on 16-byte boundaries

// Direct calls (`direct`: `out` is a symmetric heap object on every member, same address): phase
// 1 only says that every member's kernel has started, so that its `out` is free (stream order; a
// relaxed signal, protocol.cuh Arrival); then each CTA stores straight into the members' `out`
// and phase 2 says the stores are done. No staging slot, no copy out of it, no chunks. Staged
// calls push into the receivers' slots, one phase, and copy out of their own slots.

__global__ void __launch_bounds__(kThreads)
    all_gather_kernel(Device dev, Team team, Sync s, const char* in, char* out, size_t bytes,
                      size_t stride, bool direct) {
  const Range r = cta_range(bytes, kUnit, blockIdx.x, s.ctas);
  char* own = out + team.my_pe * stride;
  if (direct) arrive_and_wait(s, dev, team, 1, Arrival::kStarted);
  for (int k = 0; k + 1 < team.size; ++k) {
    const int q = world(team, push_target(team, k));
    char* dst = direct ? gshmem::detail::peer(dev, own, q) : remote_slot(s, dev, q);
    copy(dst + r.lo, in + r.lo, r.size());
  }
  if (direct) {
    copy(own + r.lo, in + r.lo, r.size());
    arrive_and_wait(s, dev, team, 2);
    end_call(s, dev, team, 2);
    return;
  }
  arrive_and_wait(s, dev, team, 1);
  for (int t = 0; t < team.size; ++t) {
    const int q = world(team, t);
    const char* src = q == dev.my_pe ? in : local_slot(s, q);
    copy(out + t * stride + r.lo, src + r.lo, r.size());
  }
  end_call(s, dev, team, 1);
}

__global__ void __launch_bounds__(kThreads)
    broadcast_kernel(Device dev, Team team, Sync s, const char* in, char* out, size_t bytes,
                     int root, bool direct) {
  const Range r = cta_range(bytes, kUnit, blockIdx.x, s.ctas);
  const int root_pe = world(team, root);
  if (direct) arrive_and_wait(s, dev, team, 1, Arrival::kStarted);
  if (dev.my_pe == root_pe) {
    for (int k = 0; k + 1 < team.size; ++k) {
      const int q = world(team, push_target(team, k));
      char* dst = direct ? gshmem::detail::peer(dev, out, q) : remote_slot(s, dev, q);
      copy(dst + r.lo, in + r.lo, r.size());
    }
    copy(out + r.lo, in + r.lo, r.size());
  }
  // Every member signals every other one, root or not: the slot reuse rule (protocol.cuh) needs
  // each member to hear from each other member in every call.
  const unsigned phases = direct ? 2 : 1;
  arrive_and_wait(s, dev, team, phases);
  if (!direct && dev.my_pe != root_pe) copy(out + r.lo, local_slot(s, root_pe) + r.lo, r.size());
  end_call(s, dev, team, phases);
}

// Direct all_to_all needs in != out (ops.cpp): a member's `out` block may be overwritten before
// that member has pushed the `in` block it would otherwise still read.
__global__ void __launch_bounds__(kThreads)
    all_to_all_kernel(Device dev, Team team, Sync s, const char* in, char* out, size_t bytes,
                      size_t stride, bool direct) {
  const Range r = cta_range(bytes, kUnit, blockIdx.x, s.ctas);
  const size_t own = team.my_pe * stride;
  if (direct) arrive_and_wait(s, dev, team, 1, Arrival::kStarted);
  for (int k = 0; k + 1 < team.size; ++k) {
    const int t = push_target(team, k);
    const int q = world(team, t);
    char* dst = direct ? gshmem::detail::peer(dev, out + own, q) : remote_slot(s, dev, q);
    copy(dst + r.lo, in + t * stride + r.lo, r.size());
  }
  if (direct) {
    copy(out + own + r.lo, in + own + r.lo, r.size());
    arrive_and_wait(s, dev, team, 2);
    end_call(s, dev, team, 2);
    return;
  }
  arrive_and_wait(s, dev, team, 1);
  // In place (in == out) is safe: this CTA alone reads and writes bytes [r.lo, r.hi) of each
  // block, and its pushes are done.
  for (int t = 0; t < team.size; ++t) {
    const int q = world(team, t);
    const char* src = q == dev.my_pe ? in + own : local_slot(s, q);
    copy(out + t * stride + r.lo, src + r.lo, r.size());
  }
  end_call(s, dev, team, 1);
}

__global__ void __launch_bounds__(kThreads)
    all_to_allv_kernel(Device dev, Team team, Sync s, const char* in, char* out, VLayout v) {
  for (int k = 0; k + 1 < team.size; ++k) {
    const int t = push_target(team, k);
    const int q = world(team, t);
    const Range r = cta_range(v.send_bytes[t], kUnit, blockIdx.x, s.ctas);
    copy(remote_slot(s, dev, q) + r.lo, in + v.send_off[t] + r.lo, r.size());
  }
  arrive_and_wait(s, dev, team, 1);
  // The sender split its message to this PE exactly as this split (the same byte count: the
  // contract), so CTA b reads what CTA b of the sender pushed.
  for (int t = 0; t < team.size; ++t) {
    const int q = world(team, t);
    const Range r = cta_range(v.recv_bytes[t], kUnit, blockIdx.x, s.ctas);
    const char* src = q == dev.my_pe ? in + v.send_off[t] : local_slot(s, q);
    copy(out + v.recv_off[t] + r.lo, src + r.lo, r.size());
  }
  end_call(s, dev, team, 1);
}

const char* bytes_of(const void* p) { return static_cast<const char*>(p); }
char* bytes_of(void* p) { return static_cast<char*>(p); }

}  // namespace

void all_gather(const Launch& l, const void* in, void* out, size_t bytes, size_t stride,
                bool direct) {
  all_gather_kernel<<<l.sync.ctas, kThreads, 0, l.stream>>>(l.dev, l.team, l.sync, bytes_of(in),
                                                            bytes_of(out), bytes, stride, direct);
  cuda::check_launch("launching the all_gather kernel");
}

void broadcast(const Launch& l, const void* in, void* out, size_t bytes, int root, bool direct) {
  broadcast_kernel<<<l.sync.ctas, kThreads, 0, l.stream>>>(l.dev, l.team, l.sync, bytes_of(in),
                                                           bytes_of(out), bytes, root, direct);
  cuda::check_launch("launching the broadcast kernel");
}

void all_to_all(const Launch& l, const void* in, void* out, size_t bytes, size_t stride,
                bool direct) {
  all_to_all_kernel<<<l.sync.ctas, kThreads, 0, l.stream>>>(l.dev, l.team, l.sync, bytes_of(in),
                                                            bytes_of(out), bytes, stride, direct);
  cuda::check_launch("launching the all_to_all kernel");
}

void all_to_allv(const Launch& l, const void* in, void* out, const VLayout& layout) {
  all_to_allv_kernel<<<l.sync.ctas, kThreads, 0, l.stream>>>(l.dev, l.team, l.sync, bytes_of(in),
                                                             bytes_of(out), layout);
  cuda::check_launch("launching the all_to_allv kernel");
}

void preload() {
  cuda::preload(all_gather_kernel, "loading the collective kernels");
  cuda::preload(broadcast_kernel, "loading the collective kernels");
  cuda::preload(all_to_all_kernel, "loading the collective kernels");
  cuda::preload(all_to_allv_kernel, "loading the collective kernels");
  preload_packets();
  preload_reduce();
  preload_permute();
}

}  // namespace gshmem::coll::kernels

// Execution scopes: who makes a call. A scoped call (put<Warp>, barrier<Block>, ...) must be made
// by every thread of the scope, with the same arguments, like __syncthreads(); the threads split
// the work between them and synchronise on entry and exit, so on return the operation is done for
// the whole scope (for example: a blocking put<Block> has read all of `src`, so any thread may
// overwrite it).
//
//   Thread  one thread; no synchronisation.
//   Warp    all 32 lanes of a warp (__syncwarp, full mask); block size must be a multiple of 32.
//   Block   all threads of the block (__syncthreads).
//
// Each scope tag gives its threads a rank in [0, size), a barrier (sync) and broadcast(v): every
// thread returns rank 0's v; broadcast synchronises the scope, so what rank 0 observed before it
// (an acquire load, for example) happens-before what every thread does after it. all(b) returns
// to every thread whether b was true on all of them, and synchronises the scope like sync().
#pragma once

namespace gshmem {

struct Thread {
  __device__ static unsigned rank() { return 0; }
  __device__ static unsigned size() { return 1; }
  __device__ static void sync() {}
  __device__ static bool all(bool b) { return b; }
  template <class T>
  __device__ static T broadcast(T v) { return v; }
};

struct Warp {
  __device__ static unsigned rank() {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
  }
  __device__ static unsigned size() { return 32; }
  __device__ static void sync() { __syncwarp(); }
  __device__ static bool all(bool b) {
    const bool r = __all_sync(0xffffffffu, b) != 0;
    __syncwarp();
    return r;
  }
  // __shfl_sync moves the value but orders no memory accesses; the __syncwarp after it does
  // (bar.warp.sync orders memory among the lanes), so lane 0's acquire precedes every lane's
  // later loads. Without it, lanes were seen reading data older than the signal lane 0 saw.
  template <class T>
  __device__ static T broadcast(T v) {
    T r = __shfl_sync(0xffffffffu, v, 0);
    __syncwarp();
    return r;
  }
};

struct Block {
  __device__ static unsigned rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  __device__ static unsigned size() { return blockDim.x * blockDim.y * blockDim.z; }
  __device__ static void sync() { __syncthreads(); }
  __device__ static bool all(bool b) { return __syncthreads_and(b) != 0; }
  template <class T>
  __device__ static T broadcast(T v) {
    __shared__ T slot;
    if (rank() == 0) slot = v;
    __syncthreads();
    T r = slot;
    __syncthreads();  // nobody overwrites slot (next broadcast) before all have read it
    return r;
  }
};

}  // namespace gshmem

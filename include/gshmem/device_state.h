/*
 * gshmem device state: the plain-C structs that the host runtime fills (gshmem_comm_device,
 * gshmem_team_*) and that kernels receive by value. Included by host C/C++ code, by nvcc device
 * code and by NVRTC (which has no standard headers), so it uses nothing but fixed-width types.
 *
 * Layout is part of the ABI: Python builds the same bytes (gshmem.device) and passes them to
 * NVRTC/CuPy kernels, so fields are only ever appended, and `version` changes when they are.
 */
#ifndef GSHMEM_DEVICE_STATE_H
#define GSHMEM_DEVICE_STATE_H

#if defined(__CUDACC_RTC__)
/* NVRTC has no standard headers: the LP64 (Linux) types glibc defines, and size_t/ptrdiff_t
 * as the compiler itself defines them (NVRTC is always C++). */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef decltype(sizeof(0)) size_t;
typedef decltype(static_cast<char*>(0) - static_cast<char*>(0)) ptrdiff_t;
#else
#include <stddef.h>
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define GSHMEM_HOST_DEVICE __host__ __device__
#else
#define GSHMEM_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define GSHMEM_DEVICE_STATE_VERSION 5

/* What gave up waiting (gshmem_fault_t.op). */
#define GSHMEM_WAIT_SIGNAL 1     /* signal_wait_until */
#define GSHMEM_WAIT_VALUE 2      /* wait_until and its _all/_any/_some forms */
#define GSHMEM_WAIT_BARRIER 3    /* sync, barrier (device API, on-stream barrier) */
#define GSHMEM_WAIT_COLLECTIVE 4 /* gshmem's collective kernels */
#define GSHMEM_WAIT_MOE 5        /* gshmem.moe's dispatch and combine kernels */
#define GSHMEM_WAIT_PROXY 6      /* room in the proxy queue, or a proxy quiet (device/proxy.cuh) */
#define GSHMEM_WAIT_PACKETS 7    /* wait_packets (device/packet.cuh) */

/* Why (gshmem_fault_t.cause). */
#define GSHMEM_FAULT_TIMEOUT 1 /* the wait lasted longer than GSHMEM_TIMEOUT */
#define GSHMEM_FAULT_ABORT 2   /* the comm was aborted (comm.abort(), the watchdog) */
#define GSHMEM_FAULT_OTHER 3   /* another wait of this comm had already failed */
#define GSHMEM_FAULT_PROXY 4   /* the comm's proxy thread stopped on an error */

/* The first bounded device wait of a comm that gives up records here what it waited for
 * (docs/reliability.md). It lives in host memory mapped into the GPU, so the host reads it
 * without synchronising with kernels that may still run, and sets `abort` for kernels that spin.
 * Kernels elect the one writer with an atomic on dev.fault_claim (GPU memory: atomics to host
 * memory are not atomic with the host's), then store the fields and, last, `recorded`. */
typedef struct gshmem_fault {
  uint32_t abort;     /* written by the host: nonzero makes every bounded wait give up */
  uint32_t recorded;  /* written last by the device: the fields below are complete */
  int32_t op;         /* GSHMEM_WAIT_* */
  int32_t cause;      /* GSHMEM_FAULT_* */
  int32_t pe;         /* world PE waited for, -1 when the wait has no single peer */
  int32_t cmp;        /* the comparison (gshmem_cmp_t order: EQ NE GT GE LT LE), -1 none */
  int32_t block;      /* blockIdx.x and threadIdx.x of the thread that gave up */
  int32_t thread;
  uint64_t addr;      /* the word polled */
  uint64_t expected;  /* the value compared against */
  uint64_t seen;      /* the last value read */
  uint64_t waited_ns; /* how long it waited */
} gshmem_fault_t;

/* A team: the PEs start, start + stride, ..., start + (size - 1) * stride of the world (world
 * ranks). Teams are values: creating one is local arithmetic, never a collective, and a team
 * needs no memory of its own (team barriers use the per-PE counters of gshmem_device_t.sync). */
typedef struct gshmem_team {
  int32_t start;  /* world rank of team PE 0 */
  int32_t stride; /* >= 1 */
  int32_t size;   /* number of PEs; 0 for the empty team */
  int32_t my_pe;  /* this PE's index in the team, or -1 when this PE is not a member */
} gshmem_team_t;

/* Everything a kernel needs to reach every load/store-reachable PE's symmetric heap.
 * All addresses are device virtual addresses of the comm's GPU (valid in kernels on that GPU). */
typedef struct gshmem_device {
  uint32_t version;     /* GSHMEM_DEVICE_STATE_VERSION */
  int32_t my_pe;        /* this PE's world rank */
  int32_t n_pes;        /* PEs in the world */
  int32_t my_slot;      /* local_index[my_pe] */
  uint64_t heap_base;   /* this PE's heap base: symmetric address p is at offset p - heap_base */
  uint64_t slot_base;   /* address of slot 0 of the reservation that maps every reachable heap */
  uint64_t slot_size;   /* bytes between consecutive slots */
  uint64_t local_index; /* int32_t[n_pes] in device memory: world rank -> slot, -1 unreachable */
  uint64_t sync;        /* symmetric uint64_t[2 * n_pes] owned by the runtime (team barriers):
                           [0, n_pes) arrivals written by peers, [n_pes, 2 n_pes) local tallies */
  gshmem_team_t world;  /* every PE */
  gshmem_team_t node;   /* the PEs this PE reaches by loads/stores (same host, P2P on); size 0
                           when they are not evenly strided in the world */
  /* version 2: bounded waits (device/deadline.cuh) */
  uint64_t timeout_ns;  /* GSHMEM_TIMEOUT: how long a bounded wait polls before it gives up */
  uint64_t fault;       /* gshmem_fault_t* (host memory mapped into this GPU) */
  uint64_t fault_claim; /* uint32_t in GPU memory: 0 until a wait claims the fault record */
  /* version 3: the proxy path to PEs beyond load/store reach (gshmem/proxy_queue.h,
   * device/proxy.cuh); proxy_capacity 0 when the comm has none */
  uint64_t proxy_slots;    /* Descriptor[proxy_capacity]: host memory mapped into this GPU */
  uint64_t proxy_tail;     /* uint64_t: tickets handed out (GPU memory) */
  uint64_t proxy_head;     /* uint64_t: descriptors the proxy took (mapped host memory) */
  uint64_t proxy_capacity; /* a power of two; 0: no proxy path */
  uint64_t proxy_retired;  /* uint64_t: descriptors retired, in ticket order (mapped) */
  uint64_t proxy_failed;   /* uint64_t: nonzero once the proxy thread stopped on an error */
  /* version 4: values fetched through the proxy (atomics that return the old value, g) */
  uint64_t proxy_results;  /* ResultSlot[proxy_capacity] (gshmem/proxy_queue.h), mapped */
  /* version 5: small puts whose data travels in the queue */
  uint64_t proxy_inline; /* uint8_t[proxy_capacity][kInlineBytes] (gshmem/proxy_queue.h), mapped */
} gshmem_device_t;

#define GSHMEM_WINDOW_STATE_VERSION 2

/* A window (docs/windows.md): memory every PE registered collectively, of possibly different
 * sizes, with its signals and counters in `n_contexts` independent sets. Filled by
 * gshmem_window_register (Python: Comm.register_window); kernels take it by value. Every array
 * lives in the GPU memory of the PE that registered it. */
typedef struct gshmem_window {
  uint32_t version;    /* GSHMEM_WINDOW_STATE_VERSION */
  int32_t my_pe;       /* this PE's world rank */
  int32_t n_pes;       /* PEs in the world */
  int32_t n_contexts;  /* independent (signals, counters) sets */
  int32_t n_signals;   /* signals per context */
  int32_t n_counters;  /* counters per context */
  uint64_t bases;      /* uint64_t[n_pes]: PE p's window as this PE addresses it */
  uint64_t sizes;      /* uint64_t[n_pes]: bytes of PE p's window */
  uint64_t signals;    /* uint64_t[n_pes]: PE p's signal array (uint64_t[n_contexts][n_signals]),
                          which puts to p add into, as this PE addresses it */
  uint64_t counters;   /* uint64_t[n_contexts][n_counters]: this PE's counters (local only) */
  /* version 2: PEs beyond load/store reach, through the comm's proxy path (bases and signals
   * hold 0 for them) */
  uint64_t signal_offset; /* the signal arrays' offset in the symmetric heap (every PE's) */
  int32_t proxy_region;   /* the proxy engine's id of the window's memory; -1: no proxy path */
  uint32_t counter_first; /* index of counters[0] in the proxy path's counter pool */
} gshmem_window_t;


static inline GSHMEM_HOST_DEVICE int32_t gshmem_team_world_pe(const gshmem_team_t* team,
                                                              int32_t pe) {
  return team->start + pe * team->stride;
}

/* Index in `team` of world rank `world_pe`, or -1 when that PE is not a member. */
static inline GSHMEM_HOST_DEVICE int32_t gshmem_team_pe_of(const gshmem_team_t* team,
                                                           int32_t world_pe) {
  int32_t d = world_pe - team->start;
  if (d < 0 || d % team->stride != 0 || d / team->stride >= team->size) return -1;
  return d / team->stride;
}

/* Index in `dst` of PE `src_pe` of team `src`, or -1 when it is not a member of `dst` (or
 * src_pe is out of range). */
static inline GSHMEM_HOST_DEVICE int32_t gshmem_team_translate(const gshmem_team_t* src,
                                                               int32_t src_pe,
                                                               const gshmem_team_t* dst) {
  if (src_pe < 0 || src_pe >= src->size) return -1;
  return gshmem_team_pe_of(dst, gshmem_team_world_pe(src, src_pe));
}

#ifdef __cplusplus
}
#endif

#endif /* GSHMEM_DEVICE_STATE_H */

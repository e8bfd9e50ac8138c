/*
 * gshmem host API (C ABI).
 *
 * A gshmem_comm_t is one member (PE) of a group of processing elements that share a symmetric
 * heap. A process may hold several comms: one per local GPU, or several independent groups.
 * There is no global state: every call names the comm it acts on.
 *
 * Conventions
 *   - Every function returns gshmem_result_t. On failure, gshmem_last_error() returns a message
 *     (owned by the library, valid until the next gshmem call on the same thread) saying what was
 *     wrong and what to do.
 *   - "Collective" means every PE of the comm must make the same call, with the same arguments,
 *     in the same order relative to its other collective calls. Collective calls block the
 *     calling host thread until all PEs have arrived, or fail after GSHMEM_TIMEOUT seconds
 *     naming the PEs that did not arrive.
 *   - Calls on one comm are not thread-safe; different comms may be used from different threads
 *     concurrently (that is how one process drives one comm per GPU).
 */
#ifndef GSHMEM_GSHMEM_H
#define GSHMEM_GSHMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GSHMEM_VERSION_MAJOR 0
#define GSHMEM_VERSION_MINOR 1
#define GSHMEM_VERSION_PATCH 0

typedef enum {
  GSHMEM_SUCCESS = 0,
  GSHMEM_ERROR_USAGE = 1,     /* bad argument or call sequence; the caller must change the call */
  GSHMEM_ERROR_BOOTSTRAP = 2, /* peers could not be reached, refused, or did not arrive in time */
  GSHMEM_ERROR_TIMEOUT = 3, /* a wait exceeded GSHMEM_TIMEOUT; the message names the missing PEs */
  GSHMEM_ERROR_HEAP = 4,    /* heap exhausted, or PEs allocated differently */
  GSHMEM_ERROR_CUDA = 5,    /* a CUDA call failed (no GPU, driver too old, out of memory...) */
  GSHMEM_ERROR_SYSTEM = 6,  /* an operating-system call failed */
  GSHMEM_ERROR_FAULT = 7,   /* a peer died, or a device wait gave up (GSHMEM_TIMEOUT, abort): the
                               message names the PE and the wait; the comm can only be aborted */
} gshmem_result_t;

/* The message for the last failed call on this thread ("" if none). */
const char* gshmem_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Unique id: how PEs find each other. Rank 0 creates it; the job distributes its bytes by
 * whatever channel it already has (a key-value store, MPI, an environment variable).
 * -------------------------------------------------------------------------------------------*/
#define GSHMEM_UNIQUE_ID_BYTES 64

typedef struct {
  char bytes[GSHMEM_UNIQUE_ID_BYTES];
} gshmem_unique_id_t;

/* Creates an id whose rendezvous is `address` (IPv4 dotted quad or host name; NULL or "" picks
 * GSHMEM_BOOTSTRAP_ADDR, else this host's first non-loopback IPv4 address) and `port` (0: one is
 * chosen). With listen != 0 the calling process opens the rendezvous socket now and the rank-0
 * comm created later in this process adopts it (no port race). With listen == 0 only a port
 * number is reserved on paper: the rank-0 comm binds it when it is created (used by launchers
 * that hand the id to child processes); port 0 then draws one that is free now from below the
 * kernel's ephemeral range, where no outgoing connection takes it meanwhile. Not collective. */
gshmem_result_t gshmem_unique_id_create(gshmem_unique_id_t* id, const char* address, int port,
                                        int listen);

/* Human-readable "address:port" of an id (for logs). Writes at most len bytes. */
gshmem_result_t gshmem_unique_id_describe(const gshmem_unique_id_t* id, char* out, size_t len);

/* ---------------------------------------------------------------------------------------------
 * Comm
 * -------------------------------------------------------------------------------------------*/
typedef struct gshmem_comm* gshmem_comm_t;

/* Collective over `nranks` PEs. Connects to the rendezvous in `id`, authenticates with its
 * secret, finds PEs on the same host, reserves the symmetric heap's address space on CUDA device
 * `device` (an ordinal as seen by this process), maps every load/store-reachable peer's heap,
 * and allocates the initial chunk. On failure nothing is left behind (no sockets, fds,
 * mappings or address reservations). */
gshmem_result_t gshmem_comm_init(gshmem_comm_t* comm, const gshmem_unique_id_t* id, int rank,
                                 int nranks, int device);

/* Collective. Waits for this device's work and for the proxy path's pending operations, then for
 * all PEs, then releases the heap and all connections. Allocations still live are released too.
 * The handle is invalid afterwards. */
gshmem_result_t gshmem_comm_finalize(gshmem_comm_t comm);

/* Not collective. Makes every bounded device wait of this comm give up and every on-stream wait
 * go on (their results are undefined), then releases everything this PE holds without waiting
 * for this device's queued work (kernels that later touch the heap fail: synchronize first where
 * that matters) or for the others (for error paths: peers will see this PE disappear and fail
 * their next call with a clear error). */
gshmem_result_t gshmem_comm_abort(gshmem_comm_t comm);

/* Not collective, not blocking (one load from host memory). GSHMEM_ERROR_FAULT, with a message
 * naming the PE and the wait, once a peer on this host died (the comm's watchdog) or a bounded
 * device wait gave up (GSHMEM_TIMEOUT); GSHMEM_SUCCESS otherwise. Every other call but abort
 * makes the same check first, so a failed comm fails every call; only abort is left to do. */
gshmem_result_t gshmem_comm_check(gshmem_comm_t comm);

typedef struct {
  int rank;        /* this PE */
  int nranks;      /* PEs in the comm */
  int local_rank;  /* index among the PEs on this host */
  int local_size;  /* PEs on this host */
  int device;      /* CUDA device ordinal of this PE */
  uint64_t heap_reserved; /* bytes of address space reserved for this PE's heap */
  uint64_t heap_mapped;   /* bytes of physical memory currently backing this PE's heap */
  uint64_t heap_in_use;   /* bytes currently allocated (including alignment padding) */
  void* heap_base;        /* this PE's heap base address */
} gshmem_comm_info_t;

/* Not collective, not blocking: this PE's ranks, device and heap usage. */
gshmem_result_t gshmem_comm_info(gshmem_comm_t comm, gshmem_comm_info_t* info);

/* Collective host barrier over the bootstrap network (does not order GPU work, nor complete
 * the proxy path's operations that kernels left to a later quiet(dev)). */
gshmem_result_t gshmem_barrier_host(gshmem_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Symmetric heap. malloc, calloc and free are collective and must be made in the same order with
 * the same sizes on every PE; they then return the same offset on every PE (gshmem_ptr is local).
 * malloc meets the other PEs only through the GSHMEM_CHECK_ALLOC comparison and when the heap
 * grows; it does not wait for GPU work. When GSHMEM_CHECK_ALLOC is on (the default) a hash of
 * the allocation sequence is compared across PEs at each call and a mismatch fails with
 * GSHMEM_ERROR_HEAP naming the PEs that differ.
 * The heap grows on demand: earlier allocations stay valid at the same addresses.
 * -------------------------------------------------------------------------------------------*/

/* size > 0; alignment 0 means 256; otherwise a power of two. Memory is not initialised. */
gshmem_result_t gshmem_malloc(gshmem_comm_t comm, size_t size, size_t alignment, void** ptr);

/* Like gshmem_malloc, then zero-filled: waits for all of this device's work (not just the
 * memset), then for every PE; returns once every PE's copy is zero. */
gshmem_result_t gshmem_calloc(gshmem_comm_t comm, size_t size, size_t alignment, void** ptr);

/* Collective. Waits for this device's outstanding work, then for all PEs, then returns the block
 * to the allocator. ptr must be a value returned by gshmem_malloc/calloc on this comm. */
gshmem_result_t gshmem_free(gshmem_comm_t comm, void* ptr);

/* Not collective. The address of symmetric object `ptr` in PE `pe`'s heap as seen by this PE's
 * device, or NULL in *peer_ptr when `pe` is not load/store-reachable. ptr must lie in the heap. */
gshmem_result_t gshmem_ptr(gshmem_comm_t comm, const void* ptr, int pe, void** peer_ptr);

/* =============================================================================================
 * Device API state and teams (include/gshmem/device.cuh, docs/device-api.md)
 *
 * Kernels take a gshmem_device_t (C++: gshmem::Device) by value; teams are gshmem_team_t values
 * (strided sets of world PEs) passed the same way. None of these calls is collective: the
 * runtime's symmetric sync memory was allocated when the comm was created, and teams own no
 * memory, so making a team is local arithmetic. Team PE numbers: team->my_pe is this PE's
 * index (-1 when not a member), team->size the number of PEs; device_state.h has the inline
 * translations gshmem_team_world_pe / gshmem_team_pe_of / gshmem_team_translate.
 * ===========================================================================================*/
#include "device_state.h"

/* Fills *dev with what kernels need to reach every load/store-reachable PE. The values stay
 * valid until the comm is finalized or aborted (the heap never moves as it grows). */
gshmem_result_t gshmem_comm_device(gshmem_comm_t comm, gshmem_device_t* dev);

/* Every PE of the comm. */
gshmem_result_t gshmem_team_world(gshmem_comm_t comm, gshmem_team_t* team);

/* The PEs this PE reaches by loads and stores (on this host, P2P enabled). Fails with
 * GSHMEM_ERROR_USAGE when they are not evenly strided in the world (unusual launcher layouts). */
gshmem_result_t gshmem_team_node(gshmem_comm_t comm, gshmem_team_t* team);

/* PEs start, start + stride, ..., start + (size - 1) * stride of `parent` (parent numbering;
 * size >= 1, stride >= 1, all inside the parent). The calling PE must be a member of `parent`;
 * child->my_pe is -1 when it is not in the child. */
gshmem_result_t gshmem_team_split_strided(const gshmem_team_t* parent, int start, int stride,
                                          int size, gshmem_team_t* child);

/* Splits `parent` into rows of `xrange` PEs (clamped to the parent size; the last row may be
 * shorter): *xteam is the calling PE's row (consecutive parent PEs), *yteam its column (parent
 * stride xrange). The calling PE must be a member of `parent`. */
gshmem_result_t gshmem_team_split_2d(const gshmem_team_t* parent, int xrange, gshmem_team_t* xteam,
                                     gshmem_team_t* yteam);

/* *dst_pe = index in `dst` of PE `src_pe` of `src`, or -1 when it is not a member of `dst`. */
gshmem_result_t gshmem_team_translate_pe(const gshmem_team_t* src, int src_pe,
                                         const gshmem_team_t* dst, int* dst_pe);

/* =============================================================================================
 * Windows (docs/windows.md): memory every PE registers, sizes free per PE, with numbered signals
 * and counters in independent contexts; kernels use a gshmem_window_t through
 * gshmem/device/window.cuh (WindowContext: put with SignalAdd / CounterInc, flush, wait_signal).
 * ===========================================================================================*/
typedef struct gshmem_window_handle* gshmem_window_handle_t;

/* Collective over the comm's world: every PE passes its own [ptr, ptr + bytes) of this comm's
 * GPU (symmetric-heap memory, or any cudaMalloc'd memory that CUDA IPC can share) and the same
 * contexts (>= 1), signals and counters per context. Blocking. Fails with GSHMEM_ERROR_USAGE on
 * every PE when any PE's buffer cannot be shared, the counts differ, or a peer is beyond
 * load/store reach while the comm has no proxy path (with one, the window is also registered
 * with its network engine: docs/windows.md). The comm owns the window. */
gshmem_result_t gshmem_window_register(gshmem_comm_t comm, void* ptr, size_t bytes, int contexts,
                                       int signals, int counters, gshmem_window_handle_t* win);
/* The by-value state kernels take; valid until the window is deregistered or the comm ends. */
gshmem_result_t gshmem_window_device(gshmem_window_handle_t win, gshmem_window_t* state);
/* Collective: waits for this GPU's work and for every PE (no PE may still use the window), then
 * releases it. */
gshmem_result_t gshmem_window_deregister(gshmem_comm_t comm, gshmem_window_handle_t win);

/* =============================================================================================
 * On-stream operations (host-initiated, docs/on-stream.md)
 *
 * The host enqueues one-sided operations on a CUDA stream; they run in that stream's order, on
 * this comm's GPU, when the stream reaches them. `stream` is a cudaStream_t passed as void*
 * (NULL = the legacy default stream); it must belong to this comm's device.
 *
 *   - Non-blocking for the host: no call waits for the GPU or for another PE (barrier included:
 *     only the GPU waits). Arguments are checked on the host when the call is made.
 *   - Capturable: every call may be made while `stream` is being captured into a CUDA graph; the
 *     graph is correct on every replay (no host-side state is baked into it that replays would
 *     have to update).
 *   - Reach: `pe` must be load/store-reachable (same host, P2P on) or on this comm's proxy path
 *     (docs/network.md); other PEs fail with GSHMEM_ERROR_USAGE.
 *   - Symmetric pointers (dst_sym, src_sym, sig_sym) lie, with all their bytes, in this comm's
 *     mapped heap; local pointers (src of put, dst of get) are device memory this GPU can
 *     address.
 *   - SMs: put, get and put_signal move data with the copy engines (zero SMs), except messages of
 *     at most GSHMEM_STREAM_KERNEL_MAX_BYTES (default 16 KiB, where measured faster; 0: none),
 *     which a one-block kernel copies. signal SET and waits EQ/GE/GT (values below 2^63) use
 *     stream memory operations (zero SMs; a one-thread kernel on GPUs without 64-bit ones);
 *     signal ADD, the other waits and the barrier run a one-block kernel (at most 32 threads).
 *     quiet enqueues nothing.
 *
 * Completion: an operation is complete, and its writes visible to this GPU's later stream work,
 * when the stream has passed it. To make data visible to another PE, follow it with a signal
 * (put_signal, signal_op) that the PE waits for, or with a barrier on both sides.
 * ===========================================================================================*/

/* Signal updates: *sig = value, or *sig += value (atomically). */
#define GSHMEM_SIGNAL_SET 0
#define GSHMEM_SIGNAL_ADD 1

/* Wait comparisons: wait until (*sig <cmp> value), unsigned 64-bit. */
#define GSHMEM_CMP_EQ 0
#define GSHMEM_CMP_NE 1
#define GSHMEM_CMP_GT 2
#define GSHMEM_CMP_GE 3
#define GSHMEM_CMP_LT 4
#define GSHMEM_CMP_LE 5

/* Copies `bytes` from local device memory `src` to PE `pe`'s copy of symmetric `dst_sym`.
 * bytes == 0 enqueues nothing. */
gshmem_result_t gshmem_put_on_stream(gshmem_comm_t comm, void* dst_sym, const void* src,
                                     size_t bytes, int pe, void* stream);

/* Copies `height` rows of `width` bytes from local device memory `src` (row i at src + i *
 * src_pitch) to PE `pe`'s copy of symmetric `dst_sym` (row i at dst_sym + i * dst_pitch): one
 * 2-D copy-engine copy (zero SMs, any size), for strided views such as a slice of the heads of a
 * [batch, heads, seq, dim] tensor. Pitches are at least `width`; width or height 0 enqueues
 * nothing. Completion and visibility as put_on_stream. To a PE on the proxy path each row is one
 * put_on_stream. */
gshmem_result_t gshmem_put_2d_on_stream(gshmem_comm_t comm, void* dst_sym, size_t dst_pitch,
                                        const void* src, size_t src_pitch, size_t width,
                                        size_t height, int pe, void* stream);

/* Copies `bytes` from PE `pe`'s copy of symmetric `src_sym` to local device memory `dst`. */
gshmem_result_t gshmem_get_on_stream(gshmem_comm_t comm, void* dst, const void* src_sym,
                                     size_t bytes, int pe, void* stream);

/* put, then updates PE `pe`'s copy of signal `sig_sym` (8-byte aligned, symmetric) with `op`
 * (GSHMEM_SIGNAL_SET/ADD) and `value`. Every byte of the put is visible on `pe` before the new
 * signal value is: a waiter that sees the signal sees the data. bytes may be 0 (signal only). */
gshmem_result_t gshmem_put_signal_on_stream(gshmem_comm_t comm, void* dst_sym, const void* src,
                                            size_t bytes, uint64_t* sig_sym, uint64_t value,
                                            int op, int pe, void* stream);

/* Updates PE `pe`'s copy of `sig_sym` after everything earlier on the stream is complete and
 * visible to `pe` (the update has release semantics at system scope). */
gshmem_result_t gshmem_signal_op_on_stream(gshmem_comm_t comm, uint64_t* sig_sym, uint64_t value,
                                           int op, int pe, void* stream);

/* Later work on the stream starts only once this PE's copy of `sig_sym` satisfies
 * (*sig_sym <cmp> value), and then sees everything the PE that made it so wrote before its
 * signal update. Comparisons that can never hold (GT UINT64_MAX, LT 0) are usage errors.
 * EQ, and GE/GT with value below 2^63, are stream memory operations, which compare GE
 * cyclically: (int64_t)(*sig_sym - value) >= 0; this is the unsigned comparison whenever the
 * signal itself stays below 2^63 (counters and flags do). The other cases poll in a kernel with
 * exact unsigned comparison. */
gshmem_result_t gshmem_signal_wait_until_on_stream(gshmem_comm_t comm, uint64_t* sig_sym, int cmp,
                                                   uint64_t value, void* stream);

/* OpenSHMEM quiet: every operation enqueued earlier on the stream is complete and visible to all
 * PEs before anything enqueued later runs. Stream order already guarantees it for every
 * operation above (docs/on-stream.md says why), so this checks its arguments and enqueues
 * nothing. */
gshmem_result_t gshmem_quiet_on_stream(gshmem_comm_t comm, void* stream);

/* Collective over all PEs (every PE load/store-reachable), enqueued in the same order on every
 * PE: later work on the stream starts once every PE's stream has reached its barrier, and then
 * sees every write that any PE's stream made before it. On one PE, stream barriers must not run
 * concurrently (two streams without an order between them): they share one set of counters,
 * separate from the device API's barriers. */
gshmem_result_t gshmem_barrier_on_stream(gshmem_comm_t comm, void* stream);

/* ---------------------------------------------------------------------------------------------
 * Collectives on a stream (docs/collectives.md). Every call is collective over `team` (NULL =
 * every PE): each member makes the same call with the same count, dtype, op and root, in the same
 * order relative to its other collectives on that team. The calls enqueue on `stream` and return
 * at once; the result is in `out` when the stream reaches that point. `in` and `out` may be
 * symmetric or ordinary device memory of this comm's GPU. Ordinary memory is staged through the
 * heap scratch the comm allocates at init; a symmetric `out` is written directly by large
 * all_gather / broadcast / all_to_all and by two-shot all_reduce, which also reads a symmetric
 * `in` in place (every member must then pass the same symmetric objects: the paths differ). Each
 * call chooses gshmem's own algorithm or NCCL (gshmem_coll_explain says which and why;
 * GSHMEM_COLL_BACKEND and per-operation variables override it). A team with a member beyond
 * load/store reach takes NCCL where it is enabled; else, on a comm with a proxy path, all_gather,
 * broadcast and all_to_all into a symmetric `out` (not `in`) run as puts straight into the
 * members' `out`, and all_reduce and reduce_scatter as puts staged through slots of the comm's,
 * through the proxy to such members ("exchange"); anything else is a usage error saying what
 * would run it. Capturable in CUDA graphs.
 * -------------------------------------------------------------------------------------------*/
typedef enum {
  GSHMEM_FLOAT32 = 0,
  GSHMEM_BFLOAT16 = 1,
  GSHMEM_FLOAT16 = 2,
  GSHMEM_INT32 = 3,
  GSHMEM_INT64 = 4,
} gshmem_dtype_t;

typedef enum { GSHMEM_SUM = 0, GSHMEM_PROD = 1, GSHMEM_MIN = 2, GSHMEM_MAX = 3 } gshmem_redop_t;

typedef enum {
  GSHMEM_COLL_ALL_REDUCE = 0,
  GSHMEM_COLL_ALL_GATHER = 1,
  GSHMEM_COLL_REDUCE_SCATTER = 2,
  GSHMEM_COLL_BROADCAST = 3,
  GSHMEM_COLL_ALL_TO_ALL = 4,
  GSHMEM_COLL_ALL_TO_ALLV = 5,
  GSHMEM_COLL_BARRIER = 6,
} gshmem_coll_t;

/* out[i] = op over members of in[i], i < count. in == out is allowed (in place). */
gshmem_result_t gshmem_all_reduce_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                            const void* in, void* out, size_t count,
                                            gshmem_dtype_t dtype, gshmem_redop_t op,
                                            void* stream);
/* out[m * count + i] = member m's in[i]. */
gshmem_result_t gshmem_all_gather_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                            const void* in, void* out, size_t count,
                                            gshmem_dtype_t dtype, void* stream);
/* out[i] = op over members of in[my_pe * count + i], i < count (in holds size * count). */
gshmem_result_t gshmem_reduce_scatter_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                                const void* in, void* out, size_t count,
                                                gshmem_dtype_t dtype, gshmem_redop_t op,
                                                void* stream);
/* out[i] = team member `root`'s in[i]; `in` is read on the root only. */
gshmem_result_t gshmem_broadcast_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                           const void* in, void* out, size_t count,
                                           gshmem_dtype_t dtype, int root, void* stream);
/* out[m * count + i] = member m's in[my_pe * count + i]. */
gshmem_result_t gshmem_all_to_all_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                            const void* in, void* out, size_t count,
                                            gshmem_dtype_t dtype, void* stream);
/* Element counts and displacements per member (host arrays of team size): member m receives
 * send_counts[m] elements from in + send_displs[m], placed at its out + recv_displs[me]; each
 * member's recv_counts must match what the others send it. */
gshmem_result_t gshmem_all_to_allv_on_stream(gshmem_comm_t comm, const gshmem_team_t* team,
                                             const void* in, const size_t* send_counts,
                                             const size_t* send_displs, void* out,
                                             const size_t* recv_counts,
                                             const size_t* recv_displs, gshmem_dtype_t dtype,
                                             void* stream);

/* Point to point (jax.lax.ppermute's step): this PE sends `bytes` of `in` to world PE `dst_pe`
 * and receives `bytes` from world PE `src_pe` into `out`; -1 for none (nothing received leaves
 * zeros in `out`); dst_pe == src_pe == this PE copies. The n-th call in which p sends to q pairs
 * with the n-th in which q receives from p: every PE makes its permutes in one order, as an SPMD
 * program does, and a PE's permutes are ordered among themselves (one stream, or stream
 * dependencies). One kernel storing into the receiver, bounded waits: below
 * GSHMEM_PERMUTE_BULK_MIN bytes (default 512 KiB) LL packets (a small message costs one NVLink
 * crossing, no signal), from it plain stores with a fence and a flag per chunk (docs/collectives.md
 * gives the rates); or, when `out` is a symmetric object (the same on every PE), not `in`, and at
 * least GSHMEM_PERMUTE_COPY_MIN bytes (default 16 MiB), a copy-engine put straight into the
 * receiver's `out` between two on-stream flag handshakes (zero SMs). On a
 * comm with a proxy path (peers on other hosts) every permute into a symmetric `out`, not `in`,
 * takes the handshake path at any size, through the proxy to such peers; one to or from a PE on
 * the proxy path with any other `out` is a usage error. Enqueued on `stream`; capturable in CUDA
 * graphs. */
gshmem_result_t gshmem_permute_on_stream(gshmem_comm_t comm, const void* in, void* out,
                                         size_t bytes, int dst_pe, int src_pe, void* stream);

/* Collective over the comm: loads NCCL at run time (dlopen; never required) and creates its
 * communicator through this comm's bootstrap, so later collectives may choose it. Fails with
 * GSHMEM_ERROR_USAGE saying why when NCCL cannot be loaded; gshmem's own algorithms keep working.
 */
gshmem_result_t gshmem_comm_enable_nccl(gshmem_comm_t comm);

/* Not collective. Writes to `out` (at most len bytes, NUL-terminated) the backend and algorithm
 * that a collective of `op` with `bytes` per PE over `npes` PEs would use on this comm, and why.
 * `symmetric`: GSHMEM_EXPLAIN_OUT_SYMMETRIC when the call's output is a symmetric heap object
 * (not `in`, for all_to_all: large calls whose output is staged through the heap switch to NCCL
 * sooner), or'ed with GSHMEM_EXPLAIN_IN_SYMMETRIC when its input is one too (a two-shot
 * all_reduce then reads the inputs in place: "two_shot pull"); other bits are a usage error. */
#define GSHMEM_EXPLAIN_OUT_SYMMETRIC 1
#define GSHMEM_EXPLAIN_IN_SYMMETRIC 2
gshmem_result_t gshmem_coll_explain(gshmem_comm_t comm, gshmem_coll_t op, size_t bytes, int npes,
                                    int symmetric, char* out, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* GSHMEM_GSHMEM_H */

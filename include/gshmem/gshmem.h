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
  GSHMEM_ERROR_TIMEOUT = 3,   /* a wait exceeded GSHMEM_TIMEOUT; the message names the missing PEs */
  GSHMEM_ERROR_HEAP = 4,      /* heap exhausted, or PEs allocated differently */
  GSHMEM_ERROR_CUDA = 5,      /* a CUDA call failed (no GPU, driver too old, out of memory...) */
  GSHMEM_ERROR_SYSTEM = 6,    /* an operating-system call failed */
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
 * GSHMEM_BOOTSTRAP_ADDR, else this host's first non-loopback IPv4 address) and `port` (0 lets
 * the OS choose). With listen != 0 the calling process opens the rendezvous socket now and the
 * rank-0 comm created later in this process adopts it (no port race). With listen == 0 only a
 * port number is reserved on paper: the rank-0 comm binds it when it is created (used by
 * launchers that hand the id to child processes). Not collective. */
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

/* Collective. Waits for all PEs, then releases the heap and all connections. Allocations still
 * live are released too. The handle is invalid afterwards. */
gshmem_result_t gshmem_comm_finalize(gshmem_comm_t comm);

/* Not collective. Releases everything this PE holds without waiting for the others (for error
 * paths: peers will see this PE disappear and fail their next collective with a clear error). */
gshmem_result_t gshmem_comm_abort(gshmem_comm_t comm);

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

gshmem_result_t gshmem_comm_info(gshmem_comm_t comm, gshmem_comm_info_t* info);

/* Collective host barrier over the bootstrap network (does not order GPU work). */
gshmem_result_t gshmem_barrier_host(gshmem_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Symmetric heap. All four calls are collective and must be made in the same order with the same
 * sizes on every PE; they then return the same offset on every PE. When GSHMEM_CHECK_ALLOC is on
 * (the default) a hash of the allocation sequence is compared across PEs at each call and a
 * mismatch fails with GSHMEM_ERROR_HEAP naming the PEs that differ.
 * The heap grows on demand: earlier allocations stay valid at the same addresses.
 * -------------------------------------------------------------------------------------------*/

/* size > 0; alignment 0 means 256; otherwise a power of two. Memory is not initialised. */
gshmem_result_t gshmem_malloc(gshmem_comm_t comm, size_t size, size_t alignment, void** ptr);

/* Like gshmem_malloc, then zero-filled; returns once every PE's copy is zero. */
gshmem_result_t gshmem_calloc(gshmem_comm_t comm, size_t size, size_t alignment, void** ptr);

/* Waits for this device's outstanding work, then for all PEs, then returns the block to the
 * allocator. ptr must be a value returned by gshmem_malloc/calloc on this comm. */
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

#ifdef __cplusplus
}
#endif

#endif /* GSHMEM_GSHMEM_H */

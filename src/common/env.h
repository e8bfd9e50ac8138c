// Run-time settings read from the environment. Each getter re-reads the variable, so tests and
// users can change settings between inits; values are validated and a bad one is a usage error.
#pragma once

#include <cstdint>
#include <string>

namespace gshmem::env {

// GSHMEM_TIMEOUT: seconds any host-side wait may take before failing (default 120).
double timeout_seconds();
// GSHMEM_WATCHDOG (default on): whether each comm runs its watchdog thread (core/watchdog.h).
bool watchdog();
// GSHMEM_CHECK_ALLOC: compare the allocation sequence across PEs at each heap call (default 1).
bool check_alloc();
// GSHMEM_DISABLE_P2P: treat no peer as load/store-reachable, even on the same host (default 0).
bool disable_p2p();
// GSHMEM_TRANSPORT: how a PE reaches peers that loads and stores do not (docs/network.md).
enum class Transport {
  kAuto,   // load/store where possible, the proxy for the rest when UCX loads (default)
  kP2p,    // load/store only: other peers are unreachable
  kProxy,  // the proxy for every other PE, even on this host (tests, comparisons)
};
Transport transport();
// GSHMEM_PROXY_QUEUE: descriptors in a comm's proxy queue (a power of two, default 1024).
uint64_t proxy_queue();
// GSHMEM_PROXY_STAGING: the proxy path stages GPU memory through pinned host chunks
// (src/proxy/staging.h; default 0: UCX moves GPU memory itself).
bool proxy_staging();
// GSHMEM_PROXY_BULK_MIN: transfers of at least this many bytes travel as rendezvous messages
// (1: every transfer); GSHMEM_PROXY_PART: larger ones in parts of at most this many bytes. Both
// positive; the defaults are the engine's (src/proxy/net_engine.h).
uint64_t proxy_bulk_min(uint64_t fallback);
uint64_t proxy_part(uint64_t fallback);
// GSHMEM_PROXY_LOCAL_SHM: the proxy path reaches PEs on this host without UCX's error handling,
// so UCX may take shared memory and CUDA IPC, and watches their processes itself (default 1;
// 0: UCX's peer-failure mode for them too; src/proxy/net_engine.h).
bool proxy_local_shm();
// GSHMEM_HEAP_RESERVE: bytes of address space per PE heap (default: the device's memory).
uint64_t heap_reserve(uint64_t fallback);
// GSHMEM_HEAP_INITIAL: bytes mapped at init (default 64 MiB).
uint64_t heap_initial();
// GSHMEM_HEAP_GROW: least number of bytes added when the heap grows (default 256 MiB).
uint64_t heap_grow();
// GSHMEM_BOOTSTRAP_ADDR: address advertised by unique ids created without one ("" if unset).
std::string bootstrap_addr();
// GSHMEM_DEBUG: log what the runtime decides, to stderr (default 0).
bool debug();

// Parses sizes such as "4096", "64M", "1.5G", "2GiB". Throws a usage error naming `what`.
uint64_t parse_size(const std::string& text, const char* what);

}  // namespace gshmem::env

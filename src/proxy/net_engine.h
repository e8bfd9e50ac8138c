// The network engine behind the proxy path: one-sided put, get, signals and atomics into memory
// regions that every rank registered, over an existing engine (UCX). Calls are serialised by
// the engine (the proxy thread and the comm's registration may overlap).
//
// Ordering and completion, as UCX gives them:
//   - operations to one peer may complete in any order; fence() orders every operation issued
//     before it before every one issued after it (put, fence, signal add). On UCX a fence is a
//     flush: UCX's own fence does not order an active message (a signal) behind a put;
//   - a signal update (add or set) travels as a UCX active message and the target's engine
//     applies it when it progresses (its proxy thread always does): network atomics on arbitrary
//     memory are not available on every transport (TCP, shared memory), messages are. The
//     target applies it through its signal sink: by default a CPU atomic (signal words in host
//     memory); a comm whose signal words are GPU memory installs a sink that updates them on its
//     GPU (src/proxy/gpu_sink.h);
//   - an atomic travels as an active message too, for the same reason; the target applies it
//     through its atomic sink (CPU atomics on host memory by default; a kernel for GPU memory)
//     and answers with the old value, so an atomic is complete once its answer is back;
//   - a put may carry a signal, applied at the target once the put's data is there (for the
//     small-message path: put, then the signal sent by progress() once a flush of that peer
//     finished, the caller not waiting for it; for bulk: one message, no fence);
//   - a put's `done` callback runs once the source buffer may be reused (local completion), a
//     get's once the data is in the local buffer;
//   - puts and gets of at least `bulk_bytes` (make_ucx_engine) travel as rendezvous active
//     messages that the target receives into the region itself, so UCX may choose a zero-copy
//     protocol for them (CUDA IPC, RDMA) where its one-sided put/get into GPU memory would be a
//     software emulation; larger than `part_bytes`, as several such messages. The target
//     acknowledges each bulk put once all its data landed and its signal went to the sink;
//     fence() and flush() wait for those acks;
//   - flush() returns once every operation issued so far is complete at its target.
// Every wait is bounded by the engine's timeout; a failed peer is named in the error.
//
// Peers on this host (same host and PID namespace) are reached with UCX's error handling off
// when `local_shared_memory` (make_ucx_engine) is on, the default: UCX then may take its
// shared-memory transports (sysv, posix, cma) and CUDA IPC, which cannot report a dead peer, so
// the engine watches those peers' processes through /proc itself. With it off, or for peers on
// other hosts, UCX's peer-failure mode names a dead peer, at the price of transports that
// support it: on one host that left every active message on TCP loopback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gshmem/proxy_queue.h"

namespace gshmem {
class Bootstrap;
}

namespace gshmem::proxy {

class Staging;

// Called from progress() (or from put()/get() when it completed at once) with the call's `tag`.
using Done = void (*)(void* arg, uint64_t tag);

enum class SignalUpdate : uint8_t { kAdd = 0, kSet = 1 };

// A signal a put carries: `value` added to (or stored in) the 8-byte aligned word at `offset`
// of the target's `region`, once the put's data is there.
struct SignalAfter {
  int region;
  uint64_t offset;
  uint64_t value;
  SignalUpdate update;
};

// Applies a signal that arrived for `word` (8-byte aligned, inside a region of this rank).
// Called on the target inside progress(), with the engine's lock held: it must not call the
// engine. Throwing stops the engine's caller with that error.
using SignalSink = void (*)(void* arg, uint64_t* word, uint64_t value, SignalUpdate update);

// An atomic on a 4- or 8-byte word (gshmem/proxy_queue.h: AmoOp, AmoType); `compare` only for
// kCompareSwap. Values are bit patterns in the low bytes.
struct Atomic {
  AmoOp op;
  AmoType type;
  uint64_t operand;
  uint64_t compare;
};

// Called with an atomic's old value once the target applied it.
using Fetched = void (*)(void* arg, uint64_t tag, uint64_t old);

// A signal an atomic sink applies right after an atomic (a value put's signal): `value` added
// to (or stored in) `word`, 8-byte aligned, with release order after the atomic.
struct SignalWord {
  uint64_t* word;
  uint64_t value;
  SignalUpdate update;
};

// Applies atomics that arrive for this rank's memory. Called on the target inside progress(),
// with the engine's lock held: it must not call the engine; throwing stops the engine's caller.
class AtomicSink {
 public:
  virtual ~AtomicSink() = default;
  // Whether start() must wait until an earlier atomic is done (the sink's limit of atomics in
  // flight); the engine keeps later arrivals meanwhile.
  virtual bool full() const { return false; }
  // Starts `a` on `word` (aligned to its width, inside a region of this rank) unless full(),
  // then `then` (when not null) after it; returns an id for done(). Atomics of one sink are
  // applied in the order they are started.
  virtual uint64_t start(void* word, const Atomic& a, const SignalWord* then) = 0;
  // Starts copying `bytes` (at most kInlineBytes) from `data`, which need not outlive the call,
  // to `dst` (inside a region of this rank) unless full(), then `then` (when not null) after it;
  // in order with the atomics, and done() like theirs (old: 0).
  virtual uint64_t start_write(void* dst, const void* data, size_t bytes,
                               const SignalWord* then) = 0;
  // Whether atomic `id` was applied; if so its old value is in *old and the id is spent. Asked
  // in the order the atomics were started.
  virtual bool done(uint64_t id, uint64_t* old) = 0;
};

class NetEngine {
 public:
  virtual ~NetEngine() = default;

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  virtual const char* name() const = 0;

  // Collective: registers [base, base + bytes) of this rank (sizes may differ per rank; 0 is
  // allowed and makes the rank's region unreachable) and learns every other rank's. Returns
  // the region's id, the same on every rank. Memory may be host or GPU memory.
  virtual int register_region(void* base, size_t bytes) = 0;
  // Collective: forgets a region everywhere. Operations on it must be flushed first.
  virtual void deregister_region(int region) = 0;
  // Collective: returns once every rank entered; this rank's engine keeps progressing meanwhile
  // (the signals of its small puts went out before it waits).
  virtual void barrier() = 0;
  // The bytes rank `pe` registered for `region`.
  virtual size_t region_bytes(int region, int pe) const = 0;

  // Non-blocking. Copies `bytes` from local `src` to `offset` of `pe`'s `region`; then, when
  // `signal` is not null, applies it at the target once the data is there.
  virtual void put(int pe, const void* src, size_t bytes, int region, uint64_t offset,
                   Done done, void* arg, uint64_t tag, const SignalAfter* signal) = 0;
  // Non-blocking. Stores the low `bytes` (1, 2, 4 or 8) bytes of `value` at `offset` of `pe`'s
  // `region`, then applies `signal` there when not null; the engine keeps the value, so nothing
  // of the caller's must outlive the call. One message that the target's atomic sink applies
  // (4 or 8 bytes at an offset aligned to them as a swap, others as put_inline's bytes; then the
  // signal): no copy into the target's memory by the transport (for GPU memory a CUDA IPC copy,
  // or RDMA), no flush before the signal. Complete, for flush(), once the target applied it.
  virtual void put_value(int pe, int region, uint64_t offset, uint64_t value, size_t bytes,
                         Done done, void* arg, uint64_t tag, const SignalAfter* signal) = 0;
  // Non-blocking. Copies `bytes` (at most kInlineBytes, proxy_queue.h) from `data`, which need
  // not outlive the call (the engine keeps a copy), to `offset` of `pe`'s `region`, then applies
  // `signal` there when not null: one message that the target's atomic sink applies (a copy,
  // then the signal), no copy into the target's memory by the transport and no flush before the
  // signal. Complete, for flush(), once the target applied it.
  virtual void put_inline(int pe, int region, uint64_t offset, const void* data, size_t bytes,
                          Done done, void* arg, uint64_t tag, const SignalAfter* signal) = 0;
  // Non-blocking. Copies from `pe`'s region into local `dst`.
  virtual void get(int pe, void* dst, size_t bytes, int region, uint64_t offset, Done done,
                   void* arg, uint64_t tag) = 0;
  // Non-blocking. Adds `value` to (or stores it in) the 8-byte aligned word at `offset` of `pe`'s
  // `region`, once it arrives and `pe`'s engine progresses.
  virtual void signal(int pe, int region, uint64_t offset, uint64_t value,
                      SignalUpdate update) = 0;
  // Non-blocking. What fence() and then signal() give, without the caller waiting for the
  // fence: the signal goes out (from progress()) once everything issued before it, to every
  // peer, is complete; operations issued after it may complete first.
  virtual void fenced_signal(int pe, int region, uint64_t offset, uint64_t value,
                             SignalUpdate update) = 0;
  // Non-blocking. Applies `a` to the word at `offset` of `pe`'s `region` once it arrives and
  // `pe`'s engine progresses; `fetched` (when not null) then gets the old value. Complete, for
  // flush(), once the target applied it.
  virtual void atomic(int pe, int region, uint64_t offset, const Atomic& a, Fetched fetched,
                      void* arg, uint64_t tag) = 0;
  // How signals arriving at this rank are applied (default: a CPU atomic on host memory).
  // Set before the first region is registered.
  virtual void set_signal_sink(SignalSink sink, void* arg) = 0;
  // How atomics arriving at this rank are applied (null, the default: CPU atomics on host
  // memory). Set before the first region is registered; `sink` must outlive the engine.
  virtual void set_atomic_sink(AtomicSink* sink) = 0;
  // How GPU memory is moved (staging.h); null (the default): every buffer goes to UCX as it
  // is. Set before the first transfer; `staging` must outlive the engine.
  virtual void set_staging(Staging* staging) = 0;
  // Orders the operations issued before it before those issued after it (to each peer).
  virtual void fence() = 0;
  // Blocking: every operation issued so far is complete at its target (a signal add: delivered to
  // the target's engine); throws GSHMEM_ERROR_FAULT
  // naming the peer that failed, or GSHMEM_ERROR_TIMEOUT naming those that did not finish.
  virtual void flush() = 0;
  // Non-blocking flush: starts one over every operation issued so far and returns its token;
  // operations issued after it are not waited for. The caller drives progress().
  virtual uint64_t flush_start() = 0;
  // Whether flush `token` finished: every operation issued before its flush_start is complete
  // at its target (the token is then spent). Throws as flush() does, the timeout counted from
  // flush_start.
  virtual bool flushed(uint64_t token) = 0;
  // Advances outstanding operations; returns whether anything happened. Throws once a peer fails.
  virtual bool progress() = 0;
  // Whether anything is in flight (issued and not complete, or arriving here): a caller that
  // drives progress() should keep driving it rather than sleep, since over TCP the data moves
  // only while the worker progresses.
  virtual bool busy() const = 0;
};

// Puts and gets from this size up travel as rendezvous messages (above), so that UCX may pick a
// zero-copy protocol where its transports allow one: on one H100 under MPS it chose CUDA IPC
// and a block's put moved 59 GB/s at 4 MiB. Over TCP the one-sided put and the rendezvous are
// both a fragmented copy through host memory (~0.4 GB/s measured for either).
constexpr size_t kDefaultBulkBytes = size_t{64} << 10;

// A bulk transfer larger than this travels as several rendezvous messages of at most this size
// (the target counts them; a put's signal and ack follow the last to land). UCX 1.22 moves GPU
// memory between two GPUs of a host by CUDA IPC only up to 4 MiB per rendezvous: above that it
// chose TCP copy-in/copy-out, and an 8 MiB put through the proxy took 32 ms against 0.19 ms for
// 4 MiB (2 x H100, UCX_PROTO_INFO=y). Parts also let the transports pipeline one transfer.
constexpr size_t kDefaultPartBytes = size_t{4} << 20;

// Collective over `bs`: a UCX context and worker on this rank and endpoints to every other rank;
// `timeout` bounds every blocking call; transfers of at least `bulk_bytes` (> 0) are bulk, and
// go in parts of at most `part_bytes` (> 0; staged memory: in parts of one staging chunk);
// `local_shared_memory`: peers on this host without UCX's error handling (above).
// Throws GSHMEM_ERROR_SYSTEM when UCX cannot be loaded or this build has no UCX support.
std::unique_ptr<NetEngine> make_ucx_engine(Bootstrap& bs, double timeout,
                                           size_t bulk_bytes = kDefaultBulkBytes,
                                           size_t part_bytes = kDefaultPartBytes,
                                           bool local_shared_memory = true);
// Empty when make_ucx_engine can load UCX here; else why not. Local, cheap after the first call.
std::string ucx_unavailable();

}  // namespace gshmem::proxy

// Comm: one PE of a group. Owns its bootstrap connections, the local channel to PEs on the same
// host, and its symmetric heap. No global state: a process may hold any number of comms.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bootstrap/local_channel.h"
#include "bootstrap/tcp_bootstrap.h"
#include "bootstrap/unique_id.h"
#include "coll/coll_state.h"
#include "coll/nccl.h"
#include "common/env.h"
#include "core/device_state.h"
#include "core/fault.h"
#include "core/proxy_path.h"
#include "core/watchdog.h"
#include "core/window.h"
#include "heap/symmetric_heap.h"
#include "stream/stream_state.h"

namespace gshmem {

class Comm {
 public:
  // Collective (see gshmem_comm_init). Throws gshmem::Error; leaves nothing behind on failure.
  Comm(const UniqueId& id, int rank, int nranks, int device);
  ~Comm();  // releases without waiting for peers (as abort())
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Collective: waits for this device's work and for every PE, then releases everything.
  void finalize();
  // Makes every bounded device wait give up and every on-stream wait go on (their results are
  // undefined), then releases everything now, without waiting for anyone.
  void abort() noexcept;
  // Throws GSHMEM_ERROR_FAULT once a device wait gave up or a peer died (FaultState).
  void check_faults() const;
  // Records `reason` (unless empty) as this comm's fault, makes every bounded device wait give
  // up and every noted on-stream wait go on. Any thread (the watchdog calls it).
  void stop_waits(const std::string& reason) noexcept;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return static_cast<int>(local_ranks_.size()); }
  int device() const { return device_; }
  bool finalized() const { return heap_ == nullptr; }

  Bootstrap& bootstrap();
  FaultState& faults();
  SymmetricHeap& heap();
  DeviceState& device_state();
  stream::StreamState& stream_state();
  coll::CollState& coll_state();
  // The path to PEs beyond load/store reach (GSHMEM_TRANSPORT), else nullptr.
  ProxyPath* proxy() { return proxy_.get(); }
  // Whether PE `pe` (a valid world rank) is reached through the proxy path.
  bool via_proxy(int pe) const {
    return proxy_ != nullptr && pe != rank_ && heap_->local_index()[pe] < 0;
  }
  // The NCCL backend once gshmem_comm_enable_nccl succeeded, else nullptr.
  coll::NcclBackend* nccl() { return nccl_.get(); }
  void set_nccl(std::unique_ptr<coll::NcclBackend> nccl) { nccl_ = std::move(nccl); }

  // Collective (core/window.h): registers this PE's [ptr, ptr + bytes) as its part of a new
  // window the comm owns until deregister_window or the comm's end.
  Window& register_window(void* ptr, uint64_t bytes, int contexts, int signals, int counters);
  // Collective. GSHMEM_ERROR_USAGE when `window` is not a live window of this comm.
  void deregister_window(const Window* window);

 private:
  // Collective: the proxy path when every rank can load UCX; otherwise an error
  // (GSHMEM_TRANSPORT=proxy) or, under auto, peers beyond load/store reach stay unreachable.
  void open_proxy(env::Transport transport, double timeout);
  // The watchdog's check of the bootstrap's connections (`pids`: every PE's process id): the
  // fault message for a PE whose connection closed, or "". Rank 0 also announces it to the
  // other PEs, which are connected to it only.
  std::string lost_connection(const std::vector<int>& pids) noexcept;

  int rank_;
  int nranks_;
  int device_;
  int local_rank_ = 0;
  std::vector<int> local_ranks_;  // world ranks on this host, increasing
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<LocalChannel> channel_;
  std::unique_ptr<FaultState> faults_;  // before device_state_, which hands out its addresses
  std::unique_ptr<SymmetricHeap> heap_;
  std::unique_ptr<ProxyPath> proxy_;  // after heap_, which it registers: destroyed first
  std::unique_ptr<DeviceState> device_state_;  // after heap_: destroyed first
  std::unique_ptr<stream::StreamState> stream_state_;  // on-stream operations (src/stream/)
  std::unique_ptr<coll::CollState> coll_state_;  // gshmem's collectives (src/coll/)
  std::unique_ptr<coll::NcclBackend> nccl_;  // src/coll/nccl.h; released first in abort()
  std::vector<std::unique_ptr<Window>> windows_;  // before heap_, which holds their signals
  std::unique_ptr<Watchdog> watchdog_;       // last: it uses faults_ and stream_state_
};

}  // namespace gshmem

#include "core/comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/process.h"

namespace gshmem {
namespace {

// What each PE tells the others at init.
struct PeerInfo {
  ProcessPlace place;     // host (where fds and UDS work), pid: the watchdog's /proc checks
  uint64_t granularity;   // physical allocation granularity of this PE's GPU
  uint64_t reserve;       // heap bytes this PE asks to reserve
  int32_t error_code;     // GSHMEM_SUCCESS, or why this PE cannot take part
  int32_t p2p_disabled;
  char error[224];
};

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Checks this PE's GPU and fills the fields the heap needs. Throws gshmem::Error.
void probe_device(int device, PeerInfo& info) {
  int count = cuda::device_count();
  if (count == 0) {
    throw_error(GSHMEM_ERROR_CUDA,
                "no CUDA device is visible to this process (no GPU, no driver, or "
                "CUDA_VISIBLE_DEVICES is empty); gshmem needs one GPU per PE");
  }
  GSHMEM_REQUIRE(device >= 0 && device < count,
                 "device " + std::to_string(device) + " does not exist: this process sees " +
                     std::to_string(count) + " CUDA device(s)");
  const auto& d = cuda::driver();
  cuda::DeviceGuard guard(device);
  CUdevice dev{};
  cuda::check(d.device_get(&dev, device), "cuDeviceGet");
  int vmm = 0, fd_ok = 0;
  d.device_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  d.device_attribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  if (!vmm || !fd_ok) {
    throw_error(GSHMEM_ERROR_CUDA, "GPU " + std::to_string(device) +
                                       " does not support CUDA virtual memory management with "
                                       "file-descriptor export, which the symmetric heap needs");
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  cuda::check(d.mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
              "cuMemGetAllocationGranularity");
  size_t free_bytes = 0, total_bytes = 0;
  cuda::check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  info.granularity = gran;
  info.reserve = env::heap_reserve(round_up(total_bytes, 1ull << 30));
}

}  // namespace

Comm::Comm(const UniqueId& id, int rank, int nranks, int device)
    : rank_(rank), nranks_(nranks), device_(device) {
  const double timeout = env::timeout_seconds();
  const bool check_alloc = env::check_alloc();
  const uint64_t initial = env::heap_initial();
  const uint64_t grow = env::heap_grow();
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t) {
    return std::chrono::duration<double, std::milli>(clock::now() - t).count();
  };
  const auto t_start = clock::now();
  bootstrap_ = std::make_unique<Bootstrap>(id, rank, nranks, timeout);
  const double bootstrap_ms = ms_since(t_start);

  // Each PE checks its own GPU; then all learn whether everyone can go on, so that one PE's
  // problem becomes the same clear error on every PE instead of a timeout elsewhere.
  PeerInfo mine{};
  mine.place = this_process();
  mine.p2p_disabled = env::disable_p2p();
  try {
    probe_device(device, mine);
  } catch (const Error& e) {
    mine.error_code = e.code();
    std::snprintf(mine.error, sizeof mine.error, "%s", e.what());
  }
  std::vector<PeerInfo> all(nranks);
  bootstrap_->allgather(&mine, all.data(), sizeof mine);
  for (int r = 0; r < nranks; ++r) {
    if (all[r].error_code != GSHMEM_SUCCESS) {
      throw_error(static_cast<gshmem_result_t>(all[r].error_code),
                  "init failed on rank " + std::to_string(r) + ": " + all[r].error);
    }
  }

  const env::Transport transport = env::transport();
  bool p2p = transport != env::Transport::kProxy;
  uint64_t granularity = 0, reserve = 0;
  for (int r = 0; r < nranks; ++r) {
    if (all[r].place.host == mine.place.host) local_ranks_.push_back(r);
    p2p = p2p && !all[r].p2p_disabled;
    granularity = std::max<uint64_t>(granularity, all[r].granularity);
    reserve = std::max<uint64_t>(reserve, all[r].reserve);
  }
  local_rank_ = static_cast<int>(std::find(local_ranks_.begin(), local_ranks_.end(), rank) -
                                 local_ranks_.begin());

  HeapConfig config;
  config.device = device;
  config.granularity = granularity;
  config.slot_size = round_up(std::max(reserve, granularity), granularity);
  config.initial_bytes = std::min(round_up(initial, granularity), config.slot_size);
  config.grow_bytes = grow;
  config.check_sequence = check_alloc;
  config.local_index.assign(nranks, -1);
  if (p2p) {
    for (size_t i = 0; i < local_ranks_.size(); ++i) {
      config.local_index[local_ranks_[i]] = static_cast<int>(i);
    }
    channel_ = std::make_unique<LocalChannel>(*bootstrap_, local_ranks_, timeout);
  } else {
    config.local_index[rank] = 0;
  }
  const double setup_ms = ms_since(t_start) - bootstrap_ms;
  faults_ = std::make_unique<FaultState>(device);
  heap_ = std::make_unique<SymmetricHeap>(*bootstrap_, channel_.get(), std::move(config));
  // The same on every rank: either a single host with load/store between all PEs, or not.
  const int reachable = p2p ? local_size() : 1;
  if (transport != env::Transport::kP2p && reachable < nranks) open_proxy(transport, timeout);
  log_debug(rank, "comm ready: %d PEs, %d on this host (local rank %d), device %d, p2p %s, "
                  "heap reserve %llu MiB; bootstrap %.1f ms (includes waiting for the last "
                  "rank), device probe + local channel %.1f ms, total %.1f ms",
            nranks, local_size(), local_rank_, device, p2p ? "on" : "off",
            static_cast<unsigned long long>(heap_->reserved() >> 20), bootstrap_ms, setup_ms,
            ms_since(t_start));
  device_state_ = std::make_unique<DeviceState>(*this);
  stream_state_ = std::make_unique<stream::StreamState>(*this);
  coll_state_ = std::make_unique<coll::CollState>(*this);
  if (env::watchdog()) {
    std::vector<PeerProcess> peers;
    for (int r : local_ranks_) {
      if (r != rank && watchable(mine.place, all[r].place)) {
        peers.push_back({r, static_cast<int>(all[r].place.pid), all[r].place.start_time});
      }
    }
    std::vector<int> pids(nranks);
    for (int r = 0; r < nranks; ++r) pids[r] = static_cast<int>(all[r].place.pid);
    watchdog_ = std::make_unique<Watchdog>(
        std::move(peers), [this] { return faults_->failed(); },
        [this, pids] { return lost_connection(pids); },
        [this](const std::string& reason) { stop_waits(reason); },
        [this] {
          if (stream_state_) stream_state_->release_waits();
        },
        std::chrono::milliseconds(100));
  }
}

void Comm::open_proxy(env::Transport transport, double timeout) {
  // Every rank learns whether every rank can load UCX before any starts the (collective)
  // engine, so a rank without UCX is one clear error everywhere rather than a timeout.
  const std::string why = proxy::ucx_unavailable();
  int32_t ready = why.empty();
  std::vector<int32_t> all(nranks_);
  bootstrap_->allgather(&ready, all.data(), sizeof ready);
  std::string missing;
  for (int r = 0; r < nranks_; ++r) {
    if (!all[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (missing.empty()) {
    proxy_ = std::make_unique<ProxyPath>(*bootstrap_, *heap_, device_, env::proxy_queue(),
                                         timeout);
    return;
  }
  const std::string reason = "UCX cannot be used on rank(s) " + missing +
                             (why.empty() ? std::string() : " (here: " + why + ")");
  if (transport == env::Transport::kProxy) {
    throw_error(GSHMEM_ERROR_SYSTEM, "GSHMEM_TRANSPORT=proxy, but " + reason);
  }
  log_debug(rank_, "no proxy path: %s; PEs on other hosts are unreachable", reason.c_str());
}

Window& Comm::register_window(void* ptr, uint64_t bytes, int contexts, int signals,
                              int counters) {
  windows_.push_back(std::make_unique<Window>(*this, ptr, bytes, contexts, signals, counters));
  return *windows_.back();
}

void Comm::deregister_window(const Window* window) {
  for (auto it = windows_.begin(); it != windows_.end(); ++it) {
    if (it->get() != window) continue;
    (*it)->deregister();
    windows_.erase(it);
    return;
  }
  throw_error(GSHMEM_ERROR_USAGE, "deregister_window: not a live window of this comm");
}

std::string Comm::lost_connection(const std::vector<int>& pids) noexcept try {
  std::string notice;
  const int pe = bootstrap_->closed_peer(&notice);
  if (pe < 0) return "";
  if (!notice.empty()) return notice;  // rank 0's announcement: it names the PE
  const std::string message =
      "PE " + std::to_string(pe) + " (pid " + std::to_string(pids[pe]) +
      ") closed its bootstrap connection while this comm was in use: its process exited or "
      "aborted, or its host stopped answering. Every wait of this comm was stopped; it can only "
      "be aborted now.";
  if (rank_ == 0) bootstrap_->announce_failure(message);  // every other PE learns it from us
  return message;
} catch (...) {
  return "";  // cannot tell now; the next period asks again
}

void Comm::stop_waits(const std::string& reason) noexcept {
  if (!reason.empty()) faults_->record_host(reason);
  faults_->request_abort();
  if (stream_state_) stream_state_->release_waits();
}

void Comm::check_faults() const {
  if (faults_) faults_->check(rank_);
  if (proxy_) proxy_->check();
}

Comm::~Comm() { abort(); }

FaultState& Comm::faults() {
  GSHMEM_REQUIRE(faults_ != nullptr, "this comm has been finalized");
  return *faults_;
}

Bootstrap& Comm::bootstrap() {
  GSHMEM_REQUIRE(bootstrap_ != nullptr, "this comm has been finalized");
  return *bootstrap_;
}

SymmetricHeap& Comm::heap() {
  GSHMEM_REQUIRE(heap_ != nullptr, "this comm has been finalized");
  return *heap_;
}

DeviceState& Comm::device_state() {
  GSHMEM_REQUIRE(device_state_ != nullptr, "this comm has been finalized");
  return *device_state_;
}

stream::StreamState& Comm::stream_state() {
  GSHMEM_REQUIRE(stream_state_ != nullptr, "this comm has been finalized");
  return *stream_state_;
}

coll::CollState& Comm::coll_state() {
  GSHMEM_REQUIRE(coll_state_ != nullptr, "this comm has been finalized");
  return *coll_state_;
}

void Comm::finalize() {
  GSHMEM_REQUIRE(heap_ != nullptr, "this comm has already been finalized");
  try {
    {
      cuda::DeviceGuard guard(device_);
      cuda::check(cudaDeviceSynchronize(), "waiting for GPU work before finalize");
    }
    // What kernels sent through the proxy without a quiet of their own still arrives (a
    // put_signal_nbi's signal may be held by the engine until its data landed).
    if (proxy_) proxy_->quiet(env::timeout_seconds());
    // Peers close their connections once past this barrier: that is not a fault to report.
    watchdog_.reset();
    bootstrap_->barrier();  // no peer still reads or writes our memory
  } catch (...) {
    abort();
    throw;
  }
  abort();
}

void Comm::abort() noexcept {
  watchdog_.reset();
  if (faults_) stop_waits("");
  nccl_.reset();
  windows_.clear();
  coll_state_.reset();
  stream_state_.reset();
  device_state_.reset();
  proxy_.reset();
  heap_.reset();
  faults_.reset();
  if (channel_) channel_->close();
  channel_.reset();
  if (bootstrap_) bootstrap_->close();
  bootstrap_.reset();
}

}  // namespace gshmem

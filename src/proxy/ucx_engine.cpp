// NetEngine on UCX (ucp): one context and worker per engine, an endpoint to every other rank
// with peer-failure handling, regions registered with ucp_mem_map and their packed keys
// exchanged over the bootstrap. Compiled only when the build found UCX's headers.
#include <algorithm>
#include <cstring>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/tcp_bootstrap.h"
#include "common/error.h"
#include "proxy/net_engine.h"
#include "proxy/ucx_api.h"

namespace gshmem::proxy {
namespace {

// Every rank's blob (sizes may differ): the sizes first, then each blob padded to the largest.
std::vector<std::vector<uint8_t>> allgather_blobs(Bootstrap& bs, const void* mine, size_t bytes) {
  const int n = bs.nranks();
  std::vector<uint64_t> sizes(n);
  const uint64_t my_size = bytes;
  bs.allgather(&my_size, sizes.data(), sizeof my_size);
  uint64_t widest = 0;
  for (uint64_t s : sizes) widest = std::max(widest, s);
  std::vector<uint8_t> padded(widest, 0), all(widest * n);
  if (bytes > 0) std::memcpy(padded.data(), mine, bytes);
  bs.allgather(padded.data(), all.data(), widest);
  std::vector<std::vector<uint8_t>> out(n);
  for (int r = 0; r < n; ++r) {
    out[r].assign(all.begin() + r * widest, all.begin() + r * widest + sizes[r]);
  }
  return out;
}

struct PeerRegion {
  uint64_t base = 0;
  uint64_t bytes = 0;
  ucp_rkey_h rkey = nullptr;
};

constexpr size_t kRegionHeader = 2 * sizeof(uint64_t);  // base, bytes

struct Region {
  bool live = false;       // usable as a target
  bool accepting = false;  // this rank's part takes signals (set before the exchange ends)
  ucp_mem_h memh = nullptr;
  std::vector<PeerRegion> peers;  // index: rank (this rank's entry holds only base and bytes)
};

// A signal update as it travels: the target applies it in on_signal.
struct SignalMessage {
  uint64_t region;
  uint64_t offset;
  uint64_t value;
  uint64_t update;  // SignalUpdate
};

// The default sink: signal words in host memory.
void cpu_signal_sink(void*, uint64_t* word, uint64_t value, SignalUpdate update) {
  if (update == SignalUpdate::kSet) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
  } else {
    __atomic_fetch_add(word, value, __ATOMIC_RELEASE);
  }
}
constexpr unsigned kSignalMessage = 1;  // the active-message id

// An operation UCX has not finished yet: a put or get (with its completion callback), or a
// signal add.
struct Pending {
  void* request;
  int pe;
  Done done;
  void* arg;
  uint64_t tag;
};

class UcxEngine final : public NetEngine {
 public:
  UcxEngine(Bootstrap& bs, double timeout)
      : api_(ucx_api()), bs_(bs), timeout_(timeout), rank_(bs.rank()), nranks_(bs.nranks()) {
    try {
      open();
    } catch (...) {
      close();
      throw;
    }
  }
  ~UcxEngine() override { close(); }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const char* name() const override { return "ucx"; }

  // The bootstrap exchanges run without the lock: a peer's operations may need this rank's
  // progress (TCP emulates RMA with messages) while both wait for the slowest rank to arrive.
  int register_region(void* base, size_t bytes) override {
    std::unique_lock<std::mutex> lock(mu_);
    // The slot is taken (same id on every rank: registrations are collective, hence in the same
    // order) and accepts signals before the exchange, since a faster peer may signal into it as
    // soon as its own exchange returned.
    const int id = static_cast<int>(regions_.size());
    regions_.emplace_back();
    Region& fresh = regions_.back();
    fresh.peers.resize(nranks_);
    fresh.peers[rank_] = {reinterpret_cast<uint64_t>(base), bytes, nullptr};
    fresh.accepting = true;
    std::string failure;  // this rank's, for the message
    std::vector<uint8_t> blob = pack_region(fresh, base, bytes, failure);
    std::vector<std::vector<uint8_t>> all;
    try {
      progress_during(lock, [&] { all = allgather_blobs(bs_, blob.data(), blob.size()); });
    } catch (...) {
      release(regions_[id]);
      throw;
    }
    Region& region = regions_[id];
    std::string failed;
    for (int r = 0; r < nranks_; ++r) {
      if (all[r].size() < kRegionHeader) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!failed.empty()) {
      release(region);
      throw_error(GSHMEM_ERROR_SYSTEM, "registering memory with UCX failed on rank(s) " + failed +
                                           (failure.empty() ? "" : " (here: " + failure + ")"));
    }
    for (int r = 0; r < nranks_; ++r) {
      uint64_t h[2];
      std::memcpy(h, all[r].data(), sizeof h);
      region.peers[r].base = h[0];
      region.peers[r].bytes = h[1];
      if (r == rank_ || h[1] == 0) continue;
      ucs_status_t st = api_.ep_rkey_unpack(eps_[r], all[r].data() + kRegionHeader,
                                            &region.peers[r].rkey);
      if (st != UCS_OK) {
        release(region);
        const std::string what = "ucp_ep_rkey_unpack of rank " + std::to_string(r) + "'s region";
        throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure(what.c_str(), st));
      }
    }
    region.live = true;
    return id;
  }

  void deregister_region(int region) override {
    std::unique_lock<std::mutex> lock(mu_);
    live_region(region);
    flush_locked();
    progress_during(lock, [&] { bs_.barrier(); });  // no rank still writes into this memory
    release(regions_[region]);
  }

  void barrier() override {
    std::unique_lock<std::mutex> lock(mu_);
    progress_during(lock, [&] { bs_.barrier(); });
  }

  size_t region_bytes(int region, int pe) const override {
    std::lock_guard<std::mutex> lock(mu_);
    GSHMEM_REQUIRE(pe >= 0 && pe < nranks_, "no rank " + std::to_string(pe));
    return live_region(region).peers[pe].bytes;
  }

  void put(int pe, const void* src, size_t bytes, int region, uint64_t offset, Done done,
           void* arg, uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    const PeerRegion& target = reach(pe, region, offset, bytes, "put");
    ucp_request_param_t param{};
    ucs_status_ptr_t req = api_.put_nbx(eps_[pe], src, bytes, target.base + offset, target.rkey,
                                        &param);
    track(req, pe, done, arg, tag, "put");
  }

  void get(int pe, void* dst, size_t bytes, int region, uint64_t offset, Done done, void* arg,
           uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    const PeerRegion& target = reach(pe, region, offset, bytes, "get");
    ucp_request_param_t param{};
    ucs_status_ptr_t req = api_.get_nbx(eps_[pe], dst, bytes, target.base + offset, target.rkey,
                                        &param);
    track(req, pe, done, arg, tag, "get");
  }

  void signal(int pe, int region, uint64_t offset, uint64_t value,
              SignalUpdate update) override {
    std::lock_guard<std::mutex> lock(mu_);
    GSHMEM_REQUIRE(offset % sizeof(uint64_t) == 0,
                   "a signal word needs an 8-byte aligned offset, got " + std::to_string(offset));
    reach(pe, region, offset, sizeof value, "signal");
    const SignalMessage msg{static_cast<uint64_t>(region), offset, value,
                            static_cast<uint64_t>(update)};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_COPY_HEADER | UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t req = api_.am_send_nbx(eps_[pe], kSignalMessage, &msg, sizeof msg, nullptr,
                                            0, &param);
    track(req, pe, nullptr, nullptr, 0, "signal");
  }

  void set_signal_sink(SignalSink sink, void* arg) override {
    std::lock_guard<std::mutex> lock(mu_);
    sink_ = sink;
    sink_arg_ = arg;
  }

  void fence() override {
    std::lock_guard<std::mutex> lock(mu_);
    check_peers();
    ucs_status_t st = api_.worker_fence(worker_);
    if (st != UCS_OK) throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_worker_fence", st));
  }

  void flush() override {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
  }

  bool progress() override {
    std::lock_guard<std::mutex> lock(mu_);
    return progress_locked();
  }

 private:
  void flush_locked() {
    // One flush per peer, so that a timeout can name the peers that did not finish.
    std::vector<void*> flushes(nranks_, nullptr);
    try {
      for (int r = 0; r < nranks_; ++r) {
        if (r == rank_) continue;
        ucp_request_param_t param{};
        ucs_status_ptr_t req = api_.ep_flush_nbx(eps_[r], &param);
        if (UCS_PTR_IS_ERR(req)) fail_peer(r, UCS_PTR_STATUS(req), "flush");
        flushes[r] = req;
      }
      wait_flushes(flushes);
    } catch (...) {
      for (void* f : flushes) {
        if (f != nullptr) api_.request_free(f);
      }
      throw;
    }
  }

  bool progress_locked() {
    check_peers();
    bool moved = api_.worker_progress(worker_) != 0;
    if (!sink_error_.empty()) {
      throw_error(GSHMEM_ERROR_SYSTEM, "applying an arriving signal failed: " + sink_error_);
    }
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      ucs_status_t st = api_.request_check_status(p.request);
      if (st == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      api_.request_free(p.request);
      Pending finished = p;
      pending_[i] = pending_.back();
      pending_.pop_back();
      moved = true;
      if (st != UCS_OK) fail_peer(finished.pe, st, "operation");
      if (finished.done != nullptr) finished.done(finished.arg, finished.tag);
    }
    check_peers();
    return moved;
  }

  void open() {
    ucp_config_t* config = nullptr;
    ucs_status_t st = api_.config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_config_read", st));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    st = api_.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
    api_.config_release(config);
    if (st != UCS_OK) throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_init", st));

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time: mu_
    st = api_.worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_worker_create", st));

    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = kSignalMessage;
    am.cb = &UcxEngine::on_signal;
    am.arg = this;
    st = api_.worker_set_am_recv_handler(worker_, &am);
    if (st != UCS_OK) {
      throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_worker_set_am_recv_handler", st));
    }

    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    st = api_.worker_query(worker_, &attr);
    if (st != UCS_OK) throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_worker_query", st));
    std::vector<std::vector<uint8_t>> addresses;
    try {  // no endpoint yet: nothing to progress
      addresses = allgather_blobs(bs_, attr.address, attr.address_length);
    } catch (...) {
      api_.worker_release_address(worker_, attr.address);
      throw;
    }
    api_.worker_release_address(worker_, attr.address);

    eps_.assign(nranks_, nullptr);
    peer_errors_.assign(nranks_, UCS_OK);
    handlers_.resize(nranks_);
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      handlers_[r] = {this, r};
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(addresses[r].data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &UcxEngine::on_peer_error;
      ep.err_handler.arg = &handlers_[r];
      st = api_.ep_create(worker_, &ep, &eps_[r]);
      if (st != UCS_OK) {
        throw_error(GSHMEM_ERROR_SYSTEM,
                    ucx_failure(("ucp_ep_create to rank " + std::to_string(r)).c_str(), st));
      }
    }
    // Endpoints wire up lazily; a first flush makes every peer reachable now (or names those
    // that are not), so that the job's first transfer does not carry the connection cost.
    flush_locked();
    std::unique_lock<std::mutex> lock(mu_);
    progress_during(lock, [&] { bs_.barrier(); });
  }

  void close() {
    for (Region& r : regions_) release(r);
    regions_.clear();
    for (Pending& p : pending_) api_.request_free(p.request);
    pending_.clear();
    std::vector<void*> closing;
    for (ucp_ep_h& ep : eps_) {
      if (ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // needs nothing from a peer, which may be gone
      ucs_status_ptr_t req = api_.ep_close_nbx(ep, &param);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) closing.push_back(req);
      ep = nullptr;
    }
    const Deadline deadline(timeout_);
    while (!closing.empty() && !deadline.passed()) {
      api_.worker_progress(worker_);
      for (size_t i = 0; i < closing.size();) {
        if (api_.request_check_status(closing[i]) == UCS_INPROGRESS) {
          ++i;
          continue;
        }
        api_.request_free(closing[i]);
        closing[i] = closing.back();
        closing.pop_back();
      }
    }
    for (void* req : closing) api_.request_free(req);
    if (worker_ != nullptr) api_.worker_destroy(worker_);
    worker_ = nullptr;
    if (context_ != nullptr) api_.cleanup(context_);
    context_ = nullptr;
  }

  // Progresses until every flush request (and every pending operation) is done; frees the done
  // ones (nulling them); throws on a failed peer or at the deadline.
  void wait_flushes(std::vector<void*>& flushes) {
    const Deadline deadline(timeout_);
    for (;;) {
      progress_locked();
      std::string waiting;
      for (int r = 0; r < nranks_; ++r) {
        if (flushes[r] == nullptr) continue;
        const ucs_status_t st = api_.request_check_status(flushes[r]);
        if (st == UCS_INPROGRESS) {
          waiting += (waiting.empty() ? "" : ", ") + std::to_string(r);
          continue;
        }
        api_.request_free(flushes[r]);
        flushes[r] = nullptr;
        if (st != UCS_OK) fail_peer(r, st, "flush");
      }
      if (waiting.empty() && pending_.empty()) return;
      if (deadline.passed()) {
        throw_error(GSHMEM_ERROR_TIMEOUT,
                    "network flush did not finish within " + std::to_string(timeout_) +
                        " s (GSHMEM_TIMEOUT); still waiting for rank(s) " +
                        (waiting.empty() ? std::string("(operations in flight)") : waiting));
      }
    }
  }

  // Runs a blocking bootstrap exchange on a helper thread while this one keeps the worker
  // progressing (`lock` held around each progress only): peers' operations and connection
  // set-up may need this rank's progress before they arrive at the same exchange.
  template <typename F>
  void progress_during(std::unique_lock<std::mutex>& lock, F&& exchange) {
    std::exception_ptr failure;
    std::atomic<bool> done{false};
    std::thread helper([&] {
      try {
        exchange();
      } catch (...) {
        failure = std::current_exception();
      }
      done.store(true, std::memory_order_release);
    });
    while (!done.load(std::memory_order_acquire)) {
      api_.worker_progress(worker_);
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    helper.join();
    if (failure) std::rethrow_exception(failure);
  }

  // Maps [base, base + bytes) and returns the blob peers need: base, bytes, packed remote key.
  // Empty (and `failure` set) when UCX refused, so that every rank fails with the same message.
  std::vector<uint8_t> pack_region(Region& region, void* base, size_t bytes, std::string& failure) {
    std::vector<uint8_t> blob(kRegionHeader);
    const uint64_t header[2] = {reinterpret_cast<uint64_t>(base), bytes};
    std::memcpy(blob.data(), header, sizeof header);
    if (bytes == 0) return blob;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    ucs_status_t st = api_.mem_map(context_, &mp, &region.memh);
    if (st != UCS_OK) {
      region.memh = nullptr;
      failure = ucx_failure("ucp_mem_map", st);
      return {};
    }
    void* packed = nullptr;
    size_t packed_bytes = 0;
    st = api_.rkey_pack(context_, region.memh, &packed, &packed_bytes);
    if (st != UCS_OK) {
      failure = ucx_failure("ucp_rkey_pack", st);
      return {};
    }
    blob.insert(blob.end(), static_cast<uint8_t*>(packed),
                static_cast<uint8_t*>(packed) + packed_bytes);
    api_.rkey_buffer_release(packed);
    return blob;
  }

  void release(Region& region) {
    for (PeerRegion& p : region.peers) {
      if (p.rkey != nullptr) api_.rkey_destroy(p.rkey);
      p.rkey = nullptr;
    }
    if (region.memh != nullptr) api_.mem_unmap(context_, region.memh);
    region.memh = nullptr;
    region.live = false;
    region.accepting = false;
  }

  Region& live_region(int region) {
    return const_cast<Region&>(std::as_const(*this).live_region(region));
  }
  const Region& live_region(int region) const {
    GSHMEM_REQUIRE(region >= 0 && region < static_cast<int>(regions_.size()) &&
                       regions_[region].live,
                   "no registered network region " + std::to_string(region));
    return regions_[region];
  }

  const PeerRegion& reach(int pe, int region, uint64_t offset, size_t bytes, const char* op) {
    check_peers();
    GSHMEM_REQUIRE(pe >= 0 && pe < nranks_ && pe != rank_,
                   std::string(op) + " to rank " + std::to_string(pe) + ": the network engine "
                   "reaches ranks 0.." + std::to_string(nranks_ - 1) + " other than itself (" +
                   std::to_string(rank_) + ")");
    const PeerRegion& target = live_region(region).peers[pe];
    GSHMEM_REQUIRE(offset <= target.bytes && bytes <= target.bytes - offset,
                   std::string(op) + " of " + std::to_string(bytes) + " bytes at offset " +
                       std::to_string(offset) + " overruns rank " + std::to_string(pe) +
                       "'s region " + std::to_string(region) + " of " +
                       std::to_string(target.bytes) + " bytes");
    return target;
  }

  void track(ucs_status_ptr_t req, int pe, Done done, void* arg, uint64_t tag, const char* op) {
    if (UCS_PTR_IS_ERR(req)) {
      const ucs_status_t st = UCS_PTR_STATUS(req);
      if (st == UCS_ERR_UNSUPPORTED || st == UCS_ERR_INVALID_PARAM) {
        throw_error(GSHMEM_ERROR_SYSTEM,
                    "network " + std::string(op) + " to rank " + std::to_string(pe) +
                        " is not supported by the transports UCX chose (" +
                        api_.status_string(st) + "; see UCX_TLS)");
      }
      fail_peer(pe, st, op);
    }
    if (req == nullptr) {  // completed at once
      if (done != nullptr) done(arg, tag);
      return;
    }
    pending_.push_back({req, pe, done, arg, tag});
  }

  struct Handler {
    UcxEngine* engine;
    int pe;
  };
  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* h = static_cast<Handler*>(arg);
    h->engine->peer_errors_[h->pe] = status;
  }

  // Runs inside worker_progress (mu_ held by the caller). The region may have been deregistered
  // meanwhile: a late signal is dropped rather than written into memory no longer ours.
  static ucs_status_t on_signal(void* arg, const void* header, size_t header_bytes, void*, size_t,
                                const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxEngine*>(arg);
    SignalMessage msg;
    if (header_bytes != sizeof msg) return UCS_OK;
    std::memcpy(&msg, header, sizeof msg);
    if (msg.region >= self->regions_.size() || !self->regions_[msg.region].accepting) {
      return UCS_OK;
    }
    const PeerRegion& mine = self->regions_[msg.region].peers[self->rank_];
    if (msg.offset % sizeof(uint64_t) != 0 || msg.offset + sizeof(uint64_t) > mine.bytes ||
        msg.update > static_cast<uint64_t>(SignalUpdate::kSet)) {
      return UCS_OK;
    }
    try {
      self->sink_(self->sink_arg_, reinterpret_cast<uint64_t*>(mine.base + msg.offset),
                  msg.value, static_cast<SignalUpdate>(msg.update));
    } catch (const Error& e) {
      // UCX calls us from C: the error travels to the next engine call instead.
      if (self->sink_error_.empty()) self->sink_error_ = e.what();
    }
    return UCS_OK;
  }

  void check_peers() {
    for (int r = 0; r < nranks_; ++r) {
      if (peer_errors_[r] != UCS_OK) fail_peer(r, peer_errors_[r], "connection");
    }
  }

  [[noreturn]] void fail_peer(int pe, ucs_status_t status, const char* op) {
    throw_error(GSHMEM_ERROR_FAULT, "network " + std::string(op) + " with rank " +
                                        std::to_string(pe) + " failed: " +
                                        api_.status_string(status) +
                                        " (the peer died or the network failed)");
  }

  const UcxApi& api_;
  mutable std::mutex mu_;  // UCX_THREAD_MODE_SERIALIZED: one caller at a time
  Bootstrap& bs_;
  double timeout_;
  int rank_;
  int nranks_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<Handler> handlers_;
  std::vector<ucs_status_t> peer_errors_;
  std::vector<Region> regions_;
  std::vector<Pending> pending_;
  SignalSink sink_ = &cpu_signal_sink;
  void* sink_arg_ = nullptr;
  std::string sink_error_;  // a sink's failure, thrown by the next progress()
};

}  // namespace

std::string ucx_unavailable() {
  try {
    ucx_api();
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<NetEngine> make_ucx_engine(Bootstrap& bs, double timeout) {
  return std::make_unique<UcxEngine>(bs, timeout);
}

}  // namespace gshmem::proxy

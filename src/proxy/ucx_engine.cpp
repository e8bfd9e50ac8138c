// NetEngine on UCX (ucp): one context and worker per engine, an endpoint to every other rank
// (with UCX's peer-failure handling, or for peers on this host without it: net_engine.h),
// regions registered with ucp_mem_map and their packed keys exchanged over the bootstrap.
// Compiled only when the build found UCX's headers.
//
// This file: the engine set up and torn down, regions registered and their keys exchanged, the
// operations NetEngine offers (put, put_value, get, signal, fence, flush, progress) and the
// bookkeeping they share. The class is declared in ucx_engine.h; what orders signals behind
// their data (flushes, fences, held signals) is in ucx_ordering.cpp, what arrives from peers in
// ucx_arrivals.cpp, bulk transfers in parts go out in ucx_parts.cpp.
#include "proxy/ucx_engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/tcp_bootstrap.h"
#include "common/error.h"
#include "proxy/net_engine.h"
#include "proxy/staging.h"
#include "proxy/ucx_api.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy {
namespace ucx {
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

constexpr size_t kRegionHeader = 2 * sizeof(uint64_t);  // base, bytes

// How often a progress call looks up the processes of the peers on this host (/proc reads).
constexpr auto kLivenessPeriod = std::chrono::milliseconds(10);

}  // namespace

// Runs a blocking bootstrap exchange on a helper thread while this one keeps the worker
// progressing (`lock` held around each progress only): peers' operations and connection
// set-up may need this rank's progress before they arrive at the same exchange.
template <typename F>
void UcxEngine::progress_during(std::unique_lock<std::mutex>& lock, F&& exchange) {
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
    advance();
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  helper.join();
  if (failure) std::rethrow_exception(failure);
}

UcxEngine::UcxEngine(Bootstrap& bs, double timeout, size_t bulk_bytes, size_t part_bytes,
                     bool local_shared_memory)
    : api_(ucx_api()),
      bs_(bs),
      timeout_(timeout),
      bulk_bytes_(bulk_bytes),
      part_bytes_(part_bytes),
      rank_(bs.rank()),
      nranks_(bs.nranks()),
      local_shared_memory_(local_shared_memory) {
  GSHMEM_REQUIRE(bulk_bytes > 0, "the network engine's bulk size must be positive");
  GSHMEM_REQUIRE(part_bytes > 0, "the network engine's part size must be positive");
  try {
    open();
  } catch (...) {
    close();
    throw;
  }
}

UcxEngine::~UcxEngine() { close(); }

// The bootstrap exchanges run without the lock: a peer's operations may need this rank's
// progress (TCP emulates RMA with messages) while both wait for the slowest rank to arrive.
int UcxEngine::register_region(void* base, size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  send_held_signals_now();
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

void UcxEngine::deregister_region(int region) {
  std::unique_lock<std::mutex> lock(mu_);
  live_region(region);
  flush_locked();
  progress_during(lock, [&] { bs_.barrier(); });  // no rank still writes into this memory
  release(regions_[region]);
}

void UcxEngine::barrier() {
  std::unique_lock<std::mutex> lock(mu_);
  send_held_signals_now();
  progress_during(lock, [&] { bs_.barrier(); });
}

size_t UcxEngine::region_bytes(int region, int pe) const {
  std::lock_guard<std::mutex> lock(mu_);
  GSHMEM_REQUIRE(pe >= 0 && pe < nranks_, "no rank " + std::to_string(pe));
  return live_region(region).peers[pe].bytes;
}

void UcxEngine::put(int pe, const void* src, size_t bytes, int region, uint64_t offset,
                    Done done, void* arg, uint64_t tag, const SignalAfter* signal) {
  std::lock_guard<std::mutex> lock(mu_);
  const PeerRegion& target = reach(pe, region, offset, bytes, "put");
  if (signal != nullptr) reach_signal(pe, signal->region, signal->offset);
  if (bytes >= bulk_bytes_) {
    const uint64_t message = next_message_++;
    wire::BulkPut header{static_cast<uint64_t>(rank_), static_cast<uint64_t>(region), offset,
                         message, 1, to_wire(signal)};
    const bool staged = staging_ != nullptr && staging_->staged(src);
    if (staged || bytes > part_bytes_) {
      header.parts = parts_of(bytes, staged);
      send_in_parts({pe, wire::kBulkPut, header, {}, static_cast<const char*>(src), bytes, done,
                     arg, tag, staged});
    } else {
      track(send(pe, wire::kBulkPut, &header, sizeof header, src, bytes), pe, done, arg, tag,
            "put", nullptr, message);
    }
    unacked_[message] = pe;
    return;
  }
  ucp_request_param_t param{};
  ucs_status_ptr_t req = api_.put_nbx(eps_[pe], src, bytes, target.base + offset, target.rkey,
                                      &param);
  track(req, pe, done, arg, tag, "put");
  // The signal must not overtake its data: everything to `pe` complete first. Only `pe`: a
  // small put_signal does not wait for other peers' transfers (a bulk put elsewhere, say).
  if (signal != nullptr) hold_signal(pe, to_wire(*signal), pe);
}

void UcxEngine::put_value(int pe, int region, uint64_t offset, uint64_t value, size_t bytes,
                          Done done, void* arg, uint64_t tag, const SignalAfter* signal) {
  std::lock_guard<std::mutex> lock(mu_);
  GSHMEM_REQUIRE(bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8,
                 "put_value stores 1, 2, 4 or 8 bytes, not " + std::to_string(bytes));
  const PeerRegion& target = reach(pe, region, offset, bytes, "put_value");
  // One message either way: a swap where an atomic can apply it (4 or 8 bytes aligned there,
  // so that atomic_set stays atomic), else the bytes as an inline put's.
  if ((bytes == 4 || bytes == 8) && offset % bytes == 0 && target.base % bytes == 0) {
    const Atomic swap{AmoOp::kSwap, bytes == 4 ? AmoType::kU32 : AmoType::kU64, value, 0};
    send_atomic(pe, region, offset, swap, signal, nullptr, arg, tag, done, "put_value");
    return;
  }
  send_write(pe, region, offset, &value, bytes, signal, done, arg, tag, "put_value");  // LE
}

void UcxEngine::get(int pe, void* dst, size_t bytes, int region, uint64_t offset, Done done,
                    void* arg, uint64_t tag) {
  std::lock_guard<std::mutex> lock(mu_);
  const PeerRegion& target = reach(pe, region, offset, bytes, "get");
  if (bytes >= bulk_bytes_) {
    const uint64_t id = next_fetch_++;
    const wire::GetRequest request{static_cast<uint64_t>(rank_), id,
                                   static_cast<uint64_t>(region), offset, bytes};
    fetches_[id] = {pe, dst, bytes, done, arg, tag, issued_++};
    try {
      track(send(pe, wire::kGetRequest, &request, sizeof request, nullptr, 0), pe, nullptr,
            nullptr, 0, "get");
    } catch (...) {
      fetches_.erase(id);
      throw;
    }
    return;
  }
  ucp_request_param_t param{};
  ucs_status_ptr_t req = api_.get_nbx(eps_[pe], dst, bytes, target.base + offset, target.rkey,
                                      &param);
  track(req, pe, done, arg, tag, "get");
}

void UcxEngine::signal(int pe, int region, uint64_t offset, uint64_t value,
                       SignalUpdate update) {
  std::lock_guard<std::mutex> lock(mu_);
  reach_signal(pe, region, offset);
  send_signal(pe, to_wire({region, offset, value, update}));
}

void UcxEngine::fenced_signal(int pe, int region, uint64_t offset, uint64_t value,
                              SignalUpdate update) {
  std::lock_guard<std::mutex> lock(mu_);
  reach_signal(pe, region, offset);
  hold_signal(pe, to_wire({region, offset, value, update}), -1);
}

void UcxEngine::set_staging(Staging* staging) {
  std::lock_guard<std::mutex> lock(mu_);
  staging_ = staging;
}

void UcxEngine::set_signal_sink(SignalSink sink, void* arg) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = sink;
  sink_arg_ = arg;
}

void UcxEngine::fence() {
  std::lock_guard<std::mutex> lock(mu_);
  fence_locked();
}

void UcxEngine::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  flush_locked();
}

bool UcxEngine::progress() {
  std::lock_guard<std::mutex> lock(mu_);
  return progress_locked();
}

uint64_t UcxEngine::flush_start() {
  std::lock_guard<std::mutex> lock(mu_);
  return start_flush(-1);
}

bool UcxEngine::flushed(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  return flush_done(token);
}

bool UcxEngine::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !pending_.empty() || !held_signals_.empty() || !arrivals_.empty() ||
         !receiving_.empty() || !serves_.empty() || !acks_.empty() || !fetches_.empty() ||
         !unacked_.empty() || !outgoing_.empty() || !flushes_.empty() ||
         !copying_in_.empty() || !atomic_calls_.empty() || !atomic_arrivals_.empty();
}

void UcxEngine::reach_signal(int pe, int region, uint64_t offset) {
  GSHMEM_REQUIRE(offset % sizeof(uint64_t) == 0,
                 "a signal word needs an 8-byte aligned offset, got " + std::to_string(offset));
  reach(pe, region, offset, sizeof(uint64_t), "signal");
}

// An active message: header only (eager), or header and data (rendezvous: the target
// receives the data where it belongs).
ucs_status_ptr_t UcxEngine::send(int pe, unsigned id, const void* header, size_t header_bytes,
                                 const void* data, size_t bytes, bool eager_data) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_COPY_HEADER |
                (bytes > 0 && !eager_data ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER);
  return api_.am_send_nbx(eps_[pe], id, header, header_bytes, data, bytes, &param);
}

bool UcxEngine::progress_locked() {
  check_peers();
  bool moved = advance();
  if (!arrival_error_.empty()) {
    std::string what;
    what.swap(arrival_error_);  // raised once; the engine stays usable
    throw_error(GSHMEM_ERROR_SYSTEM, what);
  }
  if (!refusal_.empty()) {
    std::string what;
    what.swap(refusal_);
    throw_error(GSHMEM_ERROR_USAGE, what);
  }
  moved = reap(pending_, [&](const Pending& finished, ucs_status_t st) {
    if (st != UCS_OK && finished.bulk_message != kNoMessage) {
      unacked_.erase(finished.bulk_message);  // refused: no ack will come
      if (st == kNoRegion) throw_error(GSHMEM_ERROR_USAGE, no_region(finished.pe));
    }
    if (st != UCS_OK) fail_peer(finished.pe, st, "operation");
    if (finished.done != nullptr) finished.done(finished.arg, finished.tag);
  }) || moved;
  moved = send_held_signals() || moved;  // after the reap: a put done now frees its signal
  check_peers();
  return moved;
}

void UcxEngine::open() {
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

  const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
      {wire::kSignal, &UcxEngine::on_signal},
      {wire::kBulkPut, &UcxEngine::on_bulk_put},
      {wire::kBulkPutAck, &UcxEngine::on_bulk_put_ack},
      {wire::kGetRequest, &UcxEngine::on_get_request},
      {wire::kGetReply, &UcxEngine::on_get_reply},
      {wire::kAtomic, &UcxEngine::on_atomic},
      {wire::kAtomicReply, &UcxEngine::on_atomic_reply},
      {wire::kWrite, &UcxEngine::on_write},
  };
  for (const auto& [id, cb] : handlers) {
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = id;
    am.cb = cb;
    am.arg = this;
    st = api_.worker_set_am_recv_handler(worker_, &am);
    if (st != UCS_OK) {
      throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_worker_set_am_recv_handler", st));
    }
  }

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  st = api_.worker_query(worker_, &attr);
  if (st != UCS_OK) throw_error(GSHMEM_ERROR_SYSTEM, ucx_failure("ucp_worker_query", st));
  std::vector<std::vector<uint8_t>> addresses;
  std::vector<ProcessPlace> where(nranks_);
  try {  // no endpoint yet: nothing to progress
    addresses = allgather_blobs(bs_, attr.address, attr.address_length);
    const ProcessPlace mine = this_process();
    bs_.allgather(&mine, where.data(), sizeof mine);
  } catch (...) {
    api_.worker_release_address(worker_, attr.address);
    throw;
  }
  api_.worker_release_address(worker_, attr.address);

  eps_.assign(nranks_, nullptr);
  peer_errors_.assign(nranks_, UCS_OK);
  handlers_.resize(nranks_);
  local_peers_.assign(nranks_, ProcessPlace{});
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    handlers_[r] = {this, r};
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses[r].data());
    if (local_shared_memory_ && watchable(where[rank_], where[r])) {
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;  // shared memory and CUDA IPC allowed
      local_peers_[r] = where[r];
    } else {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &UcxEngine::on_peer_error;
      ep.err_handler.arg = &handlers_[r];
    }
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

void UcxEngine::close() {
  // Requests and announced data first: they may still name memory of the regions.
  held_signals_.clear();  // their flushes go next
  while (!flushes_.empty()) drop_flush(flushes_.begin());
  for (Pending& p : pending_) api_.request_free(p.request);
  pending_.clear();
  for (Arrival& a : arrivals_) api_.am_data_release(worker_, a.desc);
  arrivals_.clear();
  for (Arrival& a : receiving_) api_.request_free(a.request);
  receiving_.clear();
  for (PartSend& p : part_sends_) api_.request_free(p.request);
  part_sends_.clear();
  copying_out_.clear();
  copying_in_.clear();
  outgoing_.clear();
  for (Region& r : regions_) release(r);
  regions_.clear();
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
  // A failed peer's endpoint (and a forced close) leaves UCX discarding its transport lanes
  // in later progress calls; destroying the worker with discards pending made UCX free one
  // of its callback entries twice (a rare abort in the die_proxy test). A worker flush
  // completes once they are done.
  if (worker_ != nullptr) {
    ucp_request_param_t param{};
    void* flushing = api_.worker_flush_nbx(worker_, &param);
    while (flushing != nullptr && !UCS_PTR_IS_ERR(flushing) && !deadline.passed()) {
      api_.worker_progress(worker_);
      if (api_.request_check_status(flushing) != UCS_INPROGRESS) break;
    }
    if (flushing != nullptr && !UCS_PTR_IS_ERR(flushing)) api_.request_free(flushing);
    api_.worker_destroy(worker_);
  }
  worker_ = nullptr;
  if (context_ != nullptr) api_.cleanup(context_);
  context_ = nullptr;
}

// Maps [base, base + bytes) and returns the blob peers need: base, bytes, packed remote key.
// Empty (and `failure` set) when UCX refused, so that every rank fails with the same message.
std::vector<uint8_t> UcxEngine::pack_region(Region& region, void* base, size_t bytes,
                                             std::string& failure) {
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

void UcxEngine::release(Region& region) {
  for (PeerRegion& p : region.peers) {
    if (p.rkey != nullptr) api_.rkey_destroy(p.rkey);
    p.rkey = nullptr;
  }
  if (region.memh != nullptr) api_.mem_unmap(context_, region.memh);
  region.memh = nullptr;
  region.live = false;
  region.accepting = false;
}

Region& UcxEngine::live_region(int region) {
  return const_cast<Region&>(std::as_const(*this).live_region(region));
}

const Region& UcxEngine::live_region(int region) const {
  GSHMEM_REQUIRE(region >= 0 && region < static_cast<int>(regions_.size()) &&
                     regions_[region].live,
                 "no registered network region " + std::to_string(region));
  return regions_[region];
}

const PeerRegion& UcxEngine::reach(int pe, int region, uint64_t offset, size_t bytes,
                                   const char* op) {
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

void UcxEngine::track(ucs_status_ptr_t req, int pe, Done done, void* arg, uint64_t tag,
                      const char* op, std::shared_ptr<uint64_t> value, uint64_t bulk_message,
                      std::optional<uint64_t> seq) {
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
  pending_.push_back(
      {req, pe, done, arg, tag, std::move(value), seq ? *seq : issued_++, bulk_message});
}

void UcxEngine::on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* h = static_cast<Handler*>(arg);
  h->engine->peer_errors_[h->pe] = status;
}

void UcxEngine::check_peers() {
  for (int r = 0; r < nranks_; ++r) {
    if (peer_errors_[r] != UCS_OK) fail_peer(r, peer_errors_[r], "connection");
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < next_liveness_check_) return;
  next_liveness_check_ = now + kLivenessPeriod;
  for (int r = 0; r < nranks_; ++r) {
    const ProcessPlace& p = local_peers_[r];
    if (p.pid != 0 && !process_alive(static_cast<int>(p.pid), p.start_time)) {
      throw_error(GSHMEM_ERROR_FAULT, "network peer rank " + std::to_string(r) + " (pid " +
                                          std::to_string(p.pid) +
                                          ", this host) exited: nothing more can complete with it");
    }
  }
}

void UcxEngine::fail_peer(int pe, ucs_status_t status, const char* op) {
  throw_error(GSHMEM_ERROR_FAULT, "network " + std::string(op) + " with rank " +
                                      std::to_string(pe) + " failed: " +
                                      api_.status_string(status) +
                                      " (the peer died or the network failed)");
}

}  // namespace ucx

std::string ucx_unavailable() {
  try {
    ucx_api();
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<NetEngine> make_ucx_engine(Bootstrap& bs, double timeout, size_t bulk_bytes,
                                           size_t part_bytes, bool local_shared_memory) {
  return std::make_unique<ucx::UcxEngine>(bs, timeout, bulk_bytes, part_bytes,
                                          local_shared_memory);
}

}  // namespace gshmem::proxy

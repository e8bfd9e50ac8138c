// NetEngine on UCX (ucp): one context and worker per engine, an endpoint to every other rank
// with peer-failure handling, regions registered with ucp_mem_map and their packed keys
// exchanged over the bootstrap. Compiled only when the build found UCX's headers.
#include <algorithm>
#include <cstring>
#include <atomic>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
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

// The default sink: signal words in host memory.
void cpu_signal_sink(void*, uint64_t* word, uint64_t value, SignalUpdate update) {
  if (update == SignalUpdate::kSet) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
  } else {
    __atomic_fetch_add(word, value, __ATOMIC_RELEASE);
  }
}

// What a target answers a bulk put for a region it does not have: the sender's request fails
// with it, which the sender raises as its own usage error.
constexpr ucs_status_t kNoRegion = UCS_ERR_NO_ELEM;

// An operation UCX has not finished yet: a put or get (with its completion callback), a
// signal, a bulk put's ack or a get's reply.
struct Pending {
  void* request;
  int pe;
  Done done;
  void* arg;
  uint64_t tag;
  std::shared_ptr<uint64_t> value;  // a put_value's source, kept until UCX is done with it
  bool bulk_put = false;            // its ack is counted in unacked_
};

// Rendezvous data announced to this rank (a bulk put into one of its regions, or the reply to
// one of its bulk gets), received once the worker is outside its callbacks.
struct Arrival {
  void* desc;        // UCX's data descriptor
  void* dst;
  uint64_t bytes;
  bool put;          // else a part of the reply to get `get_id`
  wire::BulkPut header;
  uint64_t get_id;
  uint64_t parts;    // of the transfer this part belongs to
  void* request = nullptr;  // the receive, once started
  void* chunk = nullptr;    // the staging chunk it lands in first (staged memory)
};

// A bulk transfer of staged memory on its way out (a put, or the reply to a peer's get): its
// parts are copied into outgoing chunks and sent as chunks come free.
struct Outgoing {
  int pe;
  unsigned id;  // wire::kBulkPut or wire::kGetReply
  wire::BulkPut put;
  wire::GetReply reply;
  const char* src;
  uint64_t bytes;
  Done done;  // local completion, once every part was sent
  void* arg;
  uint64_t tag;
  uint64_t next = 0;       // bytes handed to parts so far
  uint64_t in_flight = 0;  // parts sent and not complete
};

// A part of an Outgoing transfer: being copied into its chunk, then sent from it.
struct PartCopy {
  void* chunk;
  Outgoing* transfer;
  uint64_t offset;  // in the transfer
  uint64_t bytes;
};

struct PartSend {
  void* request;
  void* chunk;
  Outgoing* transfer;
};

// A bulk get of this rank waiting for its reply.
struct Fetch {
  int pe;
  void* dst;
  uint64_t bytes;
  Done done;
  void* arg;
  uint64_t tag;
  uint64_t landed = 0;  // parts of the reply
};

// A peer's bulk get this rank serves once the worker is outside its callbacks.
struct Serve {
  int pe;
  uint64_t id;
  const void* src;
  uint64_t bytes;  // 0: refused
};

class UcxEngine final : public NetEngine {
 public:
  UcxEngine(Bootstrap& bs, double timeout, size_t bulk_bytes)
      : api_(ucx_api()),
        bs_(bs),
        timeout_(timeout),
        bulk_bytes_(bulk_bytes),
        rank_(bs.rank()),
        nranks_(bs.nranks()),
        unacked_(nranks_, 0) {
    GSHMEM_REQUIRE(bulk_bytes > 0, "the network engine's bulk size must be positive");
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
           void* arg, uint64_t tag, const SignalAfter* signal) override {
    std::lock_guard<std::mutex> lock(mu_);
    const PeerRegion& target = reach(pe, region, offset, bytes, "put");
    if (signal != nullptr) reach_signal(pe, signal->region, signal->offset);
    if (bytes >= bulk_bytes_) {
      wire::BulkPut header{static_cast<uint64_t>(rank_), static_cast<uint64_t>(region), offset,
                           next_message_++, 1, {wire::kNoSignal, 0, 0, 0}};
      if (signal != nullptr) header.signal = to_wire(*signal);
      if (staging_ != nullptr && staging_->staged(src)) {
        header.parts = parts_of(bytes);
        outgoing_.push_back({pe, wire::kBulkPut, header, {}, static_cast<const char*>(src), bytes,
                             done, arg, tag});
      } else {
        track(send(pe, wire::kBulkPut, &header, sizeof header, src, bytes), pe, done, arg, tag,
              "put", nullptr, true);
      }
      ++unacked_[pe];
      return;
    }
    ucp_request_param_t param{};
    ucs_status_ptr_t req = api_.put_nbx(eps_[pe], src, bytes, target.base + offset, target.rkey,
                                        &param);
    track(req, pe, done, arg, tag, "put");
    if (signal == nullptr) return;
    fence_locked();  // the signal must not overtake its data
    send_signal(pe, to_wire(*signal));
  }

  void put_value(int pe, int region, uint64_t offset, uint64_t value, size_t bytes, Done done,
                 void* arg, uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    GSHMEM_REQUIRE(bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8,
                   "put_value stores 1, 2, 4 or 8 bytes, not " + std::to_string(bytes));
    const PeerRegion& target = reach(pe, region, offset, bytes, "put_value");
    auto source = std::make_shared<uint64_t>(value);  // little-endian: the low bytes come first
    ucp_request_param_t param{};
    ucs_status_ptr_t req = api_.put_nbx(eps_[pe], source.get(), bytes, target.base + offset,
                                        target.rkey, &param);
    track(req, pe, done, arg, tag, "put_value", std::move(source));
  }

  void get(int pe, void* dst, size_t bytes, int region, uint64_t offset, Done done, void* arg,
           uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    const PeerRegion& target = reach(pe, region, offset, bytes, "get");
    if (bytes >= bulk_bytes_) {
      const uint64_t id = next_fetch_++;
      const wire::GetRequest request{static_cast<uint64_t>(rank_), id,
                                     static_cast<uint64_t>(region), offset, bytes};
      fetches_[id] = {pe, dst, bytes, done, arg, tag};
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

  void signal(int pe, int region, uint64_t offset, uint64_t value,
              SignalUpdate update) override {
    std::lock_guard<std::mutex> lock(mu_);
    reach_signal(pe, region, offset);
    send_signal(pe, to_wire({region, offset, value, update}));
  }

  void set_staging(Staging* staging) override {
    std::lock_guard<std::mutex> lock(mu_);
    staging_ = staging;
  }

  void set_signal_sink(SignalSink sink, void* arg) override {
    std::lock_guard<std::mutex> lock(mu_);
    sink_ = sink;
    sink_arg_ = arg;
  }

  void fence() override {
    std::lock_guard<std::mutex> lock(mu_);
    fence_locked();
  }

  void flush() override {
    std::lock_guard<std::mutex> lock(mu_);
    flush_locked();
  }

  bool progress() override {
    std::lock_guard<std::mutex> lock(mu_);
    return progress_locked();
  }

  bool busy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !pending_.empty() || !arrivals_.empty() || !receiving_.empty() || !serves_.empty() ||
           !acks_.empty() || !fetches_.empty() || unacked() > 0 || !outgoing_.empty() ||
           !copying_in_.empty();
  }

 private:
  uint64_t parts_of(uint64_t bytes) const {
    const uint64_t chunk = staging_->chunk_bytes();
    return (bytes + chunk - 1) / chunk;
  }

  static wire::Signal to_wire(const SignalAfter& s) {
    return {static_cast<uint64_t>(s.region), s.offset, s.value, static_cast<uint64_t>(s.update)};
  }

  void reach_signal(int pe, int region, uint64_t offset) {
    GSHMEM_REQUIRE(offset % sizeof(uint64_t) == 0,
                   "a signal word needs an 8-byte aligned offset, got " + std::to_string(offset));
    reach(pe, region, offset, sizeof(uint64_t), "signal");
  }

  void send_signal(int pe, const wire::Signal& msg) {
    track(send(pe, wire::kSignal, &msg, sizeof msg, nullptr, 0), pe, nullptr, nullptr, 0,
          "signal");
  }

  // An active message: header only (eager), or header and data (rendezvous: the target
  // receives the data where it belongs).
  ucs_status_ptr_t send(int pe, unsigned id, const void* header, size_t header_bytes,
                        const void* data, size_t bytes) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_COPY_HEADER |
                  (bytes > 0 ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER);
    return api_.am_send_nbx(eps_[pe], id, header, header_bytes, data, bytes, &param);
  }

  // A fence is a flush: UCX's own fence orders its one-sided operations among themselves, not
  // before an active message (a signal, a bulk put) issued after it, nor bulk data a target
  // receives when it gets to it. Everything issued before is complete before anything after.
  void fence_locked() { flush_locked(); }

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

  uint64_t unacked() const {
    uint64_t n = 0;
    for (uint64_t u : unacked_) n += u;
    return n;
  }

  bool progress_locked() {
    check_peers();
    bool moved = advance();
    if (!arrival_error_.empty()) {
      std::string what;
      what.swap(arrival_error_);  // raised once; the engine stays usable
      throw_error(GSHMEM_ERROR_SYSTEM, what);
    }
    moved = reap(pending_, [&](const Pending& finished, ucs_status_t st) {
      if (st != UCS_OK && finished.bulk_put) {
        --unacked_[finished.pe];  // refused: no ack will come
        if (st == kNoRegion) {
          throw_error(GSHMEM_ERROR_USAGE, "rank " + std::to_string(finished.pe) +
                                              " has no region for a bulk put (deregistered?)");
        }
      }
      if (st != UCS_OK) fail_peer(finished.pe, st, "operation");
      if (finished.done != nullptr) finished.done(finished.arg, finished.tag);
    }) || moved;
    check_peers();
    return moved;
  }

  // Takes the entries of `v` whose staging copy (into or out of `chunk`) is complete out of it
  // and hands each to `finish`; returns whether there were any.
  template <typename T, typename F>
  bool reap_copies(std::vector<T>& v, F&& finish) {
    bool any = false;
    for (size_t i = 0; i < v.size();) {
      if (!staging_->copied(v[i].chunk)) {
        ++i;
        continue;
      }
      const T done = v[i];
      v[i] = v.back();
      v.pop_back();
      any = true;
      finish(done);
    }
    return any;
  }

  // Takes the entries of `v` whose UCX request (`request`) finished out of it, freeing the
  // request, and hands each with its status to `finish`; returns whether there were any.
  template <typename T, typename F>
  bool reap(std::vector<T>& v, F&& finish) {
    bool any = false;
    for (size_t i = 0; i < v.size();) {
      const ucs_status_t st = api_.request_check_status(v[i].request);
      if (st == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      api_.request_free(v[i].request);
      const T done = v[i];
      v[i] = v.back();
      v.pop_back();
      any = true;
      finish(done, st);
    }
    return any;
  }

  // UCX's progress, then the work its callbacks left: receiving announced rendezvous data,
  // finishing what landed, serving peers' gets. Never throws (it also runs while a bootstrap
  // exchange is under way on another thread): failures wait in arrival_error_ and peer_errors_.
  bool advance() {
    try {
      return advance_unguarded();
    } catch (const std::exception& e) {
      note_arrival_error(e.what());
    } catch (...) {
      note_arrival_error("unknown error while progressing the network");
    }
    return true;
  }

  bool advance_unguarded() {
    bool moved = api_.worker_progress(worker_) != 0;
    std::vector<Arrival> started;
    started.swap(arrivals_);
    for (Arrival& a : started) {
      void* into = a.dst;
      if (staging_ != nullptr && staging_->staged(a.dst)) {
        a.chunk = staging_->take(false);
        if (a.chunk == nullptr) {  // every incoming chunk busy: later
          arrivals_.push_back(a);
          continue;
        }
        into = a.chunk;
      }
      ucp_request_param_t param{};
      ucs_status_ptr_t req = api_.am_recv_data_nbx(worker_, a.desc, into, a.bytes, &param);
      moved = true;
      if (UCS_PTR_IS_ERR(req)) {
        if (a.chunk != nullptr) staging_->give_back(a.chunk, false);
        failed(a, ucx_failure("receiving rendezvous data", UCS_PTR_STATUS(req)));
      } else if (req == nullptr) {
        received(a);
      } else {
        a.request = req;
        receiving_.push_back(a);
      }
    }
    moved = reap(receiving_, [&](const Arrival& done, ucs_status_t st) {
      if (st != UCS_OK) {
        if (done.chunk != nullptr) staging_->give_back(done.chunk, false);
        failed(done, ucx_failure("receiving rendezvous data", st));
      } else {
        received(done);
      }
    }) || moved;
    moved = reap_copies(copying_in_, [&](const Arrival& a) {  // parts now in the GPU
      staging_->give_back(a.chunk, false);
      landed(a);
    }) || moved;
    std::vector<std::pair<int, bool>> acks;
    acks.swap(acks_);
    for (const auto& [sender, landed] : acks) {
      const wire::BulkPutAck ack{static_cast<uint64_t>(rank_), landed ? 1u : 0u};
      send_quietly(sender, wire::kBulkPutAck, &ack, sizeof ack, nullptr, 0);
      moved = true;
    }
    std::vector<Serve> serving;
    serving.swap(serves_);
    for (const Serve& s : serving) {
      wire::GetReply reply{s.id, s.bytes > 0 ? 1u : 0u, 0, 1};
      if (s.bytes > 0 && staging_ != nullptr && staging_->staged(s.src)) {
        reply.parts = parts_of(s.bytes);
        outgoing_.push_back({s.pe, wire::kGetReply, {}, reply, static_cast<const char*>(s.src),
                             s.bytes, nullptr, nullptr, 0});
      } else {
        send_quietly(s.pe, wire::kGetReply, &reply, sizeof reply, s.src, s.bytes);
      }
      moved = true;
    }
    return send_parts() || moved;
  }

  // Staged transfers out: parts whose send completed give their chunk back; parts copied out
  // of the GPU are sent; free outgoing chunks start the next parts' copies. A transfer whose
  // parts were all sent and completed is done.
  bool send_parts() {
    bool moved = reap(part_sends_, [&](const PartSend& done, ucs_status_t st) {
      staging_->give_back(done.chunk, true);
      --done.transfer->in_flight;
      if (st != UCS_OK) peer_errors_[done.transfer->pe] = st;
    });
    moved = reap_copies(copying_out_, [&](const PartCopy& c) { send_part(c); }) || moved;
    for (auto it = outgoing_.begin(); it != outgoing_.end();) {
      Outgoing& t = *it;
      while (t.next < t.bytes) {
        void* chunk = staging_->take(true);
        if (chunk == nullptr) break;
        const uint64_t len = std::min<uint64_t>(staging_->chunk_bytes(), t.bytes - t.next);
        staging_->start_copy(chunk, chunk, t.src + t.next, len);
        copying_out_.push_back({chunk, &t, t.next, len});
        t.next += len;
        ++t.in_flight;
        moved = true;
      }
      if (t.next < t.bytes || t.in_flight > 0) {
        ++it;
        continue;
      }
      const Outgoing finished = t;
      it = outgoing_.erase(it);
      if (finished.done != nullptr) finished.done(finished.arg, finished.tag);
    }
    return moved;
  }

  void send_part(const PartCopy& c) {
    Outgoing& t = *c.transfer;
    wire::BulkPut put = t.put;
    wire::GetReply reply = t.reply;
    put.offset += c.offset;
    reply.offset = c.offset;
    const bool is_put = t.id == wire::kBulkPut;
    ucs_status_ptr_t req = send(t.pe, t.id, is_put ? static_cast<const void*>(&put) : &reply,
                                is_put ? sizeof put : sizeof reply, c.chunk, c.bytes);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
      part_sends_.push_back({req, c.chunk, &t});
      return;
    }
    staging_->give_back(c.chunk, true);
    --t.in_flight;
    if (UCS_PTR_IS_ERR(req)) peer_errors_[t.pe] = UCS_PTR_STATUS(req);
  }

  // A part arrived: counted, once out of its staging chunk (if any) into the GPU.
  void received(const Arrival& a) {
    if (a.chunk == nullptr) {
      landed(a);
      return;
    }
    staging_->start_copy(a.chunk, a.dst, a.chunk, a.bytes);
    copying_in_.push_back(a);
  }

  // A part of a bulk transfer is in place. Once every part of a put is: its signal, and the
  // sender hears so; of a get's reply: the get is done.
  void landed(const Arrival& a) {
    if (!a.put) {
      const auto it = fetches_.find(a.get_id);
      if (it == fetches_.end() || ++it->second.landed < a.parts) return;
      const Fetch f = it->second;
      fetches_.erase(it);
      if (f.done != nullptr) f.done(f.arg, f.tag);
      return;
    }
    const std::pair<uint64_t, uint64_t> key{a.header.from, a.header.message};
    if (a.parts > 1 && ++parts_landed_[key] < a.parts) return;
    parts_landed_.erase(key);
    if (a.header.signal.region != wire::kNoSignal) apply_signal(a.header.signal);
    acknowledge(static_cast<int>(a.header.from), true);
  }

  // Rendezvous data that could not be received: this rank raises `what`; the sender of a put
  // hears that it failed (no wait for an ack that cannot come); a get is over.
  void failed(const Arrival& a, const std::string& what) {
    note_arrival_error(what);
    if (a.put) {
      acknowledge(static_cast<int>(a.header.from), false);
    } else {
      fetches_.erase(a.get_id);
    }
  }

  // Queued: it may be called from a UCX callback; advance() sends it.
  void acknowledge(int sender, bool landed) { acks_.push_back({sender, landed}); }

  // A send from advance(): a failure marks the peer failed instead of throwing.
  void send_quietly(int pe, unsigned id, const void* header, size_t header_bytes,
                    const void* data, size_t bytes) {
    ucs_status_ptr_t req = send(pe, id, header, header_bytes, data, bytes);
    if (UCS_PTR_IS_ERR(req)) {
      peer_errors_[pe] = UCS_PTR_STATUS(req);
    } else if (req != nullptr) {
      pending_.push_back({req, pe, nullptr, nullptr, 0, nullptr, false});
    }
  }

  void note_arrival_error(const std::string& what) {
    if (arrival_error_.empty()) arrival_error_ = what;
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

    const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
        {wire::kSignal, &UcxEngine::on_signal},
        {wire::kBulkPut, &UcxEngine::on_bulk_put},
        {wire::kBulkPutAck, &UcxEngine::on_bulk_put_ack},
        {wire::kGetRequest, &UcxEngine::on_get_request},
        {wire::kGetReply, &UcxEngine::on_get_reply},
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
    // Requests and announced data first: they may still name memory of the regions.
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

  // Progresses until every flush request, every pending operation, every bulk get and every
  // bulk put's ack is done; frees the done flush requests (nulling them); throws on a failed
  // peer or at the deadline, naming the peers waited for.
  void wait_flushes(std::vector<void*>& flushes) {
    const Deadline deadline(timeout_);
    for (;;) {
      progress_locked();
      std::vector<bool> waiting(nranks_, false);
      for (int r = 0; r < nranks_; ++r) {
        void*& f = flushes[r];
        if (f == nullptr) continue;
        const ucs_status_t st = api_.request_check_status(f);
        if (st == UCS_INPROGRESS) {
          waiting[r] = true;
          continue;
        }
        api_.request_free(f);
        f = nullptr;
        if (st != UCS_OK) fail_peer(r, st, "flush");
      }
      for (int r = 0; r < nranks_; ++r) waiting[r] = waiting[r] || unacked_[r] > 0;
      for (const auto& [id, f] : fetches_) waiting[f.pe] = true;
      for (const Pending& p : pending_) waiting[p.pe] = true;
      if (std::find(waiting.begin(), waiting.end(), true) == waiting.end()) return;
      if (deadline.passed()) {
        std::string names;
        for (int r = 0; r < nranks_; ++r) {
          if (waiting[r]) names += (names.empty() ? "" : ", ") + std::to_string(r);
        }
        throw_error(GSHMEM_ERROR_TIMEOUT,
                    "network flush did not finish within " + std::to_string(timeout_) +
                        " s (GSHMEM_TIMEOUT); still waiting for rank(s) " +
                        names);
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
      advance();
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

  void track(ucs_status_ptr_t req, int pe, Done done, void* arg, uint64_t tag, const char* op,
             std::shared_ptr<uint64_t> value = nullptr, bool bulk_put = false) {
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
    pending_.push_back({req, pe, done, arg, tag, std::move(value), bulk_put});
  }

  struct Handler {
    UcxEngine* engine;
    int pe;
  };
  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* h = static_cast<Handler*>(arg);
    h->engine->peer_errors_[h->pe] = status;
  }

  // The active-message handlers run inside worker_progress (mu_ held by the caller); they only
  // record what arrived, which advance() finishes outside UCX's callbacks. A region may have
  // been deregistered meanwhile: late data is dropped rather than written into memory no
  // longer ours (a late signal silently; a late bulk put or get as an error here).

  // This rank's part of `region` when [offset, offset + bytes) lies inside it and it takes
  // arrivals; else null.
  const PeerRegion* landing(uint64_t region, uint64_t offset, uint64_t bytes) const {
    if (region >= regions_.size() || !regions_[region].accepting) return nullptr;
    const PeerRegion& mine = regions_[region].peers[rank_];
    if (offset > mine.bytes || bytes > mine.bytes - offset) return nullptr;
    return &mine;
  }

  bool valid_signal(const wire::Signal& s) const {
    return s.offset % sizeof(uint64_t) == 0 && landing(s.region, s.offset, sizeof(uint64_t)) &&
           s.update <= static_cast<uint64_t>(SignalUpdate::kSet);
  }

  void apply_signal(const wire::Signal& s) {
    if (!valid_signal(s)) return;
    const PeerRegion& mine = regions_[s.region].peers[rank_];
    try {
      sink_(sink_arg_, reinterpret_cast<uint64_t*>(mine.base + s.offset), s.value,
            static_cast<SignalUpdate>(s.update));
    } catch (const std::exception& e) {
      // UCX calls us from C: the error travels to the next engine call instead.
      note_arrival_error("applying an arriving signal failed: " + std::string(e.what()));
    } catch (...) {
      note_arrival_error("applying an arriving signal failed");
    }
  }

  template <typename T>
  static bool read_header(const void* header, size_t bytes, T& out) {
    if (bytes != sizeof out) return false;
    std::memcpy(&out, header, sizeof out);
    return true;
  }

  static bool rendezvous(const ucp_am_recv_param_t* param) {
    return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  }

  static ucs_status_t on_signal(void* arg, const void* header, size_t header_bytes, void*, size_t,
                                const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxEngine*>(arg);
    wire::Signal msg;
    if (read_header(header, header_bytes, msg)) self->apply_signal(msg);
    return UCS_OK;
  }

  static ucs_status_t on_bulk_put(void* arg, const void* header, size_t header_bytes, void* data,
                                  size_t bytes, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxEngine*>(arg);
    wire::BulkPut msg;
    if (!read_header(header, header_bytes, msg) || msg.from >= self->unacked_.size()) {
      return UCS_OK;
    }
    const PeerRegion* mine = self->landing(msg.region, msg.offset, bytes);
    if (!rendezvous(param)) {  // UCX was told to send it by rendezvous: not expected
      self->note_arrival_error("a bulk put of " + std::to_string(bytes) + " bytes from rank " +
                               std::to_string(msg.from) + " arrived without rendezvous");
      self->acknowledge(static_cast<int>(msg.from), false);
      return UCS_OK;
    }
    if (mine == nullptr) return kNoRegion;  // the sender's request fails with it: its error
    self->arrivals_.push_back({data, reinterpret_cast<void*>(mine->base + msg.offset), bytes,
                               true, msg, 0, msg.parts});
    return UCS_INPROGRESS;
  }

  static ucs_status_t on_bulk_put_ack(void* arg, const void* header, size_t header_bytes, void*,
                                      size_t, const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxEngine*>(arg);
    wire::BulkPutAck msg;
    if (read_header(header, header_bytes, msg) && msg.from < self->unacked_.size() &&
        self->unacked_[msg.from] > 0) {
      --self->unacked_[msg.from];
      if (msg.landed == 0) {
        self->note_arrival_error("a bulk put to rank " + std::to_string(msg.from) +
                                 " failed there (it could not receive the data)");
      }
    }
    return UCS_OK;
  }

  static ucs_status_t on_get_request(void* arg, const void* header, size_t header_bytes, void*,
                                     size_t, const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxEngine*>(arg);
    wire::GetRequest msg;
    if (!read_header(header, header_bytes, msg) ||
        msg.from >= static_cast<uint64_t>(self->nranks_) || msg.bytes == 0) {
      return UCS_OK;
    }
    const PeerRegion* mine = self->landing(msg.region, msg.offset, msg.bytes);
    self->serves_.push_back(
        {static_cast<int>(msg.from), msg.id,
         mine != nullptr ? reinterpret_cast<const void*>(mine->base + msg.offset) : nullptr,
         mine != nullptr ? msg.bytes : 0});
    return UCS_OK;
  }

  static ucs_status_t on_get_reply(void* arg, const void* header, size_t header_bytes, void* data,
                                   size_t bytes, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxEngine*>(arg);
    wire::GetReply msg;
    if (!read_header(header, header_bytes, msg)) return UCS_OK;
    const auto it = self->fetches_.find(msg.id);
    if (it == self->fetches_.end()) return UCS_OK;
    const Fetch& f = it->second;
    if (msg.served == 0 || msg.offset > f.bytes || bytes > f.bytes - msg.offset ||
        !rendezvous(param)) {
      self->note_arrival_error("a bulk get of " + std::to_string(f.bytes) + " bytes from rank " +
                               std::to_string(f.pe) + " failed (" +
                               (msg.served == 0 ? "the region is gone there"
                                                : "the reply did not match") + ")");
      self->fetches_.erase(it);
      return UCS_OK;
    }
    self->arrivals_.push_back({data, static_cast<char*>(f.dst) + msg.offset, bytes, false, {},
                               msg.id, msg.parts});
    return UCS_INPROGRESS;
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
  size_t bulk_bytes_;
  int rank_;
  int nranks_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<Handler> handlers_;
  std::vector<ucs_status_t> peer_errors_;
  std::vector<Region> regions_;
  std::vector<Pending> pending_;
  std::vector<uint64_t> unacked_;  // per peer: bulk puts sent and not yet acknowledged
  std::vector<Arrival> arrivals_;  // rendezvous data announced, not yet being received
  std::vector<Arrival> receiving_;
  std::vector<Serve> serves_;
  std::vector<std::pair<int, bool>> acks_;  // (sender, landed) owed a BulkPutAck
  std::unordered_map<uint64_t, Fetch> fetches_;  // this rank's bulk gets, by id
  uint64_t next_fetch_ = 0;
  uint64_t next_message_ = 0;  // ids of this rank's bulk puts
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> parts_landed_;  // (sender, message)
  Staging* staging_ = nullptr;
  std::list<Outgoing> outgoing_;  // a list: parts in flight point at their transfer
  std::vector<PartCopy> copying_out_;
  std::vector<PartSend> part_sends_;
  std::vector<Arrival> copying_in_;  // staged parts received, on their way into the GPU
  SignalSink sink_ = &cpu_signal_sink;
  void* sink_arg_ = nullptr;
  std::string arrival_error_;  // what went wrong with something that arrived, for progress()
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

std::unique_ptr<NetEngine> make_ucx_engine(Bootstrap& bs, double timeout, size_t bulk_bytes) {
  return std::make_unique<UcxEngine>(bs, timeout, bulk_bytes);
}

}  // namespace gshmem::proxy

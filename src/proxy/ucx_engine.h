// The UCX engine (the NetEngine of make_ucx_engine) as the files that define it see it: the
// class and the records it keeps of what is in flight. Private to the files that define its
// members, which the build compiles only when it found UCX's headers:
//   ucx_engine.cpp    set-up and teardown, regions and their key exchange, the operations
//   ucx_ordering.cpp  flushes, fences, and the signals held behind them
//   ucx_arrivals.cpp  the active-message handlers and what progress does with what arrived
//   ucx_parts.cpp     bulk transfers out in parts (staged ones through outgoing chunks)
//   ucx_atomics.cpp   atomics: sent as messages, applied by the target's atomic sink, answered
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bootstrap/socket.h"  // Deadline
#include "common/process.h"
#include "proxy/cpu_sink.h"
#include "proxy/net_engine.h"
#include "proxy/staging.h"
#include "proxy/ucx_api.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy::ucx {

struct PeerRegion {
  uint64_t base = 0;
  uint64_t bytes = 0;
  ucp_rkey_h rkey = nullptr;
};

struct Region {
  bool live = false;       // usable as a target
  bool accepting = false;  // this rank's part takes signals (set before the exchange ends)
  ucp_mem_h memh = nullptr;
  std::vector<PeerRegion> peers;  // index: rank (this rank's entry holds only base and bytes)
};

// What a target answers a bulk put for a region it does not have: the sender's request fails
// with it, which the sender raises as its own usage error.
constexpr ucs_status_t kNoRegion = UCS_ERR_NO_ELEM;

constexpr uint64_t kNoMessage = ~uint64_t{0};

// An operation UCX has not finished yet: a put or get (with its completion callback), a
// signal, a bulk put's ack or a get's reply.
struct Pending {
  void* request;
  int pe;
  Done done;
  void* arg;
  uint64_t tag;
  std::shared_ptr<uint64_t> value;  // a put_value's source, kept until UCX is done with it
  uint64_t seq;                     // issue order (flushes wait for what was issued before them)
  uint64_t bulk_message = kNoMessage;  // a bulk put: its id in unacked_
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

// A bulk transfer on its way out in parts (a put, or the reply to a peer's get): staged memory
// in parts of one chunk, copied into outgoing chunks and sent as chunks come free; other memory
// in parts of at most part_bytes_, all sent at once from where the data is.
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
  bool staged;
  uint64_t next = 0;       // bytes handed to parts so far
  uint64_t in_flight = 0;  // parts sent and not complete
  bool refused = false;    // a part of a put found no region at the target
};

// A part of an Outgoing transfer: being copied into its chunk (staged), or being sent.
struct PartCopy {
  void* chunk;  // null: not staged, sent from the transfer's own memory
  Outgoing* transfer;
  uint64_t offset;  // in the transfer
  uint64_t bytes;
};

struct PartSend {
  void* request;
  void* chunk;  // null: not staged
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
  uint64_t seq;
  uint64_t landed = 0;  // parts of the reply
};

// A peer's bulk get this rank serves once the worker is outside its callbacks.
struct Serve {
  int pe;
  uint64_t id;
  const void* src;
  uint64_t bytes;  // 0: refused
};

// An atomic of this rank waiting for the target's answer.
struct AtomicCall {
  int pe;
  Fetched fetched;
  void* arg;
  uint64_t tag;
  uint64_t seq;
};

// A flush under way: what it waits for is what was issued before it started.
struct Flush {
  int only;          // -1: every peer
  uint64_t seq;      // operations with a smaller seq
  uint64_t message;  // bulk puts with a smaller id (acknowledged)
  std::vector<void*> requests;  // per peer: UCX's endpoint flush, null once done
  Deadline deadline;
  // Whether signals held before it must have arrived (reflush_behind); not for a put_signal's
  // own flush, which orders its signal behind its data only (earlier held signals to that
  // peer go out before it anyway).
  bool covers_signals = true;
};

// A signal held back until a flush of what was issued before it finished (a small put's: of
// its peer, so that the signal does not overtake the data; a fenced signal's: of every peer),
// then sent by progress; held signals go out in the order they were held. The proxy thread
// meanwhile goes on issuing what follows.
struct HeldSignal {
  int pe;
  uint64_t flush;  // token of the flush it waits for
  wire::Signal msg;
  uint64_t seq;  // issue order: flushes started while it is held wait for it
};

// A peer's atomic or inline put: started through the atomic sink in arrival order, answered
// once done.
struct AtomicArrival {
  int from;
  uint64_t id;
  void* word;  // null: refused (answered as such); an inline put's destination
  Atomic atomic;
  std::optional<SignalWord> then;  // a value or inline put's signal, applied right after it
  std::optional<std::vector<unsigned char>> written;  // an inline put's bytes
  uint64_t sink_id = 0;
};

class UcxEngine final : public NetEngine {
 public:
  UcxEngine(Bootstrap& bs, double timeout, size_t bulk_bytes, size_t part_bytes,
            bool local_shared_memory);
  ~UcxEngine() override;

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const char* name() const override { return "ucx"; }

  int register_region(void* base, size_t bytes) override;
  void deregister_region(int region) override;
  void barrier() override;
  size_t region_bytes(int region, int pe) const override;
  void put(int pe, const void* src, size_t bytes, int region, uint64_t offset, Done done,
           void* arg, uint64_t tag, const SignalAfter* signal) override;
  void put_value(int pe, int region, uint64_t offset, uint64_t value, size_t bytes, Done done,
                 void* arg, uint64_t tag, const SignalAfter* signal) override;
  void put_inline(int pe, int region, uint64_t offset, const void* data, size_t bytes, Done done,
                  void* arg, uint64_t tag, const SignalAfter* signal) override;
  void get(int pe, void* dst, size_t bytes, int region, uint64_t offset, Done done, void* arg,
           uint64_t tag) override;
  void signal(int pe, int region, uint64_t offset, uint64_t value,
              SignalUpdate update) override;
  void fenced_signal(int pe, int region, uint64_t offset, uint64_t value,
                     SignalUpdate update) override;
  void set_staging(Staging* staging) override;
  void atomic(int pe, int region, uint64_t offset, const Atomic& a, Fetched fetched, void* arg,
              uint64_t tag) override;
  void set_signal_sink(SignalSink sink, void* arg) override;
  void set_atomic_sink(AtomicSink* sink) override;
  void fence() override;
  void flush() override;
  uint64_t flush_start() override;
  bool flushed(uint64_t token) override;
  bool progress() override;
  bool busy() const override;

 private:
  struct Handler {
    UcxEngine* engine;
    int pe;
  };

  // ucx_ordering.cpp
  static wire::Signal to_wire(const SignalAfter& s);
  static wire::Signal to_wire(const SignalAfter* s);  // null: no signal (wire::kNoSignal)
  // `seq`: the issue order it took when held (HeldSignal); else a new one.
  void send_signal(int pe, const wire::Signal& msg, std::optional<uint64_t> seq = std::nullopt);
  // Sends `msg` to `pe` once what was issued so far to `flush_of` (every peer: -1) is
  // complete, without waiting here.
  void hold_signal(int pe, const wire::Signal& msg, int flush_of);
  // Sends the held signals whose flush finished, oldest first; returns whether any went.
  bool send_held_signals();
  void reflush_behind(const HeldSignal& h);
  // UCX's flush of the endpoint to `pe` (null: done at once); fails the peer on an error.
  void* flush_endpoint(int pe);
  // Blocking: progresses until every held signal went out. Collective calls start with it: a
  // peer may wait for such a signal before it enters the same call, and the exchange itself
  // progresses the worker only.
  void send_held_signals_now();
  void fence_locked();
  // Returns once every operation issued so far to peer `only` (every peer: -1) is complete.
  void flush_locked(int only = -1);
  // Starts a flush of what was issued so far to `only` (every peer: -1); its token.
  uint64_t start_flush(int only);
  // Whether flush `token` is done (then forgotten); throws on a failed peer or at its deadline,
  // naming the peers waited for (and forgets it).
  bool flush_done(uint64_t token);
  void drop_flush(std::map<uint64_t, Flush>::iterator it);

  // ucx_engine.cpp
  void reach_signal(int pe, int region, uint64_t offset);
  ucs_status_ptr_t send(int pe, unsigned id, const void* header, size_t header_bytes,
                        const void* data, size_t bytes, bool eager_data = false);
  bool progress_locked();
  void open();
  void close();
  // A template defined and used in ucx_engine.cpp only.
  template <typename F>
  void progress_during(std::unique_lock<std::mutex>& lock, F&& exchange);
  std::vector<uint8_t> pack_region(Region& region, void* base, size_t bytes, std::string& failure);
  void release(Region& region);
  Region& live_region(int region);
  const Region& live_region(int region) const;
  const PeerRegion& reach(int pe, int region, uint64_t offset, size_t bytes, const char* op);
  void track(ucs_status_ptr_t req, int pe, Done done, void* arg, uint64_t tag, const char* op,
             std::shared_ptr<uint64_t> value = nullptr, uint64_t bulk_message = kNoMessage,
             std::optional<uint64_t> seq = std::nullopt);
  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status);
  void check_peers();
  [[noreturn]] void fail_peer(int pe, ucs_status_t status, const char* op);

  // ucx_arrivals.cpp
  bool advance();
  bool advance_unguarded();
  void received(const Arrival& a);
  void landed(const Arrival& a);
  void failed(const Arrival& a, const std::string& what);
  void acknowledge(int sender, uint64_t message, bool landed);
  void send_quietly(int pe, unsigned id, const void* header, size_t header_bytes,
                    const void* data, size_t bytes);
  void note_arrival_error(const std::string& what);
  const PeerRegion* landing(uint64_t region, uint64_t offset, uint64_t bytes) const;
  bool valid_signal(const wire::Signal& s) const;
  void apply_signal(const wire::Signal& s);
  static bool rendezvous(const ucp_am_recv_param_t* param);
  static ucs_status_t on_signal(void* arg, const void* header, size_t header_bytes, void*, size_t,
                                const ucp_am_recv_param_t*);
  static ucs_status_t on_bulk_put(void* arg, const void* header, size_t header_bytes, void* data,
                                  size_t bytes, const ucp_am_recv_param_t* param);
  static ucs_status_t on_bulk_put_ack(void* arg, const void* header, size_t header_bytes, void*,
                                      size_t, const ucp_am_recv_param_t*);
  static ucs_status_t on_get_request(void* arg, const void* header, size_t header_bytes, void*,
                                     size_t, const ucp_am_recv_param_t*);
  static ucs_status_t on_get_reply(void* arg, const void* header, size_t header_bytes, void* data,
                                   size_t bytes, const ucp_am_recv_param_t* param);

  // ucx_atomics.cpp
  // Sends `a` (checked) with `signal` to apply after it; `done` once the message left.
  void send_atomic(int pe, int region, uint64_t offset, const Atomic& a,
                   const SignalAfter* signal, Fetched fetched, void* arg, uint64_t tag, Done done,
                   const char* op);
  bool apply_atomics();
  static ucs_status_t on_atomic(void* arg, const void* header, size_t header_bytes, void*, size_t,
                                const ucp_am_recv_param_t*);
  static ucs_status_t on_atomic_reply(void* arg, const void* header, size_t header_bytes, void*,
                                      size_t, const ucp_am_recv_param_t*);
  // Sends `bytes` (1 to kInlineBytes, in range: checked) from `data` as one kWrite message
  // with `signal` to apply after them; `done` once the message left.
  void send_write(int pe, int region, uint64_t offset, const void* data, size_t bytes,
                  const SignalAfter* signal, Done done, void* arg, uint64_t tag, const char* what);
  static ucs_status_t on_write(void* arg, const void* header, size_t header_bytes, void* data,
                               size_t bytes, const ucp_am_recv_param_t* param);
  // The word an arriving signal names, or nothing: *refused when it names none of ours.
  std::optional<SignalWord> arriving_signal(const wire::Signal& s, bool* refused) const;

  // ucx_parts.cpp
  uint64_t parts_of(uint64_t bytes, bool staged) const;
  void send_in_parts(Outgoing t);
  void start_parts(Outgoing& t);
  bool send_parts();
  void send_part(const PartCopy& c);
  std::string no_region(int pe) const;

  // Templates used by more than one of those files, hence defined here.

  // A message's header as `out`, when it has out's size.
  template <typename T>
  static bool read_header(const void* header, size_t bytes, T& out) {
    if (bytes != sizeof out) return false;
    std::memcpy(&out, header, sizeof out);
    return true;
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

  const UcxApi& api_;
  mutable std::mutex mu_;  // UCX_THREAD_MODE_SERIALIZED: one caller at a time
  Bootstrap& bs_;
  double timeout_;
  size_t bulk_bytes_;
  size_t part_bytes_;
  int rank_;
  int nranks_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<Handler> handlers_;
  std::vector<ucs_status_t> peer_errors_;
  // Peers on this host reached without UCX's error handling (net_engine.h), watched through
  // /proc at most every kLivenessPeriod; pid 0: another host, or watched by UCX.
  bool local_shared_memory_;
  std::vector<ProcessPlace> local_peers_;
  std::chrono::steady_clock::time_point next_liveness_check_{};
  std::vector<Region> regions_;
  std::vector<Pending> pending_;
  std::deque<HeldSignal> held_signals_;
  std::map<uint64_t, int> unacked_;  // bulk puts sent and not yet acknowledged: id -> peer
  std::vector<Arrival> arrivals_;  // rendezvous data announced, not yet being received
  std::vector<Arrival> receiving_;
  std::vector<Serve> serves_;
  std::vector<wire::BulkPutAck> acks_;  // owed to senders (`from`: the sender here)
  std::unordered_map<uint64_t, Fetch> fetches_;  // this rank's bulk gets, by id
  uint64_t next_fetch_ = 0;
  uint64_t next_message_ = 0;  // ids of this rank's bulk puts
  uint64_t issued_ = 0;        // seq of the next operation (Pending, Fetch, AtomicCall)
  std::map<uint64_t, Flush> flushes_;  // by token
  uint64_t next_flush_ = 0;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> parts_landed_;  // (sender, message)
  Staging* staging_ = nullptr;
  std::list<Outgoing> outgoing_;  // a list: parts in flight point at their transfer
  std::vector<PartCopy> copying_out_;
  std::vector<PartSend> part_sends_;
  std::vector<Arrival> copying_in_;  // staged parts received, on their way into the GPU
  SignalSink sink_ = &cpu_signal_sink;
  void* sink_arg_ = nullptr;
  std::string arrival_error_;  // what went wrong with something that arrived, for progress()
  std::string refusal_;        // a bulk put in parts that a target refused, for progress()
  std::unordered_map<uint64_t, AtomicCall> atomic_calls_;  // this rank's atomics, by id
  uint64_t next_atomic_ = 0;
  std::deque<AtomicArrival> atomic_arrivals_;  // peers' atomics, in arrival order
  size_t atomics_started_ = 0;                 // the leading atomic_arrivals_ started
  CpuAtomicSink cpu_atomics_;
  AtomicSink* atomic_sink_ = &cpu_atomics_;
};

}  // namespace gshmem::proxy::ucx

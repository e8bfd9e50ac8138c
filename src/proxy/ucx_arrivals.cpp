// The UCX engine's side of what arrives from peers (ucx_engine.h declares the class): the
// active-message handlers UCX calls inside worker_progress (signals, bulk put parts and their
// acks, get requests, get reply parts), and advance(), which finishes outside UCX's callbacks
// what they recorded: receiving announced rendezvous data (through a staging chunk for staged
// memory), counting landed parts, applying signals, acknowledging bulk puts, serving peers' gets.
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "proxy/net_engine.h"
#include "proxy/staging.h"
#include "proxy/ucx_api.h"
#include "proxy/ucx_engine.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy::ucx {

// UCX's progress, then the work its callbacks left: receiving announced rendezvous data,
// finishing what landed, serving peers' gets. Never throws (it also runs while a bootstrap
// exchange is under way on another thread): failures wait in arrival_error_ and peer_errors_.
bool UcxEngine::advance() {
  try {
    return advance_unguarded();
  } catch (const std::exception& e) {
    note_arrival_error(e.what());
  } catch (...) {
    note_arrival_error("unknown error while progressing the network");
  }
  return true;
}

bool UcxEngine::advance_unguarded() {
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
  std::vector<wire::BulkPutAck> acks;
  acks.swap(acks_);
  for (wire::BulkPutAck& ack : acks) {
    const int sender = static_cast<int>(ack.from);
    ack.from = static_cast<uint64_t>(rank_);
    send_quietly(sender, wire::kBulkPutAck, &ack, sizeof ack, nullptr, 0);
    moved = true;
  }
  std::vector<Serve> serving;
  serving.swap(serves_);
  for (const Serve& s : serving) {
    wire::GetReply reply{s.id, s.bytes > 0 ? 1u : 0u, 0, 1};
    const bool staged = s.bytes > 0 && staging_ != nullptr && staging_->staged(s.src);
    if (staged || s.bytes > part_bytes_) {
      reply.parts = parts_of(s.bytes, staged);
      send_in_parts({s.pe, wire::kGetReply, {}, reply, static_cast<const char*>(s.src), s.bytes,
                     nullptr, nullptr, 0, staged});
    } else {
      send_quietly(s.pe, wire::kGetReply, &reply, sizeof reply, s.src, s.bytes);
    }
    moved = true;
  }
  moved = apply_atomics() || moved;
  return send_parts() || moved;
}

// A part arrived: counted, once out of its staging chunk (if any) into the GPU.
void UcxEngine::received(const Arrival& a) {
  if (a.chunk == nullptr) {
    landed(a);
    return;
  }
  staging_->start_copy(a.chunk, a.dst, a.chunk, a.bytes);
  copying_in_.push_back(a);
}

// A part of a bulk transfer is in place. Once every part of a put is: its signal, and the
// sender hears so; of a get's reply: the get is done.
void UcxEngine::landed(const Arrival& a) {
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
  acknowledge(static_cast<int>(a.header.from), a.header.message, true);
}

// Rendezvous data that could not be received: this rank raises `what`; the sender of a put
// hears that it failed (no wait for an ack that cannot come); a get is over.
void UcxEngine::failed(const Arrival& a, const std::string& what) {
  note_arrival_error(what);
  if (a.put) {
    acknowledge(static_cast<int>(a.header.from), a.header.message, false);
  } else {
    fetches_.erase(a.get_id);
  }
}

// Queued: it may be called from a UCX callback; advance() sends it.
void UcxEngine::acknowledge(int sender, uint64_t message, bool landed) {
  acks_.push_back({static_cast<uint64_t>(sender), message, landed ? 1u : 0u});
}

// A send from advance(): a failure marks the peer failed instead of throwing.
void UcxEngine::send_quietly(int pe, unsigned id, const void* header, size_t header_bytes,
                             const void* data, size_t bytes) {
  ucs_status_ptr_t req = send(pe, id, header, header_bytes, data, bytes);
  if (UCS_PTR_IS_ERR(req)) {
    peer_errors_[pe] = UCS_PTR_STATUS(req);
  } else if (req != nullptr) {
    pending_.push_back({req, pe, nullptr, nullptr, 0, nullptr, issued_++});
  }
}

void UcxEngine::note_arrival_error(const std::string& what) {
  if (arrival_error_.empty()) arrival_error_ = what;
}

// The active-message handlers run inside worker_progress (mu_ held by the caller); they only
// record what arrived, which advance() finishes outside UCX's callbacks. A region may have
// been deregistered meanwhile: late data is dropped rather than written into memory no
// longer ours (a late signal silently; a late bulk put or get as an error here).

// This rank's part of `region` when [offset, offset + bytes) lies inside it and it takes
// arrivals; else null.
const PeerRegion* UcxEngine::landing(uint64_t region, uint64_t offset, uint64_t bytes) const {
  if (region >= regions_.size() || !regions_[region].accepting) return nullptr;
  const PeerRegion& mine = regions_[region].peers[rank_];
  if (offset > mine.bytes || bytes > mine.bytes - offset) return nullptr;
  return &mine;
}

bool UcxEngine::valid_signal(const wire::Signal& s) const {
  return s.offset % sizeof(uint64_t) == 0 && landing(s.region, s.offset, sizeof(uint64_t)) &&
         s.update <= static_cast<uint64_t>(SignalUpdate::kSet);
}

void UcxEngine::apply_signal(const wire::Signal& s) {
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

bool UcxEngine::rendezvous(const ucp_am_recv_param_t* param) {
  return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
}

ucs_status_t UcxEngine::on_signal(void* arg, const void* header, size_t header_bytes, void*,
                                  size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxEngine*>(arg);
  wire::Signal msg;
  if (read_header(header, header_bytes, msg)) self->apply_signal(msg);
  return UCS_OK;
}

ucs_status_t UcxEngine::on_bulk_put(void* arg, const void* header, size_t header_bytes,
                                    void* data, size_t bytes, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  wire::BulkPut msg;
  if (!read_header(header, header_bytes, msg) ||
      msg.from >= static_cast<uint64_t>(self->nranks_)) {
    return UCS_OK;
  }
  const PeerRegion* mine = self->landing(msg.region, msg.offset, bytes);
  if (!rendezvous(param)) {  // UCX was told to send it by rendezvous: not expected
    self->note_arrival_error("a bulk put of " + std::to_string(bytes) + " bytes from rank " +
                             std::to_string(msg.from) + " arrived without rendezvous");
    self->acknowledge(static_cast<int>(msg.from), msg.message, false);
    return UCS_OK;
  }
  if (mine == nullptr) return kNoRegion;  // the sender's request fails with it: its error
  self->arrivals_.push_back({data, reinterpret_cast<void*>(mine->base + msg.offset), bytes,
                             true, msg, 0, msg.parts});
  return UCS_INPROGRESS;
}

ucs_status_t UcxEngine::on_bulk_put_ack(void* arg, const void* header, size_t header_bytes,
                                        void*, size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxEngine*>(arg);
  wire::BulkPutAck msg;
  if (read_header(header, header_bytes, msg) && self->unacked_.erase(msg.message) > 0) {
    if (msg.landed == 0) {
      self->note_arrival_error("a bulk put to rank " + std::to_string(msg.from) +
                               " failed there (it could not receive the data)");
    }
  }
  return UCS_OK;
}

ucs_status_t UcxEngine::on_get_request(void* arg, const void* header, size_t header_bytes,
                                       void*, size_t, const ucp_am_recv_param_t*) {
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

ucs_status_t UcxEngine::on_get_reply(void* arg, const void* header, size_t header_bytes,
                                     void* data, size_t bytes, const ucp_am_recv_param_t* param) {
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

}  // namespace gshmem::proxy::ucx

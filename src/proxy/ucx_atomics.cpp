// The UCX engine's atomics (ucx_engine.h declares the class). An atomic travels as an active
// message, not as a UCX atomic: UCX's network atomics reach GPU memory on no transport and host
// memory only on some (none over TCP or shared memory). The target starts each one through its
// atomic sink in arrival order (a CPU compare-and-swap on host memory, a kernel on GPU memory),
// and answers with the old value once the sink says it was applied; the requester's atomic is
// complete (for flush) when the answer is back. A value put of 4 or 8 aligned bytes travels the
// same way, as a swap that carries its signal (put_value): the sink applies both in order; so
// does an inline put (put_inline: up to kInlineBytes sent as the message's data).
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "proxy/amo.h"
#include "proxy/ucx_engine.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy::ucx {

void UcxEngine::atomic(int pe, int region, uint64_t offset, const Atomic& a, Fetched fetched,
                       void* arg, uint64_t tag) {
  std::lock_guard<std::mutex> lock(mu_);
  send_atomic(pe, region, offset, a, nullptr, fetched, arg, tag, nullptr, "atomic");
}

void UcxEngine::send_atomic(int pe, int region, uint64_t offset, const Atomic& a,
                            const SignalAfter* signal, Fetched fetched, void* arg, uint64_t tag,
                            Done done, const char* what) {
  const auto op = static_cast<uint64_t>(a.op);
  const auto type = static_cast<uint64_t>(a.type);
  GSHMEM_REQUIRE(amo_valid(op, type), "no network atomic with operation " + std::to_string(op) +
                                          " on type " + std::to_string(type));
  const uint64_t bytes = amo_bytes(a.type);
  GSHMEM_REQUIRE(offset % bytes == 0, "an atomic on " + std::to_string(bytes) +
                                          " bytes needs an offset aligned to them, got " +
                                          std::to_string(offset));
  reach(pe, region, offset, bytes, what);
  if (signal != nullptr) reach_signal(pe, signal->region, signal->offset);
  const uint64_t id = next_atomic_++;
  const wire::AtomicRequest msg{static_cast<uint64_t>(rank_), id, static_cast<uint64_t>(region),
                                offset, op, type, a.operand, a.compare, to_wire(signal)};
  atomic_calls_[id] = {pe, fetched, arg, tag, issued_++};
  try {
    track(send(pe, wire::kAtomic, &msg, sizeof msg, nullptr, 0), pe, done, arg, tag, what);
  } catch (...) {
    atomic_calls_.erase(id);
    throw;
  }
}

void UcxEngine::put_inline(int pe, int region, uint64_t offset, const void* data, size_t bytes,
                           Done done, void* arg, uint64_t tag, const SignalAfter* signal) {
  std::lock_guard<std::mutex> lock(mu_);
  GSHMEM_REQUIRE(bytes >= 1 && bytes <= kInlineBytes,
                 "an inline put carries 1 to " + std::to_string(kInlineBytes) + " bytes, not " +
                     std::to_string(bytes));
  reach(pe, region, offset, bytes, "put_inline");
  send_write(pe, region, offset, data, bytes, signal, done, arg, tag, "put_inline");
}

void UcxEngine::send_write(int pe, int region, uint64_t offset, const void* data, size_t bytes,
                           const SignalAfter* signal, Done done, void* arg, uint64_t tag,
                           const char* what) {
  if (signal != nullptr) reach_signal(pe, signal->region, signal->offset);
  const uint64_t id = next_atomic_++;
  const wire::WriteRequest msg{static_cast<uint64_t>(rank_), id, static_cast<uint64_t>(region),
                               offset, bytes, to_wire(signal)};
  // The message's data must outlive the send: a copy that the request keeps.
  std::shared_ptr<uint64_t> copy(new uint64_t[(bytes + 7) / 8], std::default_delete<uint64_t[]>());
  std::memcpy(copy.get(), data, bytes);
  atomic_calls_[id] = {pe, nullptr, arg, tag, issued_++};
  try {
    track(send(pe, wire::kWrite, &msg, sizeof msg, copy.get(), bytes, true), pe, done, arg, tag,
          what, copy);
  } catch (...) {
    atomic_calls_.erase(id);
    throw;
  }
}

void UcxEngine::set_atomic_sink(AtomicSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  atomic_sink_ = sink != nullptr ? sink : &cpu_atomics_;
}

// Starts the arrived atomics in order while the sink has room, then answers, in order, those it
// applied (a refused one is answered as such when its turn comes). Runs in advance(), outside
// UCX's callbacks.
bool UcxEngine::apply_atomics() {
  bool moved = false;
  for (; atomics_started_ < atomic_arrivals_.size(); ++atomics_started_) {
    AtomicArrival& a = atomic_arrivals_[atomics_started_];
    if (a.word != nullptr) {
      if (atomic_sink_->full()) break;
      const SignalWord* then = a.then ? &*a.then : nullptr;
      a.sink_id = a.written ? atomic_sink_->start_write(a.word, a.written->data(),
                                                        a.written->size(), then)
                            : atomic_sink_->start(a.word, a.atomic, then);
    }
    moved = true;
  }
  while (atomics_started_ > 0) {
    const AtomicArrival& a = atomic_arrivals_.front();
    uint64_t old = 0;
    if (a.word != nullptr && !atomic_sink_->done(a.sink_id, &old)) break;
    const wire::AtomicReply reply{a.id, a.word != nullptr ? 1u : 0u, old};
    send_quietly(a.from, wire::kAtomicReply, &reply, sizeof reply, nullptr, 0);
    atomic_arrivals_.pop_front();
    --atomics_started_;
    moved = true;
  }
  return moved;
}

ucs_status_t UcxEngine::on_atomic(void* arg, const void* header, size_t header_bytes, void*,
                                  size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxEngine*>(arg);
  wire::AtomicRequest msg;
  if (!read_header(header, header_bytes, msg) ||
      msg.from >= static_cast<uint64_t>(self->nranks_)) {
    return UCS_OK;
  }
  void* word = nullptr;
  if (amo_valid(msg.op, msg.type)) {
    const auto type = static_cast<AmoType>(msg.type);
    const uint64_t bytes = amo_bytes(type);
    const PeerRegion* mine = self->landing(msg.region, msg.offset, bytes);
    if (mine != nullptr && msg.offset % bytes == 0) {
      word = reinterpret_cast<void*>(mine->base + msg.offset);
    }
  }
  const Atomic a{static_cast<AmoOp>(msg.op), static_cast<AmoType>(msg.type), msg.operand,
                 msg.compare};
  bool refused = false;
  std::optional<SignalWord> then = self->arriving_signal(msg.signal, &refused);
  if (refused) word = nullptr;  // refused whole: its signal must not say data arrived that did not
  self->atomic_arrivals_.push_back({static_cast<int>(msg.from), msg.id, word, a, then});
  return UCS_OK;
}

ucs_status_t UcxEngine::on_write(void* arg, const void* header, size_t header_bytes, void* data,
                                 size_t bytes, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxEngine*>(arg);
  wire::WriteRequest msg;
  if (!read_header(header, header_bytes, msg) ||
      msg.from >= static_cast<uint64_t>(self->nranks_)) {
    return UCS_OK;
  }
  // Sent eagerly, so the bytes are here now; anything else is refused (answered as such).
  const bool here = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0 && msg.bytes == bytes &&
                    bytes >= 1 && bytes <= kInlineBytes;
  const PeerRegion* mine = here ? self->landing(msg.region, msg.offset, bytes) : nullptr;
  void* dst = mine != nullptr ? reinterpret_cast<void*>(mine->base + msg.offset) : nullptr;
  bool refused = false;
  std::optional<SignalWord> then = self->arriving_signal(msg.signal, &refused);
  if (refused) dst = nullptr;
  std::optional<std::vector<unsigned char>> written;
  if (dst != nullptr) {
    const auto* from = static_cast<const unsigned char*>(data);
    written.emplace(from, from + bytes);
  }
  self->atomic_arrivals_.push_back(
      {static_cast<int>(msg.from), msg.id, dst, Atomic{}, then, std::move(written)});
  return UCS_OK;
}

std::optional<SignalWord> UcxEngine::arriving_signal(const wire::Signal& s, bool* refused) const {
  *refused = false;
  if (s.region == wire::kNoSignal) return std::nullopt;
  if (!valid_signal(s)) {
    *refused = true;
    return std::nullopt;
  }
  const PeerRegion& at = regions_[s.region].peers[rank_];
  return SignalWord{reinterpret_cast<uint64_t*>(at.base + s.offset), s.value,
                    static_cast<SignalUpdate>(s.update)};
}

ucs_status_t UcxEngine::on_atomic_reply(void* arg, const void* header, size_t header_bytes,
                                        void*, size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxEngine*>(arg);
  wire::AtomicReply msg;
  if (!read_header(header, header_bytes, msg)) return UCS_OK;
  const auto it = self->atomic_calls_.find(msg.id);
  if (it == self->atomic_calls_.end()) return UCS_OK;
  const AtomicCall call = it->second;
  self->atomic_calls_.erase(it);
  if (msg.applied == 0) {
    self->note_arrival_error("an atomic, value or inline put at rank " + std::to_string(call.pe) +
                             " failed there (its region is gone)");
  } else if (call.fetched != nullptr) {
    call.fetched(call.arg, call.tag, msg.old);
  }
  return UCS_OK;
}

}  // namespace gshmem::proxy::ucx

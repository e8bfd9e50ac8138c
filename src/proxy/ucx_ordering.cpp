// The UCX engine's ordering (ucx_engine.h declares the class): flushes, fences, and the signals
// held behind them. A flush is one UCX endpoint flush per peer plus what UCX's flush does not
// cover (bulk puts' acks, gets' replies, atomics' answers, signals still held), each compared by
// its issue order (seq) with the flush. A signal that must follow data (a small put_signal's,
// a fenced signal) is held until a flush it started finishes, and sent by progress, in order,
// so the thread that issued it goes on meanwhile.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "proxy/ucx_engine.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy::ucx {

wire::Signal UcxEngine::to_wire(const SignalAfter& s) {
  return {static_cast<uint64_t>(s.region), s.offset, s.value, static_cast<uint64_t>(s.update)};
}

wire::Signal UcxEngine::to_wire(const SignalAfter* s) {
  return s != nullptr ? to_wire(*s) : wire::Signal{wire::kNoSignal, 0, 0, 0};
}

void UcxEngine::send_signal(int pe, const wire::Signal& msg, std::optional<uint64_t> seq) {
  track(send(pe, wire::kSignal, &msg, sizeof msg, nullptr, 0), pe, nullptr, nullptr, 0,
        "signal", nullptr, kNoMessage, seq);
}

void UcxEngine::hold_signal(int pe, const wire::Signal& msg, int flush_of) {
  const uint64_t flush = start_flush(flush_of);  // its seq: what was issued before, not this
  flushes_.at(flush).covers_signals = flush_of < 0;  // a put_signal's: its data only
  const uint64_t seq = issued_++;
  // Sent at once where the data is already complete (a put that shared memory finished in the
  // call): a round of progress later would add its cost to every small put_signal.
  if (flush_done(flush)) {
    send_signal(pe, msg, seq);
    return;
  }
  held_signals_.push_back({pe, flush, msg, seq});
}

void UcxEngine::send_held_signals_now() {
  while (!held_signals_.empty()) progress_locked();  // each flush is bounded by its deadline
}

bool UcxEngine::send_held_signals() {
  bool sent = false;
  while (!held_signals_.empty()) {
    const HeldSignal h = held_signals_.front();
    bool ready = false;
    try {
      ready = flush_done(h.flush);
    } catch (...) {
      held_signals_.pop_front();  // its flush failed (and is forgotten): the error says why
      throw;
    }
    if (!ready) break;
    held_signals_.pop_front();
    send_signal(h.pe, h.msg, h.seq);
    reflush_behind(h);
    sent = true;
  }
  return sent;
}

// A flush that covers a held signal (started after it was held) issued its endpoint flush to
// h.pe before the signal went out, so that endpoint flush does not say the signal arrived: it
// gets a new one, issued after the signal, which covers everything the old one did.
void UcxEngine::reflush_behind(const HeldSignal& h) {
  for (auto& [token, f] : flushes_) {
    if (!f.covers_signals || f.seq <= h.seq || (f.only >= 0 && f.only != h.pe)) continue;
    void*& req = f.requests[h.pe];
    if (req != nullptr) api_.request_free(req);  // the newer flush completes after it
    req = nullptr;  // not left dangling should the new flush fail
    req = flush_endpoint(h.pe);
  }
}

void* UcxEngine::flush_endpoint(int pe) {
  ucp_request_param_t param{};
  const ucs_status_ptr_t req = api_.ep_flush_nbx(eps_[pe], &param);
  if (UCS_PTR_IS_ERR(req)) fail_peer(pe, UCS_PTR_STATUS(req), "flush");
  return req;
}

// A fence is a flush: UCX's own fence orders its one-sided operations among themselves, not
// before an active message (a signal, a bulk put) issued after it, nor bulk data a target
// receives when it gets to it. Everything issued before is complete before anything after.
void UcxEngine::fence_locked() { flush_locked(); }

void UcxEngine::flush_locked(int only) {
  const uint64_t token = start_flush(only);
  try {
    do {
      progress_locked();
    } while (!flush_done(token));
  } catch (...) {
    const auto it = flushes_.find(token);
    if (it != flushes_.end()) drop_flush(it);
    throw;
  }
}

// One UCX endpoint flush per peer, so that a timeout can name the peers that did not finish;
// with the acks, answers and replies of what was issued before, flush_done waits for them.
uint64_t UcxEngine::start_flush(int only) {
  const uint64_t token = next_flush_++;
  Flush& f = flushes_.emplace(token, Flush{only, issued_, next_message_,
                                           std::vector<void*>(nranks_, nullptr),
                                           Deadline(timeout_)})
                 .first->second;
  try {
    for (int r = 0; r < nranks_; ++r) {
      if (r != rank_ && (only < 0 || r == only)) f.requests[r] = flush_endpoint(r);
    }
  } catch (...) {
    drop_flush(flushes_.find(token));  // frees the endpoint flushes already issued
    throw;
  }
  return token;
}

bool UcxEngine::flush_done(uint64_t token) {
  const auto it = flushes_.find(token);
  GSHMEM_REQUIRE(it != flushes_.end(), "no network flush " + std::to_string(token) + " under way");
  Flush& f = it->second;
  std::vector<bool> waiting(nranks_, false);
  for (int r = 0; r < nranks_; ++r) {
    void*& req = f.requests[r];
    if (req == nullptr) continue;
    const ucs_status_t st = api_.request_check_status(req);
    if (st == UCS_INPROGRESS) {
      waiting[r] = true;
      continue;
    }
    api_.request_free(req);
    req = nullptr;
    if (st != UCS_OK) {
      drop_flush(it);
      fail_peer(r, st, "flush");
    }
  }
  for (const auto& [message, pe] : unacked_) {  // by id: those issued before come first
    if (message >= f.message) break;
    waiting[pe] = true;
  }
  for (const auto& [id, g] : fetches_) waiting[g.pe] = waiting[g.pe] || g.seq < f.seq;
  for (const auto& [id, c] : atomic_calls_) waiting[c.pe] = waiting[c.pe] || c.seq < f.seq;
  for (const Pending& p : pending_) waiting[p.pe] = waiting[p.pe] || p.seq < f.seq;
  for (const HeldSignal& h : held_signals_) waiting[h.pe] = waiting[h.pe] || h.seq < f.seq;
  if (f.only >= 0) {  // what other peers still have in flight does not hold this flush up
    const bool theirs = waiting[f.only];
    std::fill(waiting.begin(), waiting.end(), false);
    waiting[f.only] = theirs;
  }
  if (std::find(waiting.begin(), waiting.end(), true) == waiting.end()) {
    drop_flush(it);
    return true;
  }
  if (!f.deadline.passed()) return false;
  std::string names;
  for (int r = 0; r < nranks_; ++r) {
    if (waiting[r]) names += (names.empty() ? "" : ", ") + std::to_string(r);
  }
  drop_flush(it);
  throw_error(GSHMEM_ERROR_TIMEOUT, "network flush did not finish within " +
                                        std::to_string(timeout_) +
                                        " s (GSHMEM_TIMEOUT); still waiting for rank(s) " + names);
}

void UcxEngine::drop_flush(std::map<uint64_t, Flush>::iterator it) {
  for (void* req : it->second.requests) {
    if (req != nullptr) api_.request_free(req);
  }
  flushes_.erase(it);
}

}  // namespace gshmem::proxy::ucx

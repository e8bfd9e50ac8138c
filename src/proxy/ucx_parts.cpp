// The UCX engine's bulk transfers out in parts (ucx_engine.h declares the class): a put, or the
// reply to a peer's get, larger than one part. Memory UCX moves itself goes in parts of at most
// part_bytes_ (net_engine.h: kDefaultPartBytes says why), all sent at once from where the data
// is; staged memory (staging.h says why) in parts of one chunk, copied out of the GPU into
// outgoing chunks and sent from them as chunks come free. The target counts the parts.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "proxy/staging.h"
#include "proxy/ucx_api.h"
#include "proxy/ucx_engine.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy::ucx {

uint64_t UcxEngine::parts_of(uint64_t bytes, bool staged) const {
  const uint64_t part = staged ? staging_->chunk_bytes() : part_bytes_;
  return (bytes + part - 1) / part;
}

std::string UcxEngine::no_region(int pe) const {
  return "rank " + std::to_string(pe) + " has no region for a bulk put (deregistered?)";
}

// Queues `t` and starts its first parts; progress() sends the rest and finishes it.
void UcxEngine::send_in_parts(Outgoing t) { start_parts(outgoing_.emplace_back(std::move(t))); }

// Hands out `t`'s parts that can go now: every part of memory UCX moves itself; of staged
// memory, as many as there are free outgoing chunks (each copied out first).
void UcxEngine::start_parts(Outgoing& t) {
  while (t.next < t.bytes) {
    const uint64_t len =
        std::min<uint64_t>(t.staged ? staging_->chunk_bytes() : part_bytes_, t.bytes - t.next);
    if (t.staged) {
      void* chunk = staging_->take(true);
      if (chunk == nullptr) return;
      staging_->start_copy(chunk, chunk, t.src + t.next, len);
      copying_out_.push_back({chunk, &t, t.next, len});
      ++t.in_flight;
    } else {
      ++t.in_flight;
      send_part({nullptr, &t, t.next, len});
    }
    t.next += len;
  }
}

// Transfers out: parts whose send completed give their chunk back (staged); parts copied out
// of the GPU are sent; free outgoing chunks start the next parts' copies. A transfer whose
// parts were all sent and completed is done; a put a target refused raises its usage error
// from progress().
bool UcxEngine::send_parts() {
  bool moved = reap(part_sends_, [&](const PartSend& done, ucs_status_t st) {
    Outgoing& t = *done.transfer;
    if (done.chunk != nullptr) staging_->give_back(done.chunk, true);
    --t.in_flight;
    if (st == kNoRegion && t.id == wire::kBulkPut) {
      t.refused = true;
    } else if (st != UCS_OK) {
      peer_errors_[t.pe] = st;
    }
  });
  moved = reap_copies(copying_out_, [&](const PartCopy& c) { send_part(c); }) || moved;
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    Outgoing& t = *it;
    const uint64_t before = t.next;
    start_parts(t);
    moved = moved || t.next != before;
    if (t.next < t.bytes || t.in_flight > 0) {
      ++it;
      continue;
    }
    const Outgoing finished = t;
    it = outgoing_.erase(it);
    if (finished.refused) {  // no ack will come for it
      unacked_.erase(finished.put.message);
      refusal_ = no_region(finished.pe);
    }
    if (finished.done != nullptr) finished.done(finished.arg, finished.tag);
  }
  return moved;
}

void UcxEngine::send_part(const PartCopy& c) {
  Outgoing& t = *c.transfer;
  wire::BulkPut put = t.put;
  wire::GetReply reply = t.reply;
  put.offset += c.offset;
  reply.offset = c.offset;
  const bool is_put = t.id == wire::kBulkPut;
  const void* data = c.chunk != nullptr ? c.chunk : static_cast<const void*>(t.src + c.offset);
  ucs_status_ptr_t req = send(t.pe, t.id, is_put ? static_cast<const void*>(&put) : &reply,
                              is_put ? sizeof put : sizeof reply, data, c.bytes);
  if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
    part_sends_.push_back({req, c.chunk, &t});
    return;
  }
  if (c.chunk != nullptr) staging_->give_back(c.chunk, true);
  --t.in_flight;
  if (UCS_PTR_IS_ERR(req)) peer_errors_[t.pe] = UCS_PTR_STATUS(req);
}

}  // namespace gshmem::proxy::ucx

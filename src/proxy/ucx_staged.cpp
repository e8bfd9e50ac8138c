// The UCX engine's staged bulk transfers out (ucx_engine.h declares the class; staging.h says
// why GPU memory is staged): a put of staged memory, or the reply to a peer's get of it, is
// split into parts of one chunk each, copied out of the GPU into outgoing chunks and sent from
// them as chunks come free.
#include <algorithm>
#include <cstdint>

#include "proxy/staging.h"
#include "proxy/ucx_api.h"
#include "proxy/ucx_engine.h"
#include "proxy/ucx_wire.h"

namespace gshmem::proxy::ucx {

uint64_t UcxEngine::parts_of(uint64_t bytes) const {
  const uint64_t chunk = staging_->chunk_bytes();
  return (bytes + chunk - 1) / chunk;
}

// Staged transfers out: parts whose send completed give their chunk back; parts copied out
// of the GPU are sent; free outgoing chunks start the next parts' copies. A transfer whose
// parts were all sent and completed is done.
bool UcxEngine::send_parts() {
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

void UcxEngine::send_part(const PartCopy& c) {
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

}  // namespace gshmem::proxy::ucx

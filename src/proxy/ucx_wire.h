// What the UCX engine's active messages carry (ucx_engine.h and the files it names). Every
// header is whole 64-bit words, so every rank of a job reads it the same way.
#pragma once

#include <cstdint>

namespace gshmem::proxy::wire {

enum MessageId : unsigned {
  kSignal = 1,      // SignalUpdate applied by the target (eager, no data)
  kBulkPut = 2,     // rendezvous data for the target's region, maybe a signal after it
  kBulkPutAck = 3,  // the target's: one bulk put landed (eager, no data)
  kGetRequest = 4,  // the target sends the bytes back as kGetReply (eager, no data)
  kGetReply = 5,    // rendezvous data for the requester's buffer (none when refused)
  kAtomic = 6,      // an atomic the target applies and answers (eager, no data)
  kAtomicReply = 7, // the answer: the word's old value (eager, no data)
  kWrite = 8,       // an inline put's bytes (eager data), applied and answered as an atomic
};

struct Signal {
  uint64_t region;
  uint64_t offset;
  uint64_t value;
  uint64_t update;  // SignalUpdate
};

constexpr uint64_t kNoSignal = ~uint64_t{0};

// One part of a bulk put (a transfer of staged memory travels in parts: staging.h); the target
// applies the signal and acknowledges once all `parts` of `message` landed.
struct BulkPut {
  uint64_t from;     // the sender's rank, for the ack
  uint64_t region;
  uint64_t offset;   // of this part
  uint64_t message;  // the sender's id for the transfer
  uint64_t parts;
  Signal signal;     // signal.region == kNoSignal: none
};

struct BulkPutAck {
  uint64_t from;
  uint64_t message;  // the sender's id for the transfer (BulkPut::message)
  uint64_t landed;   // 0: the target could not receive the data (it says why on its side)
};

struct GetRequest {
  uint64_t from;
  uint64_t id;      // the requester's, echoed in the reply
  uint64_t region;
  uint64_t offset;
  uint64_t bytes;
};

// One part of the reply to a bulk get: `offset` into the requester's buffer, of `parts`.
struct GetReply {
  uint64_t id;
  uint64_t served;  // 0: the target refused (the region went away); no data follows
  uint64_t offset;
  uint64_t parts;
};

struct AtomicRequest {
  uint64_t from;
  uint64_t id;  // the requester's, echoed in the reply
  uint64_t region;
  uint64_t offset;
  uint64_t op;    // AmoOp
  uint64_t type;  // AmoType
  uint64_t operand;
  uint64_t compare;
  Signal signal;  // applied right after the atomic (a value put's); region kNoSignal: none
};

// The bytes follow as the message's data (at most kInlineBytes, sent eagerly).
struct WriteRequest {
  uint64_t from;
  uint64_t id;  // the requester's, echoed in the AtomicReply
  uint64_t region;
  uint64_t offset;
  uint64_t bytes;
  Signal signal;  // applied right after the bytes; region kNoSignal: none
};

struct AtomicReply {
  uint64_t id;
  uint64_t applied;  // 0: the target refused (no such region there, or misaligned)
  uint64_t old;
};

}  // namespace gshmem::proxy::wire

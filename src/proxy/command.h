// What one proxy descriptor asks for: the 7 payload words of a queue slot
// (descriptor_queue.h), written by a producer (a GPU thread, or a host thread in the tests) and
// executed by the proxy thread (proxy.h) on the network engine.
//
//   word 0   op (bits 0-7) | target PE (bits 8-31) | data region (bits 32-47)
//            | signal region (bits 48-63)
//   word 1   local address: the source of a put, the destination of a get
//   word 2   offset in the target's data region
//   word 3   bytes
//   word 4   offset of the signal word in the target's signal region (kPutSignal, kSignal)
//   word 5   the value added to the signal word
//   word 6   local completion counter index + 1 (0: none), incremented once the source of a
//            put may be reused or a get's data has arrived
#pragma once

#include <cstdint>

#include "proxy/descriptor_queue.h"

namespace gshmem::proxy {

enum class Op : uint8_t {
  kPut = 1,        // data only
  kPutSignal = 2,  // data, then (ordered after it) the signal add
  kSignal = 3,     // the signal add only
  kGet = 4,
  kFence = 5,      // later operations to each PE land after earlier ones
  kQuiet = 6,      // every earlier operation is complete at its target before this one retires
};

struct Command {
  Op op = Op::kPut;
  uint32_t pe = 0;  // < 2^24
  uint16_t region = 0;
  uint16_t signal_region = 0;
  uint64_t local = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t signal_offset = 0;
  uint64_t signal_value = 0;
  uint64_t counter = 0;  // index + 1; 0: none
};

constexpr uint32_t kMaxProxyPe = (1u << 24) - 1;

inline void encode(const Command& c, uint64_t (&w)[kPayloadWords]) {
  w[0] = static_cast<uint64_t>(c.op) | (static_cast<uint64_t>(c.pe & kMaxProxyPe) << 8) |
         (static_cast<uint64_t>(c.region) << 32) | (static_cast<uint64_t>(c.signal_region) << 48);
  w[1] = c.local;
  w[2] = c.offset;
  w[3] = c.bytes;
  w[4] = c.signal_offset;
  w[5] = c.signal_value;
  w[6] = c.counter;
}

inline Command decode(const uint64_t (&w)[kPayloadWords]) {
  Command c;
  c.op = static_cast<Op>(w[0] & 0xff);
  c.pe = static_cast<uint32_t>((w[0] >> 8) & kMaxProxyPe);
  c.region = static_cast<uint16_t>(w[0] >> 32);
  c.signal_region = static_cast<uint16_t>(w[0] >> 48);
  c.local = w[1];
  c.offset = w[2];
  c.bytes = w[3];
  c.signal_offset = w[4];
  c.signal_value = w[5];
  c.counter = w[6];
  return c;
}

}  // namespace gshmem::proxy

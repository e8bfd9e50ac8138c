// gshmem's proxy queue as both sides see it: the 64-byte descriptors that GPU threads (or host
// threads) append and the comm's proxy thread executes on the network (src/proxy/proxy.h), and
// what each descriptor asks for. Shared by the host runtime and device code (nvcc and NVRTC),
// so it uses nothing but fixed-width types.
//
// Layout: `capacity` slots (a power of two), each one cache line: a sequence word, then 7 words
// of payload. Slot i % capacity holds ticket i once its sequence word reads i + 1, so a slot's
// previous generation (ticket i - capacity) can never pass for the current one.
//
//   reserve  a producer takes ticket t = tail by compare-and-swap, only while t - head <
//            capacity: a full queue refuses instead of handing out a ticket that would
//            overwrite an unread slot, so a producer can wait with a deadline.
//   publish  the producer stores the payload, then the sequence word t + 1 with release order.
//   pop      the consumer waits for slot h's sequence word to read h + 1 (acquire), copies the
//            payload (and, for kPutInline, the ticket's inline data), then stores head = h + 1
//            (release): the slot is free for ticket h + capacity.
// Many producers, one consumer; each producer's descriptors come out in the order it published
// them (tickets grow), descriptors of different producers in ticket order.
//
// Where the words live: `tail` is the producers' counter (GPU memory when the producers are
// kernels: atomics among GPU threads), `head` and the slots are host memory mapped into the GPU
// (the consumer writes head with plain stores; producers only read it). The operations are in
// src/proxy/descriptor_queue.h (host) and gshmem/device/proxy.cuh (device).
//
// Payload words:
//   word 0   op (bits 0-6) | signal stores instead of adding (bit 7) | target PE (bits 8-31)
//            | data region (bits 32-47) | signal region (bits 48-63); region kHeapRegion is
//            the comm's symmetric heap, whatever the engine's id for it is at the time
//   word 1   local address: the source of a put, the destination of a get; for kPutValue and
//            kPutValueSignal the value itself (its low `bytes` bytes, little-endian)
//   word 2   offset in the target's data region
//   word 3   bytes
//   word 4   offset of the signal word in the target's signal region (kPutSignal, kSignal,
//            kPutValueSignal)
//   word 5   the signal value: added to the word, or stored in it (bit 7 of word 0)
//   word 6   local completion counter index + 1 (0: none), incremented once the source of a
//            put may be reused or a get's data has arrived
// kAtomic uses word 1 for the operand, word 3 for the operation (bits 0-7), the operand type
// (bits 8-15) and whether the old value is wanted (bit 16), word 4 for compare_swap's
// comparand. kGetValue reads `bytes` (1, 2, 4 or 8) from the target into this ticket's result.
//
// Inline data (kPutInline, kPutInlineSignal): a put of at most kInlineBytes whose bytes the
// producer copied into inline_data[t % capacity] before it published ticket t (the release that
// publishes covers them); word 1 is unused. The proxy reads them before it frees the slot, so
// the target receives them in one message, with no read of the producer's memory by the network.
//
// Results (kAtomic that fetches, kGetValue): the proxy stores the value in results[t %
// capacity], then the ticket t + 1 there (release); the producer that took ticket t waits for
// that ticket, then reads the value. A result slot is reused by ticket t + capacity, so a
// producer reads its result as soon as it arrives (it is the only one waiting for it).
#pragma once

#include "gshmem/device_state.h"

namespace gshmem {
namespace proxy {

constexpr size_t kPayloadWords = 7;
// The largest put whose data travels in the queue (kPutInline): a ping-pong's 1 KiB put_signal
// through the proxy took ~36 us as a put, a flush and a signal, against ~16 for 8 bytes carried
// in the descriptor (docs/network.md).
constexpr uint64_t kInlineBytes = 1024;

struct alignas(64) Descriptor {
  uint64_t seq;  // ticket + 1 once published; anything else: not (yet) this ticket's
  uint64_t words[kPayloadWords];
};
static_assert(sizeof(Descriptor) == 64, "a descriptor is one cache line");

// The queue as both sides see it (by value; the memory is owned elsewhere).
struct QueueView {
  Descriptor* slots;
  uint64_t* tail;     // tickets handed out
  uint64_t* head;     // descriptors consumed
  uint64_t capacity;  // power of two
  uint8_t* inline_data;  // [capacity][kInlineBytes], 16-byte aligned (Inline data above)
};

// Whether `n` can be a capacity.
GSHMEM_HOST_DEVICE inline bool valid_capacity(uint64_t n) { return n >= 2 && (n & (n - 1)) == 0; }

enum class Op : uint8_t {
  kPut = 1,        // data only
  kPutSignal = 2,  // data, then (ordered after it) the signal update
  kSignal = 3,     // the signal update only, after (fenced) every earlier descriptor's data
  kGet = 4,
  kFence = 5,      // later operations to each PE land after earlier ones
  kQuiet = 6,      // every earlier operation is complete at its target before this one retires
  kPutValue = 7,   // 1, 2, 4 or 8 bytes carried in the descriptor (word 1): what p() stores
  kAtomic = 8,     // an atomic on a 4- or 8-byte word at the target, maybe fetching its old value
  kGetValue = 9,   // 1, 2, 4 or 8 bytes of the target into this ticket's result: what g() reads
  // kPutValue, then (ordered after it) the signal update of kPutSignal: a small put_signal whose
  // data the producer carried in the descriptor, so the target applies both from one message
  kPutValueSignal = 10,
  // up to kInlineBytes carried in the ticket's inline data (Inline data above), then, for
  // kPutInlineSignal, the signal update of kPutSignal: the target applies both from one message
  kPutInline = 11,
  kPutInlineSignal = 12,
};

// The atomics a kAtomic descriptor applies (old: the word's value before).
enum class AmoOp : uint8_t {
  kAdd = 0,          // word += operand
  kAnd = 1,          // word &= operand (integers)
  kOr = 2,
  kXor = 3,
  kSwap = 4,         // word = operand
  kCompareSwap = 5,  // word = operand if word == comparand (bitwise)
};

// The operand type: arithmetic on it (add) and its width.
enum class AmoType : uint8_t { kU32 = 0, kU64 = 1, kF32 = 2, kF64 = 3 };

GSHMEM_HOST_DEVICE inline uint64_t amo_bytes(AmoType t) {
  return t == AmoType::kU32 || t == AmoType::kF32 ? 4 : 8;
}

// One fetched value (see Results above).
struct alignas(16) ResultSlot {
  uint64_t value;
  uint64_t ticket;  // t + 1 once the value of ticket t is there
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
  bool signal_set = false;  // the signal word is stored, not added to
  // kAtomic: the operation, its operand (in `local`), comparand and whether it fetches
  AmoOp amo = AmoOp::kAdd;
  AmoType amo_type = AmoType::kU64;
  bool fetch = false;
  uint64_t compare = 0;
};

constexpr uint32_t kMaxProxyPe = (1u << 24) - 1;
constexpr uint16_t kHeapRegion = 0xffff;
constexpr uint64_t kSignalSetBit = 0x80;

GSHMEM_HOST_DEVICE inline void encode(const Command& c, uint64_t (&w)[kPayloadWords]) {
  w[0] = static_cast<uint64_t>(c.op) | (c.signal_set ? kSignalSetBit : 0) |
         (static_cast<uint64_t>(c.pe & kMaxProxyPe) << 8) |
         (static_cast<uint64_t>(c.region) << 32) | (static_cast<uint64_t>(c.signal_region) << 48);
  w[1] = c.local;
  w[2] = c.offset;
  w[3] = c.bytes;
  w[4] = c.signal_offset;
  w[5] = c.signal_value;
  w[6] = c.counter;
  if (c.op == Op::kAtomic) {
    w[3] = static_cast<uint64_t>(c.amo) | (static_cast<uint64_t>(c.amo_type) << 8) |
           (c.fetch ? uint64_t{1} << 16 : 0);
    w[4] = c.compare;
  }
}

GSHMEM_HOST_DEVICE inline Command decode(const uint64_t (&w)[kPayloadWords]) {
  Command c;
  c.op = static_cast<Op>(w[0] & 0x7f);
  c.signal_set = (w[0] & kSignalSetBit) != 0;
  c.pe = static_cast<uint32_t>((w[0] >> 8) & kMaxProxyPe);
  c.region = static_cast<uint16_t>(w[0] >> 32);
  c.signal_region = static_cast<uint16_t>(w[0] >> 48);
  c.local = w[1];
  c.offset = w[2];
  c.bytes = w[3];
  c.signal_offset = w[4];
  c.signal_value = w[5];
  c.counter = w[6];
  if (c.op == Op::kAtomic) {
    c.amo = static_cast<AmoOp>(w[3] & 0xff);
    c.amo_type = static_cast<AmoType>((w[3] >> 8) & 0xff);
    c.fetch = ((w[3] >> 16) & 1) != 0;
    c.bytes = amo_bytes(c.amo_type);
    c.compare = w[4];
    c.signal_offset = 0;
  }
  return c;
}

}  // namespace proxy
}  // namespace gshmem

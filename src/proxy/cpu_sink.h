// The sinks an engine applies arrivals with when the memory the network writes is host memory
// (the default; the CPU tests): signals and atomics as CPU atomics, complete at once.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "proxy/net_engine.h"

namespace gshmem::proxy {

// A SignalSink: a release store or a release add on `word`.
void cpu_signal_sink(void* arg, uint64_t* word, uint64_t value, SignalUpdate update);

class CpuAtomicSink final : public AtomicSink {
 public:
  // Applied at once, by a compare-and-swap loop (amo.h), then `then` by cpu_signal_sink.
  uint64_t start(void* word, const Atomic& a, const SignalWord* then) override;
  // Copied at once, then `then` as above.
  uint64_t start_write(void* dst, const void* data, size_t bytes,
                       const SignalWord* then) override;
  bool done(uint64_t id, uint64_t* old) override;

 private:
  // `then` (not null), then `old` kept for done(); the next id.
  uint64_t finish(const SignalWord* then, uint64_t old);

  uint64_t next_ = 0;
  std::unordered_map<uint64_t, uint64_t> old_;  // by id, until done() reports it
};

}  // namespace gshmem::proxy

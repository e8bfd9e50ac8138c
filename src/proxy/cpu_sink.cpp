#include "proxy/cpu_sink.h"

#include <cstring>

#include "proxy/amo.h"

namespace gshmem::proxy {
namespace {

template <class Word>
uint64_t cas_loop(Word* word, const Atomic& a) {
  Word seen = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    const auto next = static_cast<Word>(amo_next(a.op, a.type, seen, a.operand, a.compare));
    if (__atomic_compare_exchange_n(word, &seen, next, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
      return seen;
    }
  }
}

}  // namespace

void cpu_signal_sink(void*, uint64_t* word, uint64_t value, SignalUpdate update) {
  if (update == SignalUpdate::kSet) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
  } else {
    __atomic_fetch_add(word, value, __ATOMIC_RELEASE);
  }
}

uint64_t CpuAtomicSink::start(void* word, const Atomic& a, const SignalWord* then) {
  const uint64_t old = amo_bytes(a.type) == 4 ? cas_loop(static_cast<uint32_t*>(word), a)
                                              : cas_loop(static_cast<uint64_t*>(word), a);
  return finish(then, old);
}

uint64_t CpuAtomicSink::start_write(void* dst, const void* data, size_t bytes,
                                    const SignalWord* then) {
  std::memcpy(dst, data, bytes);  // the signal's release store (finish) publishes it
  return finish(then, 0);
}

uint64_t CpuAtomicSink::finish(const SignalWord* then, uint64_t old) {
  if (then != nullptr) cpu_signal_sink(nullptr, then->word, then->value, then->update);
  old_[next_] = old;
  return next_++;
}

bool CpuAtomicSink::done(uint64_t id, uint64_t* old) {
  const auto it = old_.find(id);
  if (it == old_.end()) return false;
  *old = it->second;
  old_.erase(it);
  return true;
}

}  // namespace gshmem::proxy

#include "proxy/gpu_sink.h"

#include <cstring>
#include <string>

#include "common/cuda_api.h"
#include "common/error.h"
#include "proxy/amo.h"

namespace gshmem::proxy {
namespace {

__device__ void signal_word(unsigned long long* word, unsigned long long value, bool set) {
  if (set) {
    asm volatile("st.release.sys.global.b64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
  } else {
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
  }
}

__global__ void apply_signal(unsigned long long* word, unsigned long long value, bool set) {
  signal_word(word, value, set);
}

// The old value of `word` after amo_next() replaced it, by compare-and-swap at system scope.
template <class Word>
__device__ uint64_t cas_loop(Word* word, const Atomic& a) {
  Word seen = *reinterpret_cast<volatile Word*>(word);
  for (;;) {
    const auto next = static_cast<Word>(amo_next(a.op, a.type, seen, a.operand, a.compare));
    const Word before = atomicCAS_system(word, seen, next);
    if (before == seen) return seen;
    seen = before;
  }
}

// The signal a value or inline put carries, as a kernel parameter (word null: none).
struct Then {
  unsigned long long* word;
  unsigned long long value;
  bool set;
};

Then then_of(const SignalWord* s) {
  if (s == nullptr) return {nullptr, 0, false};
  return {reinterpret_cast<unsigned long long*>(s->word), static_cast<unsigned long long>(s->value),
          s->update == SignalUpdate::kSet};
}

// After what `then` follows (release: whoever sees the signal sees what came before it), the
// signal; then `value` and the ticket for the host that polls it (done()).
__device__ void finish(const Then& then, ResultSlot* out, uint64_t value,
                       unsigned long long ticket) {
  if (then.word != nullptr) signal_word(then.word, then.value, then.set);
  out->value = value;
  __threadfence_system();  // the value before the ticket
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(&out->ticket), "l"(ticket) : "memory");
}

__global__ void apply_atomic(void* word, Atomic a, Then then, ResultSlot* out,
                             unsigned long long ticket) {
  finish(then, out,
         amo_bytes(a.type) == 4 ? cas_loop(static_cast<unsigned int*>(word), a)
                                : cas_loop(static_cast<unsigned long long*>(word), a),
         ticket);
}

// An inline put's bytes, passed by value: a kernel's parameters hold up to 4 KiB.
struct InlineBytes {
  alignas(16) unsigned char bytes[kInlineBytes];
};

// The bytes, then as an atomic's (old value 0).
__global__ void apply_write(unsigned char* dst, InlineBytes data, unsigned int bytes, Then then,
                            ResultSlot* out, unsigned long long ticket) {
  if (reinterpret_cast<unsigned long long>(dst) % 8 == 0 && bytes % 8 == 0) {
    auto* to = reinterpret_cast<unsigned long long*>(dst);
    const auto* from = reinterpret_cast<const unsigned long long*>(data.bytes);
    for (unsigned int i = 0; i < bytes / 8; ++i) to[i] = from[i];
  } else {
    for (unsigned int i = 0; i < bytes; ++i) dst[i] = data.bytes[i];
  }
  finish(then, out, 0, ticket);
}

}  // namespace

GpuSink::GpuSink(int device) : device_(device) {
  cuda::DeviceGuard guard(device);
  // Loaded now: a lazy load at the first arrival waits for the kernels running on this GPU, and
  // one of them may be the very kernel waiting for that arrival.
  cuda::preload(apply_signal, "loading the kernel that applies network signals");
  cuda::preload(apply_atomic, "loading the kernel that applies network atomics");
  cuda::preload(apply_write, "loading the kernel that applies inline puts");
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
              "creating the stream that applies network signals");
  if (cudaHostAlloc(reinterpret_cast<void**>(&outcomes_), kAtomicsInFlight * sizeof(ResultSlot),
                    cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(stream_);
    throw_error(GSHMEM_ERROR_CUDA, "cudaHostAlloc of the network atomics' results failed");
  }
  for (uint64_t i = 0; i < kAtomicsInFlight; ++i) outcomes_[i] = {0, 0};
}

GpuSink::~GpuSink() {
  try {
    cuda::DeviceGuard guard(device_);
    cudaStreamSynchronize(stream_);  // no kernel writes the results any more
    cudaStreamDestroy(stream_);      // nothing more to do if it fails during teardown
    cudaFreeHost(outcomes_);
  } catch (const Error&) {
  }
}

void GpuSink::serve(NetEngine& engine) {
  engine.set_signal_sink(&GpuSink::apply, this);
  engine.set_atomic_sink(this);
}

void GpuSink::apply(void* arg, uint64_t* word, uint64_t value, SignalUpdate update) {
  auto* self = static_cast<GpuSink*>(arg);
  cuda::DeviceGuard guard(self->device_);
  apply_signal<<<1, 1, 0, self->stream_>>>(reinterpret_cast<unsigned long long*>(word),
                                           static_cast<unsigned long long>(value),
                                           update == SignalUpdate::kSet);
  cuda::check(cudaGetLastError(), "launching the kernel that applies a network signal");
}

uint64_t GpuSink::start(void* word, const Atomic& a, const SignalWord* then) {
  return launch("a network atomic", [&](ResultSlot* out, unsigned long long ticket) {
    apply_atomic<<<1, 1, 0, stream_>>>(word, a, then_of(then), out, ticket);
  });
}

uint64_t GpuSink::start_write(void* dst, const void* data, size_t bytes,
                              const SignalWord* then) {
  GSHMEM_REQUIRE(bytes <= kInlineBytes, "an inline put carries at most " +
                                            std::to_string(kInlineBytes) + " bytes");
  InlineBytes carried;
  std::memcpy(carried.bytes, data, bytes);
  return launch("an inline put", [&](ResultSlot* out, unsigned long long ticket) {
    apply_write<<<1, 1, 0, stream_>>>(static_cast<unsigned char*>(dst), carried,
                                      static_cast<unsigned int>(bytes), then_of(then), out,
                                      ticket);
  });
}

template <class Launch>
uint64_t GpuSink::launch(const char* what, Launch kernel) {
  GSHMEM_REQUIRE(!full(), std::string(what) + " started while " +
                              std::to_string(kAtomicsInFlight) + " atomics are in flight");
  const uint64_t id = started_;
  cuda::DeviceGuard guard(device_);
  kernel(&outcomes_[id % kAtomicsInFlight], static_cast<unsigned long long>(id + 1));
  cuda::check_launch((std::string("launching the kernel that applies ") + what).c_str());
  ++started_;
  return id;
}

bool GpuSink::done(uint64_t id, uint64_t* old) {
  const ResultSlot& out = outcomes_[id % kAtomicsInFlight];
  if (__atomic_load_n(&out.ticket, __ATOMIC_ACQUIRE) != id + 1) return false;
  *old = out.value;
  finished_ = id + 1;
  return true;
}

}  // namespace gshmem::proxy

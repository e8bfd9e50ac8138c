#include "common/isolated_stream.h"

#include <thread>

#include "common/cuda_api.h"

namespace gshmem::cuda {
namespace {

// Makes `context` current on this thread for the guard's lifetime.
class ContextScope {
 public:
  explicit ContextScope(CUcontext context) {
    check(driver().ctx_push(context), "cuCtxPushCurrent (isolated stream)");
  }
  ~ContextScope() {
    CUcontext popped = nullptr;
    driver().ctx_pop(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
};

template <class Query>
bool idle_polling(Query query, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const bool idle = query();
    if (idle || std::chrono::steady_clock::now() >= deadline) return idle;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

IsolatedStream::IsolatedStream(int device) {
  const Driver& d = driver();
  CUdevice dev{};
  check(d.device_get(&dev, device), "cuDeviceGet");
  // cuCtxCreate makes the new context current: pop it at once, whatever follows.
  check(d.ctx_create(&context_, 0, dev), "cuCtxCreate (isolated stream)");
  CUcontext popped = nullptr;
  d.ctx_pop(&popped);
  try {
    ContextScope scope(context_);
    check(d.stream_create(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate (isolated stream)");
  } catch (...) {
    d.ctx_destroy(context_);
    throw;
  }
}

IsolatedStream::~IsolatedStream() {
  // Destroying the context destroys its stream; a failure has no one to report to.
  driver().ctx_destroy(context_);
}

void IsolatedStream::write_value64(uint64_t* address, uint64_t value) {
  ContextScope scope(context_);
  check(driver().stream_write_value64(stream_, reinterpret_cast<CUdeviceptr>(address), value,
                                      CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue64 (isolated stream)");
}

bool IsolatedStream::idle_within(std::chrono::milliseconds limit) {
  ContextScope scope(context_);
  return idle_polling([&] { return driver().stream_query(stream_) == CUDA_SUCCESS; }, limit);
}

bool stream_idle_within(cudaStream_t stream, std::chrono::milliseconds limit) {
  bool failed = false;
  const bool ended = idle_polling(
      [&] {
        const cudaError_t err = cudaStreamQuery(stream);
        if (err == cudaErrorNotReady) return false;
        if (err != cudaSuccess) {
          cudaGetLastError();  // not sticky: leave the thread's error state clean
          failed = true;
        }
        return true;
      },
      limit);
  return ended && !failed;
}

}  // namespace gshmem::cuda

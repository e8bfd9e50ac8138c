#include "core/window.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "common/cuda_api.h"
#include "common/env.h"
#include "common/error.h"
#include "core/comm.h"

namespace gshmem {
namespace {

constexpr int kMaxPerContext = 1 << 16;  // signals or counters per context
constexpr int kMaxContexts = 1 << 16;

enum Kind : int32_t { kFailed = 0, kHeap = 1, kIpc = 2 };

// What each PE tells the others about its buffer.
struct Export {
  uint64_t bytes;
  uint64_t offset;   // from the heap's base (kHeap) or from the exported allocation (kIpc)
  uint64_t address;  // in the exporting process (for peers in that process)
  int32_t kind;
  int32_t pid;
  int32_t device;
  int32_t pad;
  cudaIpcMemHandle_t handle;
  char error[200];
};

// CUDA IPC opens an allocation once per process and context: windows in the same allocation
// (torch's allocator packs tensors into segments) share the mapping, counted here.
class IpcImports {
 public:
  void* open(int device, const cudaIpcMemHandle_t& handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Key key{device, std::string(handle.reserved, sizeof handle.reserved)};
    auto it = open_.find(key);
    if (it != open_.end()) {
      ++it->second.refs;
      return it->second.base;
    }
    void* base = nullptr;
    cuda::check(cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess),
                "cudaIpcOpenMemHandle (a peer's window)");
    open_.emplace(key, Mapping{base, 1});
    return base;
  }
  void close(void* base) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      if (it->second.base != base) continue;
      if (--it->second.refs == 0) {
        cudaIpcCloseMemHandle(base);  // teardown: nothing to do on failure
        open_.erase(it);
      }
      return;
    }
  }

 private:
  using Key = std::pair<int, std::string>;
  struct Mapping {
    void* base;
    int refs;
  };
  std::mutex mutex_;
  std::map<Key, Mapping> open_;
};

IpcImports& ipc_imports() {
  static IpcImports imports;
  return imports;
}

// This PE's Export of [ptr, ptr + bytes); kind kFailed with the reason when it cannot be shared.
Export describe(Comm& comm, void* ptr, uint64_t bytes) {
  Export e{};
  e.bytes = bytes;
  e.address = reinterpret_cast<uint64_t>(ptr);
  e.pid = static_cast<int32_t>(getpid());
  e.device = comm.device();
  auto fail = [&](const std::string& why) {
    e.kind = kFailed;
    std::snprintf(e.error, sizeof e.error, "%s", why.c_str());
    return e;
  };
  if (comm.heap().contains(ptr)) {
    if (!comm.heap().contains(static_cast<char*>(ptr) + bytes - 1)) {
      return fail("the buffer runs past the end of the symmetric heap");
    }
    e.kind = kHeap;
    e.offset = reinterpret_cast<uint64_t>(ptr) - reinterpret_cast<uint64_t>(comm.heap().base());
    return e;
  }
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess || attr.type != cudaMemoryTypeDevice) {
    cudaGetLastError();
    return fail("the buffer is not device memory (a CUDA tensor or a cudaMalloc pointer)");
  }
  if (attr.device != comm.device()) {
    return fail("the buffer is on GPU " + std::to_string(attr.device) + ", the comm's is GPU " +
                std::to_string(comm.device()));
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto addr = reinterpret_cast<CUdeviceptr>(ptr);
  if (cuda::driver().mem_get_address_range(&base, &size, addr) != CUDA_SUCCESS ||
      addr + bytes > base + size) {
    return fail("the buffer is not inside one CUDA allocation");
  }
  const cudaError_t err = cudaIpcGetMemHandle(&e.handle, reinterpret_cast<void*>(base));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(std::string("CUDA IPC cannot share this memory (") + cudaGetErrorString(err) +
                "); allocate it with comm.malloc, or with torch's allocator without "
                "expandable_segments");
  }
  e.kind = kIpc;
  e.offset = addr - base;
  return e;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw_error(GSHMEM_ERROR_USAGE, "register_window: " + message);
}

}  // namespace

Window::Window(Comm& comm, void* ptr, uint64_t bytes, int contexts, int signals, int counters)
    : comm_(comm) {
  require(ptr != nullptr && bytes > 0, "the buffer is empty");
  require(contexts >= 1 && contexts <= kMaxContexts,
          "contexts must be in [1, " + std::to_string(kMaxContexts) + "], got " +
              std::to_string(contexts));
  require(signals >= 0 && signals <= kMaxPerContext && counters >= 0 &&
              counters <= kMaxPerContext,
          "signals and counters per context must be in [0, " + std::to_string(kMaxPerContext) +
              "], got " + std::to_string(signals) + " and " + std::to_string(counters));
  const int n = comm.nranks();
  const int me = comm.rank();
  // Every PE learns every PE's buffer (or why it cannot be shared) and the call's shape, so a
  // failure is the same error everywhere rather than a hang in the next collective.
  struct Call {
    Export mine;
    int32_t contexts, signals, counters, reachable;
  } call{describe(comm, ptr, bytes), contexts, signals, counters, 1};
  for (int pe = 0; pe < n; ++pe) call.reachable &= comm.heap().local_index()[pe] >= 0;
  std::vector<Call> all(n);
  comm.bootstrap().allgather(&call, all.data(), sizeof call);
  for (int pe = 0; pe < n; ++pe) {
    const Call& c = all[pe];
    require(c.mine.kind != kFailed, "PE " + std::to_string(pe) + "'s buffer: " + c.mine.error);
    require(c.contexts == contexts && c.signals == signals && c.counters == counters,
            "PE " + std::to_string(pe) + " asked for " + std::to_string(c.contexts) +
                " contexts of " + std::to_string(c.signals) + " signals and " +
                std::to_string(c.counters) + " counters, PE " + std::to_string(me) + " for " +
                std::to_string(contexts) + ", " + std::to_string(signals) + " and " +
                std::to_string(counters) + "; every PE must ask for the same");
    require(c.reachable || comm.proxy() != nullptr,
            "PE " + std::to_string(pe) +
                " does not reach every PE by loads and stores, and the comm has no proxy path "
                "(UCX) to the others");
  }
  ProxyPath* proxy = comm.proxy();  // on every PE or on none (Comm::open_proxy)

  // The signals: symmetric, so each PE's array is found through the heap (collective, zeroed).
  const uint64_t signal_bytes = 8ull * contexts * (signals > 0 ? signals : 1);
  signals_ = comm.heap().malloc(signal_bytes, 256, true);
  if (proxy != nullptr) {
    try {
      proxy_region_ = proxy->register_region(ptr, bytes);  // collective, the same result on all
    } catch (...) {
      comm.heap().free(signals_);
      signals_ = nullptr;
      throw;
    }
  }
  cuda::DeviceGuard guard(comm.device());
  std::vector<uint64_t> tables(3 * static_cast<size_t>(n));
  std::string failure;
  try {
    for (int pe = 0; pe < n; ++pe) {
      const Export& e = all[pe].mine;
      uint64_t at = 0;
      if (pe == me) {
        at = reinterpret_cast<uint64_t>(ptr);
      } else if (comm.via_proxy(pe)) {
        at = 0;  // reached through the proxy path: (proxy_region_, offset)
      } else if (e.kind == kHeap) {
        const char* sym = static_cast<const char*>(comm.heap().base()) + e.offset;
        at = reinterpret_cast<uint64_t>(comm.heap().peer_ptr(sym, pe));
      } else if (e.pid == getpid()) {  // a comm of this process (one per GPU): no IPC
        if (e.device != comm.device()) {
          const cudaError_t err = cudaDeviceEnablePeerAccess(e.device, 0);
          if (err == cudaErrorPeerAccessAlreadyEnabled) {
            cudaGetLastError();
          } else {
            cuda::check(err, "cudaDeviceEnablePeerAccess (a peer's window)");
          }
        }
        at = e.address;
      } else {
        void* base = ipc_imports().open(comm.device(), e.handle);
        imported_.push_back(base);
        at = reinterpret_cast<uint64_t>(base) + e.offset;
      }
      tables[pe] = at;
      tables[n + pe] = e.bytes;
      tables[2 * n + pe] = comm.via_proxy(pe)
                               ? 0
                               : reinterpret_cast<uint64_t>(comm.heap().peer_ptr(signals_, pe));
    }
    if (failure.empty()) {
      cuda::check(cudaMalloc(&tables_, tables.size() * sizeof(uint64_t)), "cudaMalloc (window)");
      cuda::check(cudaMemcpy(tables_, tables.data(), tables.size() * sizeof(uint64_t),
                             cudaMemcpyHostToDevice),
                  "cudaMemcpy (window tables)");
      const uint64_t n_counters = uint64_t(contexts) * (counters > 0 ? counters : 1);
      if (proxy != nullptr) {  // the proxy adds to them too
        counter_first_ = proxy->take_counters(n_counters);
        pooled_counters_ = true;
      } else {
        cuda::check(cudaMalloc(&counters_, 8 * n_counters), "cudaMalloc (window counters)");
        cuda::check(cudaMemset(counters_, 0, 8 * n_counters), "cudaMemset (window counters)");
      }
    }
  } catch (const Error& e) {
    failure = e.what();
  }
  // Opening the peers' memory can fail on one PE only: agree before anyone uses the window.
  int32_t ok = failure.empty();
  std::vector<int32_t> oks(n);
  comm.bootstrap().allgather(&ok, oks.data(), sizeof ok);
  for (int pe = 0; pe < n && failure.empty(); ++pe) {
    if (!oks[pe]) failure = "PE " + std::to_string(pe) + " could not map its peers' windows";
  }
  if (!failure.empty()) {
    release_local();
    deregister_region();         // collective: every PE is here
    comm.heap().free(signals_);
    signals_ = nullptr;
    throw_error(GSHMEM_ERROR_USAGE, "register_window: " + failure);
  }
  auto* t = static_cast<uint64_t*>(tables_);
  const uint64_t counter_words =
      proxy != nullptr
          ? reinterpret_cast<uint64_t>(proxy->completion().counters + counter_first_)
          : reinterpret_cast<uint64_t>(counters_);
  state_ = gshmem_window_t{GSHMEM_WINDOW_STATE_VERSION,
                           me,
                           n,
                           contexts,
                           signals,
                           counters,
                           reinterpret_cast<uint64_t>(t),
                           reinterpret_cast<uint64_t>(t + n),
                           reinterpret_cast<uint64_t>(t + 2 * n),
                           counter_words,
                           static_cast<uint64_t>(static_cast<const char*>(signals_) -
                                                 static_cast<const char*>(comm.heap().base())),
                           proxy_region_,
                           static_cast<uint32_t>(counter_first_)};
}

Window::~Window() { release_local(); }

void Window::deregister() {
  cuda::DeviceGuard guard(comm_.device());
  cuda::check(cudaDeviceSynchronize(), "waiting for GPU work before deregister_window");
  // Descriptors kernels appended may still wait in the proxy queue: issued first, then the
  // engine completes them before it forgets the region (deregister_region flushes).
  if (proxy_region_ >= 0) comm_.proxy()->drain(env::timeout_seconds());
  comm_.bootstrap().barrier();  // no PE still writes into this PE's window or signals
  deregister_region();
  // The sink's adds to signals and counters of those last operations, before the memory goes.
  cuda::check(cudaDeviceSynchronize(), "waiting for the proxy's last signal and counter adds");
  release_local();
  comm_.heap().free(signals_);
  signals_ = nullptr;
}

void Window::release_local() noexcept {
  for (void* base : imported_) ipc_imports().close(base);
  imported_.clear();
  cudaFree(tables_);
  cudaFree(counters_);
  tables_ = counters_ = nullptr;
  if (pooled_counters_) comm_.proxy()->give_counters(counter_first_);
  pooled_counters_ = false;
}

void Window::deregister_region() {
  if (proxy_region_ >= 0) comm_.proxy()->deregister_region(proxy_region_);  // collective
  proxy_region_ = -1;
}

}  // namespace gshmem

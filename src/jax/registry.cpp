#include "registry.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>

namespace gshmem::jax {
namespace {

constexpr int kMaxDevices = 64;
std::array<DeviceState, kMaxDevices> g_states;
std::array<std::array<std::atomic<bool>, kMaxDevices>, kMaxDevices> g_peer{};  // [from][to]
std::mutex g_mutex;  // attach/detach only: handlers read a device's state after it is attached
thread_local std::string g_error;

void release(DeviceState& s) {
  for (Channel& c : s.channels) {  // the CUDA objects outlive work already enqueued on them
    for (cudaStream_t st : {c.stream, c.copier}) {
      if (st) cudaStreamDestroy(st);
    }
    for (cudaEvent_t e : {c.issued, c.landed, c.forked, c.copied}) {
      if (e) cudaEventDestroy(e);
    }
  }
  s = DeviceState{};
}

bool make_stream(cudaStream_t* st) {
  return cudaStreamCreateWithFlags(st, cudaStreamNonBlocking) == cudaSuccess;
}

bool make_event(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDisableTiming) == cudaSuccess;
}

// The channels' streams and events on `device` (the caller's current device is restored):
// every channel's copier, and channels 1.. their own stream.
bool create_channels(DeviceState& s, int device) {
  int before = 0;
  if (cudaGetDevice(&before) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return false;
  bool ok = true;
  for (int i = 0; i < kChannels && ok; ++i) {
    Channel& c = s.channels[i];
    ok = make_stream(&c.copier) && make_event(&c.forked) && make_event(&c.copied) &&
         (i == 0 || (make_stream(&c.stream) && make_event(&c.issued) && make_event(&c.landed)));
  }
  cudaSetDevice(before);
  return ok;
}

// Lets `from` load and store `to`'s cudaMalloc'd memory (CUDA devices); true when it can.
bool enable_peer(int from, int to) {
  int can = 0, before = 0;
  if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) return false;
  if (cudaGetDevice(&before) != cudaSuccess || cudaSetDevice(from) != cudaSuccess) return false;
  const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();  // not sticky: clear it
  cudaSetDevice(before);
  return e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
}

// Peer access both ways between `ordinal` and every other attached device (under g_mutex).
void connect(int ordinal) {
  for (int other = 0; other < kMaxDevices; ++other) {
    if (other == ordinal || !g_states[other].comm) continue;
    const int a = g_states[ordinal].device, b = g_states[other].device;
    g_peer[ordinal][other] = enable_peer(a, b);
    g_peer[other][ordinal] = enable_peer(b, a);
  }
}

}  // namespace

const DeviceState* device_state(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return nullptr;
  const DeviceState& s = g_states[ordinal];
  return s.comm ? &s : nullptr;
}

int local_ordinal(int pe) {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (g_states[i].comm && g_states[i].rank == pe) return i;
  }
  return -1;
}

bool peer_access(int from, int to) {
  return from >= 0 && from < kMaxDevices && to >= 0 && to < kMaxDevices && g_peer[from][to];
}

}  // namespace gshmem::jax

extern "C" int gshmem_jax_channels(void) { return gshmem::jax::kChannels; }

extern "C" size_t gshmem_jax_flags(int nranks) {
  using namespace gshmem::jax;
  return static_cast<size_t>(kChannels) * kHalves * (nranks + 1);
}

extern "C" int gshmem_jax_attach(int ordinal, void* comm, void* slots, size_t slot_bytes,
                                 void* flags) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices || !comm || !slots || !flags) {
    g_error = "gshmem_jax_attach: bad ordinal or null pointer";
    return 1;
  }
  if (slot_bytes < kMinSlotBytes) {
    g_error = "gshmem.jax: a permute slot (GSHMEM_JAX_SLOT_BYTES) must hold at least 64K, got " +
              std::to_string(slot_bytes) + " bytes";
    return 1;
  }
  gshmem_comm_info_t info{};
  gshmem_device_t device{};
  if (gshmem_comm_info(static_cast<gshmem_comm_t>(comm), &info) != GSHMEM_SUCCESS ||
      gshmem_comm_device(static_cast<gshmem_comm_t>(comm), &device) != GSHMEM_SUCCESS) {
    g_error = gshmem_last_error();
    return 1;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = g_states[ordinal];
  release(s);
  if (!create_channels(s, info.device)) {
    g_error = std::string("gshmem_jax_attach: cannot create the permute channels' streams: ") +
              cudaGetErrorString(cudaGetLastError());
    release(s);
    return 1;
  }
  s.comm = static_cast<gshmem_comm_t>(comm);
  s.device = info.device;
  s.rank = info.rank;
  s.nranks = info.nranks;
  s.slot_bytes = slot_bytes;
  s.half_bytes = slot_bytes / kHalves / 256 * 256;
  s.timeout_s = static_cast<double>(device.timeout_ns) * 1e-9;
  auto* flag = static_cast<uint64_t*>(flags);
  for (int i = 0; i < kChannels; ++i) {
    Channel& c = s.channels[i];
    c.slot = static_cast<char*>(slots) + i * slot_bytes;
    for (int h = 0; h < kHalves; ++h, flag += info.nranks + 1) {
      c.ready[h] = flag;
      c.arrived[h] = flag + info.nranks;
    }
  }
  connect(ordinal);
  return 0;
}

extern "C" void gshmem_jax_detach(int ordinal) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  release(g_states[ordinal]);
  for (int other = 0; other < kMaxDevices; ++other) {
    g_peer[ordinal][other] = g_peer[other][ordinal] = false;
  }
}

extern "C" const char* gshmem_jax_last_error(void) { return gshmem::jax::g_error.c_str(); }

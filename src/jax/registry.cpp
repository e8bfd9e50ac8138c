#include "registry.h"

#include <array>
#include <mutex>
#include <string>

namespace gshmem::jax {
namespace {

constexpr int kMaxDevices = 64;
std::array<DeviceState, kMaxDevices> g_states;
std::mutex g_mutex;  // attach/detach only: handlers read a device's state after it is attached
thread_local std::string g_error;

void release(DeviceState& s) {
  for (Channel& c : s.channels) {  // the CUDA objects outlive work already enqueued on them
    if (c.stream) cudaStreamDestroy(c.stream);
    if (c.issued) cudaEventDestroy(c.issued);
    if (c.landed) cudaEventDestroy(c.landed);
  }
  s = DeviceState{};
}

// Streams and events of channels 1.. on `device` (the caller's current device is restored).
bool create_channels(DeviceState& s, int device) {
  int before = 0;
  if (cudaGetDevice(&before) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return false;
  bool ok = true;
  for (int i = 1; i < kChannels && ok; ++i) {
    Channel& c = s.channels[i];
    ok = cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking) == cudaSuccess &&
         cudaEventCreateWithFlags(&c.issued, cudaEventDisableTiming) == cudaSuccess &&
         cudaEventCreateWithFlags(&c.landed, cudaEventDisableTiming) == cudaSuccess;
  }
  cudaSetDevice(before);
  return ok;
}

}  // namespace

const DeviceState* device_state(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return nullptr;
  const DeviceState& s = g_states[ordinal];
  return s.comm ? &s : nullptr;
}

}  // namespace gshmem::jax

extern "C" int gshmem_jax_channels(void) { return gshmem::jax::kChannels; }

extern "C" int gshmem_jax_attach(int ordinal, void* comm, void* slots, size_t slot_bytes,
                                 void* flags) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices || !comm || !slots || !flags || !slot_bytes) {
    g_error = "gshmem_jax_attach: bad ordinal, null pointer or empty slot";
    return 1;
  }
  gshmem_comm_info_t info{};
  if (gshmem_comm_info(static_cast<gshmem_comm_t>(comm), &info) != GSHMEM_SUCCESS) {
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
  s.rank = info.rank;
  s.nranks = info.nranks;
  s.slot_bytes = slot_bytes;
  for (int i = 0; i < kChannels; ++i) {
    Channel& c = s.channels[i];
    c.slot = static_cast<char*>(slots) + i * slot_bytes;
    c.ready = static_cast<uint64_t*>(flags) + static_cast<size_t>(i) * (info.nranks + 1);
    c.arrived = c.ready + info.nranks;
  }
  return 0;
}

extern "C" void gshmem_jax_detach(int ordinal) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  release(g_states[ordinal]);
}

extern "C" const char* gshmem_jax_last_error(void) { return gshmem::jax::g_error.c_str(); }

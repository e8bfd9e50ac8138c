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

}  // namespace

const DeviceState* device_state(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return nullptr;
  const DeviceState& s = g_states[ordinal];
  return s.comm ? &s : nullptr;
}

}  // namespace gshmem::jax

using gshmem::jax::DeviceState;

extern "C" int gshmem_jax_attach(int ordinal, void* comm, void* slot, size_t slot_bytes,
                                 void* flags) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices || !comm || !slot || !flags) {
    g_error = "gshmem_jax_attach: bad ordinal or null pointer";
    return 1;
  }
  gshmem_comm_info_t info{};
  if (gshmem_comm_info(static_cast<gshmem_comm_t>(comm), &info) != GSHMEM_SUCCESS) {
    g_error = gshmem_last_error();
    return 1;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = g_states[ordinal];
  s.comm = static_cast<gshmem_comm_t>(comm);
  s.rank = info.rank;
  s.nranks = info.nranks;
  s.slot = slot;
  s.slot_bytes = slot_bytes;
  s.ready = static_cast<uint64_t*>(flags);
  s.arrived = static_cast<uint64_t*>(flags) + 1;
  return 0;
}

extern "C" void gshmem_jax_detach(int ordinal) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_states[ordinal] = DeviceState{};
}

extern "C" const char* gshmem_jax_last_error(void) { return gshmem::jax::g_error.c_str(); }

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

int fail(const std::string& message) {
  g_error = message;
  return 1;
}

void release(DeviceState& s) {
  if (s.fork) cudaEventDestroy(s.fork);
  if (s.join) cudaEventDestroy(s.join);
  if (s.side) cudaStreamDestroy(s.side);
  s = DeviceState{};
}

}  // namespace

const DeviceState* device_state(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return nullptr;
  const DeviceState& s = g_states[ordinal];
  return s.comm ? &s : nullptr;
}

}  // namespace gshmem::jax

extern "C" int gshmem_jax_attach(int ordinal, void* comm, void* slots, size_t slot_bytes, void* flags, void* ll,
                                 size_t ll_words) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices || !comm || !slots || !flags || !ll) {
    return fail("gshmem_jax_attach: bad ordinal or null pointer");
  }
  auto c = static_cast<gshmem_comm_t>(comm);
  DeviceState s;
  gshmem_comm_info_t info{};
  if (gshmem_comm_info(c, &info) != GSHMEM_SUCCESS || gshmem_comm_device(c, &s.device) != GSHMEM_SUCCESS) {
    return fail(gshmem_last_error());
  }
  s.comm = c;
  s.rank = info.rank;
  s.nranks = info.nranks;
  s.slots = static_cast<char*>(slots);
  s.slot_bytes = slot_bytes;
  s.ready = static_cast<uint64_t*>(flags);
  s.arrived = s.ready + 2;
  s.ll = LLLayout{static_cast<uint64_t*>(ll), info.nranks, ll_words};
  int previous = 0;
  cudaGetDevice(&previous);
  cudaError_t err = cudaSetDevice(info.device);
  if (!err) err = cudaStreamCreateWithFlags(&s.side, cudaStreamNonBlocking);
  if (!err) err = cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming);
  if (!err) err = cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming);
  cudaSetDevice(previous);
  if (err) {
    release(s);
    return fail(std::string("gshmem_jax_attach: ") + cudaGetErrorString(err));
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  release(g_states[ordinal]);
  g_states[ordinal] = s;
  return 0;
}

extern "C" void gshmem_jax_detach(int ordinal) {
  using namespace gshmem::jax;
  if (ordinal < 0 || ordinal >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  release(g_states[ordinal]);
}

extern "C" const char* gshmem_jax_last_error(void) { return gshmem::jax::g_error.c_str(); }

extern "C" size_t gshmem_jax_ll_bytes(int npes, size_t words) { return gshmem::jax::ll_bytes(npes, words); }

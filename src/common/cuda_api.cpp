#include "common/cuda_api.h"

#include <mutex>

#include "common/error.h"

namespace gshmem::cuda {
namespace {

// The driver ABI these prototypes come from: CUDA 12.0 is the oldest driver we support.
constexpr unsigned kDriverApiVersion = 12000;

template <typename Fn>
void load(Fn& fn, const char* symbol) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult status{};
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &ptr, kDriverApiVersion,
                                                     cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || ptr == nullptr) {
    throw_error(GSHMEM_ERROR_CUDA, std::string("the CUDA driver does not provide ") + symbol +
                                       " (" + cudaGetErrorString(err) +
                                       "); gshmem needs an NVIDIA driver for CUDA 12 or newer");
  }
  fn = reinterpret_cast<Fn>(ptr);
}

Driver load_driver() {
  Driver d{};
  load(d.mem_create, "cuMemCreate");
  load(d.mem_release, "cuMemRelease");
  load(d.mem_map, "cuMemMap");
  load(d.mem_unmap, "cuMemUnmap");
  load(d.mem_set_access, "cuMemSetAccess");
  load(d.mem_address_reserve, "cuMemAddressReserve");
  load(d.mem_address_free, "cuMemAddressFree");
  load(d.mem_export, "cuMemExportToShareableHandle");
  load(d.mem_import, "cuMemImportFromShareableHandle");
  load(d.mem_granularity, "cuMemGetAllocationGranularity");
  load(d.mem_get_address_range, "cuMemGetAddressRange");
  load(d.device_attribute, "cuDeviceGetAttribute");
  load(d.device_get, "cuDeviceGet");
  load(d.error_string, "cuGetErrorString");
  load(d.stream_write_value64, "cuStreamWriteValue64");
  load(d.stream_wait_value64, "cuStreamWaitValue64");
  load(d.ctx_create, "cuCtxCreate");
  load(d.ctx_destroy, "cuCtxDestroy");
  load(d.ctx_push, "cuCtxPushCurrent");
  load(d.ctx_pop, "cuCtxPopCurrent");
  load(d.ctx_get_current, "cuCtxGetCurrent");
  load(d.ctx_set_current, "cuCtxSetCurrent");
  load(d.stream_create, "cuStreamCreate");
  load(d.stream_query, "cuStreamQuery");
  return d;
}

}  // namespace

const Driver& driver() {
  static std::once_flag once;
  static Driver d;
  static std::string failure;
  std::call_once(once, [] {
    try {
      d = load_driver();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw_error(GSHMEM_ERROR_CUDA, failure);
  return d;
}

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error so the next call starts clean
  throw_error(GSHMEM_ERROR_CUDA, std::string(what) + ": " + cudaGetErrorString(err));
}

void check(CUresult err, const char* what) {
  if (err == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  driver().error_string(err, &msg);
  throw_error(GSHMEM_ERROR_CUDA,
              std::string(what) + ": " + (msg ? msg : "unknown error") + " (CUresult " +
                  std::to_string(static_cast<int>(err)) + ")");
}

DeviceGuard::DeviceGuard(int device) {
  CUcontext current = nullptr;
  check(driver().ctx_get_current(&current), "cuCtxGetCurrent");
  int now = -1;
  if (current != nullptr) check(cudaGetDevice(&now), "cudaGetDevice");
  if (now == device) return;
  check(cudaSetDevice(device), "cudaSetDevice");
  previous_ = current;  // null (nothing to put back) when the thread had no context
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != nullptr) driver().ctx_set_current(previous_);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace gshmem::cuda

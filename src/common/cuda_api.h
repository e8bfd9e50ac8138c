// CUDA access for the host runtime. The runtime links cudart statically and reaches the driver
// API through cudaGetDriverEntryPointByVersion, so libgshmem loads on machines with no driver
// (CI, login nodes) and fails only when a GPU is actually needed, with a clear message.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

namespace gshmem::cuda {

// cuCtxCreate as the CUDA 12.0 ABI defines it (newer headers declare a later version).
using CtxCreateV2 = CUresult(CUDAAPI*)(CUcontext*, unsigned int, CUdevice);

// Driver entry points used by the heap (virtual memory management and device queries), by
// on-stream signals (stream memory operations, src/stream/) and by IsolatedStream (contexts).
struct Driver {
  decltype(&::cuMemCreate) mem_create;
  decltype(&::cuMemRelease) mem_release;
  decltype(&::cuMemMap) mem_map;
  decltype(&::cuMemUnmap) mem_unmap;
  decltype(&::cuMemSetAccess) mem_set_access;
  decltype(&::cuMemAddressReserve) mem_address_reserve;
  decltype(&::cuMemAddressFree) mem_address_free;
  decltype(&::cuMemExportToShareableHandle) mem_export;
  decltype(&::cuMemImportFromShareableHandle) mem_import;
  decltype(&::cuMemGetAllocationGranularity) mem_granularity;
  decltype(&::cuMemGetAddressRange) mem_get_address_range;
  decltype(&::cuDeviceGetAttribute) device_attribute;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuGetErrorString) error_string;
  decltype(&::cuStreamWriteValue64) stream_write_value64;
  decltype(&::cuStreamWaitValue64) stream_wait_value64;
  CtxCreateV2 ctx_create;
  decltype(&::cuCtxDestroy) ctx_destroy;
  decltype(&::cuCtxPushCurrent) ctx_push;
  decltype(&::cuCtxPopCurrent) ctx_pop;
  decltype(&::cuCtxGetCurrent) ctx_get_current;
  decltype(&::cuCtxSetCurrent) ctx_set_current;
  decltype(&::cuStreamCreate) stream_create;
  decltype(&::cuStreamQuery) stream_query;
};

// Loads the entry points once per process (thread-safe). Throws GSHMEM_ERROR_CUDA if no driver.
const Driver& driver();

// Throws GSHMEM_ERROR_CUDA "<what>: <CUDA's message>" unless the call succeeded.
void check(cudaError_t err, const char* what);
void check(CUresult err, const char* what);

// Makes `device` current for the guard's lifetime (its primary context, created by cudaSetDevice
// if need be, unless a context of `device` is current already), then puts the thread's previous
// context back when it had one (another device's); a thread that had none keeps `device`'s.
// Restoring the context rather than the device number matters: cudaSetDevice creates the primary
// context of the device it names (CUDA >= 12), so "restoring device 0" on a thread that never
// used GPU 0 would leave a context of ~0.5 GiB there, in every process of a one-process-per-GPU
// job whose thread starts on device 0. Restoring "no context" does the same one call later: the
// runtime binds its default device's (0's) primary context at its next call on that thread
// (seen on 2 x H200: gshmem.init(device=1) on a fresh thread, then torch.cuda.set_device(1)).
// Free when `device` is current (the per-operation case). Touches no stream, so it is safe while
// a stream is being captured.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  CUcontext previous_ = nullptr;  // the context to put back, if the guard switched from one
};

// Number of visible CUDA devices; 0 when there is no driver or no device.
int device_count();

// Throws GSHMEM_ERROR_CUDA "<what>: ..." if the last kernel launch on this thread failed.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Loads `kernel`'s module now. CUDA loads modules lazily, at a kernel's first launch, which must
// not happen inside a graph capture: components preload their kernels when a comm is created.
template <class Kernel>
void preload(Kernel kernel, const char* what) {
  cudaFuncAttributes attributes{};
  check(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)), what);
}

}  // namespace gshmem::cuda

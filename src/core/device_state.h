// DeviceState: what the device API needs from a comm (DESIGN.md §2.2). Built collectively as the
// last step of comm init, because it allocates symmetric memory: the runtime's sync area in the
// heap (zeroed; the arrival counters and tallies of device team barriers), plus a device copy of
// the world rank -> heap slot table. It then hands out the gshmem_device_t that kernels take by
// value, and the world and node teams.
#pragma once

#include <memory>

#include "gshmem/device_state.h"

namespace gshmem {

class Comm;

class DeviceState {
 public:
  // Collective over the comm (one heap allocation). Throws gshmem::Error.
  explicit DeviceState(Comm& comm);
  // The device table is freed here; the sync area is released with the heap (a free would be
  // a collective), which is why the comm destroys this object before its heap.
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;

  const gshmem_device_t& device() const { return state_; }

 private:
  struct DeviceFree {
    int device;
    void operator()(int32_t* p) const noexcept;
  };
  std::unique_ptr<int32_t, DeviceFree> local_index_;
  gshmem_device_t state_{};
};

}  // namespace gshmem

// The proxy: one CPU thread per comm that takes descriptors from the queue in ticket order and
// executes them on the network engine (the GIN paper's Proxy backend, over UCX). Completion
// flows back through words the producers can read (descriptors: gshmem/proxy_queue.h):
//   retired    descriptors taken and issued, in ticket order; a kQuiet descriptor retires only
//              once every earlier operation is complete at its target, so "retired > t" after a
//              quiet with ticket t means everything before it has landed (the quiets of one
//              batch of descriptors share one flush started at its end, which does not block:
//              later descriptors are issued meanwhile, and retired stays at the first quiet
//              whose flush has not finished);
//   counters   local completion counts (gshmem/proxy_queue.h, word 6), added to by the CPU
//              (host memory) or through `counter_sink` (GPU memory, which the CPU cannot add
//              to atomically: GpuSink's kernel);
//   failed     0 while healthy; 1 once the thread stopped on an error (error() says which);
//   results    one ResultSlot per queue slot: the value a kAtomic that fetches or a kGetValue
//              brought back, then its ticket (gshmem/proxy_queue.h).
// The memory of the queue and of these words belongs to the caller (host memory, or pinned
// host memory mapped into the GPU when kernels produce); it must outlive the Proxy.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gshmem/gshmem.h"
#include "proxy/descriptor_queue.h"
#include "proxy/net_engine.h"

namespace gshmem::proxy {

struct CompletionWords {
  uint64_t* retired;
  uint64_t* failed;
  uint64_t* counters;
  uint64_t n_counters;
  ResultSlot* results;  // [queue capacity]
  SignalSink counter_sink = nullptr;  // null: the counters are host memory
  void* counter_arg = nullptr;
};

class Proxy {
 public:
  // Starts the thread, on `cpus` when not empty (the cores near the comm's GPU and NIC:
  // cpus_near_pci_device), with CUDA device `device` current when >= 0 (the GPU whose memory
  // descriptors name: UCX's CUDA transports copy in the calling thread's context). The queue
  // must be new (nothing reserved or taken yet).
  Proxy(NetEngine& engine, QueueView queue, CompletionWords completion,
        std::vector<int> cpus = {}, int device = -1);
  ~Proxy();  // stop()
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Stops the thread after the descriptors it already took; what is still queued stays there.
  void stop();
  // Whether the thread stopped on an error; if so, its code and message.
  bool failed(gshmem_result_t* code, std::string* message) const;
  // The engine's id for the region that descriptors call kHeapRegion (the comm's symmetric heap:
  // it changes when the heap grows and is registered again).
  void set_heap_region(int region) { heap_region_.store(region, std::memory_order_release); }

 private:
  void run(int device);
  void execute(const Command& c, uint64_t ticket);
  int resolve(uint16_t region) const;
  static void counted(void* self, uint64_t counter);
  ResultSlot& result_slot(uint64_t ticket) const;  // where ticket's fetched value goes
  static void fetched(void* self, uint64_t ticket, uint64_t value);
  static void got(void* self, uint64_t ticket);

  NetEngine& engine_;
  QueueView queue_;
  CompletionWords completion_;
  std::atomic<bool> stop_{false};
  std::atomic<int> heap_region_{-1};
  mutable std::mutex error_mu_;
  gshmem_result_t error_code_ = GSHMEM_SUCCESS;
  std::string error_;
  std::thread thread_;
};

// The CPUs the kernel lists as local to PCI device `bus_id` ("0000:1b:00.0"; any case) in
// <sysfs>/bus/pci/devices/<bus_id>/local_cpulist; empty when it lists none or cannot tell.
std::vector<int> cpus_near_pci_device(const std::string& bus_id,
                                      const std::string& sysfs = "/sys");

}  // namespace gshmem::proxy

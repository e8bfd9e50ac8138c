// Watchdog: a per-comm host thread (on unless GSHMEM_WATCHDOG=0) that notices, while this PE's GPU
// may be spinning, that a peer process on this host has died or that a device wait of the comm
// gave up. Then it calls `stop` once, from its own thread: the comm records the fault, makes
// every bounded device wait give up and lets the on-stream waits go on (Comm::stop_waits), so no
// part of this PE keeps waiting for a peer that will never come. From then on it calls `release`
// every period: a stream may re-arm a flag it waited on (wait, reset, ... wait again, as a ring
// does) with the later waits already queued, and those must go on too.
//
// Peers are watched through /proc: a PE is gone when its pid no longer names the process that
// started at the recorded time, or names a zombie. That covers the PEs this PE reaches by
// loads/stores (same host and pid namespace), the ones its kernels wait for. Every other peer is
// watched through the bootstrap's connections (`lost_connection`): a process that exits closes
// them, a host that stops answering fails its keepalive probes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gshmem {

// A peer PE's process as this host sees it.
struct PeerProcess {
  int pe;
  int pid;
  uint64_t start_time;  // /proc/<pid>/stat field 22 (clock ticks since boot)
};

class Watchdog {
 public:
  // `device_failed` and `lost_connection` (a message naming the PE whose connection closed, or
  // "") are polled each period; `stop(reason)` is called at most once, with a message naming
  // the dead PE, or with "" when a device wait gave up; `release` every period after it.
  Watchdog(std::vector<PeerProcess> peers, std::function<bool()> device_failed,
           std::function<std::string()> lost_connection,
           std::function<void(const std::string&)> stop, std::function<void()> release,
           std::chrono::milliseconds period);
  ~Watchdog();  // stops the thread and joins it
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void run();

  std::vector<PeerProcess> peers_;
  std::function<bool()> device_failed_;
  std::function<std::string()> lost_connection_;
  std::function<void(const std::string&)> stop_;
  std::function<void()> release_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::thread thread_;  // last: starts after every member it reads is ready
};

}  // namespace gshmem

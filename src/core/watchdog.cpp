#include "core/watchdog.h"

#include "common/process.h"

namespace gshmem {

Watchdog::Watchdog(std::vector<PeerProcess> peers, std::function<bool()> device_failed,
                   std::function<std::string()> lost_connection,
                   std::function<void(const std::string&)> stop, std::function<void()> release,
                   std::chrono::milliseconds period)
    : peers_(std::move(peers)),
      device_failed_(std::move(device_failed)),
      lost_connection_(std::move(lost_connection)),
      stop_(std::move(stop)),
      release_(std::move(release)),
      period_(period),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  bool stopped = false;
  while (!wake_.wait_for(lock, period_, [this] { return quit_; })) {
    if (stopped) {
      release_();
      continue;
    }
    if (device_failed_()) {
      stop_("");
      stopped = true;
      continue;
    }
    for (const PeerProcess& p : peers_) {
      if (!process_alive(p.pid, p.start_time)) {
        stop_("PE " + std::to_string(p.pe) + " (pid " + std::to_string(p.pid) +
              ", this host) exited while this comm was in use: every wait for it was stopped. "
              "The comm can only be aborted now.");
        stopped = true;
        break;
      }
    }
    if (stopped) continue;
    // After /proc: a peer on this host that died is named with its pid.
    const std::string lost = lost_connection_();
    if (!lost.empty()) {
      stop_(lost);
      stopped = true;
    }
  }
}

}  // namespace gshmem

#include "core/watchdog.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace gshmem {
namespace {

// State letter and start time from /proc/<pid>/stat; false when the process does not exist. The
// command name (field 2) is parenthesised and may hold spaces, so parsing starts after its ')'.
bool read_stat(int pid, char& state, uint64_t& start_time) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  rest >> state;  // field 3
  for (int i = 4; i < 22 && rest >> field; ++i) {
  }
  return static_cast<bool>(rest >> start_time);  // field 22
}

}  // namespace

uint64_t process_start_time(int pid) {
  char state = 0;
  uint64_t start = 0;
  return read_stat(pid, state, start) ? start : 0;
}

bool process_alive(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  char state = 0;
  uint64_t start = 0;
  if (!read_stat(pid, state, start)) return kill(pid, 0) == 0 || errno == EPERM;
  if (state == 'Z' || state == 'X') return false;
  return start_time == 0 || start == start_time;
}

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

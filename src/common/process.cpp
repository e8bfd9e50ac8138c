#include "common/process.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include "common/hash.h"

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

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

uint64_t host_identity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string id = std::string(name) + "|" + read_first_line("/proc/sys/kernel/random/boot_id");
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  if (n > 0) id += "|" + std::string(ns, static_cast<size_t>(n));
  return hash_bytes(id.data(), id.size(), 0);
}

uint64_t pid_namespace() {
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  return n > 0 ? hash_bytes(ns, static_cast<size_t>(n), 0) : 0;
}

ProcessPlace this_process() {
  const int pid = static_cast<int>(getpid());
  return {host_identity(), pid_namespace(), process_start_time(pid), pid};
}

bool watchable(const ProcessPlace& me, const ProcessPlace& peer) {
  return peer.host == me.host && peer.pid_namespace == me.pid_namespace &&
         me.pid_namespace != 0 && peer.pid > 0;
}

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

}  // namespace gshmem

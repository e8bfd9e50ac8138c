// Where a process runs and whether it still does, as /proc tells: what the comm's watchdog and the
// network engine use to watch peer processes on this host without any help from them.
#pragma once

#include <cstdint>

namespace gshmem {

// This host and network namespace (hostname, boot id, /proc/self/ns/net), hashed: equal for two
// processes between which file descriptors and Unix sockets work.
uint64_t host_identity();
// This process's PID namespace, hashed (0 when /proc cannot tell): two processes with the same
// value (and host) see each other's pids in /proc.
uint64_t pid_namespace();
// Where a process runs, as peers exchange it over the bootstrap (plain bytes).
struct ProcessPlace {
  uint64_t host;           // host_identity()
  uint64_t pid_namespace;  // pid_namespace()
  uint64_t start_time;     // process_start_time(pid)
  int64_t pid;
};
// This process's place.
ProcessPlace this_process();
// Whether `me` can watch `peer`'s process through /proc: the same host and the same (known) PID
// namespace.
bool watchable(const ProcessPlace& me, const ProcessPlace& peer);
// A process's start time as process_alive() compares it; 0 when /proc cannot tell.
uint64_t process_start_time(int pid);
// Whether `pid` is a live (not zombie) process that started at `start_time` (when non-zero).
bool process_alive(int pid, uint64_t start_time);

}  // namespace gshmem

// LocalChannel: Unix-domain-socket connections among the PEs of one host, for passing file
// descriptors (the exported heap chunks) with SCM_RIGHTS. The sockets live in the abstract
// namespace (nothing in the file system to clean up), are named by a hash of the job's secret
// (not the secret itself), accept only processes of the same user, and are closed again once the
// mesh is connected, so no listening socket outlives init.
#pragma once

#include <cstdint>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/tcp_bootstrap.h"

namespace gshmem {

class LocalChannel {
 public:
  // Collective over the bootstrap (every rank calls it, also ranks alone on their host).
  // local_ranks: the world ranks on this host, in increasing order; must include this rank.
  LocalChannel(Bootstrap& bootstrap, const std::vector<int>& local_ranks, double timeout_seconds);

  int local_size() const { return static_cast<int>(ranks_.size()); }
  int local_rank() const { return me_; }

  // Sends `fd` (not consumed) and a 64-bit tag to every other local PE, and returns what each
  // sent us: fds[i] is local PE i's descriptor (owned by the caller), invalid for ourselves.
  // Every local PE must call it with the same tag; a different tag (PEs growing the heap
  // differently) is a GSHMEM_ERROR_HEAP naming the PE.
  std::vector<Fd> exchange_fd(int fd, uint64_t tag);

  void close();

 private:
  std::vector<int> ranks_;
  int me_ = -1;
  int world_rank_ = -1;
  double timeout_;
  std::vector<Fd> peers_;  // by local index; invalid for ourselves
};

}  // namespace gshmem

// gshmem._C: the unique id from Python bytes, and the test-only bootstrap handle (shared by the
// core's bindings and the proxy's, whose network engine runs on a bootstrap).
#pragma once

#include <nanobind/nanobind.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/local_channel.h"
#include "bootstrap/tcp_bootstrap.h"
#include "python/ext_common.h"

namespace gshmem::python {

inline gshmem_unique_id_t uid_from_bytes(const nanobind::bytes& b) {
  if (b.size() != GSHMEM_UNIQUE_ID_BYTES) {
    raise(GSHMEM_ERROR_USAGE, "a unique id is " + std::to_string(GSHMEM_UNIQUE_ID_BYTES) +
                                  " bytes, got " + std::to_string(b.size()));
  }
  gshmem_unique_id_t id;
  std::memcpy(id.bytes, b.c_str(), sizeof id.bytes);
  return id;
}

// Test-only access to the bootstrap and local channel (CPU tests run them without a GPU).
class BootstrapHandle {
 public:
  BootstrapHandle(const nanobind::bytes& uid, int rank, int nranks, double timeout) {
    gshmem_unique_id_t raw = uid_from_bytes(uid);
    gshmem::UniqueId id = call_internal([&] { return gshmem::UniqueId::decode(raw); });
    bs_ = call_internal(
        [&] { return std::make_unique<gshmem::Bootstrap>(id, rank, nranks, timeout); });
    timeout_ = timeout;
  }
  nanobind::bytes allgather(const nanobind::bytes& mine) {
    std::string in(mine.c_str(), mine.size());
    std::string out(in.size() * bs().nranks(), '\0');
    call_internal([&] { bs().allgather(in.data(), out.data(), in.size()); });
    return nanobind::bytes(out.data(), out.size());
  }
  nanobind::bytes broadcast(const nanobind::bytes& data, int root) {
    std::string buf(data.c_str(), data.size());
    call_internal([&] { bs().broadcast(buf.data(), buf.size(), root); });
    return nanobind::bytes(buf.data(), buf.size());
  }
  void barrier() {
    call_internal([&] { bs().barrier(); });
  }
  // Connects the local channel among `local_ranks` (collective over the bootstrap).
  void connect_local(const std::vector<int>& local_ranks) {
    call_internal(
        [&] { lc_ = std::make_unique<gshmem::LocalChannel>(bs(), local_ranks, timeout_); });
  }
  // Sends fd to every local peer; returns the peers' fds (owned by the caller), -1 for ourselves.
  std::vector<int> exchange_fd(int fd, uint64_t tag) {
    if (!lc_) raise(GSHMEM_ERROR_USAGE, "connect_local() first");
    return call_internal([&] {
      std::vector<gshmem::Fd> fds = lc_->exchange_fd(fd, tag);
      std::vector<int> raw;
      for (auto& f : fds) raw.push_back(f.valid() ? f.release() : -1);
      return raw;
    });
  }
  // (rank, notice) of a closed connection, or (-1, "") (the watchdog's poll).
  std::pair<int, std::string> closed_peer() {
    std::string notice;
    const int r = call_internal([&] { return bs().closed_peer(&notice); });
    return {r, notice};
  }
  void announce_failure(const std::string& message) {
    call_internal([&] { bs().announce_failure(message); });
  }
  void close() {
    if (lc_) lc_->close();
    lc_.reset();
    if (bs_) bs_->close();
    bs_.reset();
  }

  // The bootstrap itself, for other test objects built on it (the network engine).
  gshmem::Bootstrap& bs() {
    if (!bs_) raise(GSHMEM_ERROR_USAGE, "bootstrap is closed");
    return *bs_;
  }
  double timeout() const { return timeout_; }

 private:
  std::unique_ptr<gshmem::Bootstrap> bs_;
  std::unique_ptr<gshmem::LocalChannel> lc_;
  double timeout_ = 0;
};

}  // namespace gshmem::python

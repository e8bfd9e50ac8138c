// The TCP bootstrap: a star around rank 0, used for the small, rare, host-side collectives of
// init, allocation and teardown (allgather, broadcast, barrier). Every connection presents the
// job's secret; every wait has a deadline; failures name the ranks concerned, and rank 0 tells the
// other ranks why an operation failed so that every PE raises the same, useful error.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/unique_id.h"

namespace gshmem {

class Bootstrap {
 public:
  // Collective over nranks processes/threads. Rank 0 listens (adopting the socket opened by
  // UniqueId::create in this process, if any); others connect, retrying until the deadline.
  Bootstrap(const UniqueId& id, int rank, int nranks, double timeout_seconds);
  ~Bootstrap() = default;
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const UniqueId& id() const { return id_; }

  // out receives nranks * bytes: rank r's `in` at out + r * bytes. Collective.
  void allgather(const void* in, void* out, size_t bytes);
  // buf on `root` is sent to every rank's buf. Collective.
  void broadcast(void* buf, size_t bytes, int root);
  // Returns when every rank has entered. Collective.
  void barrier();

  // Closes every connection now; peers' pending and later operations fail naming this rank.
  void close();

  // For a watchdog thread while the collectives above may run on another: neither call blocks,
  // and both leave the connections alone while a collective is in progress (it notices a closed
  // connection by itself and fails naming the rank, on every rank).
  //
  // The rank whose connection to this one has closed or failed (its process exited, or its host
  // stopped answering keepalive probes), or -1. Ranks > 0 are connected to rank 0 only, so they
  // see rank 0; `notice` then receives the failure rank 0 announced before it closed, if any.
  int closed_peer(std::string* notice);
  // Rank 0: sends `message` to every other rank as the failure of their current or next
  // collective (their closed_peer() reports it as the notice), then ends the connections.
  void announce_failure(const std::string& message);

 private:
  struct Header;
  std::vector<uint8_t> exchange(uint32_t op, uint32_t arg, const void* in, size_t in_bytes,
                                size_t out_bytes);
  std::vector<uint8_t> root_exchange(const Header& mine, const void* in, size_t out_bytes);
  void root_accept(Fd listener);
  void client_connect();
  // Throws (after telling every rank, like fail_all) unless rank r's header h announces the
  // same collective call as rank 0's `mine`.
  void check_same_call(const Header& mine, const Header& h, int r, size_t out_bytes);
  [[noreturn]] void fail_all(gshmem_result_t code, const std::string& message);

  UniqueId id_;
  int rank_;
  int nranks_;
  double timeout_;
  uint64_t seq_ = 0;
  std::mutex io_mutex_;      // held by each collective (and close); the watchdog's calls try it
  bool announced_ = false;   // rank 0 has announced a failure: its collectives fail with it
  std::string announcement_;
  Fd root_;                  // on ranks > 0: the connection to rank 0
  std::vector<Fd> clients_;  // on rank 0: index r is the connection to rank r
};

}  // namespace gshmem

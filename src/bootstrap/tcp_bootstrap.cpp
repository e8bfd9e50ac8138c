#include "bootstrap/tcp_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace gshmem {
namespace {

constexpr uint32_t kHelloMagic = 0x42485347;  // "GSHB"
constexpr uint32_t kMsgMagic = 0x4d485347;    // "GSHM"
constexpr uint32_t kProtocolVersion = 1;
// Ranks > 0 wait this much longer than rank 0, so that rank 0's explanation of a failure
// (which ranks never arrived) reaches them before their own deadline passes.
constexpr double kGraceSeconds = 5.0;
// A new connection must present its credentials within this time.
constexpr double kHelloSeconds = 5.0;
// The longest error text rank 0 sends; a longer announcement is a protocol error.
constexpr uint64_t kMaxErrorBytes = 1 << 16;

enum Op : uint32_t { kAllgather = 1, kBroadcast = 2, kBarrier = 3, kAck = 4 };

const char* op_name(uint32_t op) {
  switch (op) {
    case kAllgather: return "allgather";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
    default: return "unknown";
  }
}

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t nranks;
  uint8_t secret[kSecretBytes];
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

}  // namespace

struct Bootstrap::Header {
  uint32_t magic;
  uint32_t op;      // Op, or kAck for rank 0's replies
  uint32_t arg;     // broadcast root
  int32_t status;   // gshmem_result_t in replies; payload is then the error text
  uint64_t seq;
  uint64_t bytes;   // payload bytes that follow
};

Bootstrap::Bootstrap(const UniqueId& id, int rank, int nranks, double timeout_seconds)
    : id_(id), rank_(rank), nranks_(nranks), timeout_(timeout_seconds) {
  GSHMEM_REQUIRE(nranks >= 1, "nranks must be at least 1, got " + std::to_string(nranks));
  GSHMEM_REQUIRE(rank >= 0 && rank < nranks, "rank " + std::to_string(rank) + " is outside [0, " +
                                                 std::to_string(nranks) + ")");
  if (rank == 0) {
    Fd listener = take_listener(id);
    if (!listener.valid()) {
      uint16_t bound = 0;
      listener = tcp_listen(id.addr, id.port, &bound);
    }
    root_accept(std::move(listener));
  } else {
    client_connect();
  }
  log_debug(rank, "bootstrap connected: %d ranks via %s", nranks, id.describe().c_str());
}

void Bootstrap::root_accept(Fd listener) {
  clients_.resize(nranks_);
  Deadline deadline(timeout_);
  int connected = 0;
  int refused = 0;
  std::string mismatch;
  // A connection is admitted once its whole Hello has arrived. Hellos are read concurrently: a
  // silent or slow connection (a port scanner, a stale process) gets kHelloSeconds of its own and
  // delays no one else.
  struct Pending {
    Fd fd;
    Deadline deadline{kHelloSeconds};
    Hello hello{};
    size_t got = 0;
  };
  std::vector<Pending> pending;
  auto admit = [&](Pending& p) {
    const Hello& hello = p.hello;
    if (hello.magic != kHelloMagic || hello.version != kProtocolVersion ||
        !equal_secret(hello.secret, id_.secret, kSecretBytes)) {
      ++refused;
      log_debug(0, "bootstrap: refused a connection that did not present the job's secret");
      return;  // p.fd closes with p
    }
    if (hello.nranks != nranks_) {
      mismatch = "rank " + std::to_string(hello.rank) +
                 " was started with nranks=" + std::to_string(hello.nranks) +
                 " but rank 0 with nranks=" + std::to_string(nranks_);
    } else if (hello.rank <= 0 || hello.rank >= nranks_ || clients_[hello.rank].valid()) {
      mismatch = "two processes claim rank " + std::to_string(hello.rank) +
                 " (or it is out of range); give every process a distinct rank in [0, nranks)";
    }
    if (!mismatch.empty()) {
      Header h{kMsgMagic, kAck, 0, GSHMEM_ERROR_USAGE, 0, mismatch.size()};
      try {
        send_all(p.fd.get(), &h, sizeof h, deadline, "a connecting process");
        send_all(p.fd.get(), mismatch.data(), mismatch.size(), deadline, "a connecting process");
      } catch (const Error&) {
      }
      return;
    }
    clients_[hello.rank] = std::move(p.fd);
    ++connected;
  };
  while (connected < nranks_ - 1 && mismatch.empty() && !deadline.passed()) {
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    int wait_ms = deadline.remaining_ms();
    for (const Pending& p : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wait_ms = std::min(wait_ms, p.deadline.remaining_ms());
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll() on the bootstrap's connections");
    }
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size() && mismatch.empty(); ++i) {
      Pending& p = pending[i];
      if (fds[i + 1].revents) {
        try {
          p.got += recv_some(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got,
                             sizeof p.hello - p.got, "a connecting process");
        } catch (const Error&) {
          ++refused;  // closed (or failed) before its Hello was complete
          continue;
        }
      }
      if (p.got == sizeof p.hello) {
        admit(p);
      } else if (p.deadline.passed()) {
        ++refused;
      } else {
        still.push_back(std::move(p));
      }
    }
    if (fds[0].revents && mismatch.empty()) {
      Fd conn = accept_until(listener.get(), Deadline(0));
      if (conn.valid()) still.push_back(Pending{std::move(conn)});
    }
    pending = std::move(still);
  }
  if (!mismatch.empty()) {
    fail_all(GSHMEM_ERROR_USAGE, "bootstrap: " + mismatch);
  }
  if (connected < nranks_ - 1) {
    std::vector<int> missing;
    for (int r = 1; r < nranks_; ++r) {
      if (!clients_[r].valid()) missing.push_back(r);
    }
    std::string msg = "bootstrap: rank(s) " + rank_list(missing) + " of " +
                      std::to_string(nranks_) + " did not connect to rank 0 at " + id_.describe() +
                      " within " + std::to_string(timeout_) + " s (GSHMEM_TIMEOUT)";
    if (refused) {
      msg += "; " + std::to_string(refused) +
             " connection(s) were refused for not presenting the job's secret (a stale or "
             "different unique id?)";
    }
    fail_all(GSHMEM_ERROR_TIMEOUT, msg);
  }
  Header ok{kMsgMagic, kAck, 0, GSHMEM_SUCCESS, 0, 0};
  for (int r = 1; r < nranks_; ++r) {
    send_all(clients_[r].get(), &ok, sizeof ok, deadline, rank_name(r));
  }
}

void Bootstrap::client_connect() {
  Deadline deadline(timeout_);
  root_ = tcp_connect(id_.addr, id_.port, deadline, "rank 0's bootstrap");
  Hello hello{kHelloMagic, kProtocolVersion, rank_, nranks_, {}};
  std::memcpy(hello.secret, id_.secret, kSecretBytes);
  send_all(root_.get(), &hello, sizeof hello, deadline, "rank 0");
  Deadline ack_deadline(timeout_ + kGraceSeconds);
  Header ack{};
  try {
    recv_all(root_.get(), &ack, sizeof ack, ack_deadline, "rank 0");
  } catch (const Error& e) {
    // Rank 0 closes connections whose secret is wrong without a reply.
    throw_error(e.code() == GSHMEM_ERROR_TIMEOUT ? GSHMEM_ERROR_TIMEOUT : GSHMEM_ERROR_BOOTSTRAP,
                std::string("bootstrap: rank 0 at ") + id_.describe() +
                    " did not accept this process (" + e.what() +
                    "); the unique id's secret may be wrong or stale");
  }
  if (ack.magic != kMsgMagic || ack.op != kAck) {
    throw_error(GSHMEM_ERROR_BOOTSTRAP, "bootstrap: rank 0 sent a malformed reply");
  }
  if (ack.status != GSHMEM_SUCCESS) {
    if (ack.bytes > kMaxErrorBytes) {
      throw_error(GSHMEM_ERROR_BOOTSTRAP, "bootstrap: rank 0 sent a malformed reply");
    }
    std::string msg(ack.bytes, '\0');
    recv_all(root_.get(), msg.data(), msg.size(), ack_deadline, "rank 0");
    throw_error(static_cast<gshmem_result_t>(ack.status), msg);
  }
}

void Bootstrap::fail_all(gshmem_result_t code, const std::string& message) {
  Deadline deadline(1.0);
  Header h{kMsgMagic, kAck, 0, code, seq_, message.size()};
  for (int r = 1; r < static_cast<int>(clients_.size()); ++r) {
    if (!clients_[r].valid()) continue;
    try {
      send_all(clients_[r].get(), &h, sizeof h, deadline, rank_name(r));
      send_all(clients_[r].get(), message.data(), message.size(), deadline, rank_name(r));
    } catch (const Error&) {
    }
  }
  // Closing a socket that still holds unread bytes (a rank's late request) sends a reset, which
  // can destroy the explanation before that rank reads it. So: end our side, drain what the
  // ranks still send until they close (they do once they read the error), then close.
  for (auto& c : clients_) {
    if (c.valid()) ::shutdown(c.get(), SHUT_WR);
  }
  char sink[4096];
  for (int r = 1; r < static_cast<int>(clients_.size()); ++r) {
    if (!clients_[r].valid()) continue;
    try {
      for (;;) {
        pollfd p{clients_[r].get(), POLLIN, 0};
        if (::poll(&p, 1, deadline.remaining_ms()) <= 0) break;
        if (recv_some(clients_[r].get(), sink, sizeof sink, rank_name(r)) == 0) break;
      }
    } catch (const Error&) {
      // the rank closed its side: done with it
    }
    clients_[r].reset();
  }
  throw_error(code, message);
}

void Bootstrap::allgather(const void* in, void* out, size_t bytes) {
  std::vector<uint8_t> all = exchange(kAllgather, 0, in, bytes, bytes * nranks_);
  std::memcpy(out, all.data(), all.size());
}

void Bootstrap::broadcast(void* buf, size_t bytes, int root) {
  GSHMEM_REQUIRE(root >= 0 && root < nranks_, "broadcast root " + std::to_string(root) +
                                                  " is outside [0, " + std::to_string(nranks_) +
                                                  ")");
  std::vector<uint8_t> data =
      exchange(kBroadcast, static_cast<uint32_t>(root), buf, rank_ == root ? bytes : 0, bytes);
  std::memcpy(buf, data.data(), bytes);
}

void Bootstrap::barrier() { exchange(kBarrier, 0, nullptr, 0, 0); }

void Bootstrap::close() {
  std::lock_guard<std::mutex> lock(io_mutex_);
  root_.reset();
  for (auto& c : clients_) c.reset();
}

int Bootstrap::closed_peer(std::string* notice) {
  std::unique_lock<std::mutex> lock(io_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || announced_) return -1;
  if (rank_ != 0) {
    if (!root_.valid() || !connection_closed(root_.get())) return -1;
    // Rank 0's announcement, if it left one, is the whole of what is waiting: nothing else is
    // sent to a rank outside its collectives.
    std::vector<char> got(sizeof(Header) + kMaxErrorBytes);
    const size_t n = peek_some(root_.get(), got.data(), got.size());
    Header h{};
    if (n >= sizeof h) std::memcpy(&h, got.data(), sizeof h);
    if (n >= sizeof h && h.magic == kMsgMagic && h.op == kAck && h.status != GSHMEM_SUCCESS &&
        h.bytes <= n - sizeof h) {
      notice->assign(got.data() + sizeof h, h.bytes);
    }
    return 0;
  }
  for (int r = 1; r < static_cast<int>(clients_.size()); ++r) {
    if (clients_[r].valid() && connection_closed(clients_[r].get())) return r;
  }
  return -1;
}

void Bootstrap::announce_failure(const std::string& message) {
  std::unique_lock<std::mutex> lock(io_mutex_, std::try_to_lock);
  if (rank_ != 0 || !lock.owns_lock() || announced_) return;
  announced_ = true;
  announcement_ = message.substr(0, kMaxErrorBytes);
  Deadline deadline(1.0);
  Header h{kMsgMagic, kAck, 0, GSHMEM_ERROR_FAULT, 0, announcement_.size()};
  for (int r = 1; r < static_cast<int>(clients_.size()); ++r) {
    if (!clients_[r].valid()) continue;
    try {
      send_all(clients_[r].get(), &h, sizeof h, deadline, rank_name(r));
      send_all(clients_[r].get(), announcement_.data(), announcement_.size(), deadline,
               rank_name(r));
    } catch (const Error&) {
      // that rank is gone too, or not reading: it learns from the closed connection
    }
    ::shutdown(clients_[r].get(), SHUT_WR);  // after the notice: the rank sees it, then the end
  }
}

std::vector<uint8_t> Bootstrap::exchange(uint32_t op, uint32_t arg, const void* in,
                                         size_t in_bytes, size_t out_bytes) {
  std::lock_guard<std::mutex> lock(io_mutex_);
  if (announced_) throw_error(GSHMEM_ERROR_FAULT, announcement_);
  ++seq_;
  Header mine{kMsgMagic, op, arg, GSHMEM_SUCCESS, seq_, in_bytes};
  if (nranks_ == 1) {
    std::vector<uint8_t> out(out_bytes);
    if (in_bytes) std::memcpy(out.data(), in, std::min(in_bytes, out_bytes));
    return out;
  }
  if (rank_ == 0) return root_exchange(mine, in, out_bytes);
  GSHMEM_REQUIRE(root_.valid(), "this comm's bootstrap is closed (after finalize or abort)");

  Deadline deadline(timeout_ + kGraceSeconds);
  Header reply{};
  std::vector<uint8_t> payload;
  bool have_reply = false;
  auto receive_reply = [&](const Deadline& until) {
    recv_all(root_.get(), &reply, sizeof reply, until, "rank 0");
    const bool fits = reply.status == GSHMEM_SUCCESS ? reply.bytes == out_bytes
                                                     : reply.bytes <= kMaxErrorBytes;
    if (reply.magic != kMsgMagic || reply.op != kAck || !fits) {
      throw_error(GSHMEM_ERROR_BOOTSTRAP, "bootstrap: rank 0's reply to this " +
                                              std::string(op_name(op)) +
                                              " is malformed (protocol error)");
    }
    payload.resize(reply.bytes);
    if (reply.bytes) recv_all(root_.get(), payload.data(), payload.size(), until, "rank 0");
    have_reply = true;
  };
  try {
    send_all(root_.get(), &mine, sizeof mine, deadline, "rank 0");
    if (in_bytes) send_all(root_.get(), in, in_bytes, deadline, "rank 0");
  } catch (const Error&) {
    // Rank 0 may have failed this operation (and exited) before we sent: its explanation can
    // still be waiting in our receive buffer, and it says more than "broken pipe".
    bool explained = false;
    try {
      receive_reply(Deadline(1.0));
      explained = reply.status != GSHMEM_SUCCESS;
    } catch (const Error&) {
    }
    if (!explained) throw;  // the send error: rank 0 left no explanation
  }
  if (!have_reply) receive_reply(deadline);
  if (reply.status != GSHMEM_SUCCESS) {
    root_.reset();  // rank 0 has given up on this comm; so do we
    throw_error(static_cast<gshmem_result_t>(reply.status),
                std::string(payload.begin(), payload.end()));
  }
  if (reply.bytes != out_bytes || reply.seq != seq_) {
    throw_error(GSHMEM_ERROR_BOOTSTRAP, "bootstrap: rank 0's reply does not match this " +
                                            std::string(op_name(op)) + " (protocol error)");
  }
  return payload;
}

void Bootstrap::check_same_call(const Header& mine, const Header& h, int r, size_t out_bytes) {
  // Every rank must be in the same operation with compatible sizes.
  size_t expect = mine.op == kAllgather                                             ? mine.bytes
                  : mine.op == kBroadcast && static_cast<int>(mine.arg) == r ? out_bytes
                                                                             : 0;
  if (h.magic != kMsgMagic || h.op != mine.op || h.seq != mine.seq || h.arg != mine.arg ||
      h.bytes != expect) {
    fail_all(GSHMEM_ERROR_USAGE,
             "bootstrap: collective mismatch: rank 0 called " + std::string(op_name(mine.op)) +
                 " #" + std::to_string(mine.seq) + " (" + std::to_string(mine.bytes) +
                 " bytes, arg " + std::to_string(mine.arg) + ") but rank " + std::to_string(r) +
                 " called " + op_name(h.op) + " #" + std::to_string(h.seq) + " (" +
                 std::to_string(h.bytes) + " bytes, arg " + std::to_string(h.arg) +
                 "); every PE must make the same collective calls in the same order");
  }
}

std::vector<uint8_t> Bootstrap::root_exchange(const Header& mine, const void* in,
                                              size_t out_bytes) {
  GSHMEM_REQUIRE(!clients_.empty() && clients_[1].valid(),
                 "this comm's bootstrap is closed (after finalize or abort)");
  // Per-rank receive state: header first, then the payload it announces.
  struct Pending {
    Header h{};
    size_t got = 0;
    std::vector<uint8_t> data;
    bool done = false;
  };
  std::vector<Pending> pend(nranks_);
  Deadline deadline(timeout_);
  int remaining = nranks_ - 1;
  std::vector<pollfd> fds;
  std::vector<int> who;
  while (remaining > 0) {
    fds.clear();
    who.clear();
    for (int r = 1; r < nranks_; ++r) {
      if (pend[r].done) continue;
      fds.push_back(pollfd{clients_[r].get(), POLLIN, 0});
      who.push_back(r);
    }
    int rc = ::poll(fds.data(), fds.size(), deadline.remaining_ms());
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw_errno("poll() in the bootstrap");
    if (rc == 0) {
      fail_all(GSHMEM_ERROR_TIMEOUT,
               "bootstrap " + std::string(op_name(mine.op)) + ": rank(s) " + rank_list(who) +
                   " of " + std::to_string(nranks_) + " did not arrive within " +
                   std::to_string(timeout_) + " s (GSHMEM_TIMEOUT); they may be stuck, dead, or "
                   "calling collectives in a different order");
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      int r = who[i];
      Pending& p = pend[r];
      bool header_done = false;
      try {
        if (p.got < sizeof(Header)) {
          p.got += recv_some(fds[i].fd, reinterpret_cast<char*>(&p.h) + p.got,
                             sizeof(Header) - p.got, rank_name(r));
          header_done = p.got == sizeof(Header);
        } else {
          size_t off = p.got - sizeof(Header);
          p.got += recv_some(fds[i].fd, p.data.data() + off, p.data.size() - off, rank_name(r));
        }
      } catch (const Error& e) {
        fail_all(GSHMEM_ERROR_BOOTSTRAP, std::string("bootstrap ") + op_name(mine.op) + ": " +
                                             e.what());
      }
      if (header_done) {
        // Judge the header before reading (or allocating for) the payload it announces.
        check_same_call(mine, p.h, r, out_bytes);
        p.data.resize(p.h.bytes);
      }
      if (p.got == sizeof(Header) + p.data.size() && p.got >= sizeof(Header)) {
        p.done = true;
        --remaining;
      }
    }
  }
  std::vector<uint8_t> out(out_bytes);
  if (mine.op == kAllgather) {
    if (mine.bytes) std::memcpy(out.data(), in, mine.bytes);
    for (int r = 1; r < nranks_; ++r) {
      if (mine.bytes) std::memcpy(out.data() + r * mine.bytes, pend[r].data.data(), mine.bytes);
    }
  } else if (mine.op == kBroadcast) {
    int root = static_cast<int>(mine.arg);
    const void* src = root == 0 ? in : pend[root].data.data();
    if (out_bytes) std::memcpy(out.data(), src, out_bytes);
  }
  Header reply{kMsgMagic, kAck, 0, GSHMEM_SUCCESS, mine.seq, out_bytes};
  for (int r = 1; r < nranks_; ++r) {
    try {
      send_all(clients_[r].get(), &reply, sizeof reply, deadline, rank_name(r));
      if (out_bytes) send_all(clients_[r].get(), out.data(), out_bytes, deadline, rank_name(r));
    } catch (const Error& e) {
      fail_all(e.code(), std::string("bootstrap ") + op_name(mine.op) + ": " + e.what());
    }
  }
  return out;
}

}  // namespace gshmem

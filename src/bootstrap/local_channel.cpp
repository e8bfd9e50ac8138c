#include "bootstrap/local_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace gshmem {
namespace {

struct LocalHello {
  uint8_t secret[kSecretBytes];
  int32_t rank;
};

sockaddr_un abstract_name(const UniqueId& id, int rank, socklen_t* len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::string name = "gshmem-" + id.secret_tag() + "-" + std::to_string(rank);
  // Abstract namespace: a leading NUL byte, then the name (not NUL-terminated).
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return sa;
}

Fd unix_socket() {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno("socket(AF_UNIX)");
  return fd;
}

void require_same_user(int fd, const std::string& who) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) throw_errno("SO_PEERCRED");
  if (cred.uid != getuid()) {
    throw_error(GSHMEM_ERROR_BOOTSTRAP, "local channel: " + who + " belongs to user " +
                                            std::to_string(cred.uid) + ", not to this user");
  }
}

struct FdMessage {
  uint64_t tag;
  int32_t rank;
  int32_t has_fd;
};

void send_fd(int sock, int fd, const FdMessage& msg) {
  iovec iov{const_cast<FdMessage*>(&msg), sizeof msg};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t k = ::sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (k == static_cast<ssize_t>(sizeof msg)) return;
    if (k < 0 && errno == EINTR) continue;
    throw_errno("local channel: sending a memory descriptor");
  }
}

// Receives one FdMessage (and the fd it carries) before the deadline.
Fd recv_fd(int sock, FdMessage* msg, const Deadline& deadline, const std::string& who) {
  pollfd p{sock, POLLIN, 0};
  for (;;) {
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) break;
    if (rc == 0) {
      throw_error(GSHMEM_ERROR_TIMEOUT, "local channel: " + who +
                                            " sent no memory descriptor within " +
                                            std::to_string(deadline.seconds()) +
                                            " s (GSHMEM_TIMEOUT); did every PE make the same "
                                            "allocation calls?");
    }
    if (errno != EINTR) throw_errno("poll() on the local channel");
  }
  iovec iov{msg, sizeof *msg};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t k;
  do {
    k = ::recvmsg(sock, &mh, MSG_WAITALL | MSG_CMSG_CLOEXEC);
  } while (k < 0 && errno == EINTR);
  if (k == 0) {
    throw_error(GSHMEM_ERROR_BOOTSTRAP,
                "local channel: " + who + " closed the connection; that process probably exited");
  }
  if (k != static_cast<ssize_t>(sizeof *msg)) throw_errno("local channel: receiving a descriptor");
  Fd fd;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int raw;
      std::memcpy(&raw, CMSG_DATA(c), sizeof raw);
      fd = Fd(raw);
    }
  }
  if (msg->has_fd && !fd.valid()) {
    throw_error(GSHMEM_ERROR_SYSTEM, "local channel: " + who +
                                         "'s descriptor was dropped in transit (out of file "
                                         "descriptors? check ulimit -n)");
  }
  return fd;
}

}  // namespace

LocalChannel::LocalChannel(Bootstrap& bootstrap, const std::vector<int>& local_ranks,
                           double timeout_seconds)
    : ranks_(local_ranks), world_rank_(bootstrap.rank()), timeout_(timeout_seconds) {
  auto it = std::find(ranks_.begin(), ranks_.end(), world_rank_);
  GSHMEM_REQUIRE(it != ranks_.end(), "local channel: this rank is not among the local ranks");
  me_ = static_cast<int>(it - ranks_.begin());
  peers_.resize(ranks_.size());
  const UniqueId& id = bootstrap.id();

  // Listen only if a lower-indexed peer will connect to us; connect to the higher-indexed ones.
  Fd listener;
  if (ranks_.size() > 1 && me_ + 1 < static_cast<int>(ranks_.size())) {
    listener = unix_socket();
    socklen_t len = 0;
    sockaddr_un sa = abstract_name(id, world_rank_, &len);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) {
      throw_errno("local channel: binding the abstract socket for rank " +
                  std::to_string(world_rank_) + " (is another process using this unique id?)");
    }
    if (::listen(listener.get(), 256) != 0) throw_errno("listen(AF_UNIX)");
  }
  bootstrap.barrier();  // every listener exists before anyone connects

  Deadline deadline(timeout_);
  for (int j = 0; j < me_; ++j) {
    Fd fd = unix_socket();
    socklen_t len = 0;
    sockaddr_un sa = abstract_name(id, ranks_[j], &len);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) {
      throw_errno("local channel: connecting to rank " + std::to_string(ranks_[j]));
    }
    require_same_user(fd.get(), "rank " + std::to_string(ranks_[j]));
    LocalHello hello{};
    std::memcpy(hello.secret, id.secret, kSecretBytes);
    hello.rank = world_rank_;
    send_all(fd.get(), &hello, sizeof hello, deadline, "rank " + std::to_string(ranks_[j]));
    peers_[j] = std::move(fd);
  }
  int expected = static_cast<int>(ranks_.size()) - 1 - me_;
  while (expected > 0) {
    Fd conn = accept_until(listener.get(), deadline);
    if (!conn.valid()) {
      throw_error(GSHMEM_ERROR_TIMEOUT, "local channel: " + std::to_string(expected) +
                                            " local peer(s) did not connect within " +
                                            std::to_string(timeout_) + " s (GSHMEM_TIMEOUT)");
    }
    require_same_user(conn.get(), "a local process");
    LocalHello hello{};
    recv_all(conn.get(), &hello, sizeof hello, deadline, "a local process");
    auto pos = std::find(ranks_.begin() + me_ + 1, ranks_.end(), hello.rank);
    if (!equal_secret(hello.secret, id.secret, kSecretBytes) || pos == ranks_.end() ||
        peers_[pos - ranks_.begin()].valid()) {
      continue;  // not one of ours: drop it
    }
    peers_[pos - ranks_.begin()] = std::move(conn);
    --expected;
  }
  listener.reset();
  bootstrap.barrier();  // every connection is made; the names are gone
}

std::vector<Fd> LocalChannel::exchange_fd(int fd, uint64_t tag) {
  FdMessage mine{tag, world_rank_, fd >= 0};
  for (int j = 0; j < local_size(); ++j) {
    if (j == me_) continue;
    GSHMEM_REQUIRE(peers_[j].valid(), "local channel is closed (after finalize or abort)");
    send_fd(peers_[j].get(), fd, mine);
  }
  std::vector<Fd> fds(local_size());
  Deadline deadline(timeout_);
  for (int j = 0; j < local_size(); ++j) {
    if (j == me_) continue;
    FdMessage got{};
    std::string who = "rank " + std::to_string(ranks_[j]);
    fds[j] = recv_fd(peers_[j].get(), &got, deadline, who);
    if (got.tag != tag) {
      throw_error(GSHMEM_ERROR_HEAP, "symmetric heap: " + who +
                                         " grew its heap differently from rank " +
                                         std::to_string(world_rank_) +
                                         "; every PE must make the same allocation calls in the "
                                         "same order with the same sizes");
    }
  }
  return fds;
}

void LocalChannel::close() {
  for (auto& p : peers_) p.reset();
}

}  // namespace gshmem

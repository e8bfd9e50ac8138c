#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace gshmem {

Deadline::Deadline(double seconds)
    : end_(std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(seconds))),
      seconds_(seconds) {}

int Deadline::remaining_ms() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  end_ - std::chrono::steady_clock::now())
                  .count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

in_addr resolve_ipv4(const std::string& text) {
  in_addr addr{};
  if (inet_pton(AF_INET, text.c_str(), &addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(text.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw_error(GSHMEM_ERROR_BOOTSTRAP, "cannot resolve bootstrap address '" + text +
                                            "': " + gai_strerror(rc) +
                                            "; set GSHMEM_BOOTSTRAP_ADDR to an IPv4 address");
  }
  addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return addr;
}

std::string ipv4_to_string(in_addr addr) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, buf, sizeof buf);
  return buf;
}

in_addr default_ipv4() {
  in_addr result{};
  result.s_addr = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return result;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
    if (!(it->ifa_flags & IFF_UP) || (it->ifa_flags & IFF_LOOPBACK)) continue;
    result = reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr;
    break;
  }
  freeifaddrs(list);
  return result;
}

namespace {

// A peer whose host stops answering (power, kernel panic, a cut link) closes nothing, so the
// kernel probes an idle connection after kKeepIdle s, every kKeepInterval s, and fails it after
// kKeepProbes unanswered ones; data left unacknowledged that long fails it too (the user
// timeout: retransmissions alone would take ~15 minutes). connection_closed() then sees it
// within ~11 s.
constexpr int kKeepIdle = 5;
constexpr int kKeepInterval = 2;
constexpr int kKeepProbes = 3;
constexpr unsigned kUnansweredMs = (kKeepIdle + kKeepInterval * kKeepProbes) * 1000;

void tune_connection(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdle, sizeof kKeepIdle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepInterval, sizeof kKeepInterval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepProbes, sizeof kKeepProbes);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUnansweredMs, sizeof kUnansweredMs);
}

Fd new_tcp_socket() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno("socket()");
  tune_connection(fd.get());
  return fd;
}

sockaddr_in make_addr(in_addr addr, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = addr;
  sa.sin_port = htons(port);
  return sa;
}

// Waits until fd is ready for `events`; throws GSHMEM_ERROR_TIMEOUT at the deadline.
void wait_ready(int fd, short events, const Deadline& deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return;
    if (rc == 0) {
      throw_error(GSHMEM_ERROR_TIMEOUT,
                  what + " timed out after " + std::to_string(deadline.seconds()) +
                      " s (GSHMEM_TIMEOUT)");
    }
    if (errno != EINTR) throw_errno("poll() while " + what);
  }
}

}  // namespace

Fd tcp_listen(in_addr addr, uint16_t port, uint16_t* bound_port) {
  Fd fd = new_tcp_socket();
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = make_addr(addr, port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    throw_errno("cannot bind the bootstrap socket to " + ipv4_to_string(addr) + ":" +
                std::to_string(port));
  }
  if (::listen(fd.get(), 1024) != 0) throw_errno("listen()");
  socklen_t len = sizeof sa;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  if (bound_port) *bound_port = ntohs(sa.sin_port);
  return fd;
}

Fd tcp_connect(in_addr addr, uint16_t port, const Deadline& deadline, const std::string& who) {
  sockaddr_in sa = make_addr(addr, port);
  int last_errno = 0;
  while (!deadline.passed()) {
    Fd fd = new_tcp_socket();
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    last_errno = errno;
    if (last_errno != ECONNREFUSED && last_errno != ETIMEDOUT && last_errno != ENETUNREACH &&
        last_errno != EHOSTUNREACH && last_errno != EINTR && last_errno != ECONNRESET) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw_error(last_errno == 0 || deadline.passed() ? GSHMEM_ERROR_TIMEOUT : GSHMEM_ERROR_BOOTSTRAP,
              "could not connect to " + who + " at " + ipv4_to_string(addr) + ":" +
                  std::to_string(port) + " within " + std::to_string(deadline.seconds()) +
                  " s (last error: " + std::strerror(last_errno) +
                  "); is rank 0 running, and is the address reachable?");
}

Fd accept_until(int listen_fd, const Deadline& deadline) {
  for (;;) {
    pollfd p{listen_fd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc == 0) return Fd();
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll() on the bootstrap listener");
    }
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.valid()) {
      tune_connection(fd.get());
      return fd;
    }
    if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) throw_errno("accept()");
  }
}

void send_all(int fd, const void* buf, size_t n, const Deadline& deadline, const std::string& who) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline, "sending to " + who);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    throw_error(GSHMEM_ERROR_BOOTSTRAP,
                "lost the connection to " + who + " (" + std::strerror(errno) +
                    "); that process probably exited or aborted");
  }
}

size_t recv_some(int fd, void* buf, size_t n, const std::string& who) {
  for (;;) {
    ssize_t k = ::recv(fd, buf, n, MSG_DONTWAIT);
    if (k > 0) return static_cast<size_t>(k);
    if (k == 0) {
      throw_error(GSHMEM_ERROR_BOOTSTRAP,
                  who + " closed the connection; that process probably exited or aborted");
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EINTR) continue;
    throw_error(GSHMEM_ERROR_BOOTSTRAP,
                "lost the connection to " + who + " (" + std::strerror(errno) + ")");
  }
}

void recv_all(int fd, void* buf, size_t n, const Deadline& deadline, const std::string& who) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    size_t k = recv_some(fd, p, n, who);
    if (k == 0) {
      wait_ready(fd, POLLIN, deadline, "waiting for " + who);
      continue;
    }
    p += k;
    n -= k;
  }
}

bool connection_closed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  while (::poll(&p, 1, 0) < 0) {
    if (errno != EINTR) return false;  // cannot tell: the next collective will
  }
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

size_t peek_some(int fd, void* buf, size_t n) {
  for (;;) {
    ssize_t k = ::recv(fd, buf, n, MSG_PEEK | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno != EINTR) return 0;
  }
}

void random_bytes(void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = getrandom(p, n, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw_errno("getrandom()");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool equal_secret(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace gshmem

// Sockets with deadlines: the building blocks of the bootstrap. Every blocking operation takes a
// Deadline and throws GSHMEM_ERROR_TIMEOUT when it passes, so nothing in the bootstrap can hang.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gshmem {

class Deadline {
 public:
  explicit Deadline(double seconds);
  // Milliseconds left, clamped to [0, INT_MAX] (for poll()).
  int remaining_ms() const;
  bool passed() const { return remaining_ms() == 0; }
  double seconds() const { return seconds_; }

 private:
  std::chrono::steady_clock::time_point end_;
  double seconds_;
};

// An owned file descriptor; closes on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Resolves an IPv4 address or host name. Throws GSHMEM_ERROR_BOOTSTRAP naming `text`.
in_addr resolve_ipv4(const std::string& text);
std::string ipv4_to_string(in_addr addr);
// This host's first up, non-loopback IPv4 address; 127.0.0.1 if it has none.
in_addr default_ipv4();

// Listening TCP socket bound to addr:port (port 0: any). Returns the bound port in *bound_port.
Fd tcp_listen(in_addr addr, uint16_t port, uint16_t* bound_port);
// Connects, retrying refused/unreachable attempts until the deadline (the listener may start
// later than we do). `who` names the peer in error messages.
Fd tcp_connect(in_addr addr, uint16_t port, const Deadline& deadline, const std::string& who);
// Accepts one connection, or returns an invalid Fd when the deadline passes.
Fd accept_until(int listen_fd, const Deadline& deadline);

// Send/receive exactly n bytes. `who` names the peer in error messages; a closed connection is
// GSHMEM_ERROR_BOOTSTRAP ("<who> closed the connection"), a passed deadline GSHMEM_ERROR_TIMEOUT.
void send_all(int fd, const void* buf, size_t n, const Deadline& deadline, const std::string& who);
void recv_all(int fd, void* buf, size_t n, const Deadline& deadline, const std::string& who);

// Reads whatever is available without blocking, into buf[0, n). Returns bytes read (0 = would
// block). Throws GSHMEM_ERROR_BOOTSTRAP if the peer closed the connection.
size_t recv_some(int fd, void* buf, size_t n, const std::string& who);

// Whether the peer has closed `fd` or the connection failed (a reset, or keepalive probes
// unanswered), without reading from it or blocking: safe beside another thread's reads.
bool connection_closed(int fd);
// Copies up to n bytes waiting on `fd` into buf without consuming or blocking; returns how many.
size_t peek_some(int fd, void* buf, size_t n);

// Fills buf with bytes from the kernel's random source.
void random_bytes(void* buf, size_t n);

// Constant-time comparison (for secrets).
bool equal_secret(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace gshmem
